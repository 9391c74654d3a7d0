"""The expression DAG: interned nodes, their constructors (with constant folding and the checks of
sorts and labels), pickling, formatting, traversal, digests and substitution."""

from __future__ import annotations

import math
import operator
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Union  # noqa: UP035

import numpy as np

Number = int | float | bool | np.integer | np.floating | np.bool_
ExprLike = Union["Expr", int, float, bool]

INT64_SAFE = 2**62  # magnitudes above this are evaluated in float64 by the vectorized evaluators

_ARITH = {"add", "sub", "mul", "neg", "floordiv", "ceildiv", "truediv", "min", "max"}
_COMPARE = {"lt": "<", "le": "<=", "eq": "==", "ne": "!="}
_LOGIC = {"and", "or", "not"}
_INFIX = {"add": "+", "sub": "-", "mul": "*", "floordiv": "//", "truediv": "/", "and": "&", "or": "|"}
_INFIX.update(_COMPARE)
_PRECEDENCE = {"or": 1, "and": 2, "not": 3, "lt": 4, "le": 4, "eq": 4, "ne": 4, "add": 5, "sub": 5}
_PRECEDENCE.update({"mul": 6, "floordiv": 6, "truediv": 6, "neg": 7})

_interned: dict[tuple[Any, ...], Expr] = {}


class _PickleState(threading.local):
    """Per thread: the flat node list being pickled (id -> position) and how far the pickler got."""

    def __init__(self) -> None:
        self.batch: dict[int, int] = {}
        self.done = 0


_pickle_state = _PickleState()


