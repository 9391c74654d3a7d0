"""Capture: one trace at one configuration. :class:`_Trace` records guards and ops into the region's
network; :class:`_Mode` intercepts torch calls (factories remember symbolic shapes while building,
calls on symbolic tensors become ops in the forward, and while building in scratch traces:
:meth:`_Trace.scratch`); :class:`_SkippedInit` skips weight init."""

from __future__ import annotations

import sys
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn as nn
from torch.overrides import TorchFunctionMode
from torch.utils._device import _device_constructors

from ..expr import Const, Expr, ExprLike, as_expr, interval
from ..graph import Check, Network, Tensor
from ..graph._catalog import prod
from ._aten import fallback
from ._errors import _HERE, TraceError
from ._functions import _FUNCTIONS
from ._symbolic import TORCH_DIR, Recorder, SymFloat, SymInt, as_expr_like, expr_of, fixed, plain, user_line
from ._tensor import STensor, _flat, network_dtype

# ------------------------------------------------------------------------------------------------
# expression evaluation at one configuration


def _evaluate(e: Expr, env: Mapping[str, Any], memo: dict[int, Any]) -> Any:
    """Value of ``e`` at the encoded assignment ``env`` (memoised by node)."""
    from ..expr._nodes import _PY_OPS, topological

    if id(e) in memo:
        return memo[id(e)]
    for node in topological([e], lambda n: () if id(n) in memo else n.args):  # not below known values
        key = id(node)
        if key in memo:
            continue
        if node.op == "const":
            memo[key] = node.payload
        elif node.op == "var":
            memo[key] = env[node.name]
        elif node.op == "where":
            c, a, b = (memo[id(x)] for x in node.args)
            memo[key] = a if c else b
        else:
            memo[key] = _PY_OPS[node.op](*(memo[id(x)] for x in node.args))
    return memo[id(e)]


