"""``from_torch``: the symbolic network of a user's own ``nn.Module`` builder, exact on every configuration.

How it works (see :func:`from_torch`):

1. **Symbolic values.** ``build(cfg)`` and ``inputs(cfg)`` run with ``cfg`` holding
   :class:`~dnnsat.torch._symbolic.SymInt` / ``SymFloat`` / ``SymStr`` values: plain values that also
   record their expression over the space's variables. Modules are built on the ``meta`` device; torch
   calls receive plain values (a size handed to a tensor factory is remembered as the tensor's symbolic
   shape, with the guard ``size >= 0``). Choices that cannot be wrapped (booleans, ``None``) are pinned.
2. **Guards.** Every place the code (the user's or torch's) turns a symbolic value into control flow
   or a plain value - ``if``, a comparison, ``range(depth)``, a dict lookup by a categorical, a
   division by a symbolic divisor - is a guard (a boolean expression and its outcome). A guard that has
   the same outcome on the whole space (interval bounds) is dropped.
3. **Forward.** ``module(*inputs)`` runs with symbolic tensors: a call of a supported ``torch.nn`` leaf
   module becomes a catalog op whose attributes are the module's symbolic attributes (plus a rule that
   the module's declared input size matches its input); supported tensor functions and methods become
   catalog ops; ``x.shape`` / ``x.size(i)`` are symbolic ints. Anything else raises
   :class:`TraceError` naming the module or function and the user's source line.
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

import builtins
import math
import os
import re
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn as nn
from torch.overrides import TorchFunctionMode
from torch.utils._device import _device_constructors
from torch.utils._python_dispatch import TorchDispatchMode

from ..expr import Const, Expr, all_, any_, ceildiv, compile_vectorized, interval, sum_
from ..graph import Check, GraphError, Network, Tensor
from ..graph._catalog import PAD_MODES, einsum_subscripts, eq
from ..graph._network import conv_pads
from ._symbolic import (
    REAL_RANGE,
    TORCH_DIR,
    Recorder,
    SymFloat,
    SymInt,
    SymStr,
    activate,
    as_expr_like,
    expr_of,
    fixed,
    guarded_range,
    plain,
    user_line,
)

__all__ = ["from_torch", "TorchModel", "TraceError", "MeasureError"]

_HERE = os.path.dirname(os.path.abspath(__file__)) + os.sep
_GRID_LIMIT = 1 << 20  # combinations of guarded parameters enumerated to find uncovered configurations


class TraceError(GraphError):
    """A model ``from_torch`` cannot represent exactly: names the module or op and the source line."""


class MeasureError(RuntimeError):
    """PyTorch cannot run the model on the meta device (:meth:`TorchModel.measure`): the configuration
    is neither valid nor invalid as far as the check can tell."""


_META = re.compile(r"\bmeta\b", re.IGNORECASE)  # PyTorch's errors about the meta device


def _user_frame(err: BaseException) -> str:
    """``file:line: code`` of the innermost frame of ``err``'s traceback outside torch and dnnsat."""
    import linecache

    found = "<unknown>"
    tb = err.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if not name.startswith((TORCH_DIR, _HERE)):
            found = f"{name}:{tb.tb_lineno}: {linecache.getline(name, tb.tb_lineno).strip()}"
        tb = tb.tb_next
    return found


# ------------------------------------------------------------------------------------------------
# expression evaluation at one configuration


def _evaluate(e: Expr, env: Mapping[str, Any], memo: dict[int, Any]) -> Any:
    """Value of ``e`` at the encoded assignment ``env`` (memoised by node)."""
    from ..expr import _PY_OPS, topological

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


# ------------------------------------------------------------------------------------------------
# symbolic tensors


class STensor:
    """A symbolic tensor during a trace: a :class:`~dnnsat.graph.Tensor` of the region's network."""

    def __init__(self, trace: _Trace, t: Tensor) -> None:
        self._trace = trace
        self._t = t
        self.is_bool = False  # a boolean model input (an attention mask)
        self.watched = False  # reached the model's own code: notes when Python frees it (_Trace.held)

    # shape queries -------------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[Any, ...]:
        return tuple(self._trace.sym(d) for d in self._t.shape)

    def size(self, dim: int | None = None) -> Any:
        return self.shape if dim is None else self.shape[fixed(dim)]

    def dim(self) -> int:
        return self._t.ndim

    @property
    def ndim(self) -> int:
        return self._t.ndim

    @property
    def dtype(self) -> torch.dtype:
        return torch.int64 if self._t.dtype == "int64" else torch.float32

    @property
    def device(self) -> torch.device:
        return torch.device("meta")

    def __len__(self) -> int:
        return int(self.shape[0])

    # operators -----------------------------------------------------------------------------------
    def __add__(self, other: Any) -> Any:
        return self._trace.call("add", (self, other), {})

    def __radd__(self, other: Any) -> Any:
        return self._trace.call("add", (other, self), {})

    def __sub__(self, other: Any) -> Any:
        return self._trace.call("sub", (self, other), {})

    def __rsub__(self, other: Any) -> Any:
        return self._trace.call("sub", (other, self), {})

    def __neg__(self) -> Any:
        return self._trace.call("neg", (self,), {})

    def __mul__(self, other: Any) -> Any:
        return self._trace.call("mul", (self, other), {})

    def __rmul__(self, other: Any) -> Any:
        return self._trace.call("mul", (other, self), {})

    def __truediv__(self, other: Any) -> Any:
        return self._trace.call("div", (self, other), {})

    def __matmul__(self, other: Any) -> Any:
        return self._trace.call("matmul", (self, other), {})

    def __rmatmul__(self, other: Any) -> Any:
        return self._trace.call("matmul", (other, self), {})

    def __getitem__(self, index: Any) -> Any:
        return self._trace.call("__getitem__", (self, index), {})

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)

        def method(*args: Any, **kwargs: Any) -> Any:
            return self._trace.call(name, (self, *args), kwargs)

        return method

    def __bool__(self) -> bool:
        raise TraceError(f"a tensor's value decides control flow (not supported): {user_line()}")

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        trace = next(a._trace for a in _flat(args, kwargs or {}) if isinstance(a, STensor))
        return trace.call(getattr(func, "__name__", ""), tuple(args), dict(kwargs or {}))

    def __repr__(self) -> str:
        return f"STensor({self._t!r})"


class _Opaque:
    """A secondary output (an RNN's final states, attention weights): any use raises."""

    def __init__(self, what: str) -> None:
        self.what = what

    def __getattr__(self, name: str) -> Any:
        raise TraceError(f"{self.what} is not supported as a value: {user_line()}")


# ------------------------------------------------------------------------------------------------
# one trace (one region)


@dataclass
class _Region:
    cond: Expr
    guards: list[tuple[Expr, str]]
    net: Network | None = None
    outputs: tuple[int, ...] = ()
    binds: dict[int, list[Check]] = field(default_factory=dict)  # node index -> input rules
    held: dict[int, int] = field(default_factory=dict)  # tensor -> last node Python holds it (past its uses)
    error: str = ""
    slots: dict[str, str] = field(default_factory=dict)  # module path -> its slot (see _slots)


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

    def call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        handler = _FUNCTIONS.get(name)
        if handler is None:
            raise TraceError(f"tensor function or method {name!r} is not supported: {user_line()}")
        return self.handle(handler, *args, **kwargs)

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


def _t(x: STensor) -> Tensor:
    return x._t


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
            return tr.call(name, tuple(args), dict(kwargs))
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


def _flat(args: Any, kwargs: Any) -> list[Any]:
    out: list[Any] = []
    stack = [*args, *kwargs.values()]
    while stack:
        a = stack.pop()
        if isinstance(a, tuple | list):
            stack.extend(a)
        else:
            out.append(a)
    return out


# ------------------------------------------------------------------------------------------------
# functions and methods


def _dim(d: Any, n: int) -> int:
    d = fixed(d)
    if not isinstance(d, int) or not -n <= d < n:
        raise TraceError(f"dimension {d!r} out of range for a {n}-D tensor: {user_line()}")
    return d % n


def _sizes(args: tuple[Any, ...]) -> tuple[Any, ...]:
    if len(args) == 1 and isinstance(args[0], tuple | list | torch.Size):
        return tuple(args[0])
    return tuple(args)


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _binary(op: str) -> Callable[..., STensor]:
    """``add``/``sub``/``mul`` of two tensors, or of a tensor and a number (``shift``/``scale``)."""

    def f(tr: _Trace, a: Any, b: Any, *, alpha: Any = 1, out: Any = None) -> STensor:
        if out is not None or fixed(alpha) != 1:
            raise TraceError(f"{op} with out= or alpha= is not supported: {user_line()}")
        if _number(a) or _number(b):
            x, c = (tr.tensor(b, op), float(plain(a))) if _number(a) else (tr.tensor(a, op), float(plain(b)))
            if op == "mul":
                return tr.apply("scale", tr.net.scale, _t(x), c)
            if op == "add":
                return tr.apply("shift", tr.net.shift, _t(x), c)
            return (
                tr.apply("shift", tr.net.shift, _t(x), c, negate=True)
                if _number(a)
                else (tr.apply("shift", tr.net.shift, _t(x), -c))
            )
        x, y = tr.tensor(a, op), tr.tensor(b, op)
        return tr.apply(op, getattr(tr.net, op), _t(x), _t(y))

    return f


def _neg(tr: _Trace, x: Any) -> STensor:
    return tr.apply("scale", tr.net.scale, _t(tr.tensor(x, "neg")), -1.0)