class Expr:
    """One node of the DAG. Build expressions with operators; never instantiate directly."""

    __slots__ = ("op", "args", "payload", "sort", "_vars", "__weakref__")

    op: str
    args: tuple[Expr, ...]
    payload: Any  # the value of a Const, (name, labels) of a Var, else None
    sort: str
    _vars: frozenset[str] | None

    def __new__(cls, op: str, args: tuple[Expr, ...], payload: Any, sort: str) -> Expr:
        key = (op, tuple(id(a) for a in args), _payload_key(payload), sort)
        node = _interned.get(key)
        if node is None:
            node = object.__new__(cls)
            node.op, node.args, node.payload, node.sort = op, args, payload, sort
            node._vars = None
            _interned[key] = node
        return node

    # -- arithmetic -------------------------------------------------------------------------------
    def __add__(self, other: ExprLike) -> Expr:
        return _arith("add", self, as_expr(other))

    def __radd__(self, other: ExprLike) -> Expr:
        return _arith("add", as_expr(other), self)

    def __sub__(self, other: ExprLike) -> Expr:
        return _arith("sub", self, as_expr(other))

    def __rsub__(self, other: ExprLike) -> Expr:
        return _arith("sub", as_expr(other), self)

    def __mul__(self, other: ExprLike) -> Expr:
        return _arith("mul", self, as_expr(other))

    def __rmul__(self, other: ExprLike) -> Expr:
        return _arith("mul", as_expr(other), self)

    def __floordiv__(self, other: ExprLike) -> Expr:
        return _arith("floordiv", self, as_expr(other))

    def __rfloordiv__(self, other: ExprLike) -> Expr:
        return _arith("floordiv", as_expr(other), self)

    def __truediv__(self, other: ExprLike) -> Expr:
        return _arith("truediv", self, as_expr(other))

    def __rtruediv__(self, other: ExprLike) -> Expr:
        return _arith("truediv", as_expr(other), self)

    def __pow__(self, exponent: int) -> Expr:
        if not isinstance(exponent, int) or exponent < 1:
            raise TypeError("only positive integer constant exponents are supported: x**2, x**3, ...")
        result = self
        for _ in range(exponent - 1):
            result = result * self
        return result

    def __neg__(self) -> Expr:
        return _arith("neg", self)

    def __pos__(self) -> Expr:
        return self

    # -- comparisons (return boolean expressions) -------------------------------------------------
    def __lt__(self, other: ExprLike) -> Expr:  # type: ignore[override]
        return _compare("lt", self, _coerce_label(self, other, "lt"))

    def __le__(self, other: ExprLike) -> Expr:  # type: ignore[override]
        return _compare("le", self, _coerce_label(self, other, "le"))

    def __gt__(self, other: ExprLike) -> Expr:  # type: ignore[override]
        return _compare("lt", _coerce_label(self, other, "lt"), self)

    def __ge__(self, other: ExprLike) -> Expr:  # type: ignore[override]
        return _compare("le", _coerce_label(self, other, "le"), self)

    def __eq__(self, other: object) -> Expr:  # type: ignore[override]
        return _compare("eq", self, _coerce_label(self, other, "eq"))

    def __ne__(self, other: object) -> Expr:  # type: ignore[override]
        return _compare("ne", self, _coerce_label(self, other, "ne"))

    __hash__ = object.__hash__  # interned: identity is structural equality

    # -- logic ------------------------------------------------------------------------------------
    def __and__(self, other: ExprLike) -> Expr:
        return _logic("and", self, as_expr(other))

    __rand__ = __and__

    def __or__(self, other: ExprLike) -> Expr:
        return _logic("or", self, as_expr(other))

    __ror__ = __or__

    def __invert__(self) -> Expr:
        return _logic("not", self)

    # -- pickling and copying ------------------------------------------------------------------------
    def __reduce__(self) -> tuple[Any, ...]:
        """A node is written as the topological list of its DAG (itself last), unpickled by
        :func:`_last`. The pickler then writes that list in order, and each node in it is written as
        ``Expr(op, args, payload, sort)``: its arguments come earlier in the list, so the pickler has
        them in its memo already (no recursion, whatever the depth; shared nodes written once).

        Positions only move forward and the list's root ends it, so a list left over by a failed
        pickle can never make a later one recurse: an argument sits before its user and gets a list
        of its own. Both forms unpickle to the interned node."""
        state = _pickle_state
        pos = state.batch.get(id(self))
        if pos is not None and pos >= state.done:
            if pos == len(state.batch) - 1:  # the root: the list is complete
                state.batch, state.done = {}, 0
            else:
                state.done = pos + 1
            return (Expr, (self.op, self.args, self.payload, self.sort))
        order = topological([self])
        state.batch, state.done = {id(n): i for i, n in enumerate(order)}, 0
        return (_last, (order,))

    def __copy__(self) -> Expr:
        return self  # immutable and interned

    def __deepcopy__(self, memo: dict[int, Any]) -> Expr:
        return self

    def __bool__(self) -> bool:
        raise TypeError(
            "a symbolic expression has no truth value: use `&`, `|`, `~` and dnnsat.where(cond, a, b) "
            "instead of `and`, `or`, `not` and `if`"
        )

    # -- inspection -------------------------------------------------------------------------------
    @property
    def is_const(self) -> bool:
        return self.op == "const"

    @property
    def value(self) -> Any:
        """The Python value of a constant node."""
        if self.op != "const":
            raise TypeError(f"{self} is not a constant")
        return self.payload

    @property
    def name(self) -> str:
        """The name of a variable node."""
        if self.op != "var":
            raise TypeError(f"{self} is not a variable")
        return str(self.payload[0])

    def variables(self) -> frozenset[str]:
        """Names of the variables this expression depends on."""
        if self._vars is None:
            # children first: iterative, so deep DAGs are fine; not below nodes already known
            for node in topological([self], lambda n: n.args if n._vars is None else ()):
                if node._vars is None:
                    if node.op == "var":
                        node._vars = frozenset([node.payload[0]])
                    else:
                        node._vars = frozenset().union(*(a._vars for a in node.args))  # type: ignore[arg-type]
        assert self._vars is not None
        return self._vars

    def __str__(self) -> str:
        return _format(self)

    def __repr__(self) -> str:
        return f"Expr({_format(self)})"


def _last(nodes: list[Expr]) -> Expr:
    """Unpickling helper: the root of a flat node list (see :meth:`Expr.__reduce__`)."""
    return nodes[-1]


def _payload_key(payload: Any) -> Any:
    if isinstance(payload, float) and math.isnan(payload):
        return ("nan",)
    if isinstance(payload, bool | int | float):
        return (type(payload).__name__, payload)
    if isinstance(payload, tuple):  # a Var's (name, labels): labels 1 and True must not intern alike
        return tuple(_payload_key(x) for x in payload)
    return payload


def Var(name: str, sort: str = "int", labels: Sequence[Any] | None = None) -> Expr:
    """A variable. ``labels`` (for categoricals of non-numeric choices) maps choice i to the value i."""
    if sort not in ("int", "real", "bool"):
        raise ValueError(f"unknown sort {sort!r} for variable {name!r}: use 'int', 'real' or 'bool'")
    return Expr("var", (), (name, tuple(labels) if labels is not None else None), sort)


