"""Values that carry their symbolic expression through a user's model-building code.

``from_torch`` calls the user's ``build(cfg)`` with these in ``cfg``: :class:`SymInt` (an ``int``),
:class:`SymFloat` (a ``float``) and :class:`SymStr` (a ``str``) compute like the plain values they
subclass and record, next to the value, the same computation as a :class:`~dnnsat.expr.Expr` over
the space's variables. Every place where Python turns one into control flow or a plain value
(``if``, a comparison, ``range``, ``hash`` for a dict lookup, ``int()``) is reported to the active
recorder as a *guard*: a boolean expression and its outcome. Within the set of configurations where
all guards of a trace have the same outcomes, the code runs the same way (concolic execution).
"""

from __future__ import annotations

import builtins
import os
import sys
from collections.abc import Callable
from typing import Any

import torch

from ..expr import Const, Expr, ExprLike
from ..graph._catalog import lin

__all__ = [
    "SymInt",
    "SymFloat",
    "SymStr",
    "Recorder",
    "plain",
    "fixed",
    "expr_of",
    "user_line",
    "guarded_range",
]


class Recorder:
    """Receives guards: ``guard(cond, outcome)`` with ``cond`` a boolean expression."""

    def guard(self, cond: Expr, outcome: bool) -> None:
        raise NotImplementedError


_ACTIVE: list[Recorder] = []


def _record(cond: Expr, outcome: bool) -> bool:
    if not (cond.is_const or not _ACTIVE):
        _ACTIVE[-1].guard(cond, outcome)
    return outcome


def _pin(e: Expr, value: Any) -> None:
    """The value itself leaves the symbolic world: the guard ``e == value``."""
    _record(e == value, True)


def activate(rec: Recorder | None) -> None:
    """Push (``rec``) or pop (``None``) the active recorder."""
    if rec is None:
        _ACTIVE.pop()
    else:
        _ACTIVE.append(rec)


_CONSTS: dict[tuple[type, Any], Expr] = {}


def expr_of(x: Any) -> Expr:
    """The expression of a symbolic value, or the constant of a plain number."""
    if isinstance(x, SymInt | SymFloat | SymStr):
        return x.expr
    key = (type(x), x)
    if key not in _CONSTS:
        _CONSTS[key] = Const(x)
    return _CONSTS[key]


def plain(x: Any) -> Any:
    """The plain Python value of a symbolic value (no guard), recursively through tuples/lists/dicts."""
    if isinstance(x, SymInt):
        return int.__int__(x)
    if isinstance(x, SymFloat):
        return float.__float__(x)
    if isinstance(x, SymStr):
        return str.__str__(x)
    if isinstance(x, tuple | list):
        return type(x)(plain(v) for v in x) if type(x) in (tuple, list) else x
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    return x


TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep


_INIT_FUNCTIONS = frozenset({"reset_parameters", "_init_weights", "init_weights", "_initialize_weights"})


def _initialisation(frame: Any) -> bool:
    """True when ``frame`` initialises weights (``torch.nn.init``, a module's ``reset_parameters``, a
    Hugging Face model's ``_init_weights``): a float made there only scales random values."""
    if frame is None:
        return False
    code = frame.f_code
    return code.co_name in _INIT_FUNCTIONS or (
        code.co_filename.startswith(TORCH_DIR) and code.co_filename.endswith(f"nn{os.sep}init.py")
    )


def fixed(x: Any) -> Any:
    """The plain value of ``x`` for a use that may decide structure: a symbolic value is pinned
    (recursively through tuples and lists)."""
    if isinstance(x, _SymNumber | SymStr):
        return x._out()
    if type(x) in (tuple, list):
        return type(x)(fixed(v) for v in x)
    return x