def _div(tr: _Trace, a: Any, b: Any) -> STensor:
    if isinstance(b, int | float) and not isinstance(b, bool) and isinstance(a, STensor | nn.Parameter):
        return tr.apply("scale", tr.net.scale, _t(tr.tensor(a, "div")), 1.0 / float(plain(b)))
    raise TraceError(f"division of tensors is not supported: {user_line()}")


def _softmax(tr: _Trace, x: Any, dim: Any = None, *args: Any, **kwargs: Any) -> STensor:
    x = tr.tensor(x, "softmax")
    if dim is None:
        raise TraceError(f"softmax needs an explicit dim: {user_line()}")
    return tr.apply("softmax", tr.net.softmax, _t(x), _dim(dim, x.ndim))


def _dropout(tr: _Trace, x: Any, p: Any = 0.5, training: bool = True, inplace: bool = False) -> STensor:
    x = tr.tensor(x, "dropout")
    if not training:
        return x
    rate = float(plain(p))
    if isinstance(p, SymFloat) and rate == 0:  # a rate of 0 is no dropout at all: not for every trial here
        rate = 0.5
    return tr.apply("dropout", tr.net.dropout, _t(x), rate)


def _cat(tr: _Trace, tensors: Sequence[Any], dim: Any = 0, **kwargs: Any) -> STensor:
    ts = [tr.tensor(t, "cat") for t in tensors]
    return tr.apply("concat", tr.net.concat, [_t(t) for t in ts], _dim(dim, ts[0].ndim))


def _flatten(tr: _Trace, x: Any, start_dim: Any = 0, end_dim: Any = -1) -> STensor:
    x = tr.tensor(x, "flatten")
    return tr.apply("flatten", tr.net.flatten, _t(x), fixed(start_dim), fixed(end_dim))


def _reshape(tr: _Trace, x: Any, *shape: Any) -> STensor:
    x = tr.tensor(x, "reshape")
    target = [as_expr_like(d) for d in _sizes(shape)]
    return tr.apply("reshape", tr.net.reshape, _t(x), target)


def _permute(tr: _Trace, x: Any, *dims: Any) -> STensor:
    x = tr.tensor(x, "permute")
    return tr.apply("permute", tr.net.permute, _t(x), [fixed(d) for d in _sizes(dims)])


def _transpose(tr: _Trace, x: Any, dim0: Any, dim1: Any) -> STensor:
    x = tr.tensor(x, "transpose")
    return tr.apply("permute", tr.net.transpose, _t(x), fixed(dim0), fixed(dim1))


def _reduce(op: str) -> Callable[..., STensor]:
    """``mean``/``sum`` over one dimension or adjacent ones (``(2, 3)``: flattened into one first, a
    view); ``keepdim``: size-1 views in their place."""

    def f(tr: _Trace, x: Any, dim: Any = None, keepdim: bool = False, **kwargs: Any) -> STensor:
        xs = tr.tensor(x, op)
        dims = sorted(_dim(d, xs.ndim) for d in (fixed(dim) if isinstance(dim, tuple | list) else [dim]))
        if not dims or dims != list(range(dims[0], dims[-1] + 1)) or kwargs.get("dtype") is not None:
            raise TraceError(f"{op} is supported over one dimension or adjacent ones: {user_line()}")
        if len(dims) > 1:
            xs = tr.apply("flatten", tr.net.flatten, _t(xs), dims[0], dims[-1])
        y = tr.apply(op, getattr(tr.net, op), _t(xs), dims[0])
        for d in dims if fixed(keepdim) else ():
            y = _unsqueeze(tr, y, d)
        return y

    return f


def _unsqueeze(tr: _Trace, x: Any, dim: Any) -> STensor:
    xs = tr.tensor(x, "unsqueeze")
    d = _dim(dim, xs.ndim + 1)
    shape = list(_t(xs).shape)
    shape.insert(d, Const(1))
    return tr.apply("reshape", tr.net.reshape, _t(xs), shape)


def _squeeze(tr: _Trace, x: Any, dim: Any = None) -> STensor:
    """Drops the given (or every) dimension of size 1; whether a symbolic size is 1 is a guard."""
    xs = tr.tensor(x, "squeeze")
    dims = (
        range(xs.ndim)
        if dim is None
        else [_dim(d, xs.ndim) for d in (dim if isinstance(dim, tuple | list) else [dim])]
    )
    drop = {d for d in dims if tr.sym(_t(xs).shape[d]) == 1}
    if not drop:
        return xs
    return tr.apply(
        "reshape", tr.net.reshape, _t(xs), [e for d, e in enumerate(_t(xs).shape) if d not in drop]
    )


def _stack(tr: _Trace, tensors: Sequence[Any], dim: Any = 0, **kwargs: Any) -> STensor:
    ts = [tr.tensor(t, "stack") for t in tensors]
    d = _dim(dim, ts[0].ndim + 1)
    return _cat(tr, [_unsqueeze(tr, t, d) for t in ts], d)


def _matmul(tr: _Trace, a: Any, b: Any) -> STensor:
    x, y = tr.tensor(a, "matmul"), tr.tensor(b, "matmul")
    return tr.apply("matmul", tr.net.matmul, _t(x), _t(y))


def _bmm(tr: _Trace, a: Any, b: Any) -> STensor:
    x, y = tr.tensor(a, "bmm"), tr.tensor(b, "bmm")
    return tr.apply("bmm", tr.net.bmm, _t(x), _t(y))


def _einsum(tr: _Trace, equation: Any, *operands: Any) -> STensor:
    """``torch.einsum`` of two operands in matmul form (``einsum_subscripts``); others are refused."""
    ops = tuple(operands[0]) if len(operands) == 1 and isinstance(operands[0], list | tuple) else operands
    xs = [tr.tensor(o, "einsum") for o in ops]
    try:
        einsum_subscripts(fixed(equation), [x.ndim for x in xs])
    except ValueError as e:
        raise TraceError(f"{e}: {user_line()}") from None
    return tr.apply("einsum", tr.net.einsum, fixed(equation), _t(xs[0]), _t(xs[1]))


def _expand(tr: _Trace, x: Any, *shape: Any) -> STensor:
    xs = tr.tensor(x, "expand")
    return tr.apply("expand", tr.net.expand, _t(xs), [as_expr_like(d) for d in _sizes(shape)])


def _select(tr: _Trace, x: Any, dim: Any, index: Any) -> STensor:
    xs = tr.tensor(x, "select")
    return tr.apply("select_index", tr.net.select_index, _t(xs), fixed(dim), as_expr_like(index))


def _getitem(tr: _Trace, x: Any, index: Any) -> STensor:
    """``x[:, i]``-style indexing: full slices and one integer (a :func:`_select`)."""
    xs = tr.tensor(x, "indexing")
    items = index if isinstance(index, tuple) else (index,)
    ints = [j for j, it in enumerate(items) if isinstance(it, int) and not isinstance(it, bool)]
    full = all(isinstance(it, slice) and it == slice(None) for j, it in enumerate(items) if j not in ints)
    if len(ints) != 1 or not full:
        raise TraceError(
            f"indexing {index!r} is not supported (full slices and one integer are): {user_line()}"
        )
    return _select(tr, xs, ints[0], items[ints[0]])


def _pieces(tr: _Trace, xs: STensor, d: int, lengths: list[Expr]) -> tuple[STensor, ...]:
    out, start = [], Const(0)
    for length in lengths:
        out.append(tr.apply("narrow", tr.net.narrow, _t(xs), d, start, length))
        start = start + length
    return tuple(out)


def _even_pieces(tr: _Trace, xs: STensor, d: int, size: Expr) -> tuple[STensor, ...]:
    n = _t(xs).shape[d]
    count = int(tr.sym(ceildiv(n, size)))  # the number of pieces is structural: pinned
    return _pieces(tr, xs, d, [size if i < count - 1 else n - i * size for i in range(count)])


def _chunk(tr: _Trace, x: Any, chunks: Any, dim: Any = 0) -> tuple[STensor, ...]:
    xs = tr.tensor(x, "chunk")
    d = _dim(dim, xs.ndim)
    if _record_positive(tr, chunks):
        raise GraphError("chunk: chunks must be >= 1")
    return _even_pieces(tr, xs, d, ceildiv(_t(xs).shape[d], expr_of(chunks)))


def _record_positive(tr: _Trace, n: Any) -> bool:
    return not n >= 1  # a guard when symbolic


def _split(tr: _Trace, x: Any, split_size_or_sections: Any, dim: Any = 0) -> tuple[STensor, ...]:
    xs = tr.tensor(x, "split")
    d = _dim(dim, xs.ndim)
    if isinstance(split_size_or_sections, tuple | list):
        lengths = [expr_of(v) for v in split_size_or_sections]
        pieces = _pieces(tr, xs, d, lengths)
        tr.bind(pieces[0], "split sizes add up to the dimension", eq(sum_(lengths), _t(xs).shape[d]))
        return pieces
    if _record_positive(tr, split_size_or_sections):
        raise GraphError("split: split_size must be >= 1")
    return _even_pieces(tr, xs, d, expr_of(split_size_or_sections))