_consts: dict[tuple[type, Any], Expr] = {}  # (type, value) -> the interned constant (Const's fast path)


def Const(value: Number) -> Expr:
    """A constant; its sort follows the Python type (bool, int or float)."""
    kind = type(value)
    if kind is int or kind is float or kind is bool:  # interned: one lookup once made
        node = _consts.get((kind, value))
        if node is None:
            node = _consts[(kind, value)] = _make_const(value)
        return node
    return _make_const(value)


def _make_const(value: Number) -> Expr:
    if isinstance(value, bool | np.bool_):
        return Expr("const", (), bool(value), "bool")
    if isinstance(value, int | np.integer):
        return Expr("const", (), int(value), "int")
    if isinstance(value, float | np.floating):
        v = float(value)
        if not math.isfinite(v):
            raise ValueError(f"constants must be finite, got {v!r}")
        if v.is_integer() and abs(v) < 2**53:
            return Expr("const", (), v, "real")
        return Expr("const", (), v, "real")
    raise TypeError(f"cannot use {value!r} of type {type(value).__name__} in an expression")


def as_expr(x: ExprLike) -> Expr:
    return x if isinstance(x, Expr) else Const(x)


def _kind(x: Any) -> str | None:
    """Which choices a value can match: Python equality says ``1 == 1.0 == True``; choices don't."""
    if x is None:
        return "none"
    if isinstance(x, bool | np.bool_):
        return "bool"
    if isinstance(x, int | float | np.integer | np.floating):
        return "number"
    return "str" if isinstance(x, str) else None


def label_index(labels: Sequence[Any], value: Any) -> int | None:
    """Index of the choice ``value`` means: an equal choice of the same kind (None, bool, number or
    string), so ``True`` never matches ``1`` and ``1.0`` matches ``1``; ``None`` if there is none."""
    kind = _kind(value)
    for i, c in enumerate(labels):
        if kind is not None and _kind(c) == kind and c == value:
            return i
    return None


_ARITH_TEXT = {"neg": "unary -", "min": "minimum", "max": "maximum", "ceildiv": "ceildiv"}


def _reject_labels(op: str, *args: Expr) -> None:
    """Raise for arithmetic or an ordering comparison ``op`` on a labelled variable (it stands for a
    choice index, which means nothing); ``==`` and ``!=`` pass."""
    if op in ("eq", "ne"):
        return
    for a in args:
        if a.op == "var" and a.payload[1] is not None:
            if op in ("lt", "le"):
                what = "an ordering comparison (<, <=, >, >=)"
            else:
                what = f"arithmetic ({_ARITH_TEXT.get(op) or _INFIX[op]})"
            labels = list(a.payload[1])
            raise TypeError(
                f"parameter {a.name!r} has the non-numeric choices {labels}: {what} on it has no meaning; "
                f"only == and != do (e.g. `v.{a.name} == {labels[0]!r}`; membership: "
                f"`(v.{a.name} == a) | (v.{a.name} == b)`); compute with "
                f"`dnnsat.where(v.{a.name} == {labels[0]!r}, x, y)`, or give the parameter numeric choices"
            )


def _coerce_label(var: Expr, other: object, op: str) -> Expr:
    """``v.act == "relu"``: map a categorical label to its index (``op`` is the comparison)."""
    if isinstance(other, Expr):
        return other
    if var.op == "var" and var.payload[1] is not None:
        _reject_labels(op, var)
        labels = var.payload[1]
        i = label_index(labels, other)
        if i is not None:
            return Const(i)
        raise ValueError(f"{other!r} is not a choice of {var.name!r}; choices are {list(labels)}")
    if isinstance(other, bool | int | float | np.integer | np.floating | np.bool_):
        return Const(other)
    raise TypeError(f"cannot compare {var} with {other!r}")


def _num_sort(*args: Expr) -> str:
    for a in args:
        if a.sort == "bool":
            raise TypeError(f"arithmetic on a boolean expression {a}: use dnnsat.where(cond, 1, 0)")
    return "real" if any(a.sort == "real" for a in args) else "int"


def _fold(op: str, *vals: Any) -> Any:
    return _PY_OPS[op](*vals)


