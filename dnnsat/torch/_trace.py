"""``from_torch``: the symbolic network of a user's own ``nn.Module`` builder, exact on every configuration.

How it works (see :func:`from_torch`):

1. **Symbolic values.** ``build(cfg)`` and ``inputs(cfg)`` run with ``cfg`` holding
   :class:`~dnnsat.torch._symbolic.SymInt` / ``SymFloat`` / ``SymStr`` values: plain values that also
   record their expression over the space's variables. Modules are built on the ``meta`` device; torch
   calls receive plain values (a size handed to a tensor factory is remembered as the tensor's symbolic
   shape, with the guard ``size >= 0``). Choices that cannot be wrapped (booleans, ``None``) are pinned.
   A module called while building on such a tensor (a dummy forward that computes a flatten size) and
   the ops on it are traced into scratch networks (``_Trace.scratch``): their results are symbolic, and
   their ops' validity rules become guards. Tensors made from data (``torch.tensor``, ``torch.arange``)
   are real while building, so code may compute with their values.
2. **Guards.** Every place the code (the user's or torch's) turns a symbolic value into control flow
   or a plain value - ``if``, a comparison, ``range(depth)``, a dict lookup by a categorical, a
   division by a symbolic divisor - is a guard (a boolean expression and its outcome). A guard that has
   the same outcome on the whole space (interval bounds) is dropped.
3. **Forward.** ``module(*inputs)`` runs with symbolic tensors: a call of a supported ``torch.nn`` leaf
   module becomes a catalog op whose attributes are the module's symbolic attributes (plus a rule that
   the module's declared input size matches its input); supported tensor functions and methods become
   catalog ops; ``x.shape`` / ``x.size(i)`` are symbolic ints. Anything else (an unmapped function or
   ``torch.nn`` module's ``forward``) is traced at the ATen level through PyTorch's symbolic shapes
   (``_aten.py``); what cannot be traced raises :class:`TraceError` naming the module or function and
   the user's source line.
4. **Regions.** The conjunction of a trace's guards is its *region*: every configuration in it runs
   the same code, so the trace's network is exact there. Tracing repeats at a configuration no region
   covers yet (all combinations of the guarded parameters, enumerated) until every configuration is
   covered, up to ``max_regions``. A trace that raises (the module rejects the configuration) makes
   its region invalid.
5. **Merge.** The regions' networks are merged into one: identical ops on identical inputs are shared,
   each op gated by the regions it runs in; the outputs are selected by region. Costs and rules are
   then those of the ordinary DSL network, for every configuration.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn as nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from ..graph import Network
from ._capture import _OnMeta, _SkippedInit, _to_meta
from ._errors import _META, MeasureError, TraceError, _user_frame
from ._merge import _merge
from ._regions import _explore, forward_arguments

__all__ = ["from_torch", "TorchModel", "TraceError", "MeasureError"]


class _EmptyTensors(TorchDispatchMode):
    """Notes an empty tensor an op makes and another op (or the model's output) uses: dnnsat requires
    every dimension >= 1. An unused empty output is a kernel's placeholder (``_embedding_bag``'s
    ``max_indices`` outside ``mode="max"``, eval batch norm's saved statistics), as in the trace."""

    def __init__(self) -> None:
        super().__init__()
        self.found = False
        self.empty: dict[int, torch.Tensor] = {}  # id -> tensor (kept, so that ids stay unique)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if self.empty:  # (most models make none: no walk over every op's arguments)
            self.check(tree_leaves((args, kwargs)))
        out = func(*args, **kwargs)
        if "empty" not in str(func):  # kernels' own (empty) workspaces
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor) and t.numel() == 0:
                    self.empty[id(t)] = t
        return out

    def check(self, values: list[Any]) -> None:
        """Note whether one of ``values`` is an empty tensor an op made."""
        self.found |= any(isinstance(v, torch.Tensor) and id(v) in self.empty for v in values)


# ------------------------------------------------------------------------------------------------
# the entry point