def _interpolate(
    tr: _Trace,
    x: Any,
    size: Any = None,
    scale_factor: Any = None,
    mode: Any = "nearest",
    align_corners: Any = None,
    recompute_scale_factor: Any = None,
    antialias: Any = False,
) -> STensor:
    xs = tr.tensor(x, "interpolate")
    nd = xs.ndim - 2
    if fixed(antialias) or fixed(mode) not in ("nearest", "linear", "bilinear", "bicubic"):
        raise TraceError(
            f"interpolate with mode {fixed(mode)!r} or antialias is not supported: {user_line()}"
        )
    if scale_factor is not None:
        factors = scale_factor if isinstance(scale_factor, tuple | list) else (scale_factor,) * nd
        if not all(float(fixed(f)).is_integer() for f in factors):
            raise TraceError(f"interpolate: only integer scale factors are supported: {user_line()}")
        scale: Any = tuple(f.expr if isinstance(f, SymInt) else int(fixed(f)) for f in factors)
        return tr.apply(
            "upsample",
            tr.net.upsample,
            _t(xs),
            None,
            scale,
            mode=fixed(mode),
            align_corners=fixed(align_corners),
        )
    return tr.apply(
        "upsample",
        tr.net.upsample,
        _t(xs),
        _exprs(size),
        None,
        mode=fixed(mode),
        align_corners=fixed(align_corners),
    )


def _pad(tr: _Trace, x: Any, pad: Any, mode: str = "constant", value: Any = None) -> STensor:
    xs = tr.tensor(x, "pad")
    if fixed(mode) not in PAD_MODES or (value is not None and fixed(value) != 0):
        raise TraceError(f"F.pad: mode {mode!r} with value {value!r} is not supported (zeros, reflect, "
                         f"replicate, circular are): {user_line()}")  # fmt: skip
    if any(p < 0 for p in pad):  # records the guards: a region with negative padding raises
        raise TraceError(f"F.pad: negative padding (cropping) is not supported: {user_line()}")
    n, rank = len(pad) // 2, xs.ndim
    if n > rank - 2 and (fixed(mode) == "constant" or (n == rank - 1 and rank in (3, 4))):
        raise TraceError(f"F.pad: padding the batch or channel dimension is not supported: {user_line()}")
    return tr.apply("pad", tr.net.pad, _t(xs), [as_expr_like(p) for p in pad], fixed(mode))


def _identity(tr: _Trace, x: Any, *args: Any, **kwargs: Any) -> STensor:
    return tr.tensor(x, "contiguous")


def _size(tr: _Trace, x: Any, dim: Any = None) -> Any:
    return tr.tensor(x, "size").size(dim)


def _sdpa(
    tr: _Trace,
    q: Any,
    k: Any,
    v: Any,
    attn_mask: Any = None,
    dropout_p: Any = 0.0,
    is_causal: Any = False,
    scale: Any = None,
    enable_gqa: Any = False,
) -> STensor:
    if fixed(dropout_p) != 0.0:
        raise TraceError(f"scaled_dot_product_attention with dropout_p is not supported: {user_line()}")
    qs, ks, vs = (tr.tensor(t, "scaled_dot_product_attention") for t in (q, k, v))
    mask, bool_mask = _mask(tr, attn_mask, "scaled_dot_product_attention: attn_mask")
    if mask is not None and is_causal:
        raise TraceError(
            "scaled_dot_product_attention: attn_mask with is_causal=True (PyTorch refuses both): "
            f"{user_line()}"
        )
    return tr.apply(
        "sdpa", tr.net.sdpa, _t(qs), _t(ks), _t(vs), causal=bool(is_causal), gqa=bool(enable_gqa), mask=mask,
        bool_mask=bool_mask,
    )  # fmt: skip


def _mask(tr: _Trace, m: Any, what: str) -> tuple[Tensor | tuple[Expr, ...] | None, bool]:
    """An attention mask as the DSL takes it: a tensor of the trace (a model input or computed from one),
    or the symbolic shape of a mask the model builds itself (``torch.ones(s, s).tril()``); and whether
    it is boolean."""
    if m is None:
        return None, False
    if isinstance(m, STensor):
        return _t(m), m.is_bool
    if isinstance(m, torch.Tensor) and not isinstance(m, nn.Parameter):
        shape = tr.shape_of(m)
        if shape is None:
            raise TraceError(
                f"{what}: cannot tell how the shape {tuple(m.shape)} of this mask depends on the "
                f"configuration (build it with torch.ones/zeros/full(shape...) and tril/triu/masked_fill, "
                f"or pass it as a model input): {user_line()}"
            )
        with torch._C.DisableTorchFunction():
            is_bool = m.dtype == torch.bool
        if not (is_bool or m.is_floating_point()):
            raise TraceError(f"{what}: the mask must be boolean or floating point: {user_line()}")
        return tuple(shape), is_bool
    raise TraceError(f"{what}: expected a tensor, got {type(m).__name__}: {user_line()}")


def _max_pool(nd: int) -> Callable[..., STensor]:
    def f(
        tr: _Trace,
        x: Any,
        kernel_size: Any,
        stride: Any = None,
        padding: Any = 0,
        dilation: Any = 1,
        ceil_mode: Any = False,
        return_indices: Any = False,
    ) -> STensor:
        _plain_pool(f"max_pool{nd}d", return_indices)
        xs = tr.tensor(x, f"max_pool{nd}d")
        args = (_exprs(kernel_size), _stride(stride), _exprs(padding), _exprs(dilation))
        return tr.apply(f"maxpool{nd}d", tr.net.maxpool, _t(xs), *args, ceil_mode=bool(fixed(ceil_mode)))

    return f


def _avg_pool(nd: int) -> Callable[..., STensor]:
    def f(
        tr: _Trace,
        x: Any,
        kernel_size: Any,
        stride: Any = None,
        padding: Any = 0,
        ceil_mode: Any = False,
        count_include_pad: Any = True,
        divisor_override: Any = None,
    ) -> STensor:
        _plain_pool(f"avg_pool{nd}d", divisor_override is not None)
        xs = tr.tensor(x, f"avg_pool{nd}d")
        args = (_exprs(kernel_size), _stride(stride), _exprs(padding), bool(fixed(count_include_pad)))
        return tr.apply(f"avgpool{nd}d", tr.net.avgpool, _t(xs), *args, ceil_mode=bool(fixed(ceil_mode)))

    return f


def _plain_pool(what: str, other: Any) -> None:
    if fixed(other):
        raise TraceError(f"{what} with return_indices or divisor_override is not supported: {user_line()}")


def _stride(stride: Any) -> Any:
    return None if stride is None or (isinstance(stride, tuple | list) and not stride) else _exprs(stride)


def _exprs(x: Any) -> Any:
    if x is None:
        return None
    if isinstance(x, tuple | list):
        return tuple(as_expr_like(v) for v in x)
    return as_expr_like(x)


def _adaptive(kind: str, nd: int) -> Callable[..., STensor]:
    def f(tr: _Trace, x: Any, output_size: Any, return_indices: bool = False) -> STensor:
        return _adaptive_op(
            tr, kind, nd, tr.tensor(x, f"adaptive_{kind}_pool{nd}d"), output_size, return_indices
        )

    return f


def _adaptive_op(
    tr: _Trace, kind: str, nd: int, x: STensor, output_size: Any, return_indices: Any
) -> STensor:
    size = output_size if isinstance(output_size, tuple | list) else (output_size,) * nd
    if fixed(return_indices) or any(s is None for s in size):
        raise TraceError(
            f"adaptive pooling with return_indices or None sizes is not supported: {user_line()}"
        )
    method = tr.net.adaptive_maxpool if kind == "max" else tr.net.adaptive_avgpool
    if x.ndim != nd + 2:
        raise GraphError(f"adaptive_{kind}pool{nd}d: expects a {nd + 2}-D input, got {x.ndim}-D")
    return tr.apply(f"adaptive_{kind}pool{nd}d", method, _t(x), _exprs(tuple(size)))


def _activation_fn(op: str) -> Callable[..., STensor]:
    def f(tr: _Trace, x: Any, *args: Any, **kwargs: Any) -> STensor:
        return tr.apply(op, getattr(tr.net, op), _t(tr.tensor(x, op)))

    return f


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    **{
        n: _activation_fn(n)
        for n in ("relu", "gelu", "silu", "sigmoid", "tanh", "hardswish", "relu6", "mish", "elu")
    },
    "leaky_relu": _activation_fn("leaky_relu"),
    "relu_": _activation_fn("relu"),
    "softmax": _softmax,
    "dropout": _dropout,
    "add": _binary("add"),
    "sub": _binary("sub"),
    "__sub__": _binary("sub"),
    "__rsub__": lambda tr, a, b: _binary("sub")(tr, b, a),
    "rsub": lambda tr, a, b: _binary("sub")(tr, b, a),
    "neg": _neg,
    "__neg__": _neg,
    "sum": _reduce("sum"),
    "unsqueeze": _unsqueeze,
    "squeeze": _squeeze,
    "stack": _stack,
    "__add__": _binary("add"),
    "__radd__": lambda tr, a, b: _binary("add")(tr, b, a),
    "__iadd__": _binary("add"),
    "mul": _binary("mul"),
    "__mul__": _binary("mul"),
    "__rmul__": lambda tr, a, b: _binary("mul")(tr, b, a),
    "div": _div,
    "__truediv__": _div,
    "cat": _cat,
    "concat": _cat,
    "flatten": _flatten,
    "view": _reshape,
    "reshape": _reshape,
    "permute": _permute,
    "transpose": _transpose,
    "mean": _reduce("mean"),
    "matmul": _matmul,
    "__matmul__": _matmul,
    "bmm": _bmm,
    "einsum": _einsum,
    "contiguous": _identity,
    "expand": _expand,
    "chunk": _chunk,
    "split": _split,
    "interpolate": _interpolate,
    "pad": _pad,
    "select": _select,
    "__getitem__": _getitem,
    "size": _size,
    "scaled_dot_product_attention": _sdpa,
    "max_pool1d": _max_pool(1),
    "max_pool2d": _max_pool(2),
    "avg_pool1d": _avg_pool(1),
    "avg_pool2d": _avg_pool(2),
    "adaptive_avg_pool1d": _adaptive("avg", 1),
    "adaptive_avg_pool2d": _adaptive("avg", 2),
    "adaptive_max_pool1d": _adaptive("max", 1),
    "adaptive_max_pool2d": _adaptive("max", 2),
}