def _arith(op: str, *args: Expr) -> Expr:
    _reject_labels(op, *args)
    sort = _num_sort(*args)
    if op in ("floordiv", "ceildiv") and sort != "int":
        raise TypeError(f"{op} needs integer operands; use `/` for real division ({args[0]}, {args[1]})")
    if op == "truediv":
        sort = "real"
    if all(a.op == "const" for a in args):
        v = _fold(op, *(a.payload for a in args))
        return Const(float(v) if sort == "real" else int(v))
    if len(args) == 2:
        a, b = args
        if op == "add":
            if _is(a, 0):
                return b if b.sort == sort else _arith("mul", b, Const(1.0))
            if _is(b, 0):
                return a if a.sort == sort else _arith("mul", a, Const(1.0))
        elif op == "sub" and _is(b, 0) and a.sort == sort:
            return a
        elif op == "mul":
            if (_is(a, 0) or _is(b, 0)) and sort == "int":
                return Const(0)
            if _is(a, 1) and b.sort == sort:
                return b
            if _is(b, 1) and a.sort == sort:
                return a
            if b.op == "const" and a.op != "const":
                a, b = b, a  # constants first: 2*x, so that 2*x and x*2 intern to the same node
        elif op in ("floordiv", "ceildiv") and _is(b, 1) or op in ("min", "max") and a is b:
            return a
        args = (a, b)
    elif op == "neg" and args[0].op == "neg":
        return args[0].args[0]
    return Expr(op, tuple(args), None, sort)


def _is(e: Expr, v: int) -> bool:
    return e.op == "const" and e.payload == v and not isinstance(e.payload, bool)


def _compare(op: str, a: Expr, b: Expr) -> Expr:
    _reject_labels(op, a, b)
    _num_sort(a, b)
    if a.op == "const" and b.op == "const":
        return Const(bool(_fold(op, a.payload, b.payload)))
    return Expr(op, (a, b), None, "bool")


def _check_bool(*args: Expr) -> None:
    for a in args:
        if a.sort != "bool":
            raise TypeError(f"logical operator on a non-boolean expression {a}: compare it first (x <= 3)")


def _logic(op: str, *args: Expr) -> Expr:
    _check_bool(*args)
    if op == "not":
        (a,) = args
        if a.op == "const":
            return Const(not a.payload)
        if a.op == "not":
            return a.args[0]
        return Expr("not", (a,), None, "bool")
    a, b = args
    for x, y in ((a, b), (b, a)):
        if x.op == "const":
            if op == "and":
                return y if x.payload else Const(False)
            return Const(True) if x.payload else y
    if a is b:
        return a
    return Expr(op, (a, b), None, "bool")


def ceildiv(a: ExprLike, b: ExprLike) -> Expr:
    """Ceiling division of integers: ``-((-a) // b)``."""
    return _arith("ceildiv", as_expr(a), as_expr(b))


def minimum(a: ExprLike, b: ExprLike, *more: ExprLike) -> Expr:
    """Elementwise minimum of two or more expressions."""
    result = _arith("min", as_expr(a), as_expr(b))
    for m in more:
        result = _arith("min", result, as_expr(m))
    return result


def maximum(a: ExprLike, b: ExprLike, *more: ExprLike) -> Expr:
    """Elementwise maximum of two or more expressions."""
    result = _arith("max", as_expr(a), as_expr(b))
    for m in more:
        result = _arith("max", result, as_expr(m))
    return result


def where(cond: ExprLike, a: ExprLike, b: ExprLike) -> Expr:
    """``a`` where ``cond`` holds, else ``b``."""
    c, x, y = as_expr(cond), as_expr(a), as_expr(b)
    _check_bool(c)
    if c.op == "const":
        return x if c.payload else y
    if x is y:
        return x
    if x.sort == "bool" or y.sort == "bool":
        _check_bool(x, y)
        return Expr("where", (c, x, y), None, "bool")
    sort = _num_sort(x, y)
    return Expr("where", (c, x, y), None, sort)


def sum_(terms: Iterable[ExprLike]) -> Expr:
    """Sum of expressions (``0`` for none)."""
    result: Expr = Const(0)
    for t in terms:
        result = result + t
    return result


def all_(conds: Iterable[ExprLike]) -> Expr:
    result: Expr = Const(True)
    for c in conds:
        result = result & as_expr(c)
    return result


def any_(conds: Iterable[ExprLike]) -> Expr:
    result: Expr = Const(False)
    for c in conds:
        result = result | as_expr(c)
    return result


# ------------------------------------------------------------------------------------------------
# Python semantics shared by folding and the scalar evaluator