def _is_num(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


_COMBINED: dict[tuple[Any, int, int], Expr] = {}  # (eop, id(a), id(b)) -> canonical result
_DECIDED: dict[tuple[Any, int, int], Expr | None] = {}


def _combine(eop: Callable[[Expr, Expr], Expr], a: Expr, b: Expr) -> Expr:
    """``eop(a, b)`` in canonical form, memoised (expressions are interned: their ids are stable)."""
    key = (eop, id(a), id(b))
    if key not in _COMBINED:
        e = eop(a, b)
        _COMBINED[key] = lin(e) if e.sort == "int" else e
    return _COMBINED[key]


def _condition(eop: Callable[[Expr, Expr], Expr], a: Expr, b: Expr) -> Expr | None:
    """The comparison ``eop(a, b)``, or ``None`` when two integer expressions' forms decide it (``w == w``,
    ``2*w > w + w - 1``); memoised as :func:`_combine`."""
    key = (eop, id(a), id(b))
    if key not in _DECIDED:
        decided = a.sort == b.sort == "int" and lin(a - b).is_const
        _DECIDED[key] = None if decided else eop(a, b)
    return _DECIDED[key]


def _wrap(value: Any, e: Expr, canonical: bool = False) -> Any:
    """A symbolic number for ``value`` computed as ``e`` (plain when ``e`` is a constant)."""
    e = lin(e) if e.sort == "int" and not canonical else e
    if e.is_const:
        return value
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return SymInt(value, e)
    if isinstance(value, float):
        return SymFloat(value, e)
    return value


def _binary(op: Callable[[Any, Any], Any], eop: Callable[[Expr, Expr], Expr], divides: bool = False) -> Any:
    def fwd(self: Any, other: Any) -> Any:
        if not _is_num(other):
            return NotImplemented
        if divides and isinstance(other, _SymNumber):
            _record(other.expr == 0, plain(other) == 0)
        return _wrap(op(plain(self), plain(other)), _combine(eop, self.expr, expr_of(other)), True)

    def rev(self: Any, other: Any) -> Any:
        if not _is_num(other):
            return NotImplemented
        if divides:
            _record(self.expr == 0, plain(self) == 0)
        return _wrap(op(plain(other), plain(self)), _combine(eop, expr_of(other), self.expr), True)

    return fwd, rev


def _compare(op: Callable[[Any, Any], bool], eop: Callable[[Expr, Expr], Expr]) -> Any:
    def cmp(self: Any, other: Any) -> Any:
        if not _is_num(other):
            return NotImplemented
        outcome = op(plain(self), plain(other))
        cond = _condition(eop, self.expr, expr_of(other))
        return outcome if cond is None else _record(cond, outcome)

    return cmp


def _mod(a: Expr, b: Expr) -> Expr:
    return a - a // b * b


def _pinned(op: Callable[[Any, Any], Any]) -> Any:
    def fwd(self: Any, other: Any) -> Any:
        return op(self._out(), _value(other)) if _is_num(other) else NotImplemented

    def rev(self: Any, other: Any) -> Any:
        return op(_value(other), self._out()) if _is_num(other) else NotImplemented

    return fwd, rev


class _SymNumber:
    """Arithmetic and comparisons shared by :class:`SymInt` and :class:`SymFloat`."""

    expr: Expr

    __add__, __radd__ = _binary(lambda a, b: a + b, lambda a, b: a + b)
    __sub__, __rsub__ = _binary(lambda a, b: a - b, lambda a, b: a - b)
    __mul__, __rmul__ = _binary(lambda a, b: a * b, lambda a, b: a * b)
    __truediv__, __rtruediv__ = _binary(lambda a, b: a / b, lambda a, b: a / b, divides=True)
    __lt__ = _compare(lambda a, b: a < b, lambda a, b: a < b)
    __le__ = _compare(lambda a, b: a <= b, lambda a, b: a <= b)
    __gt__ = _compare(lambda a, b: a > b, lambda a, b: a > b)
    __ge__ = _compare(lambda a, b: a >= b, lambda a, b: a >= b)
    __eq__ = _compare(lambda a, b: a == b, lambda a, b: a == b)  # type: ignore[assignment]
    __ne__ = _compare(lambda a, b: a != b, lambda a, b: a != b)  # type: ignore[assignment]

    def __neg__(self) -> Any:
        return _wrap(-plain(self), -self.expr)

    def __pos__(self) -> Any:
        return self

    def __abs__(self) -> Any:
        return self if _record(self.expr >= 0, plain(self) >= 0) else -self  # type: ignore[operator]

    def __bool__(self) -> bool:
        return _record(self.expr != 0, plain(self) != 0)

    def _out(self) -> Any:
        value = plain(self)
        _pin(self.expr, value)
        return value

    def __hash__(self) -> int:
        return hash(self._out())

    def __int__(self) -> int:
        return int(self._out())

    def __index__(self) -> int:
        return int(self._out())

    def __float__(self) -> float:
        if _initialisation(sys._getframe(1)):  # a weight initialisation scale: not structure
            return float(plain(self))
        return float(self._out())

    def __round__(self, ndigits: int | None = None) -> Any:
        return round(self._out(), ndigits)

    def __trunc__(self) -> int:
        return int(self._out())

    def __floor__(self) -> int:
        import math

        return math.floor(self._out())

    def __ceil__(self) -> int:
        import math

        return math.ceil(self._out())

    def __copy__(self) -> Any:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        return self

    def __reduce__(self) -> Any:
        return (type(plain(self)), (self._out(),))

    # operations without an expression: the value is pinned, the result plain
    __divmod__, __rdivmod__ = _pinned(divmod)
    __lshift__, __rlshift__ = _pinned(lambda a, b: a << b)
    __rshift__, __rrshift__ = _pinned(lambda a, b: a >> b)
    __and__, __rand__ = _pinned(lambda a, b: a & b)
    __or__, __ror__ = _pinned(lambda a, b: a | b)
    __xor__, __rxor__ = _pinned(lambda a, b: a ^ b)

    def __invert__(self) -> Any:
        return ~self._out()


class SymInt(_SymNumber, int):  # type: ignore[misc]
    """An ``int`` that also records its expression (see the module docstring)."""

    def __new__(cls, value: int, expr: Expr) -> SymInt:
        obj = int.__new__(cls, value)
        obj.expr = expr
        return obj

    __floordiv__, __rfloordiv__ = _binary(lambda a, b: a // b, lambda a, b: a // b, divides=True)
    __mod__, __rmod__ = _binary(lambda a, b: a % b, _mod, divides=True)

    def __pow__(self, other: Any) -> Any:  # type: ignore[override]
        if type(other) is int and other >= 0:
            return _wrap(plain(self) ** other, self.expr**other)
        return _power(self, other, sys._getframe(1))

    def __rpow__(self, other: Any) -> Any:  # type: ignore[override]
        return _power(other, self, sys._getframe(1))

    def __repr__(self) -> str:
        return int.__repr__(self)


def _power(base: Any, exponent: Any, caller: Any) -> Any:
    """``base ** exponent`` without an expression (a real power): plain, the symbolic operands pinned,
    except in a weight initialisation (``std = (d_model * d_kv) ** -0.5``: not structure)."""
    if not (_is_num(base) and _is_num(exponent)):
        return NotImplemented
    if _initialisation(caller):
        return plain(base) ** plain(exponent)
    return _value(base) ** _value(exponent)


def _value(x: Any) -> Any:
    """The plain value of ``x``, pinning it when it is symbolic."""
    return x._out() if isinstance(x, _SymNumber) else x


class SymFloat(_SymNumber, float):  # type: ignore[misc]
    """A ``float`` that also records its expression (see the module docstring)."""

    def __new__(cls, value: float, expr: Expr) -> SymFloat:
        obj = float.__new__(cls, value)
        obj.expr = expr
        return obj

    def __pow__(self, other: Any) -> Any:  # type: ignore[override]
        return _power(self, other, sys._getframe(1))

    def __rpow__(self, other: Any) -> Any:  # type: ignore[override]
        return _power(other, self, sys._getframe(1))

    __floordiv__, __rfloordiv__ = _pinned(lambda a, b: a // b)
    __mod__, __rmod__ = _pinned(lambda a, b: a % b)

    def is_integer(self) -> bool:
        return float(self._out()).is_integer()

    def __repr__(self) -> str:
        return float.__repr__(self)


class SymStr(str):
    """A categorical choice given as a ``str``: ``==``/``!=`` record ``var == choice`` as a guard; any
    other use (hashing for a dict lookup, a string method, formatting) pins the choice."""

    expr: Expr

    def __new__(cls, value: str, expr: Expr) -> SymStr:
        obj = str.__new__(cls, value)
        obj.expr = expr
        return obj

    def _label_eq(self, other: Any) -> bool | None:
        if not isinstance(other, str):
            return None
        labels = self.expr.payload[1] if self.expr.op == "var" else None
        value = str.__str__(self)
        if labels is not None and str(other) in labels:
            return _record(self.expr == str(other), value == other)
        self._out()
        return value == other

    def __eq__(self, other: object) -> bool:  # type: ignore[override]
        r = self._label_eq(other)
        return NotImplemented if r is None else r  # type: ignore[return-value]

    def __ne__(self, other: object) -> bool:  # type: ignore[override]
        r = self._label_eq(other)
        return NotImplemented if r is None else not r  # type: ignore[return-value]

    def _out(self) -> str:
        value = str.__str__(self)
        _pin(object.__getattribute__(self, "expr"), value)
        return value

    def __hash__(self) -> int:
        return hash(self._out())

    def __str__(self) -> str:
        return self._out()

    def __format__(self, spec: str) -> str:
        return format(self._out(), spec)

    def __getattribute__(self, name: str) -> Any:
        if name in ("expr", "_out", "_label_eq", "__class__") or name.startswith("__"):
            return object.__getattribute__(self, name)
        return getattr(self._out(), name)

    def __copy__(self) -> Any:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        return self

    def __repr__(self) -> str:
        return str.__repr__(str.__str__(self))


REAL_RANGE = builtins.range


class _RangeMeta(type):
    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, REAL_RANGE)

    def __subclasscheck__(cls, sub: Any) -> bool:
        return issubclass(sub, REAL_RANGE)


class guarded_range(metaclass=_RangeMeta):  # noqa: N801 - stands in for the builtin while tracing
    """``range`` while tracing: a symbolic bound is pinned (``depth == 3``) before the loop runs."""

    def __new__(cls, *args: Any) -> Any:  # type: ignore[misc]
        return REAL_RANGE(*(int(a) if isinstance(a, _SymNumber) else a for a in args))


def user_line(skip: tuple[str, ...] = ()) -> str:
    """``file:line: code`` of the innermost frame outside torch and dnnsat (the user's code)."""
    import linecache
    import os

    here = os.path.dirname(os.path.dirname(__file__))
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not (name.startswith(here) or f"{os.sep}torch{os.sep}" in name or any(s in name for s in skip)):
            line = linecache.getline(name, frame.f_lineno).strip()
            return f"{name}:{frame.f_lineno}: {line}"
        frame = frame.f_back  # type: ignore[assignment]
    return "<unknown>"


def as_expr_like(x: Any) -> ExprLike:
    """An ``int``/``Expr`` for the Network API: the expression of a symbolic int, a plain int as is."""
    if isinstance(x, SymInt):
        return x.expr
    return plain(x)  # type: ignore[no-any-return]