# ------------------------------------------------------------------------------------------------
# modules


def _claim(tr: _Trace, mod: nn.Module, tied_weight: bool = False) -> str | None:
    """Mark ``mod``'s parameters counted; when its weight is shared with an earlier op (allowed only
    with ``tied_weight``: a Linear's weight, e.g. a tied LM head), the module path of that op."""
    tied = None
    for pname, p in mod.named_parameters():
        if id(p) in tr.counted:
            if tied_weight and pname == "weight" and id(p) in tr.owners:
                tied = tr.owners[id(p)]
                continue
            raise TraceError(
                f"module {tr.where()} ({type(mod).__name__}): parameter {pname!r} is shared with another "
                f"op or the module is called twice (supported for a Linear's weight only): {user_line()}"
            )
    for p in mod.parameters():
        tr.counted.add(id(p))
        tr.owners.setdefault(id(p), tr.where().replace(".", "/"))
    return tied


def _in(tr: _Trace, x: Any, mod: nn.Module) -> STensor:
    return tr.tensor(x, f"{tr.where()} ({type(mod).__name__})")


def _linear_mod(tr: _Trace, mod: nn.Linear, x: Any) -> STensor:
    xs = _in(tr, x, mod)
    tied = _claim(tr, mod, tied_weight=True)
    y = tr.apply(
        "linear", tr.net.linear, _t(xs), as_expr_like(mod.out_features), mod.bias is not None, tied or False
    )
    tr.bind(y, "in_features matches the input", eq(_t(xs).shape[-1], expr_of(mod.in_features)))
    return y


def _conv_mod(nd: int) -> Callable[..., STensor]:
    def h(tr: _Trace, mod: Any, x: Any) -> STensor:
        xs = _in(tr, x, mod)
        _claim(tr, mod)
        method = {1: tr.net.conv1d, 2: tr.net.conv2d, 3: tr.net.conv3d}[nd]
        pad = fixed(mod.padding) if isinstance(mod.padding, str) else _exprs(mod.padding)
        mode = fixed(mod.padding_mode)
        if mode != "zeros":  # ``_conv_forward``: F.pad(x, _reversed_padding_repeated_twice, mode), no padding
            pads = conv_pads(pad, _exprs(mod.kernel_size), _exprs(mod.dilation))
            xs = tr.apply("pad", tr.net.pad, _t(xs), pads, mode)
            pad = (0,) * nd
        y = tr.apply(
            f"conv{nd}d", method, _t(xs), as_expr_like(mod.out_channels), _exprs(mod.kernel_size),
            _exprs(mod.stride), pad, _exprs(mod.dilation), as_expr_like(mod.groups), mod.bias is not None,
        )  # fmt: skip
        tr.bind(y, "in_channels matches the input", eq(_t(xs).shape[1], expr_of(mod.in_channels)))
        return y

    return h


def _conv_transpose_mod(nd: int) -> Callable[..., STensor]:
    def h(tr: _Trace, mod: Any, x: Any, output_size: Any = None) -> STensor:
        if output_size is not None:
            raise TraceError(f"module {tr.where()}: output_size is not supported: {user_line()}")
        xs = _in(tr, x, mod)  # (nn.ConvTransposeNd accepts padding_mode="zeros" only)
        _claim(tr, mod)
        method = {1: tr.net.conv_transpose1d, 2: tr.net.conv_transpose2d}[nd]
        y = tr.apply(
            f"conv_transpose{nd}d", method, _t(xs), as_expr_like(mod.out_channels),
            _exprs(mod.kernel_size), _exprs(mod.stride), _exprs(mod.padding), _exprs(mod.output_padding),
            _exprs(mod.dilation), as_expr_like(mod.groups), mod.bias is not None,
        )  # fmt: skip
        tr.bind(y, "in_channels matches the input", eq(_t(xs).shape[1], expr_of(mod.in_channels)))
        return y

    return h


def _batchnorm_mod(tr: _Trace, mod: Any, x: Any) -> STensor:
    xs = _in(tr, x, mod)
    ranks = (4,) if isinstance(mod, nn.BatchNorm2d) else (2, 3)
    if xs.ndim not in ranks:
        raise GraphError(
            f"{tr.where()}: {type(mod).__name__} expects a {' or '.join(map(str, ranks))}-D input"
        )
    _claim(tr, mod)
    y = tr.apply("batchnorm", tr.net.batchnorm, _t(xs), affine=bool(mod.affine))
    tr.bind(y, "num_features matches the input", eq(_t(xs).shape[1], expr_of(mod.num_features)))
    return y


def _layernorm_mod(tr: _Trace, mod: nn.LayerNorm, x: Any) -> STensor:
    xs = _in(tr, x, mod)
    _claim(tr, mod)
    shape = tuple(mod.normalized_shape)
    n = len(shape)
    if n > xs.ndim:
        raise GraphError(f"{tr.where()}: normalized_shape has more dimensions than the input")
    affine = bool(mod.elementwise_affine)
    y = tr.apply("layernorm", tr.net.layernorm, _t(xs), n, affine, mod.bias is not None)
    rule = all_(eq(d, expr_of(s)) for d, s in zip(_t(xs).shape[xs.ndim - n :], shape))
    tr.bind(y, "normalized_shape matches the input", rule)
    return y


def _rmsnorm_mod(tr: _Trace, mod: nn.RMSNorm, x: Any) -> STensor:
    xs = _in(tr, x, mod)
    _claim(tr, mod)
    shape = tuple(mod.normalized_shape)
    n = len(shape)
    if n > xs.ndim:
        raise GraphError(f"{tr.where()}: normalized_shape has more dimensions than the input")
    y = tr.apply("rmsnorm", tr.net.rmsnorm, _t(xs), n, bool(mod.elementwise_affine))
    rule = all_(eq(d, expr_of(s)) for d, s in zip(_t(xs).shape[xs.ndim - n :], shape))
    tr.bind(y, "normalized_shape matches the input", rule)
    return y


def _upsample_mod(tr: _Trace, mod: nn.Upsample, x: Any) -> STensor:
    return _interpolate(tr, _in(tr, x, mod), mod.size, mod.scale_factor, mod.mode, mod.align_corners)


def _groupnorm_mod(tr: _Trace, mod: nn.GroupNorm, x: Any) -> STensor:
    xs = _in(tr, x, mod)
    _claim(tr, mod)
    y = tr.apply("groupnorm", tr.net.groupnorm, _t(xs), as_expr_like(mod.num_groups), affine=bool(mod.affine))
    tr.bind(y, "num_channels matches the input", eq(_t(xs).shape[1], expr_of(mod.num_channels)))
    return y


def _activation_mod(op: str) -> Callable[..., STensor]:
    def h(tr: _Trace, mod: nn.Module, x: Any) -> STensor:
        return tr.apply(op, getattr(tr.net, op), _t(_in(tr, x, mod)))

    return h


def _softmax_mod(tr: _Trace, mod: nn.Softmax, x: Any) -> STensor:
    return _softmax(tr, _in(tr, x, mod), mod.dim)


def _dropout_mod(tr: _Trace, mod: nn.Dropout, x: Any) -> STensor:
    return _dropout(tr, _in(tr, x, mod), mod.p, mod.training)


def _identity_mod(tr: _Trace, mod: nn.Module, x: Any, *args: Any, **kwargs: Any) -> STensor:
    return _in(tr, x, mod)


def _flatten_mod(tr: _Trace, mod: nn.Flatten, x: Any) -> STensor:
    return _flatten(tr, _in(tr, x, mod), mod.start_dim, mod.end_dim)


def _max_pool_mod(nd: int) -> Callable[..., STensor]:
    def h(tr: _Trace, mod: Any, x: Any) -> STensor:
        return _max_pool(nd)(tr, _in(tr, x, mod), mod.kernel_size, mod.stride, mod.padding, mod.dilation,
                             mod.ceil_mode, mod.return_indices)  # fmt: skip

    return h


def _avg_pool_mod(nd: int) -> Callable[..., STensor]:
    def h(tr: _Trace, mod: Any, x: Any) -> STensor:
        return _avg_pool(nd)(tr, _in(tr, x, mod), mod.kernel_size, mod.stride, mod.padding, mod.ceil_mode,
                             mod.count_include_pad, getattr(mod, "divisor_override", None))  # fmt: skip

    return h


def _adaptive_mod(kind: str, nd: int) -> Callable[..., STensor]:
    def h(tr: _Trace, mod: Any, x: Any) -> STensor:
        return _adaptive_op(
            tr, kind, nd, _in(tr, x, mod), mod.output_size, getattr(mod, "return_indices", False)
        )

    return h


def _embedding_mod(tr: _Trace, mod: nn.Embedding, x: Any) -> STensor:
    if mod.max_norm is not None:
        raise TraceError(f"module {tr.where()}: Embedding with max_norm is not supported: {user_line()}")
    xs = _in(tr, x, mod)
    _claim(tr, mod)
    return tr.apply(
        "embedding",
        tr.net.embedding,
        _t(xs),
        as_expr_like(mod.num_embeddings),
        as_expr_like(mod.embedding_dim),
    )