def _py_floordiv(a: Any, b: Any) -> Any:
    return 0 if b == 0 else a // b


def _py_ceildiv(a: Any, b: Any) -> Any:
    return 0 if b == 0 else -((-a) // b)


def _py_truediv(a: Any, b: Any) -> Any:
    return 0.0 if b == 0 else a / b


_DIV_TEXT = {  # (Python source, numpy function) of a division by a nonzero constant
    "floordiv": ("{x} // {c}", "_fdiv({x}, {c})"),
    "ceildiv": ("-((-{x}) // {c})", "_cdiv({x}, {c})"),
    "truediv": ("{x} / {c}", "_tdiv({x}, {c})"),
}

_MAX_NESTING = 40  # inlined expressions deeper than this are stored in a local (the parser's limit is 200)

_PY_OPS: dict[str, Callable[..., Any]] = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "neg": operator.neg,
    "floordiv": _py_floordiv,
    "ceildiv": _py_ceildiv,
    "truediv": _py_truediv,
    "min": min,
    "max": max,
    "lt": operator.lt,
    "le": operator.le,
    "eq": operator.eq,
    "ne": operator.ne,
    "and": lambda a, b: a and b,
    "or": lambda a, b: a or b,
    "not": operator.not_,
}


def _format(e: Expr, parent: int = 0) -> str:
    if e.op == "var":
        return e.name
    if e.op == "const":
        return repr(e.payload)
    prec = _PRECEDENCE.get(e.op, 10)
    if e.op in _INFIX:
        left = _format(e.args[0], prec)
        right = _format(e.args[1], prec + 1)
        text = f"{left} {_INFIX[e.op]} {right}" if e.op not in ("mul",) else f"{left}*{right}"
    elif e.op == "neg":
        text = f"-{_format(e.args[0], prec)}"
    elif e.op == "not":
        text = f"~{_format(e.args[0], prec)}"
    else:
        text = f"{e.op}({', '.join(_format(a) for a in e.args)})"
    return f"({text})" if prec < parent else text


# ------------------------------------------------------------------------------------------------
# Traversal


def topological(
    roots: Sequence[Expr], children: Callable[[Expr], Sequence[Expr]] | None = None
) -> list[Expr]:
    """All nodes reachable from ``roots``, children before parents, each once (``children``: a node's
    arguments, by default ``node.args``)."""
    order: list[Expr] = []
    seen: set[int] = set()
    stack: list[tuple[Expr, bool]] = [(r, False) for r in reversed(roots)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        args = node.args if children is None else children(node)
        stack.extend((a, False) for a in reversed(args) if id(a) not in seen)
    return order


_digests: dict[int, str] = {}  # id -> digest; safe because interned nodes live for the process


def digest(e: Expr) -> str:
    """A stable structural digest of ``e`` (same across processes), linear in the DAG's size.

    Unlike ``str(e)``, which prints the DAG as a tree, this never blows up on shared subexpressions.
    """
    import hashlib

    for node in topological([e], lambda n: () if id(n) in _digests else n.args):  # not below known ones
        if id(node) not in _digests:
            raw = f"{node.op}|{node.payload!r}|{node.sort}|" + ",".join(_digests[id(a)] for a in node.args)
            _digests[id(node)] = hashlib.blake2b(raw.encode(), digest_size=8).hexdigest()
    return _digests[id(e)]


def variables(exprs: Iterable[Expr]) -> frozenset[str]:
    acc: frozenset[str] = frozenset()
    for e in exprs:
        acc |= e.variables()
    return acc


def substitute(expr: Expr, values: Mapping[str, ExprLike]) -> Expr:
    """Replace variables by constants or expressions, folding constants on the way."""
    if not (expr.variables() & values.keys()):
        return expr
    memo: dict[int, Expr] = {}
    for node in topological([expr]):
        if node.op == "var":
            new = as_expr(values[node.name]) if node.name in values else node
        elif node.op == "const":
            new = node
        else:
            args = [memo[id(a)] for a in node.args]
            new = _rebuild(node.op, args)
        memo[id(node)] = new
    return memo[id(expr)]


def _rebuild(op: str, args: list[Expr]) -> Expr:
    if op in _ARITH:
        return _arith(op, *args)
    if op in _COMPARE:
        return _compare(op, args[0], args[1])
    if op in _LOGIC:
        return _logic(op, *args)
    if op == "where":
        return where(args[0], args[1], args[2])
    raise AssertionError(op)