class TorchModel:
    """A user's PyTorch builder as a dnnsat model: ``Problem(space, model=from_torch(build, inputs))``.

    Calling it with the space's variables returns the merged symbolic :class:`~dnnsat.graph.Network`
    (built once per space). ``regions`` and ``trace_seconds`` describe the last trace.
    """

    def __init__(
        self,
        build: Callable[[dict[str, Any]], nn.Module],
        inputs: Callable[[dict[str, Any]], Any],
        max_regions: int = 256,
        space: Any = None,
    ) -> None:
        self.build = build
        self.inputs = inputs
        self.max_regions = max_regions
        self.space = space
        self.regions = 0
        self.invalid_regions = 0
        self.trace_seconds = 0.0
        self._cache: tuple[Any, Network] | None = None
        self.unchecked = 0  # configurations ``disagreements`` could not check (see MeasureError)

    def network(self, space: Any) -> Network:
        """The symbolic network of the model over ``space`` (traced and merged on the first call)."""
        if self._cache is not None and self._cache[0] is space:
            return self._cache[1]
        start = time.perf_counter()
        cache: dict[Any, Any] = {}  # op results shared by the regions' networks and the merged one
        regions, gates = _explore(self.build, self.inputs, space, self.max_regions, cache)
        net = _merge(regions, gates, cache)
        self.trace_seconds = time.perf_counter() - start
        self.regions = len(regions)
        self.invalid_regions = sum(r.net is None for r in regions)
        self._cache = (space, net)
        return net

    def cache_key(self) -> str | None:
        """A digest of what a trace reads besides the space: the source of ``build`` and ``inputs`` (a
        function, a class, a method or a ``functools.partial`` of one, with its defaults, bound
        arguments and closure values), ``max_regions`` and PyTorch's version. ``None`` (do not cache)
        when a source cannot be read or a value has no stable ``repr`` (an object shown by address)."""
        parts = [_source_key(self.build), _source_key(self.inputs)]
        if None in parts:
            return None
        parts += [str(self.max_regions), torch.__version__]
        return hashlib.sha256("\0".join(map(str, parts)).encode()).hexdigest()

    def use_network(self, space: Any, net: Network) -> None:
        """Take ``net`` (a stored trace of this model over ``space``) as the network over ``space``."""
        self._cache = (space, net)

    def measure(self, config: Mapping[str, Any]) -> tuple[int, int] | None:
        """PyTorch's own ``(params, FLOPs)`` of ``config``: ``build(config)`` on the meta device (no
        weight memory, weight initialisation skipped; tensors made from data, ``torch.tensor`` or
        ``torch.arange``, are real while building and moved to ``meta`` after it), one forward of
        ``inputs(config)`` under ``FlopCounterMode`` (2 FLOPs per multiply-add), parameters counted
        once each (tied ones once).
        ``None`` when building or the forward raises, or makes an empty tensor (dnnsat requires every
        dimension >= 1): invalid. :class:`MeasureError` when PyTorch cannot run the model on the meta
        device (an op without a meta kernel, ``.item()``): neither valid nor invalid. Leaves torch's
        random state and the warnings filters as they were. The per-trial safety net for what a trace
        cannot see (about 0.1 s for a CNN or transformer, 0.7 s for an LSTM: PyTorch's meta kernels)."""
        from torch.utils.flop_counter import FlopCounterMode

        cfg = dict(config)
        with warnings.catch_warnings(), torch.random.fork_rng(devices=[]):
            warnings.simplefilter("ignore")
            try:
                with _OnMeta(), _SkippedInit():
                    module = self.build(cfg)
                    xs = self.inputs(cfg)
                _to_meta(module)
                args, kwargs = forward_arguments(xs)
                empty = _EmptyTensors()
                hooks = [  # a check CPU and CUDA kernels make and the meta kernel does not
                    m.register_forward_pre_hook(_output_padding_check)
                    for m in module.modules()
                    if isinstance(m, nn.modules.conv._ConvTransposeNd)
                ]
                try:
                    with FlopCounterMode(display=False) as counter, empty:
                        out = module(*map(_on_meta, args), **{k: _on_meta(x) for k, x in kwargs.items()})
                        empty.check(tree_leaves(out))
                finally:
                    for hook in hooks:
                        hook.remove()
            except Exception as err:  # the user's code or PyTorch refused the configuration: invalid
                if _META.search(f"{type(err).__name__}: {err}"):
                    raise MeasureError(
                        f"PyTorch cannot run this model on the meta device ({type(err).__name__}: "
                        f"{str(err).splitlines()[0][:160]}): {_user_frame(err)}"
                    ) from err
                return None
        params = list(module.parameters())
        if empty.found or any(p.numel() == 0 for p in params):
            return None
        return sum(p.numel() for p in params), int(counter.get_total_flops())

    def disagreements(self, problem: Any, config: Mapping[str, Any]) -> list[str]:
        """Where ``problem`` (built on this model) and :meth:`measure` disagree on ``config``: validity,
        ``params`` or ``flops``, as readable lines (empty when they agree). A configuration PyTorch
        cannot measure on the meta device (:class:`MeasureError`) is not a disagreement: it warns
        (once per model), counts in ``unchecked`` and gives ``[]``."""
        try:
            real = self.measure(config)
        except MeasureError as err:
            if not self.unchecked:
                warnings.warn(f"from_torch: configurations not checked: {err}", stacklevel=2)
            self.unchecked += 1
            return []
        # validity rules are named "<op>#<position>: <rule>"; budget limits after their cost
        invalid = [str(v) for v in problem.check(config).violations if "#" in v.name]
        if real is None or invalid:
            if (real is None) == bool(invalid):
                return []
            said = f"dnnsat: {invalid[0]}" if invalid else "dnnsat accepts it"
            return [f"validity: PyTorch {'rejects' if real is None else 'accepts'} the configuration, {said}"]
        costs = problem.costs(config)
        return [
            f"{name}: PyTorch {value:,}, dnnsat {costs[name]:,.0f}"
            for name, value in zip(("params", "flops"), real)
            if costs[name] != value
        ]

    def __call__(self, variables: Any) -> Network:
        """The network over ``from_torch(..., space=)`` (``Problem`` calls :meth:`network` itself)."""
        if self.space is None:
            raise TypeError(
                "from_torch: this model needs its Space: pass it to ds.Problem(space, model=...), "
                "or give from_torch(..., space=space)"
            )
        return self.network(self.space)