def _rnn_mod(kind: str) -> Callable[..., Any]:
    def h(tr: _Trace, mod: Any, x: Any, hx: Any = None) -> Any:
        if hx is not None or not mod.batch_first or mod.proj_size:
            raise TraceError(
                f"module {tr.where()}: {type(mod).__name__} is supported with batch_first=True, no initial "
                f"state and no proj_size: {user_line()}"
            )
        xs = _in(tr, x, mod)
        _claim(tr, mod)
        y = tr.apply(
            kind, getattr(tr.net, kind), _t(xs), as_expr_like(mod.hidden_size), int(mod.num_layers),
            bool(mod.bidirectional), bool(mod.bias),
        )  # fmt: skip
        tr.bind(y, "input_size matches the input", eq(_t(xs).shape[-1], expr_of(mod.input_size)))
        return y, _Opaque(f"the final states of {tr.where()}")

    return h


def _mha_mod(
    tr: _Trace,
    mod: nn.MultiheadAttention,
    query: Any,
    key: Any,
    value: Any,
    key_padding_mask: Any = None,
    need_weights: Any = True,
    attn_mask: Any = None,
    average_attn_weights: Any = True,
    is_causal: Any = False,
    _in_layer: bool = False,
    _fused_layer: bool = False,
) -> Any:
    """``nn.MultiheadAttention`` as the catalog's ``attention`` with its own memory rules (``layout="mha"``),
    with the copy its consumer makes of the transposed output (``attention_output``) and the attention
    weights (``attention_weights``), each alive while the model's code holds the value it belongs to.
    ``_in_layer``: called by a Transformer layer, whose dropout and residual add need no copy;
    ``_fused_layer``: by a ``TransformerEncoderLayer`` that may run ``_transformer_encoder_layer_fwd``,
    whose fast path takes float masks too."""
    if key is not value:
        raise TraceError(
            f"module {tr.where()}: MultiheadAttention is supported as self- or cross-attention (key is "
            f"value): {user_line()}"
        )
    same_kv = mod._qkv_same_embed_dim or mod.kdim == mod.vdim
    if not mod.batch_first or not same_kv or mod.bias_k is not None or mod.add_zero_attn:
        raise TraceError(
            f"module {tr.where()}: MultiheadAttention is supported with batch_first=True, kdim == vdim and "
            f"no add_bias_kv or add_zero_attn: {user_line()}"
        )
    xs = _in(tr, query, mod)
    kv = None if key is query else _in(tr, key, mod)
    for t in (xs, kv):
        if t is not None and t.ndim != 3:
            raise GraphError(f"{tr.where()}: expects (batch, sequence, embed_dim) inputs")
    _claim(tr, mod)
    causal, mask, rules = _mha_masks(
        tr, mod, xs, xs if kv is None else kv, attn_mask, key_padding_mask, need_weights, is_causal
    )
    # ``MultiheadAttention.forward``'s fast path in eval under no_grad (torch 2.13): self-attention, packed
    # weights with a bias, boolean masks only (a fused encoder layer merges float ones too); odd heads and
    # autocast rule it out, which the catalog's rule covers by taking the larger of both paths
    float_mask = any(m is not None and not _mask(tr, m, "mask")[1] for m in (attn_mask, key_padding_mask))
    fast = kv is None and mod.in_proj_bias is not None and (_fused_layer or not float_mask)
    y = tr.apply(
        "attention", tr.net.attention, _t(xs), as_expr_like(mod.num_heads), bias=mod.in_proj_bias is not None,
        kv=None if kv is None else _t(kv), causal=causal, mask=mask, layout="mha",
        need_weights=bool(need_weights), fast_path=fast, dropout=bool(mod.dropout > 0),
    )  # fmt: skip
    for rule, cond in rules:
        tr.bind(y, rule, cond)
    tr.bind(y, "embed_dim matches the input", eq(_t(xs).shape[-1], expr_of(mod.embed_dim)))
    if kv is not None:
        tr.bind(y, "kdim matches the key/value input", eq(_t(kv).shape[-1], expr_of(mod.kdim)))
    if not _in_layer:  # the copy lives as long as the output's value does (its consumer runs within that)
        copy = tr.apply("attention_output", tr.net.apply, "attention_output", [_t(y)])
        y.copy = copy  # type: ignore[attr-defined]
        tr.watch(copy)
    weights = _Opaque(f"the attention weights of {tr.where()}")
    if need_weights:  # the weights live while the model's code holds them (``y, _ = ...``: to ``return``)
        src = [_t(y)] if kv is None else [_t(y), _t(kv)]
        w = tr.apply(
            "attention_weights", tr.net.apply, "attention_weights", src, heads=expr_of(mod.num_heads),
            average=bool(average_attn_weights),
        )  # fmt: skip
        weights.tensor = w  # type: ignore[attr-defined]  # freed with the opaque value: see _Trace.watch
        tr.watch(w)
    return y, weights


def _mha_masks(
    tr: _Trace,
    mod: nn.MultiheadAttention,
    xs: STensor,
    kv: STensor,
    attn_mask: Any,
    key_padding_mask: Any,
    need_weights: Any,
    is_causal: Any,
) -> tuple[bool, tuple[Expr, ...] | None, list[tuple[str, Expr]]]:
    """``F.multi_head_attention_forward``'s masks: (causal, the shape of the float mask its scaled
    dot-product gets, PyTorch's shape rules). ``is_causal`` needs ``attn_mask`` and, without a key padding
    mask and attention weights, replaces it (unchecked) by causal attention."""
    what = f"module {tr.where()}: MultiheadAttention"
    am, _ = _mask(tr, attn_mask, f"{what} attn_mask")
    kpm, _ = _mask(tr, key_padding_mask, f"{what} key_padding_mask")
    if is_causal and am is None:
        raise TraceError(f"{what}: is_causal=True needs attn_mask (PyTorch refuses it): {user_line()}")
    if is_causal and kpm is None and not need_weights:
        return True, None, []
    b, s, n = _t(xs).shape[0], _t(xs).shape[1], _t(kv).shape[1]
    h = expr_of(mod.num_heads)
    rules: list[tuple[str, Expr]] = []
    shape: tuple[Expr, ...] | None = None
    if am is not None:
        dims = am.shape if isinstance(am, Tensor) else am
        if len(dims) not in (2, 3):
            raise TraceError(f"{what}: attn_mask must be 2-D or 3-D (PyTorch refuses others): {user_line()}")
        want = (s, n) if len(dims) == 2 else (b * h, s, n)
        rules.append((f"attn_mask has shape {'(L, S)' if len(dims) == 2 else '(N*num_heads, L, S)'}",
                      all_(eq(p, q) for p, q in zip(dims, want))))  # fmt: skip
        shape = (s, n) if len(dims) == 2 else (b, h, s, n)
    if kpm is not None:
        dims = kpm.shape if isinstance(kpm, Tensor) else kpm
        if len(dims) != 2:
            raise TraceError(f"{what}: key_padding_mask must be 2-D (PyTorch refuses others): {user_line()}")
        rules.append(("key_padding_mask has shape (N, S)", eq(dims[0], b) & eq(dims[1], n)))
        shape = (b, Const(1), Const(1), n) if shape is None else (b, h, s, n)  # added to attn_mask
    return False, shape, rules


def _feed_forward(
    tr: _Trace, mod: nn.TransformerEncoderLayer | nn.TransformerDecoderLayer, dropout: nn.Module
) -> Callable[[Any], Any]:
    """The feed-forward block of a Transformer layer: ``dropout(linear2(dropout(act(linear1(y)))))``."""
    act = mod.activation
    if isinstance(act, nn.Module):

        def activation(y: STensor) -> Any:
            return _call(tr, act, y)
    else:
        name = getattr(act, "__name__", "")
        if name not in ("relu", "gelu"):
            raise TraceError(f"module {tr.where()}: activation {act!r} is not supported: {user_line()}")

        def activation(y: STensor) -> Any:
            return _activation_fn(name)(tr, y)

    def ff(y: Any) -> Any:
        h = _call(tr, mod.dropout, activation(_call(tr, mod.linear1, y)))
        return _call(tr, dropout, _call(tr, mod.linear2, h))

    return ff


def _attention_block(
    tr: _Trace, attn: nn.Module, dropout: nn.Module, kv: Any, mask: Any, padding_mask: Any, causal: Any,
    fused: bool = False,
) -> Callable[[Any], Any]:  # fmt: skip
    """A Transformer layer's attention sub-block ``dropout(attn(y, kv, kv)[0])`` (``kv=None``:
    self-attention on ``y``), with the layer's masks (``fused``: the layer may run the fused encoder path)."""

    def block(y: Any) -> Any:
        src = y if kv is None else kv
        more = {"_in_layer": True, "_fused_layer": fused} if isinstance(attn, nn.MultiheadAttention) else {}
        att = _call(
            tr, attn, y, src, src, attn_mask=mask, key_padding_mask=padding_mask, need_weights=False,
            is_causal=bool(causal), **more,
        )  # fmt: skip
        return _call(tr, dropout, att[0])

    return block


def _encoder_layer_mod(
    tr: _Trace, mod: nn.TransformerEncoderLayer, src: Any, src_mask: Any = None,
    src_key_padding_mask: Any = None, is_causal: Any = False,
) -> STensor:  # fmt: skip
    x = _in(tr, src, mod)
    ff = _feed_forward(tr, mod, mod.dropout2)
    # ``torch._transformer_encoder_layer_fwd`` in eval (``TransformerEncoderLayer.forward``, torch 2.13)
    fused = bool(mod.activation_relu_or_gelu) and mod.norm1.eps == mod.norm2.eps
    sa = _attention_block(
        tr, mod.self_attn, mod.dropout1, None, src_mask, src_key_padding_mask, is_causal, fused
    )

    if mod.norm_first:
        x = x + sa(_call(tr, mod.norm1, x))
        return x + ff(_call(tr, mod.norm2, x))  # type: ignore[no-any-return]
    x = _call(tr, mod.norm1, x + sa(x))
    return _call(tr, mod.norm2, x + ff(x))  # type: ignore[no-any-return]


