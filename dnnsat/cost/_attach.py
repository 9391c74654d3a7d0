"""Cost expressions of a symbolic network and their attachment to a Problem.

Costs (all symbolic, over the space's variables; whole batch as the network is built):

* ``params``: trainable parameters; ``weight_bytes = params * bytes per stored parameter`` (fp32 master
  weights for ``dtype="mixed"``);
* ``flops``: forward FLOPs, 1 multiply-add = 2 FLOPs, matmul-like kernels only (conv, linear,
  matmul/bmm, attention, LSTM/GRU) - exactly ``FlopCounterMode`` on the meta device; ``macs = flops/2``;
* ``train_flops = 3 * flops``: backward of a matmul-like op costs two of its forward (input and
  weight gradients; the first layer's input gradient included, as when inputs require grad);
* ``activation_bytes``: activations saved for backward (an estimate), ``bytes_moved``: bytes read and
  written by all ops (for a roofline model), ``other_ops``: elementwise/norm/pool arithmetic (not FLOPs);
* ``memory`` (bytes, peak of a training step or an inference pass, see :mod:`dnnsat.cost._memory`; on
  a GPU a lower bound: the footprint plus the allocation peak in 2 MiB segments; the budget also checks
  the simulated reserved peak per configuration, :mod:`dnnsat.cost._reserved`) and its components
  ``memory_weights``, ``memory_gradients``, ``memory_optimizer``, ``memory_activations``,
  ``memory_transient``, ``memory_input``, ``memory_overhead`` (they sum to ``memory``);
* ``latency`` (seconds, one inference forward of the batch on the budget's device; of
  ``Budget(latency_batch=)`` images when given) and
  ``train_step_time`` (seconds, forward + backward + optimizer step), see :mod:`dnnsat.cost._latency`.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

from ..expr import Const, Expr, substitute
from ..graph import Network
from ._budget import Budget
from ._latency import latency_expressions
from ._memory import batch_values, memory_expressions
from ._reserved import ReservedMemory

__all__ = ["cost_expressions", "attach", "build_network"]

log = logging.getLogger("dnnsat.cost")


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
        **_latency(net, budget),
    }


def _latency(net: Network, budget: Budget) -> dict[str, Expr]:
    """Latency and train step time; with ``budget.latency_batch`` the latency of a forward at that batch."""
    exprs = latency_expressions(net, budget, budget.device_profile)
    if budget.latency_batch is not None:
        batch = Const(budget.latency_batch)
        served = batch_values(net, lambda _: batch, f"latency_batch={budget.latency_batch}")
        exprs["latency"] = substitute(exprs["latency"], served)
    return exprs


def build_network(model: Any, space: Any) -> Network:
    """Call ``model(space.vars)`` (``model.network(space)`` for a model that traces over the space's
    domains, e.g. :func:`dnnsat.torch.from_torch`), or take a ready Network, and check the result."""
    if isinstance(model, Network):
        net = model
    elif callable(getattr(model, "network", None)):
        net = model.network(space)
    else:
        net = model(space.vars)
    if not isinstance(net, Network):
        raise TypeError(
            f"model must return a dnnsat Network (end the build function with `return net.output(x)`), "
            f"got {type(net).__name__}"
        )
    return net


def _box(space: Any) -> dict[str, tuple[Any, Any]]:
    return {name: space[name].bounds() for name in space}


def _values(space: Any) -> dict[str, Any]:
    """Encoded values of the finite parameters (``{name: array}``)."""
    return {name: space[name].encoded() for name in space if space[name].is_finite}


def attach(problem: Any, model: Any, budget: Budget | None) -> Network | None:
    """Build ``model`` over ``problem.space``, add its costs, validity rules and the budget's limits.

    Validity rules are named ``"<op>#<position>: <rule>"``; budget limits are named after the cost
    (``"params"``, ``"flops"``, ...). A rule that fails for every configuration of an always-active op,
    and a ``repeat`` body that changes the shape wherever it runs, raise
    :class:`~dnnsat.graph.GraphError` here, naming the op (or repeat block), its position and the rule.
    """
    budget = budget if budget is not None else Budget()
    if not isinstance(budget, Budget):
        raise TypeError(f"budget must be a dnnsat Budget, got {type(budget).__name__}")
    if model is None:
        if budget.limits():
            raise ValueError("a Budget needs a model (Problem(space, model=build, budget=...))")
        return None
    space = problem.space
    net = build_network(model, space)
    train = budget.train
    box = _box(space)
    net.check_always_false(box, train=train, values=_values(space))
    problem.network = net
    exprs = cost_expressions(net, budget)
    for name, e in exprs.items():
        problem.add_cost(name, e)
    rules = net.checks(train) + _last_batch_checks(net, budget)  # (the latter re-reads net.checks)
    checks = [(name, e) for name, e in rules if not (e.is_const and e.value)]
    if checks:
        from ..expr import interval

        bounds = interval([e for _, e in checks], box)
        kept = [(name, e) for name, e in checks if not bounds[id(e)][0]]  # drop rules true everywhere
        log.debug(
            "attach: %d validity rules, %d provably true everywhere", len(checks), len(checks) - len(kept)
        )
        for name, e in kept:
            problem.require(e, name=name)
    for name, limit in budget.limits().items():
        problem.require(exprs[name] <= limit, name=name)
    _require_reserved(problem, net, budget)
    return net


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


def _require_reserved(problem: Any, net: Network, budget: Budget) -> None:
    """On a GPU with a memory limit: the per-configuration check of the simulated reserved peak plus the
    footprint (constraint ``"memory_reserved"``, :class:`~dnnsat.cost._reserved.ReservedMemory`, also
    ``problem.gpu_memory``), next to the symbolic ``memory`` lower bound that prunes ranges. Not with
    ``Budget(simulate=False)``, for
    activation checkpointing or gradient accumulation (no allocation sequence yet: the symbolic bound
    alone decides), nor when the sequence reads a continuous parameter (predicates cannot)."""
    device = budget.device_profile
    if budget.memory is None or device is None or device.kind != "gpu" or not budget.simulate:
        return
    if budget.train and (budget.checkpoint or budget.accumulation_steps > 1):
        log.info("attach: no allocator simulation with checkpoint/accumulation_steps: symbolic memory only")
        return
    checker = ReservedMemory(net, budget, problem.space)
    continuous = [n for n in checker.uses if not problem.space[n].is_finite]
    if continuous:
        log.warning(
            "attach: the allocation sequence reads the continuous parameter(s) %s: the GPU memory budget "
            "is checked on the symbolic lower bound only (give them a step to simulate the allocator)",
            continuous,
        )
        return
    from ..problem import OpaqueConstraintWarning

    with warnings.catch_warnings():  # by design: the simulation is checked per configuration
        warnings.simplefilter("ignore", OpaqueConstraintWarning)
        problem.require(checker, name="memory_reserved", uses=checker.uses)
    problem.gpu_memory = checker
