"""Cost expressions of a symbolic network (``dnnsat.problem._model.attach`` adds them to a Problem).

Costs (all symbolic, over the space's variables; whole batch as the network is built):

* ``params``: trainable parameters; ``weight_bytes = params * bytes per stored parameter`` (fp32 master
  weights for ``dtype="mixed"``);
* ``flops``: forward FLOPs, 1 multiply-add = 2 FLOPs, matmul-like kernels only (conv, linear,
  matmul/bmm, attention, LSTM/GRU) - exactly ``FlopCounterMode`` on the meta device; ``macs = flops/2``;
* ``train_flops = 3 * flops``: backward of a matmul-like op costs two of its forward (input and
  weight gradients; the first layer's input gradient included, as when inputs require grad);
* ``activation_bytes``: activations saved for backward (an estimate), ``bytes_moved``: bytes read and
  written by all ops (for a roofline model), ``other_ops``: elementwise/norm/pool arithmetic (not FLOPs);
* ``memory`` (bytes, peak of a training step or an inference pass, see :mod:`dnnsat.cost.memory`; on
  a GPU a lower bound: the footprint plus the allocation peak in 2 MiB segments; the budget also checks
  the simulated reserved peak per configuration, :mod:`dnnsat.cost.memory._reserved`) and its components
  ``memory_weights``, ``memory_gradients``, ``memory_optimizer``, ``memory_activations``,
  ``memory_transient``, ``memory_input``, ``memory_overhead`` (they sum to ``memory``);
* ``latency`` (seconds, one inference forward of the batch on the budget's device; of
  ``Budget(latency_batch=)`` images when given) and
  ``train_step_time`` (seconds, forward + backward + optimizer step), see :mod:`dnnsat.cost.latency`;
* ``gpu_utilization`` (GPU devices; a share of the peak FLOP/s for the dtype): ``train_flops`` over
  ``train_step_time`` when training, ``flops`` of the served batch over ``latency`` for inference,
  divided by the peak.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..expr import Const, Expr, substitute
from ..graph import Network
from ._budget import Budget
from .latency import latency_expressions
from .memory import batch_values, memory_expressions

__all__ = ["cost_expressions", "build_network"]


def cost_expressions(net: Network, budget: Budget | None = None) -> dict[str, Expr]:
    """Named cost expressions of ``net`` (see the module docstring for conventions)."""
    budget = budget or Budget()
    c = net.costs()
    b = budget.act_bytes
    return {
        "params": c["params"],
        "weight_bytes": budget.param_bytes * c["params"],
        "flops": c["flops"],
        "macs": c["macs"],
        "train_flops": 3 * c["flops"],
        "activation_bytes": b * c["saved"],
        "bytes_moved": b * c["io"],
        "other_ops": c["ops"],
        **memory_expressions(net, budget, budget.device_profile),
        **_latency(net, budget, c["flops"]),
    }


def _latency(net: Network, budget: Budget, flops: Expr) -> dict[str, Expr]:
    """Latency, train step time and (GPUs) utilization of ``flops``, the network's forward FLOPs; with
    ``budget.latency_batch`` the latency of a forward at that batch."""
    exprs = latency_expressions(net, budget, budget.device_profile)
    served_flops = flops
    if budget.latency_batch is not None:
        batch = Const(budget.latency_batch)
        served = batch_values(net, lambda _: batch, f"latency_batch={budget.latency_batch}")
        exprs["latency"] = substitute(exprs["latency"], served)
        served_flops = substitute(flops, served)
    device = budget.device_profile
    if device is not None and device.kind == "gpu":
        peak = device.peak(budget.dtype)
        exprs["gpu_utilization"] = (
            3 * flops / (exprs["train_step_time"] * peak)
            if budget.train
            else served_flops / (exprs["latency"] * peak)
        )
    return exprs


NetworkStore = Callable[[Any, Any, Callable[[], Network]], Network]
"""``store(model, space, trace) -> Network``: a network from a store, or ``trace()`` (and kept)."""

_network_store: NetworkStore | None = None


@contextmanager
def network_store(store: NetworkStore | None) -> Iterator[None]:
    """Within the block, models that trace over the space (``model.network(space)``, e.g.
    :func:`dnnsat.torch.from_torch`) get their network through ``store`` (the CLI's on-disk cache)."""
    global _network_store
    previous, _network_store = _network_store, store
    try:
        yield
    finally:
        _network_store = previous


def build_network(model: Any, space: Any) -> Network:
    """Call ``model(space.vars)`` (``model.network(space)`` for a model that traces over the space's
    domains, e.g. :func:`dnnsat.torch.from_torch`), or take a ready Network, and check the result."""
    if isinstance(model, Network):
        net = model
    elif callable(getattr(model, "network", None)):
        if _network_store is None:
            net = model.network(space)
        else:
            net = _network_store(model, space, lambda: model.network(space))
    elif not callable(model):
        raise TypeError(
            f"model must be a function building a dnnsat Network from the space's variables, a Network or "
            f"ds.from_torch(build, inputs), got {type(model).__name__}"
        )
    else:
        try:
            net = model(space.vars)
        except Exception as err:
            if not _raised_in_torch(err):
                raise
            first = str(err).splitlines()[0] if str(err) else "no message"
            raise TypeError(
                f"model {_name(model)} looks like a PyTorch builder: PyTorch raised {type(err).__name__} "
                f"({first}) while it ran on dnnsat's symbolic values; "
                "wrap the builder in ds.from_torch(build, inputs) (see docs/from-torch.md)"
            ) from None
    if not isinstance(net, Network):
        if _from_torch_module(net):
            raise TypeError(
                f"model {_name(model)} returned a PyTorch {type(net).__name__}, not a dnnsat Network; wrap "
                "the builder in ds.from_torch(build, inputs) (see docs/from-torch.md)"
            )
        raise TypeError(
            f"model must return a dnnsat Network (end the build function with `return net.output(x)`), "
            f"got {type(net).__name__}"
        )
    return net


def _name(model: Any) -> str:
    return repr(getattr(model, "__qualname__", None) or type(model).__name__)


def _from_torch_module(obj: Any) -> bool:
    """``obj`` is an object of PyTorch's (an ``nn.Module``, a tensor), without importing torch."""
    return any(c.__module__.split(".")[0] == "torch" for c in type(obj).__mro__)


def _raised_in_torch(err: BaseException) -> bool:
    """``err`` was raised inside PyTorch (its innermost frame, or the call that failed, is torch's)."""
    tb = err.__traceback__
    while tb is not None:
        if str(tb.tb_frame.f_globals.get("__name__", "")).split(".")[0] == "torch":
            return True
        tb = tb.tb_next
    # torch's C functions (torch.zeros(Expr)) leave no frame of theirs: their message names the Expr
    return (
        type(err).__module__.split(".")[0] == "torch"
        or re.search(r"argument .*\bExpr\b", str(err)) is not None
    )


def _last_batch_checks(net: Network, budget: Budget) -> list[tuple[str, Expr]]:
    """With ``Budget(dataset_size=n)``: the training-only validity rules (BatchNorm's) that read a batch
    variable, at the epoch's last batch, ``n - batch * ((n - 1) // batch)`` samples (1 to ``batch``);
    named ``"<rule> (last batch of the epoch)"``."""
    n = budget.dataset_size
    if n is None:
        return []
    last = batch_values(net, lambda b: n - b * ((n - 1) // b), f"dataset_size={n}")
    always = {name for name, _ in net.checks(train=False)}
    return [
        (f"{name} (last batch of the epoch)", substitute(e, last))
        for name, e in net.checks(train=True)  # (last: check_sources as for training)
        if name not in always and e.variables() & last.keys()
    ]