def _source_key(fn: Any) -> str | None:
    """The source text of ``fn`` and the values it is called with beyond ``cfg`` (see ``cache_key``)."""
    extra: list[Any] = []
    while isinstance(fn, functools.partial):
        extra += [fn.args, sorted(fn.keywords.items())]
        fn = fn.func
    if not (inspect.isfunction(fn) or inspect.isclass(fn)):  # a bound method, a callable object: state
        return None
    if inspect.isfunction(fn):
        try:
            cells = [c.cell_contents for c in fn.__closure__ or ()]
        except ValueError:  # a closure variable not assigned yet
            return None
        extra += [fn.__defaults__, fn.__kwdefaults__, cells]
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):  # defined interactively, or a builtin
        return None
    text = repr(extra)
    if " at 0x" in text or " object at " in text:  # a value keyed only by its address
        return None
    return f"{fn.__module__}.{fn.__qualname__}\n{source}\n{text}"


def _on_meta(x: Any) -> Any:
    """An input of ``inputs(cfg)`` on the meta device: a tensor moved, a shape made one, ``None`` kept."""
    if x is None:
        return None
    return x.to("meta") if isinstance(x, torch.Tensor) else torch.empty(*x, device="meta")


def _output_padding_check(mod: Any, args: Any) -> None:
    """As ``aten::convolution`` on real devices: each output padding below the stride or the dilation."""
    if not all(o < st or o < d for o, st, d in zip(mod.output_padding, mod.stride, mod.dilation)):
        raise ValueError("output padding must be smaller than either stride or dilation")


def from_torch(
    build: Callable[[dict[str, Any]], nn.Module],
    inputs: Callable[[dict[str, Any]], Any],
    *,
    max_regions: int = 256,
    space: Any = None,
) -> TorchModel:
    """A dnnsat model from an unmodified PyTorch builder: ``build(cfg) -> nn.Module`` and example
    inputs ``inputs(cfg)``: forward's arguments, one or a tuple of tensors (e.g. ``torch.empty(cfg["batch"],
    3, 224, 224)``) or shapes, ``None`` for an optional one left out, or a dict of keyword arguments
    (``model(**inputs(cfg))``, as Hugging Face models take ``input_ids=...``).

    Params, FLOPs (2 per multiply-add, as FlopCounterMode) and validity equal PyTorch's on every
    configuration of the space: see the module docstring for how, and :class:`TraceError` for what
    is refused. ``max_regions`` bounds the number of control-flow regions traced.
    """
    return TorchModel(build, inputs, max_regions=max_regions, space=space)
