"""Capture: one trace at one configuration. :class:`_Trace` records guards and ops into the region's
network; :class:`_Mode` intercepts torch calls (factories remember symbolic shapes while building,
calls on symbolic tensors become ops in the forward); :class:`_SkippedInit` skips weight init."""

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

from ..expr import Expr, interval
from ..graph import Check, Network, Tensor
from ._aten import fallback
from ._errors import _HERE, TraceError
from ._functions import _FUNCTIONS
from ._symbolic import TORCH_DIR, Recorder, SymFloat, SymInt, as_expr_like, expr_of, fixed, plain, user_line
from ._tensor import STensor, _flat

# ------------------------------------------------------------------------------------------------
# expression evaluation at one configuration


def _evaluate(e: Expr, env: Mapping[str, Any], memo: dict[int, Any]) -> Any:
    """Value of ``e`` at the encoded assignment ``env`` (memoised by node)."""
    from ..expr._nodes import _PY_OPS, topological

    if id(e) in memo:
        return memo[id(e)]
    for node in topological([e]):
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
        self.params: dict[int, STensor] = {}  # id(parameter) -> its parameter node
        self.counted: set[int] = set()  # ids of parameters counted by an op
        self.owners: dict[int, str] = {}  # id(parameter) -> module path of the op counting it
        self.names: dict[int, str] = {}  # id(module) -> qualified name
        self.param_names: dict[int, str] = {}
        self.binds: dict[int, list[Check]] = {}
        self.forward = False
        self.stack: list[str] = []
        self.depth = 0  # handlers running: their own tensors are not the model's
        self.held: dict[int, int] = {}  # tensor index -> last node emitted while Python held it

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

    def shape_of(self, t: torch.Tensor) -> tuple[Any, ...] | None:
        """The symbolic shape remembered for ``t``'s storage, if it still describes ``t`` (its values
        at this configuration are ``t``'s sizes: an in-place reshape or a view makes it unknown)."""
        with torch._C.DisableTorchFunction():
            rec = self.shapes.get(t.untyped_storage()._cdata)
            sizes = tuple(t.shape)
        if rec is None or len(rec[1]) != len(sizes):
            return None
        if any(_evaluate(d, self.env, self.memo) != n for d, n in zip(rec[1], sizes)):
            return None
        return rec[1]

    def tensor(self, x: Any, what: str) -> STensor:
        """``x`` as a symbolic tensor: an :class:`STensor`, or a parameter of the model (counted once)."""
        if isinstance(x, STensor):
            return x
        if isinstance(x, nn.Parameter):
            if id(x) in self.params:
                return self.params[id(x)]
            name = self.param_names.get(id(x), "?")
            if id(x) in self.counted:
                raise TraceError(
                    f"parameter {name} of a module is also used directly in {what} (not supported): "
                    f"{user_line()}"
                )
            shape = self.shape_of(x)
            if shape is None:
                raise TraceError(
                    f"parameter {name}: cannot tell how its shape {tuple(x.shape)} depends on the "
                    f"configuration (create it with torch.empty/zeros/ones/randn/rand(shape...) or an "
                    f"elementwise op of one): {user_line()}"
                )
            t = STensor(
                self, self.net.parameter([as_expr_like(d) for d in shape], name=self._name("parameter", name))
            )
            self.params[id(x)] = t
            self.counted.add(id(x))
            return t
        if isinstance(x, torch.Tensor):
            raise TraceError(
                f"a constant tensor of shape {tuple(x.shape)} (not a parameter) is used in {what} "
                f"(not supported): {user_line()}"
            )
        raise TraceError(f"{what}: expected a tensor, got {type(x).__name__}: {user_line()}")

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


def _factory_size(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...] | None:
    if "size" in kwargs:
        return tuple(kwargs["size"])
    for a in args:
        if isinstance(a, tuple | list | torch.Size):
            return tuple(a)
    if name in ("empty", "zeros", "ones", "randn", "rand") and args and all(isinstance(a, int) for a in args):
        return tuple(args)
    return None


def _fixed_args(x: Any) -> Any:
    """Plain values for a torch call: a symbolic value whose use is not understood is pinned."""
    if isinstance(x, tuple | list):
        return type(x)(_fixed_args(v) for v in x) if type(x) in (tuple, list) else x
    if isinstance(x, dict):
        return {k: _fixed_args(v) for k, v in x.items()}
    return fixed(x)


_CONSTRUCTORS = _device_constructors()


class _Mode(TorchFunctionMode):
    """Build phase: factories get plain sizes and remember symbolic shapes. Forward phase: calls with
    symbolic tensors or model parameters become ops of the trace."""

    def __init__(self, trace: _Trace) -> None:
        super().__init__()
        self.trace = trace

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func in _CONSTRUCTORS and kwargs.get("device") is None:  # as ``with torch.device("meta")``
            kwargs = {**kwargs, "device": "meta"}
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
        if tr.forward and any(isinstance(a, STensor | nn.Parameter) for a in _flat(args, kwargs)):
            return tr.call(name, tuple(args), dict(kwargs), func)
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
        out = func(*_fixed_args(args), **_fixed_args(kwargs))
        if (name in _SAME_SHAPE or name.endswith("_")) and isinstance(out, torch.Tensor):
            src = next((a for a in args if isinstance(a, torch.Tensor) and a.shape == out.shape), None)
            shape = tr.shape_of(src) if src is not None else None
            if shape is not None:
                tr.remember(out, shape)
        return out

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