class _Trace(Recorder):
    """Runs ``build`` and ``forward`` at one encoded configuration, recording guards and ops."""

    def __init__(
        self,
        env: Mapping[str, Any],
        box: Mapping[str, tuple[Any, Any]],
        finite: set[str],
        cache: dict[Any, Any],
    ) -> None:
        self.env = dict(env)
        self.box = box
        self.finite = finite
        self.guards: dict[int, tuple[Expr, str]] = {}
        self.memo: dict[int, Any] = {}
        self.cache = cache  # shared by the regions: ops' OpInfo, guards decided on the whole space
        self.net = Network("from_torch", infer_cache=cache)
        self.net.permute_views = True
        self.shapes: dict[int, tuple[Tensor | Any, tuple[Any, ...]]] = {}  # storage -> (tensor, shape)
        self.views: dict[int, tuple[torch.Tensor, tuple[Any, ...]]] = {}  # id(tensor) -> (tensor, shape)
        self.params: dict[int, STensor] = {}  # id(parameter) -> its parameter node
        self.counted: set[int] = set()  # ids of parameters counted by an op
        # id(parameter) -> (module path of the op counting it, its name there)
        self.owners: dict[int, tuple[str, str]] = {}
        self.names: dict[int, str] = {}  # id(module) -> qualified name
        self.param_names: dict[int, str] = {}
        self.binds: dict[int, list[Check]] = {}
        self.forward = False
        self.stack: list[str] = []
        self.depth = 0  # handlers running: their own tensors are not the model's
        self.held: dict[int, int] = {}  # tensor index -> last node emitted while Python held it
        self.buffer_names: dict[int, str] = {}  # id(buffer) -> qualified name
        self.consts: dict[int, tuple[torch.Tensor, STensor]] = {}  # id(tensor) -> its constant node
        self.derived: dict[int, tuple[Expr, ...]] = {}  # storage -> the sizes its shape depends on
        self.scratches: list[_Trace] = []  # forwards run while building (see :meth:`scratch`)
        self.settled: set[int] = set()  # ids of the scratch networks' rules already decided
        self.replays: dict[Any, Any] = {}  # ATen fallback calls made, by their key (see _aten._key)

    # guards --------------------------------------------------------------------------------------
    def guard(self, cond: Expr, outcome: bool) -> None:
        held = cond if outcome else ~cond
        if held.is_const or id(held) in self.guards:
            return
        names = held.variables()
        if not names <= set(self.box):
            return
        key = ("holds everywhere", id(held))  # the same guards recur in every region
        if key not in self.cache:
            self.cache[key] = bool(interval([held], self.box)[id(held)][0])
        if self.cache[key]:  # holds on the whole space: not a decision
            return
        line = user_line()
        if not names <= self.finite:
            cont = sorted(names - self.finite)
            raise TraceError(
                f"continuous parameter(s) {cont} decide control flow ({cond} at {line}); give them a "
                f"step or make them categorical"
            )
        self.guards[id(held)] = (held, line)

    def sym(self, e: Expr) -> Any:
        value = _evaluate(e, self.env, self.memo)
        if e.is_const:
            return value
        return SymInt(int(value), e) if e.sort == "int" else SymFloat(float(value), e)

    # tensors -------------------------------------------------------------------------------------
    def remember(self, t: Any, shape: tuple[Any, ...]) -> None:
        if isinstance(t, torch.Tensor):
            with torch._C.DisableTorchFunction():
                self.shapes[t.untyped_storage()._cdata] = (t, shape)

    def remember_view(self, t: torch.Tensor, shape: tuple[Any, ...]) -> None:
        """Remember ``shape`` for the tensor object ``t`` itself (a view made while building, see
        ``_Mode._propagate``: its storage keeps its base's shape)."""
        self.views[id(t)] = (t, shape)

    def shape_of(self, t: torch.Tensor) -> tuple[Any, ...] | None:
        """The symbolic shape remembered for ``t`` (:meth:`remember_view`) or its storage, if it still
        describes ``t`` (its values at this configuration are ``t``'s sizes: an in-place reshape or an
        untraced view makes it unknown)."""
        with torch._C.DisableTorchFunction():
            rec: tuple[Any, tuple[Any, ...]] | None = self.views.get(id(t))
            if rec is None or rec[0] is not t:
                rec = self.shapes.get(t.untyped_storage()._cdata)
            sizes = tuple(t.shape)
        if rec is None or len(rec[1]) != len(sizes):
            return None
        if any(_evaluate(d, self.env, self.memo) != n for d, n in zip(rec[1], sizes)):
            return None
        return rec[1]

    def same_shape(self, x: STensor, t: torch.Tensor) -> bool:
        """Whether the symbolic shape of ``x`` has ``t``'s sizes at this configuration."""
        with torch._C.DisableTorchFunction():
            sizes = tuple(t.shape)
        return x.ndim == len(sizes) and all(
            _evaluate(d, self.env, self.memo) == n for d, n in zip(x._t.shape, sizes)
        )

    def tensor(self, x: Any, what: str) -> STensor:
        """``x`` as a symbolic tensor: an :class:`STensor`, or a parameter of the model (counted once)."""
        if isinstance(x, STensor):
            return x
        if isinstance(x, nn.Parameter):
            if id(x) in self.params:
                return self.params[id(x)]
            name = self._name("parameter", self.param_names.get(id(x), "?"))
            t = STensor(self, self.net.parameter(self.param_shape(x), name=name))
            if id(x) in self.owners:  # counted by a module's op: used here too (a tied weight)
                self.net.share(t._t, self.numel(x), (("weight", *self.owners[id(x)]),))
            self.owners.setdefault(id(x), (name.partition(" ")[2], "weight"))
            self.params[id(x)] = t
            self.counted.add(id(x))
            return t
        if isinstance(x, torch.Tensor):
            return self.constant(x, what)
        raise TraceError(f"{what}: expected a tensor, got {type(x).__name__}: {user_line()}")

    def param_shape(self, p: torch.Tensor) -> list[ExprLike]:
        """A parameter's symbolic shape; one made by an op without a shape rule (``torch.log(t)``,
        ``unsqueeze_``) has its plain shape where the symbolic sizes it came from keep their values."""
        shape = self.shape_of(p)
        if shape is None:
            self.pin(p)
            with torch._C.DisableTorchFunction():
                shape = tuple(p.shape)
        return [as_expr_like(d) for d in shape]

    def numel(self, p: torch.Tensor) -> Expr:
        """Elements of parameter ``p`` (symbolic)."""
        return prod([as_expr(d) for d in self.param_shape(p)])

    def constant(self, x: torch.Tensor, what: str) -> STensor:
        """A tensor the model made without the trace's inputs or parameters (a factory's result in the
        forward, a registered buffer, a module-level tensor) as a ``constant`` node of the network, of
        its symbolic shape (see :meth:`constant_shape`) and dtype; one node per tensor object."""
        with torch._C.DisableTorchFunction():
            sizes, dtype = tuple(x.shape), x.dtype
        known = self.consts.get(id(x))
        if known is not None and known[0] is x and known[1].ndim == len(sizes):
            return known[1]
        shape = self.constant_shape(x)
        buffer = self.buffer_names.get(id(x))
        node = self.net.apply(
            "constant", [], name=self._name("constant", buffer or self.where()), shape=tuple(shape),
            dtype=network_dtype(dtype), buffer=buffer is not None,
        )  # fmt: skip
        out = STensor(self, node, dtype)
        self.consts[id(x)] = (x, out)
        return out

    def constant_shape(self, x: torch.Tensor) -> tuple[Expr, ...]:
        """The symbolic shape of a tensor made outside the trace's network: the one remembered for it (a
        factory with symbolic sizes), else its plain sizes, the symbolic sizes it was made from pinned
        (:meth:`pin`)."""
        shape = self.shape_of(x)
        if shape is not None:
            return tuple(as_expr(d) for d in shape)
        self.pin(x)
        with torch._C.DisableTorchFunction():
            return tuple(Const(n) for n in x.shape)

    def has_symbolic_shape(self, x: torch.Tensor) -> bool:
        """``x``'s storage was made from symbolic sizes (by a factory, or by an op without a shape rule)."""
        return bool(self._pins(x))

    def _pins(self, x: torch.Tensor) -> tuple[Expr, ...]:
        with torch._C.DisableTorchFunction():
            key = x.untyped_storage()._cdata
        rec = self.shapes.get(key)
        dims = tuple(as_expr(d) for d in rec[1]) if rec is not None else ()
        return tuple(d for d in dims if not d.is_const) + self.derived.get(key, ())

    def derive(self, out: Any, sources: list[Any]) -> None:
        """``out`` (a tensor or tensors) was made by an op without a shape rule from ``sources``: its
        shape holds on the values of their symbolic sizes, pinned if it is ever used (:meth:`pin`)."""
        pins = tuple(d for a in sources if isinstance(a, torch.Tensor) for d in self._pins(a))
        for t in out if isinstance(out, tuple | list) else (out,):
            if pins and isinstance(t, torch.Tensor) and self.shape_of(t) is None:
                with torch._C.DisableTorchFunction():
                    key = t.untyped_storage()._cdata
                self.derived[key] = self.derived.get(key, ()) + pins

    def pin(self, x: torch.Tensor) -> None:
        """Pin the symbolic sizes ``x`` was made from (guards ``size == value``): its shape (and that of
        what it is made from) is then the same on the whole region."""
        for d in self._pins(x):
            fixed(self.sym(d))

    def _name(self, op: str, where: str) -> str:
        """``op#position module/path`` (``/`` for ``.``: module names of a materialized network)."""
        where = where.replace(".", "/")
        return f"{op}#{len(self.net.nodes)} {where}" if where else f"{op}#{len(self.net.nodes)}"

    def where(self) -> str:
        return self.stack[-1] if self.stack else ""

    def bind(self, out: STensor, rule: str, cond: Expr) -> None:
        """A rule of the op that produced ``out`` (a module's declared size matches its input)."""
        if not (cond.is_const and cond.value):
            node = self.net.producer[out._t.index]
            self.binds.setdefault(node, []).append(Check(rule, cond))

    def call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], func: Any = None) -> Any:
        """A tensor function or method of the model (``func``: the callable, when known): its handler
        (exact memory rules), or where there is none or it refuses the call before adding an op, the
        ATen fallback (:mod:`._aten`)."""
        handler = _FUNCTIONS.get(name)
        if handler is not None:
            done, out = self.attempt(handler, *args, **kwargs)
            if done:
                return out
        return self.handle(fallback, name, func, args, kwargs)

    def attempt(self, handler: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[bool, Any]:
        """``(True, handle(handler, ...))``, or ``(False, None)`` when the handler refuses the call
        (:class:`TraceError`) before adding an op (the caller then traces it at the ATen level)."""
        mark = len(self.net.nodes)
        try:
            return True, self.handle(handler, *args, **kwargs)
        except TraceError:
            if any(n.op != "parameter" for n in self.net.nodes[mark:]):
                raise
            return False, None

    def handle(self, handler: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``handler(self, *args, **kwargs)``; a result reaching the model's code is watched (see
        :meth:`watch`)."""
        self.depth += 1
        try:
            out = handler(self, *args, **kwargs)
        finally:
            self.depth -= 1
        if not self.depth:
            for x in out if isinstance(out, tuple | list) else (out,):
                if isinstance(x, STensor) and not x.watched:
                    self.watch(x)
        return out

    def watch(self, x: STensor) -> None:
        """When CPython frees ``x`` (the model's code drops its last reference: a local reassigned or
        gone at ``return``), note the last node emitted so far in :attr:`held`: the real tensor lives
        until that op has run. The trace keeps no reference to ``x`` (a finalizer is a weak one)."""
        x.watched = True
        weakref.finalize(x, self._freed, x._t.index)

    def _freed(self, index: int) -> None:
        if self.forward:
            self.held[index] = max(self.held.get(index, -1), len(self.net.nodes) - 1)

    # forwards run while building ---------------------------------------------------------------
    def scratch(self) -> _Trace:
        """A trace for a module called while building (a dummy forward that computes a flatten size):
        its own network, parameters and claims (nothing of it is the model's: no op, no parameter
        counted), the same configuration, guards and remembered shapes. Its results are symbolic
        tensors, so sizes read off them are :class:`SymInt` (never the first configuration's values);
        :meth:`settle` makes its ops' validity rules guards of this trace."""
        s = _Trace(self.env, self.box, self.finite, self.cache)
        s.guards, s.memo, s.shapes, s.views, s.forward = self.guards, self.memo, self.shapes, self.views, True
        s.replays = self.replays
        self.scratches.append(s)
        return s

    def symbolic(self, x: Any) -> Any:
        """``x`` as an input of this (scratch) trace when it is a real tensor with a remembered shape
        (recursively through tuples and lists), else ``x`` itself."""
        if type(x) in (tuple, list):
            return type(x)(self.symbolic(v) for v in x)
        shape = self.shape_of(x) if isinstance(x, torch.Tensor) else None
        if shape is None:
            return x
        dtype = "int64" if x.dtype in (torch.int64, torch.int32) else "float32"
        dims = [as_expr_like(d.value if d.is_const else d) for d in shape]
        return STensor(self, self.net.input(dims, dtype=dtype, name=f"input#{len(self.net.nodes)}"))

    def settle(self) -> None:
        """Decide the validity rules of the scratch networks' ops at this configuration: each one is a
        guard, and one that fails rejects the configuration (as the forward raising in PyTorch)."""
        for s in self.scratches:
            rules = s.net.checks() + [
                (f"{s.net.nodes[n].label}: {c.rule}", c.expr) for n, cs in s.binds.items() for c in cs
            ]
            for name, rule in rules:
                if id(rule) in self.settled:
                    continue
                self.settled.add(id(rule))
                holds = bool(_evaluate(rule, self.env, self.memo))
                self.guard(rule, holds)
                if not holds:
                    raise RuntimeError(f"a forward run while building the model fails: {name}")

    def apply(self, op: str, method: Callable[..., Tensor], *args: Any, **kwargs: Any) -> STensor:
        """Add one op through the Network method ``method`` (named after the current module)."""
        return STensor(self, method(*args, name=self._name(op, self.where()), **kwargs))


# ------------------------------------------------------------------------------------------------
# torch function interception


_FACTORIES = {"empty", "zeros", "ones", "randn", "rand", "full", "randint", "ones_like", "zeros_like"}
_FILLS = {"zero_", "fill_", "uniform_", "normal_", "exponential_", "log_normal_", "cauchy_", "random_"}
_SAME_SHAPE = {
    "mul", "__mul__", "__rmul__", "add", "__add__", "__radd__", "sub", "__sub__", "div", "__truediv__",
    "clone", "detach", "to", "float", "contiguous", "requires_grad_", "neg", "__neg__",
    "tril", "triu", "masked_fill", "logical_not", "__invert__", "bool", "eq", "__eq__", "ne", "__ne__",
}  # fmt: skip

_KEEP_REAL = _FACTORIES | _SAME_SHAPE  # calls on real tensors that keep them real (their shapes remembered)


def _factory_size(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...] | None:
    if "size" in kwargs:
        return tuple(kwargs["size"])
    for a in args:
        if isinstance(a, tuple | list | torch.Size):
            return tuple(a)
    if name in ("empty", "zeros", "ones", "randn", "rand") and args and all(isinstance(a, int) for a in args):
        return tuple(args)
    return None


def _arange_size(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The length of ``torch.arange(end)`` / ``arange(start, end)`` with integer bounds (symbolic
    ones allowed) and step 1; ``None`` for other forms (their values are pinned)."""
    bounds = [a for a in args if not isinstance(a, torch.dtype)][:3]
    start, end = (0, bounds[0]) if len(bounds) == 1 else (bounds + [None, None])[:2]
    start, end = kwargs.get("start", start), kwargs.get("end", end)
    step = kwargs.get("step", bounds[2] if len(bounds) == 3 else 1)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, end)) or fixed(step) != 1:
        return None
    return end - start


def _fixed_args(x: Any) -> Any:
    """Plain values for a torch call: a symbolic value whose use is not understood is pinned."""
    if isinstance(x, tuple | list):
        return type(x)(_fixed_args(v) for v in x) if type(x) in (tuple, list) else x
    if isinstance(x, dict):
        return {k: _fixed_args(v) for k, v in x.items()}
    return fixed(x)


# constructors whose values come from their arguments: while building they make real (CPU) tensors, so
# code that computes with them runs as on a real device (RegNet's stage widths: ``torch.arange(depth) *
# w_a + w_0``, rounded, ``.int().tolist()``); :func:`_to_meta` moves what the module keeps to ``meta``
_VALUES = frozenset(
    getattr(torch, n)
    for n in ("tensor", "as_tensor", "asarray", "scalar_tensor", "arange", "range", "linspace", "logspace",
              "tril_indices", "triu_indices")
)  # fmt: skip
_ON_META = _device_constructors() - _VALUES


def _placed(func: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` of a torch call while building: a constructor given no device makes a meta tensor
    (as under ``with torch.device("meta")``), except those of :data:`_VALUES`."""
    if func in _ON_META and kwargs.get("device") is None:
        return {**kwargs, "device": "meta"}
    return kwargs


def _to_meta(module: nn.Module) -> None:
    """Move the parameters and buffers ``module`` holds on a real device (made from data while
    building, see :data:`_VALUES`) to ``meta``, as all others: a forward on ``meta`` inputs uses them."""
    module._apply(lambda t: t if t.is_meta else t.to("meta"))


class _OnMeta(TorchFunctionMode):
    """Building on the meta device (``TorchModel.measure``): :func:`_placed` for every call."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return func(*args, **_placed(func, kwargs or {}))


class _Mode(TorchFunctionMode):
    """Build phase: factories get plain sizes and remember symbolic shapes. Forward phase: calls with
    symbolic tensors or model parameters become ops of the trace."""

    def __init__(self, trace: _Trace) -> None:
        super().__init__()
        self.trace = trace

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = _placed(func, kwargs or {})
        tr = self.trace
        name = getattr(func, "__name__", "")
        if name in ("__get__", "size") and args and isinstance(args[0], torch.Tensor):
            return self._shape_query(func, name, args, kwargs)
        if (
            name in _FILLS
            and not tr.forward
            and args
            and isinstance(args[0], torch.Tensor)
            and args[0].is_meta
        ):
            return args[0]  # initialising a meta tensor: no data, nothing to do
        flat = _flat(args, kwargs)
        owner = next((a._trace for a in flat if isinstance(a, STensor)), None)
        if owner is not None and owner is not tr:  # a forward run while building (see _Trace.scratch)
            return owner.call(name, tuple(args), dict(kwargs), func)
        if tr.forward and self._traced(name, flat):
            return tr.call(name, tuple(args), dict(kwargs), func)
        if name == "arange":
            size = _arange_size(args, kwargs)
            if size is not None:
                size >= 0  # noqa: B015 - records the guard (a negative length raises)
                out = func(*_plain_sizes(args), **_plain_sizes(kwargs))
                tr.remember(out, (expr_of(size),))
                return out
        if name in _FACTORIES:
            size = _factory_size(name, args, kwargs)
            if size is not None:
                for d in size:
                    if isinstance(d, SymInt):
                        d >= 0  # noqa: B015 - records the guard (torch rejects negative sizes)
                out = func(*_plain_sizes(args), **_plain_sizes(kwargs))
                tr.remember(out, tuple(expr_of(d) for d in size))
                return out
            if name.endswith("_like") and args and isinstance(args[0], torch.Tensor):
                out = func(*_fixed_args(args), **_fixed_args(kwargs))
                shape = tr.shape_of(args[0])
                if shape is not None:
                    tr.remember(out, shape)
                return out
        if not (tr.forward or name in _SAME_SHAPE or name.endswith("_")) and name in _FUNCTIONS:
            return self._propagate(func, name, args, kwargs)
        out = func(*_fixed_args(args), **_fixed_args(kwargs))
        if (name in _SAME_SHAPE or name.endswith("_")) and isinstance(out, torch.Tensor):
            src = next((a for a in args if isinstance(a, torch.Tensor) and a.shape == out.shape), None)
            shape = tr.shape_of(src) if src is not None else None
            if shape is not None:
                tr.remember(out, shape)
                return out
        tr.derive(out, _flat(args, kwargs))  # no shape rule: the result holds on the sizes' values only
        return out

    def _traced(self, name: str, flat: list[Any]) -> bool:
        """A forward call that becomes ops of the network: one on a symbolic tensor or a parameter, or a
        supported one (``_FUNCTIONS``) on a tensor of symbolic shape or with a symbolic size (a view,
        a slice ``[:, :n]`` of a buffer: its result is a view of a ``constant`` node)."""
        if any(isinstance(a, STensor | nn.Parameter) for a in flat):
            return True
        inplace = name.endswith("_") and not name.endswith("__")  # the shape stays: see __torch_function__
        if name not in _FUNCTIONS or name in _KEEP_REAL or inplace:
            return False
        if not any(isinstance(a, torch.Tensor) for a in flat):
            return False
        parts = [p for a in flat for p in ((a.start, a.stop, a.step) if isinstance(a, slice) else (a,))]
        return any(
            isinstance(a, SymInt | SymFloat)
            or (isinstance(a, torch.Tensor) and self.trace.has_symbolic_shape(a))
            for a in parts
        )

    def _propagate(self, func: Any, name: str, args: Any, kwargs: Any) -> Any:
        """While building, a torch op on tensors with remembered shapes (``torch.randn(res, res).view(-1,
        1, res, res)``, ``torch.cat``): the op is traced in a scratch network (:meth:`_Trace.scratch`)
        and runs with plain sizes, and its result remembers the traced shape, so sizes stay symbolic.
        Where no argument has a remembered shape, or the op cannot be traced, or the shapes disagree,
        it runs as other calls do: symbolic sizes handed to it are pinned."""
        tr = self.trace
        if any(isinstance(a, torch.Tensor) and tr.shape_of(a) is not None for a in _flat(args, kwargs)):
            scratch = tr.scratch()
            try:
                sym = scratch.call(
                    name, scratch.symbolic(tuple(args)), {k: scratch.symbolic(v) for k, v in kwargs.items()}
                )
            except Exception:  # not traceable (a TraceError, a GraphError): as any other call
                tr.scratches.remove(scratch)
            else:
                out = func(*_plain_sizes(args), **_plain_sizes(kwargs))
                if isinstance(sym, STensor) and isinstance(out, torch.Tensor) and tr.same_shape(sym, out):
                    tr.remember_view(out, sym._t.shape)
                else:
                    _fixed_args((args, kwargs))  # pins: the result's shape is plain
                return out
        return func(*_fixed_args(args), **_fixed_args(kwargs))

    def _shape_query(self, func: Any, name: str, args: Any, kwargs: Any) -> Any:
        """A property (``p.shape``, ``t.grad``) or ``size()`` of a real tensor: the user's code gets the
        symbolic sizes of a tensor made from symbolic sizes (a parameter), torch's own code plain ones."""
        out = func(*args, **kwargs)
        what = name if name == "size" else getattr(getattr(func, "__self__", None), "__name__", "")
        caller = sys._getframe(2).f_code.co_filename  # 1: __torch_function__, 2: who asked
        if what not in ("shape", "size") or caller.startswith((TORCH_DIR, _HERE)):
            return out
        shape = self.trace.shape_of(args[0])
        if shape is None:
            return out
        sizes = tuple(self.trace.sym(d) for d in shape)
        if name == "size" and (len(args) > 1 or "dim" in kwargs):
            return sizes[fixed(args[1] if len(args) > 1 else kwargs["dim"])]
        return sizes


class _SkippedInit:
    """While building: ``torch.nn.init``'s functions leave a meta tensor as it is (it has no data),
    except that those needing fans still run on tensors of fewer than 2 dimensions (where they raise).
    Other tensors (another thread's real model) are initialised as usual; nested and concurrent uses
    patch once and restore the originals when the last one leaves."""

    _FANS = ("kaiming_uniform_", "kaiming_normal_", "xavier_uniform_", "xavier_normal_", "orthogonal_",
             "eye_", "sparse_")  # fmt: skip
    _DATA = ("uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_")
    _REAL = {n: getattr(nn.init, n) for n in (*_FANS, *_DATA)}
    _lock = threading.Lock()
    _depth = 0

    def __enter__(self) -> None:
        with _SkippedInit._lock:
            if not _SkippedInit._depth:
                for name, real in self._REAL.items():
                    setattr(nn.init, name, self._skip(real, name in self._FANS))
            _SkippedInit._depth += 1

    def __exit__(self, *exc: Any) -> None:
        with _SkippedInit._lock:
            _SkippedInit._depth -= 1
            if not _SkippedInit._depth:
                for name, real in self._REAL.items():
                    setattr(nn.init, name, real)

    @staticmethod
    def _skip(real: Callable[..., Any], fans: bool) -> Callable[..., Any]:
        def init(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            with torch._C.DisableTorchFunction():
                skip = isinstance(tensor, torch.Tensor) and tensor.is_meta and (tensor.dim() >= 2 or not fans)
            return tensor if skip else real(tensor, *args, **kwargs)

        return init


def _plain_sizes(x: Any) -> Any:
    if isinstance(x, tuple | list):
        return type(x)(_plain_sizes(v) for v in x) if type(x) in (tuple, list) else x
    if isinstance(x, dict):
        return {k: _plain_sizes(v) for k, v in x.items()}
    return plain(x) if isinstance(x, SymInt) else _fixed_args(x)