def _decoder_layer_mod(
    tr: _Trace, mod: nn.TransformerDecoderLayer, tgt: Any, memory: Any, tgt_mask: Any = None,
    memory_mask: Any = None, tgt_key_padding_mask: Any = None, memory_key_padding_mask: Any = None,
    tgt_is_causal: Any = False, memory_is_causal: Any = False,
) -> STensor:  # fmt: skip
    x, m = _in(tr, tgt, mod), _in(tr, memory, mod)
    ff = _feed_forward(tr, mod, mod.dropout3)
    sa = _attention_block(
        tr, mod.self_attn, mod.dropout1, None, tgt_mask, tgt_key_padding_mask, tgt_is_causal
    )
    ca = _attention_block(
        tr, mod.multihead_attn, mod.dropout2, m, memory_mask, memory_key_padding_mask, memory_is_causal
    )
    if mod.norm_first:
        x = x + sa(_call(tr, mod.norm1, x))
        x = x + ca(_call(tr, mod.norm2, x))
        return x + ff(_call(tr, mod.norm3, x))  # type: ignore[no-any-return]
    x = _call(tr, mod.norm1, x + sa(x))
    x = _call(tr, mod.norm2, x + ca(x))
    return _call(tr, mod.norm3, x + ff(x))  # type: ignore[no-any-return]


def _encoder_mod(
    tr: _Trace, mod: nn.TransformerEncoder, src: Any, mask: Any = None, src_key_padding_mask: Any = None,
    is_causal: Any = None,
) -> Any:  # fmt: skip
    x = _in(tr, src, mod)
    # ``is_causal=None`` with a mask: PyTorch compares the mask's values with a causal one; a shape
    # rule holds either way, and masked and causal attention cost the same but for memory
    for layer in mod.layers:
        x = _call(
            tr, layer, x, src_mask=mask, src_key_padding_mask=src_key_padding_mask, is_causal=bool(is_causal)
        )
    return _call(tr, mod.norm, x) if mod.norm is not None else x


_MODULES: dict[type, Callable[..., Any]] = {
    nn.Linear: _linear_mod,
    nn.Conv1d: _conv_mod(1),
    nn.Conv2d: _conv_mod(2),
    nn.Conv3d: _conv_mod(3),
    nn.ConvTranspose1d: _conv_transpose_mod(1),
    nn.ConvTranspose2d: _conv_transpose_mod(2),
    nn.BatchNorm1d: _batchnorm_mod,
    nn.BatchNorm2d: _batchnorm_mod,
    nn.LayerNorm: _layernorm_mod,
    nn.GroupNorm: _groupnorm_mod,
    nn.RMSNorm: _rmsnorm_mod,
    nn.Upsample: _upsample_mod,
    nn.ReLU: _activation_mod("relu"),
    nn.GELU: _activation_mod("gelu"),
    nn.SiLU: _activation_mod("silu"),
    nn.Sigmoid: _activation_mod("sigmoid"),
    nn.Tanh: _activation_mod("tanh"),
    nn.Hardswish: _activation_mod("hardswish"),
    nn.ReLU6: _activation_mod("relu6"),
    nn.LeakyReLU: _activation_mod("leaky_relu"),
    nn.ELU: _activation_mod("elu"),
    nn.Mish: _activation_mod("mish"),
    nn.Softmax: _softmax_mod,
    nn.Dropout: _dropout_mod,
    nn.Identity: _identity_mod,
    nn.Flatten: _flatten_mod,
    nn.MaxPool1d: _max_pool_mod(1),
    nn.MaxPool2d: _max_pool_mod(2),
    nn.AvgPool1d: _avg_pool_mod(1),
    nn.AvgPool2d: _avg_pool_mod(2),
    nn.AdaptiveAvgPool1d: _adaptive_mod("avg", 1),
    nn.AdaptiveAvgPool2d: _adaptive_mod("avg", 2),
    nn.AdaptiveMaxPool1d: _adaptive_mod("max", 1),
    nn.AdaptiveMaxPool2d: _adaptive_mod("max", 2),
    nn.Embedding: _embedding_mod,
    nn.LSTM: _rnn_mod("lstm"),
    nn.GRU: _rnn_mod("gru"),
    nn.MultiheadAttention: _mha_mod,
    nn.TransformerEncoderLayer: _encoder_layer_mod,
    nn.TransformerEncoder: _encoder_mod,
    nn.TransformerDecoderLayer: _decoder_layer_mod,
}
_CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)
_ORIGINAL_CALL = nn.Module.__call__
_CURRENT: list[_Trace] = []


def _call(tr: _Trace, mod: nn.Module, *args: Any, **kwargs: Any) -> Any:
    """A module call during the forward trace: a supported leaf becomes ops, others run ``forward``."""
    handler = _handler(type(mod))
    tr.stack.append(tr.names.get(id(mod), type(mod).__name__))
    try:
        if handler is not None:
            return tr.handle(handler, mod, *args, **kwargs)
        if type(mod).__module__.startswith("torch.") and not isinstance(mod, _CONTAINERS):
            raise TraceError(f"module {tr.where()} ({type(mod).__name__}) is not supported: {user_line()}")
        return mod.forward(*args, **kwargs)
    finally:
        tr.stack.pop()


def _handler(cls: type) -> Callable[..., Any] | None:
    """The handler of a supported module class, or of its supported base when it keeps the base's
    ``forward`` (``class MyConv(nn.Conv2d)`` with a new ``__init__`` only)."""
    for base in cls.__mro__:
        if base in _MODULES:
            return _MODULES[base] if getattr(cls, "forward", None) is getattr(base, "forward", None) else None
    return None


def _module_call(mod: nn.Module, *args: Any, **kwargs: Any) -> Any:
    if _CURRENT and _CURRENT[-1].forward:
        return _call(_CURRENT[-1], mod, *args, **kwargs)
    return _ORIGINAL_CALL(mod, *args, **kwargs)


# ------------------------------------------------------------------------------------------------
# one region


def _wrap_param(tr: _Trace, param: Any, var: Expr, encoded: Any) -> Any:
    value = param.decode(encoded)
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        tr.guard(var == value, True)  # pinned: a region per choice
        return value
    if isinstance(value, str):
        return SymStr(value, var)
    if isinstance(value, int):
        return SymInt(value, var)
    return SymFloat(float(value), var)


def _run(
    build: Callable[[dict[str, Any]], nn.Module],
    inputs: Callable[[dict[str, Any]], Any],
    space: Any,
    env: Mapping[str, Any],
    box: Mapping[str, tuple[Any, Any]],
    finite: set[str],
    cache: dict[Any, Any],
) -> _Region:
    tr = _Trace(env, box, finite, cache)
    region = _Region(Const(True), [])
    activate(tr)
    _CURRENT.append(tr)
    builtins.range = guarded_range  # type: ignore[misc]
    init = _SkippedInit()
    try:
        cfg = {name: _wrap_param(tr, space[name], space.vars[name], env[name]) for name in space}
        with _Mode(tr), init:
            module = build(cfg)
            if not isinstance(module, nn.Module):
                raise TraceError(f"build must return an nn.Module, got {type(module).__name__}")
            example = inputs(cfg)
            xs = [_input(tr, x, i) for i, x in enumerate(_examples(example))]
            tr.names = {
                id(m): n or "model" for n, m in reversed(list(module.named_modules(remove_duplicate=False)))
            }
            tr.param_names = {
                id(p): n for n, p in reversed(list(module.named_parameters(remove_duplicate=False)))
            }
            tr.forward = True
            nn.Module.__call__ = _module_call  # type: ignore[method-assign]
            try:
                out = module(*xs)
            finally:
                nn.Module.__call__ = _ORIGINAL_CALL  # type: ignore[method-assign]
                tr.forward = False
        outs = out if isinstance(out, tuple | list) else (out,)
        if not all(isinstance(o, STensor) for o in outs):
            raise TraceError(f"forward must return a tensor or a tuple of tensors, got {type(out).__name__}")
        for name, p in module.named_parameters():
            if id(p) not in tr.counted:  # built but not used by forward: PyTorch counts it all the same
                tr.tensor(p, f"parameter {name}, which forward does not use,")
        region.net, region.outputs, region.binds = tr.net, tuple(o._t.index for o in outs), tr.binds
        region.held = _past_uses(tr.net, tr.held, region.outputs)
        region.slots = _slots(tr, module)
    except TraceError:
        raise
    except Exception as err:  # the module rejects this configuration
        if isinstance(err, AssertionError | TypeError | AttributeError | KeyError) and _raised_here(err):
            raise
        region.error = f"{type(err).__name__}: {err}".splitlines()[0][:200]
    finally:
        builtins.range = REAL_RANGE  # type: ignore[misc]
        _CURRENT.pop()
        activate(None)
    region.guards = list(tr.guards.values())
    region.cond = all_(g for g, _ in region.guards)
    return region


def _past_uses(net: Network, held: dict[int, int], outputs: tuple[int, ...]) -> dict[int, int]:
    """The facts of ``held`` that keep a tensor past its last consumer (outputs live to the end anyway)."""
    last = {}
    for node in net.nodes:
        for i in node.inputs:
            last[i] = node.index
    return {t: h for t, h in held.items() if h > last.get(t, net.producer[t]) and t not in outputs}


def _raised_here(err: BaseException) -> bool:
    """True when ``err`` comes from this module's own code (a bug, not the model's verdict)."""
    tb = err.__traceback__
    last = None
    while tb is not None:
        last = tb.tb_frame.f_code.co_filename
        tb = tb.tb_next
    return last == __file__


def _examples(example: Any) -> Sequence[Any]:
    """``inputs(cfg)``'s result as a sequence of inputs (tensors or shapes): one, or a tuple/list of them."""
    return example if isinstance(example, tuple | list) else (example,)


def _input(tr: _Trace, x: Any, i: int) -> STensor:
    if isinstance(x, torch.Tensor):
        shape = tr.shape_of(x) or tuple(Const(d) for d in x.shape)
        dtype = "int64" if x.dtype in (torch.int64, torch.int32) else "float32"
    elif isinstance(x, tuple | list | torch.Size):
        shape, dtype = tuple(expr_of(d) for d in x), "float32"
    else:
        raise TraceError(f"inputs(cfg) must give tensors or shapes, got {type(x).__name__} at position {i}")
    out = STensor(tr, tr.net.input([as_expr_like(_lit(d)) for d in shape], dtype=dtype, name=f"input#{i}"))
    out.is_bool = isinstance(x, torch.Tensor) and x.dtype == torch.bool  # an attention mask
    return out


def _lit(e: Any) -> Any:
    return e.value if isinstance(e, Expr) and e.is_const else e


# ------------------------------------------------------------------------------------------------
# exploring the regions and merging them


def _explore(
    build: Any, inputs: Any, space: Any, max_regions: int, cache: dict[Any, Any]
) -> tuple[list[_Region], _Gates]:
    """Trace until every combination of the guarded parameters' values is in some region."""
    box = {n: space[n].bounds() for n in space}
    finite = {n for n in space if space[n].is_finite}
    default = {n: space[n].encoded()[0].item() if n in finite else float(space[n].low) for n in space}
    regions: list[_Region] = []
    names: list[str] = []
    cols: dict[str, np.ndarray] = {}
    covered = np.zeros(1, dtype=bool)
    fresh: list[_Region] = []
    while True:
        want = sorted(set().union(*(r.cond.variables() for r in regions)))
        if want != names:
            names = want
            sizes = [len(space[n].encoded()) for n in names]
            if math.prod(sizes) > _GRID_LIMIT:
                raise TraceError(
                    f"the guarded parameters {names} have {math.prod(sizes)} combinations (more than "
                    f"{_GRID_LIMIT}): the model's control flow depends on too many values"
                )
            grids = np.meshgrid(*(space[n].encoded() for n in names), indexing="ij")
            cols = {n: g.ravel() for n, g in zip(names, grids)}
            covered = np.zeros(math.prod(sizes), dtype=bool)
            fresh = regions
        for r in fresh:
            (hit,) = compile_vectorized([r.cond], box)(cols)
            covered |= np.broadcast_to(np.asarray(hit, dtype=bool), covered.shape)
        left = np.flatnonzero(~covered)
        if not len(left):
            return regions, _Gates(space, names, cols, regions, box)
        if len(regions) >= max_regions:
            lines = sorted({line for r in regions for _, line in r.guards})
            raise TraceError(
                f"more than max_regions={max_regions} control-flow regions; the guards come from:\n  "
                + "\n  ".join(lines[:20])
            )
        env = dict(default)
        env.update({n: cols[n][left[0]].item() for n in names})
        region = _run(build, inputs, space, env, box, finite, cache)
        regions.append(region)
        fresh = [region]


class _Gates:
    """Sets of regions as simple exact conditions, read off the grid of the guarded parameters: a
    product of per-parameter value sets (``2 < depth``, ``act == 'relu'``) when it matches the set's
    points, else the union of the regions' own conditions."""

    def __init__(
        self, space: Any, names: list[str], cols: dict[str, np.ndarray], regions: list[_Region], box: Any
    ) -> None:
        self.space, self.names, self.cols, self.regions = space, names, cols, regions
        n = len(next(iter(cols.values()))) if cols else 1
        self.owner = np.full(n, -1)
        for i, r in enumerate(regions):
            (hit,) = compile_vectorized([r.cond], box)(cols)
            self.owner[np.broadcast_to(np.asarray(hit, dtype=bool), (n,))] = i
        self.valid = np.isin(self.owner, [i for i, r in enumerate(regions) if r.net is not None])
        self.cache: dict[tuple[frozenset[int], bool], Expr] = {}

    def of(self, members: frozenset[int], exact: bool) -> Expr:
        """The condition of being in one of the regions ``members`` (indices into ``regions``);
        ``exact=False``: anything goes on invalid regions' configurations."""
        key = (members, exact)
        if key not in self.cache:
            self.cache[key] = self._build(members, exact)
        return self.cache[key]

    def _build(self, members: frozenset[int], exact: bool) -> Expr:
        pts = np.isin(self.owner, list(members))
        care = np.ones_like(pts) if exact else self.valid
        if pts[care].all():
            return Const(True)
        lits: list[Expr] = []
        mask = np.ones_like(pts)
        for n in self.names:
            vals = np.unique(self.cols[n][pts])
            domain = self.space[n].encoded()
            if len(vals) < len(domain):
                lits.append(self._literal(n, vals, domain))
                mask &= np.isin(self.cols[n], vals)
        if np.array_equal(mask & care, pts & care):
            return all_(lits)
        if len(members) == 1:
            return self.regions[next(iter(members))].cond
        return any_(self.of(frozenset([i]), exact) for i in sorted(members))

    def _literal(self, name: str, vals: np.ndarray, domain: np.ndarray) -> Expr:
        param, var = self.space[name], self.space.vars[name]
        if param.labels is not None:
            return any_(var == param.decode(v.item()) for v in vals)
        pos = np.searchsorted(domain, vals)
        lo, hi = int(pos.min()), int(pos.max())
        if hi - lo + 1 != len(vals):
            return any_(var == v.item() for v in vals)
        parts = []
        if lo > 0:
            parts.append(var > domain[lo - 1].item())
        if hi < len(domain) - 1:
            parts.append(var < domain[hi + 1].item())
        return all_(parts)


def _key(v: Any) -> Any:
    if isinstance(v, Expr):
        return ("e", id(v))
    if isinstance(v, tuple | list):
        return ("t", tuple(_key(x) for x in v))
    if isinstance(v, dict):
        return ("d", tuple((k, _key(x)) for k, x in sorted(v.items())))
    return ("v", type(v).__name__, v)


def _slots(tr: _Trace, root: nn.Module) -> dict[str, str]:
    """Module path (as in op labels, ``7/conv1``) -> its *slot*: the path with each list position
    replaced by the module's class, first parameter's symbolic shape and rank among the earlier
    siblings alike (``Basic('conv1.weight', (w1, w0, k, k))#0/conv1``). A loop's k-th block sits at
    another position of a ``Sequential`` in another region; its slot is the same, so the regions' ops
    match. (Slots only decide which ops are shared: the merge stays exact for any matching.)"""
    out = {"model": "model"}
    todo = [(root, "", "model")]
    while todo:
        mod, path, slot = todo.pop()
        seen: dict[str, int] = {}
        for name, child in mod.named_children():
            part = name
            if name.isdigit():
                first = next(iter(child.named_parameters()), None)  # optional parts come later
                shape = first and (first[0], tr.shape_of(first[1]) or tuple(first[1].shape))
                part = f"{type(child).__qualname__}{shape}"
                seen[part] = seen.get(part, -1) + 1
                part = f"{part}#{seen[part]}"
            cpath = f"{path}/{name}" if path else name
            out[cpath] = f"{slot}/{part}"
            todo.append((child, cpath, out[cpath]))
    return out


def _slot(label: str, slots: Mapping[str, str]) -> str:
    """The slot (see :func:`_slots`) of the module path in an op's label (a parameter's: its module's)."""
    where = label.split(" ", 1)[1] if " " in label else ""
    head, rest = where, ""
    while head and head not in slots:
        head, _, last = head.rpartition("/")
        rest = f"{last}/{rest}" if rest else last
    return f"{slots.get(head, head)}/{rest}" if rest else slots.get(head, head)


def _merge(regions: list[_Region], gates: _Gates, cache: dict[Any, Any]) -> Network:
    """One network for all regions, its ops in an order that keeps every region's execution order
    (so liveness, hence memory, is the region's own). Ops are matched by (op, module, attributes,
    occurrence), their inputs selected by region where the regions feed them different tensors (a
    ``choose``); when no order keeps every region's (or ranks mismatch), ops are matched with their
    inputs too (no selects), and as a last resort ordered by their data dependencies only."""
    valid = [r for r in regions if r.net is not None]
    if not valid:
        errors = sorted({r.error for r in regions})
        raise GraphError(f"from_torch: the model raises on every configuration: {'; '.join(errors[:5])}")
    for positional, ordered in ((True, True), (False, True)):
        try:
            return _merge_with(regions, gates, cache, positional, ordered)
        except (_Cycle, GraphError):
            continue
    return _merge_with(regions, gates, cache, positional=False, ordered=False)


class _Cycle(Exception):
    """Ops matched across regions depend on each other in different orders."""


def _merge_with(
    regions: list[_Region], gates: _Gates, cache: dict[Any, Any], positional: bool, ordered: bool
) -> Network:
    first: dict[Any, tuple[_Region, int]] = {}
    members: dict[Any, set[int]] = {}
    feeds: dict[Any, list[dict[Any, set[int]]]] = {}  # key -> per input: input key -> regions
    after: dict[Any, set[Any]] = {}  # key -> keys that come first (its inputs; ``ordered``: its predecessor)
    appearance: dict[Any, tuple[int, int]] = {}
    rules: dict[tuple[Any, str, int], tuple[Check, set[int]]] = {}
    outputs: list[list[Any]] = []
    at: dict[int, dict[Any, int]] = {}  # region -> key -> its node there
    held: dict[tuple[Any, Any], set[int]] = {}  # (tensor's producer, last node held) -> regions
    ids: dict[Any, int] = {}  # keys are interned to ints (a key names its inputs by their ints)
    for k, r in enumerate(regions):
        if r.net is None:
            continue
        keys: dict[int, Any] = {}
        seen: dict[Any, int] = {}  # identical ops (k and v projections) are told apart by occurrence
        prev = None
        for node in r.net.nodes:
            where = _slot(node.label, r.slots)
            inputs = tuple(keys[r.net.producer[t]] for t in node.inputs)
            # positional: ops are matched without their inputs, but not across regions that produce
            # the inputs in another order (the memory model reads production order off them)
            produced = tuple(sorted(range(len(inputs)), key=lambda j: (node.inputs[j], j)))
            base = (node.op, where, _key(dict(node.attrs)), produced, () if positional else inputs)
            seen[base] = seen.get(base, 0) + 1
            key = ids.setdefault((*base, seen[base]), len(ids))
            keys[node.index] = key
            at.setdefault(k, {})[key] = node.index
            if key not in first:
                first[key], members[key], appearance[key] = (r, node.index), set(), (k, node.index)
                feeds[key] = [{} for _ in inputs]
                after[key] = set()
            members[key].add(k)
            for j, ik in enumerate(inputs):
                feeds[key][j].setdefault(ik, set()).add(k)
                after[key].add(ik)
            if ordered and prev is not None:
                after[key].add(prev)
            prev = key
            for c in r.binds.get(node.index, []):
                rules.setdefault((key, c.rule, id(c.expr)), (c, set()))[1].add(k)
        outputs.append([keys[r.net.producer[t]] for t in r.outputs])
        for ti, h in r.held.items():
            held.setdefault((keys[r.net.producer[ti]], keys[h]), set()).add(k)
    order = _topological(after, appearance)
    net = Network("from_torch", infer_cache=cache)
    net.permute_views = True
    made: dict[Any, Tensor] = {}
    names: dict[Any, str] = {}
    # a select is made as soon as its last case exists, so that tensor indices follow production
    # order (the memory model takes the input produced first as the one keeping an add's gradient)
    selects: dict[Any, Tensor] = {}
    waiting: dict[Any, list[tuple[Any, dict[Any, set[int]]]]] = {}
    position = {key: i for i, key in enumerate(order)}
    for by_input in (b for key in order for b in feeds[key] if len(b) > 1):
        sid = _select_id(by_input)
        last = max(by_input, key=position.__getitem__)
        if sid not in {s for s, _ in waiting.get(last, [])}:
            waiting.setdefault(last, []).append((sid, by_input))
    for key in order:
        r, index = first[key]
        assert r.net is not None
        node = r.net.nodes[index]
        gate = gates.of(frozenset(members[key]), exact=False)
        where = node.label.split(" ", 1)[1] if " " in node.label else ""
        name = names[key] = f"{node.op}#{len(net.nodes)} {where}".rstrip()

        def add(node: Any = node, key: Any = key, name: str = name) -> Tensor:
            ins = [selects[_select_id(b)] if len(b) > 1 else made[next(iter(b))] for b in feeds[key]]
            return net.apply(node.op, ins, name=name, **node.attrs)

        t = net._gated(gate, add)
        if node.op == "input":
            net.inputs.append(t)
        made[key] = t
        for sid, by_input in waiting.get(key, []):
            regions_in = frozenset(k for m in by_input.values() for k in m)

            def pick(b: dict[Any, set[int]] = by_input) -> Tensor:
                return _pick(net, gates, made, b)

            selects[sid] = net._gated(gates.of(regions_in, exact=False), pick)
    if positional and not _same_keepers(net, regions, order, first, members, made, at):
        raise _Cycle
    for (key, until), where_ in held.items():
        cond = gates.of(frozenset(where_), exact=False)
        net.held.append((made[key].index, net.producer[made[until].index], cond))
    for (key, _, _), (c, where_) in rules.items():
        net.extra_checks.append(
            (names[key], Check(c.rule, ~gates.of(frozenset(where_), exact=False) | c.expr))
        )
    arity = {len(o) for o in outputs}
    if len(arity) != 1:
        raise TraceError(f"forward returns different numbers of tensors in different configurations: {arity}")
    valid = [k for k, r in enumerate(regions) if r.net is not None]
    outs = []
    for j in range(arity.pop()):
        by_key: dict[Any, set[int]] = {}
        for k, o in zip(valid, outputs):
            by_key.setdefault(o[j], set()).add(k)
        outs.append(_pick(net, gates, made, by_key))
    for k, r in enumerate(regions):
        if r.net is None:
            rule = Check(f"the model raises {r.error}", ~gates.of(frozenset([k]), exact=True))
            net.extra_checks.append((f"from_torch#{k}", rule))
    return net.output(*outs)


def _same_keepers(
    net: Network,
    regions: list[_Region],
    order: list[Any],
    first: dict[Any, tuple[_Region, int]],
    members: dict[Any, set[int]],
    made: dict[Any, Tensor],
    at: dict[int, dict[Any, int]],
) -> bool:
    """Whether every op with several inputs sees them in each region's production order (the memory
    model reads production order off tensor indices, e.g. which input of an ``add`` keeps its output
    gradient): a select made after one of its cases may reorder them."""
    for key in order:
        r, index = first[key]
        assert r.net is not None
        if len(r.net.nodes[index].inputs) < 2:
            continue
        ins = net.nodes[net.producer[made[key].index]].inputs
        merged = sorted(range(len(ins)), key=lambda j: (ins[j], j))
        for k in members[key]:
            net_k = regions[k].net
            assert net_k is not None
            own = net_k.nodes[at[k][key]].inputs
            if [own[j] for j in merged] != sorted(own):
                return False
    return True


def _select_id(by_input: dict[Any, set[int]]) -> Any:
    return tuple(sorted(((k, tuple(sorted(m))) for k, m in by_input.items()), key=repr))


def _pick(net: Network, gates: _Gates, made: dict[Any, Tensor], by_key: dict[Any, set[int]]) -> Tensor:
    """The tensor of ``by_key`` (key -> regions where it is the one) for each region: a select."""
    if len(by_key) == 1:
        return made[next(iter(by_key))]
    cases = [(gates.of(frozenset(m), exact=False), made[k]) for k, m in by_key.items()]
    return net._select(cases, label="from_torch")


def _topological(after: dict[Any, set[Any]], appearance: dict[Any, tuple[int, int]]) -> list[Any]:
    """Keys in dependency order, earliest appearance first; :class:`_Cycle` when there is none."""
    import heapq

    waiting = {k: len(v) for k, v in after.items()}
    users: dict[Any, list[Any]] = {}
    for k, v in after.items():
        for i in v:
            users.setdefault(i, []).append(k)
    ready = [(appearance[k], n, k) for n, k in enumerate(after) if not waiting[k]]
    heapq.heapify(ready)
    rank = {k: n for n, k in enumerate(after)}
    order = []
    while ready:
        _, _, k = heapq.heappop(ready)
        order.append(k)
        for u in users.get(k, []):
            waiting[u] -= 1
            if not waiting[u]:
                heapq.heappush(ready, (appearance[u], rank[u], u))
    if len(order) != len(after):
        raise _Cycle
    return order


class _EmptyTensors(TorchDispatchMode):
    """Notes an op that makes an empty tensor (dnnsat requires every dimension >= 1)."""

    def __init__(self) -> None:
        super().__init__()
        self.found = False

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if "empty" not in str(func):  # kernels' own (empty) workspaces
            for t in out if isinstance(out, tuple | list) else (out,):
                self.found |= isinstance(t, torch.Tensor) and t.numel() == 0
        return out


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

    def measure(self, config: Mapping[str, Any]) -> tuple[int, int] | None:
        """PyTorch's own ``(params, FLOPs)`` of ``config``: ``build(config)`` on the meta device (no
        weight memory, weight initialisation skipped), one forward of ``inputs(config)`` under
        ``FlopCounterMode`` (2 FLOPs per multiply-add), parameters counted once each (tied ones once).
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
                with torch.device("meta"), _SkippedInit():
                    module = self.build(cfg)
                    xs = self.inputs(cfg)
                xs = [
                    x if isinstance(x, torch.Tensor) else torch.empty(*x, device="meta")
                    for x in _examples(xs)
                ]
                empty = _EmptyTensors()
                hooks = [  # a check CPU and CUDA kernels make and the meta kernel does not
                    m.register_forward_pre_hook(_output_padding_check)
                    for m in module.modules()
                    if isinstance(m, nn.modules.conv._ConvTransposeNd)
                ]
                try:
                    with FlopCounterMode(display=False) as counter, empty:
                        module(*xs)
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
    inputs ``inputs(cfg)`` (tensors, e.g. ``torch.empty(cfg["batch"], 3, 224, 224)``, or shapes).

    Params, FLOPs (2 per multiply-add, as FlopCounterMode) and validity equal PyTorch's on every
    configuration of the space: see the module docstring for how, and :class:`TraceError` for what
    is refused. ``max_regions`` bounds the number of control-flow regions traced.
    """
    return TorchModel(build, inputs, max_regions=max_regions, space=space)
