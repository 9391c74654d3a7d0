"""Symbolic expressions: an immutable, hash-consed DAG with three evaluators.

Nodes are interned, so structurally equal expressions are the same object and every evaluator can
memoise per node. Sorts: ``"int"`` (Python ``int``; numpy ``int64``), ``"real"`` (``float64``) and
``"bool"``. Operators: ``+ - * /`` (``/`` is real division), ``//`` (floor division), :func:`ceildiv`,
:func:`minimum`, :func:`maximum`, :func:`where`, comparisons, ``& | ~`` on booleans, :func:`sum_`.

Division by zero is defined as ``0`` in every evaluator (``x // 0 == ceildiv(x, 0) == x / 0 == 0``),
so that numpy, Python and Z3 agree on every point.

A variable with ``labels`` (a categorical of non-numeric choices) stands for the index of its choice:
only ``==`` and ``!=`` against a label or another expression are defined on it; arithmetic and
ordering comparisons raise :class:`TypeError`.

Expressions pickle (any protocol): a DAG is written as one flat, topologically ordered node list (no
recursion, so 10**5-deep chains are fine; a node shared by several pickled expressions is written once
and referenced after), and unpickled nodes are interned again, so ``pickle.loads(pickle.dumps(e)) is e``
within a process and a fresh process builds the same nodes when it builds the same expressions.

Evaluators (all agree; property tests check it):

* :func:`compile_scalar` - Python function of one assignment (exact, arbitrary-precision ints);
* :func:`compile_vectorized` - numpy function of columns of assignments;
* :func:`compile_interval` - numpy function of boxes (``lo``/``hi`` columns) giving sound bounds;
  :func:`compile_interval_scalar` the same for one box of Python numbers, for a few boxes at a time;
* :func:`to_z3` - lowering to Z3 terms.
"""

from __future__ import annotations

import functools
import math
import operator
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any, Union  # noqa: UP035

import numpy as np

__all__ = [
    "Expr",
    "Var",
    "Const",
    "ExprLike",
    "as_expr",
    "ceildiv",
    "minimum",
    "maximum",
    "where",
    "sum_",
    "all_",
    "any_",
    "topological",
    "variables",
    "substitute",
    "compile_scalar",
    "compile_vectorized",
    "compile_interval",
    "compile_interval_scalar",
    "interval",
    "to_z3",
]

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
            for node in topological([self]):  # children first: iterative, so deep DAGs are fine
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


def Const(value: Number) -> Expr:
    """A constant; its sort follows the Python type (bool, int or float)."""
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

    for node in topological([e]):
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


# ------------------------------------------------------------------------------------------------
# Scalar evaluator (code generation)


_NARY = ("min", "max")  # trees of these become one builtin call
_MAX_NESTING = 40  # inlined expressions deeper than this are stored in a local (the parser's limit is 200)


def _scalar_text(node: Expr, a: list[str]) -> str:
    """Python source of ``node`` given its arguments' source ``a`` (min, max and a division by a
    non-constant read an argument twice; the others read each once)."""
    op = node.op
    if op in ("add", "sub", "mul", "lt", "le", "eq", "ne"):
        return f"{a[0]} {_INFIX[op]} {a[1]}"
    if op == "neg":
        return f"-{a[0]}"
    if op in _DIV_TEXT:
        text = _DIV_TEXT[op][0].format(x=a[0], c=a[1])
        return (
            text if _nonzero_const(node.args[1]) else f"{text} if {a[1]} else {0.0 if op == 'truediv' else 0}"
        )
    if op in _NARY:
        return f"{a[0]} if {a[0]} {'<=' if op == 'min' else '>='} {a[1]} else {a[1]}"
    if op in ("and", "or"):
        return f"{a[0]} {op} {a[1]}"
    if op == "not":
        return f"not {a[0]}"
    if op == "where":
        return f"{a[1]} if {a[0]} else {a[2]}"  # lazy: the branch not taken is not evaluated
    raise AssertionError(op)


def _nonzero_const(e: Expr) -> bool:
    return e.op == "const" and e.payload != 0


def _nary_leaves(node: Expr, uses: Mapping[int, int]) -> list[Expr]:
    """Operands of the tree of ``node.op`` nodes under ``node`` whose inner nodes have no other use."""
    out, stack = [], [node]
    while stack:
        x = stack.pop()
        if x.op == node.op and (x is node or uses[id(x)] == 1):
            stack.extend(reversed(x.args))
        else:
            out.append(x)
    return out


def compile_scalar(
    roots: Sequence[Expr], point_forms: bool = True, box: Mapping[str, tuple[Any, Any]] | None = None
) -> Callable[[Mapping[str, Any]], tuple[Any, ...]]:
    """A function ``env -> tuple of values`` (one per root) over one assignment of Python numbers.

    Integer arithmetic is exact (Python ints); categorical labels must already be encoded. Nodes with
    a single use are inlined into their user (so a :func:`where` evaluates only the branch it takes),
    trees of :func:`minimum`/:func:`maximum` become one ``min``/``max`` call, and every other node is
    computed once into a local.

    ``point_forms`` (the same values, bit for bit, in less work; interval bounds are not affected):
    conditions on one expression become at most two intervals of it, integer ``x - x`` and ``x == x``
    fold (integer-sort values are integers), a large integer maximum of sums (a memory peak) is one
    numpy sweep (``dnnsat._point_forms.Peak``), a local read only under ``where(c, ...)``'s taken
    branch is computed under ``if c:``, and ``where(c, a, b)`` whose ``b`` is read by nothing after it becomes
    ``if c: b = a`` (the latency model's chains ``where(gate, t + k, t)``).

    ``box`` (with point forms; ``{name: (lo, hi)}`` of every variable, and the function is then only
    called with values inside it, Python ints for integer variables, as ``Problem`` does): conditions
    constant over the box are folded, integer terms and divisions by constants take exact cheaper
    forms (``k*x - x -> (k-1)*x``, ``(2*x) / c -> x / (c/2)``, ...; see
    ``dnnsat._point_forms.point_conditions``), and a few structural choices (labelled categoricals)
    each get a variant compiled with the choice fixed (``dnnsat._point_forms.split``).
    """
    from ._point_forms import (  # imports this module
        guards,
        point_conditions,
        reassigns,
        schedule,
        split,
        split_names,
    )
    from ._point_forms import peaks as find_peaks

    if point_forms and box and (names := split_names(roots, box)):
        return split(roots, box, names)
    if point_forms:
        roots = point_conditions(roots, box)
    peaks = find_peaks(roots) if point_forms else {}
    order = topological(roots, lambda n: peaks[id(n)].leaves if id(n) in peaks else n.args)
    uses: dict[int, int] = {id(n): 0 for n in order}
    for r in roots:
        uses[id(r)] += 2  # returned: always stored
    nary: dict[int, list[Expr]] = {}
    for node in order:
        for x in peaks[id(node)].leaves if id(node) in peaks else node.args:
            uses[id(x)] += 1
    for node in order:
        if id(node) in peaks:
            continue
        if node.op in _NARY and len(leaves := _nary_leaves(node, uses)) > 2:
            nary[id(node)] = leaves
        elif node.op in _NARY or node.op in _DIV_TEXT and not _nonzero_const(node.args[1]):
            for x in node.args:
                uses[id(x)] += 2  # read twice by the template: store it

    def args_of(n: Expr) -> Sequence[Expr]:
        return peaks[id(n)].leaves if id(n) in peaks else nary.get(id(n), n.args)

    stored: set[int] = set()  # nodes computed into a local (the others are inlined into their user)
    depth: dict[int, int] = {}
    for node in order:
        d = 1 + max((depth[id(x)] for x in args_of(node)), default=0)
        if node.op != "const" and (uses[id(node)] != 1 or d >= _MAX_NESTING):
            stored.add(id(node))
        depth[id(node)] = 0 if id(node) in stored or node.op == "const" else d
    guarded, branch = (
        guards(roots, order, args_of, stored) if point_forms else ({id(n): () for n in order}, {})
    )
    byid = {id(n): n for n in order}
    order = schedule(order, lambda n: [*args_of(n), *(byid[c] for c in guarded[id(n)])], guarded, stored)
    at = {id(n): i for i, n in enumerate(order)}  # the statement that evaluates a node
    for node in reversed(order):
        for x in args_of(node):
            if id(x) not in stored:
                at[id(x)] = at[id(node)]
    last = {id(r): len(order) for r in roots}  # the last statement that reads a node
    for node in order:
        for x in args_of(node):
            last[id(x)] = max(last.get(id(x), 0), at[id(node)])
    ref: dict[int, str] = {}
    ns: dict[str, Any] = {}
    body: list[tuple[tuple[int, ...], str]] = []  # (guard, statement)
    for i, node in enumerate(order):
        if node.op == "const":
            ref[id(node)] = repr(node.payload)
            continue
        args = args_of(node)
        if node.op == "var":
            text = f"env[{node.name!r}]"
        elif id(node) in peaks:
            ns[f"_pk{i}"] = peaks[id(node)]
            text = f"_pk{i}(env, ({''.join(ref[id(x)] + ', ' for x in args)}))"
        elif id(node) in nary:
            text = f"{node.op}({', '.join(ref[id(x)] for x in args)})"
        elif node.op == "where" and point_forms and reassigns(node, stored, last, at):
            # ``a if c else b`` as ``if c: b = a`` where b is not read after this
            c, a, b = args
            ref[id(node)] = ref[id(b)]
            guard = branch[id(node)] if id(c) in branch[id(node)] else (*guarded[id(node)], id(c))
            body.append((guard, f"{ref[id(b)]} = {ref[id(a)]}"))
            continue
        else:
            text = _scalar_text(node, [ref[id(x)] for x in args])
        if id(node) in stored:
            body.append((guarded[id(node)], f"t{i} = {text}"))
            ref[id(node)] = f"t{i}"
        else:
            ref[id(node)] = f"({text})"
    lines = ["def _f(env):"]
    open_: tuple[int, ...] = ()
    for guard, statement in body:
        common = 0
        while common < min(len(open_), len(guard)) and open_[common] == guard[common]:
            common += 1
        for level in range(common, len(guard)):
            lines.append(f"{'    ' * (level + 1)}if {ref[guard[level]]}:")
        open_ = guard
        lines.append(f"{'    ' * (len(guard) + 1)}{statement}")
    lines.append(f"    return ({', '.join(ref[id(r)] for r in roots)},)")
    exec(compile("\n".join(lines), "<dnnsat.expr scalar>", "exec"), ns)
    return ns["_f"]  # type: ignore[no-any-return]


# ------------------------------------------------------------------------------------------------
# Interval bounds over a box of Python numbers (used to plan numpy dtypes)


def interval(roots: Sequence[Expr], box: Mapping[str, tuple[Any, Any]]) -> dict[int, tuple[Any, Any]]:
    """Sound bounds of every node under ``roots`` over ``box`` (Python numbers, exact for ints).

    Returns a map ``id(node) -> (lo, hi)``; booleans are bounded by ``(False/True, False/True)``.
    """
    f = compile_interval(roots, box=None, python=True)
    lo = {k: v[0] for k, v in box.items()}
    hi = {k: v[1] for k, v in box.items()}
    bounds: dict[int, tuple[Any, Any]] = {}
    f(lo, hi, bounds)
    return bounds


# ------------------------------------------------------------------------------------------------
# Vectorized evaluator


def _codegen(
    roots: Sequence[Expr],
    emit: Callable[[Expr, list[str], str], list[str]],
    header: str,
    computed: AbstractSet[int] = frozenset(),
) -> str:
    """One line per node; each node's array is deleted after its last reader (a batch of points then
    holds few arrays at once: memory traffic dominated when every one lived to the end). Nodes in
    ``computed`` are emitted without their arguments (``emit`` computes them some other way)."""

    def inputs(node: Expr) -> Sequence[Expr]:
        return () if id(node) in computed else node.args

    order = topological(roots, inputs)
    last_use = {id(a): i for i, node in enumerate(order) for a in inputs(node)}
    keep = {id(r) for r in roots}
    names: dict[int, str] = {}
    lines = [header]
    for i, node in enumerate(order):
        out = f"t{i}"
        names[id(node)] = out
        lines.extend("    " + line for line in emit(node, [names[id(a)] for a in inputs(node)], out))
        dead = sorted({names[id(a)] for a in inputs(node) if last_use[id(a)] == i and id(a) not in keep})
        if dead:
            lines.append(f"    del {', '.join(dead)}")
    lines.append(f"    return ({', '.join(names[id(r)] for r in roots)},)")
    return "\n".join(lines)


def _dtype_plan(
    roots: Sequence[Expr],
    box: Mapping[str, tuple[Any, Any]] | None,
    bounds: Mapping[int, tuple[Any, Any]] | None = None,
) -> set[int]:
    """Nodes of integer sort that must be evaluated in float64 because they may exceed int64
    (``bounds``: :func:`interval` of ``roots`` over ``box`` when already computed)."""
    if box is None:
        return set()
    bounds = interval(roots, box) if bounds is None else bounds
    wide: set[int] = set()
    for node in topological(roots):
        lo, hi = bounds[id(node)]
        too_big = abs(lo) > INT64_SAFE or abs(hi) > INT64_SAFE
        if node.sort == "int" and (too_big or any(id(a) in wide for a in node.args)):
            wide.add(id(node))
    return wide


def _emit_vector(wide: set[int]) -> Callable[[Expr, list[str], str], list[str]]:
    def emit(node: Expr, a: list[str], out: str) -> list[str]:
        op = node.op
        if op == "var":
            cast = "np.float64" if id(node) in wide or node.sort == "real" else "np.int64"
            if node.sort == "bool":
                cast = "np.bool_"
            return [f"{out} = np.asarray(env[{node.name!r}], dtype={cast})"]
        if op == "const":
            v = float(node.payload) if id(node) in wide else node.payload
            return [f"{out} = {v!r}"]
        if op in ("add", "sub", "mul"):
            if id(node) in wide:
                return [f"{out} = np.asarray({a[0]}, dtype=np.float64) {_INFIX[op]} {a[1]}"]
            return [f"{out} = {a[0]} {_INFIX[op]} {a[1]}"]
        if op in _COMPARE:
            return [f"{out} = {a[0]} {_INFIX[op]} {a[1]}"]
        if op == "neg":
            return [f"{out} = -{a[0]}"]
        if op == "floordiv":
            d = node.args[1]
            if (
                d.op == "const"
                and d.payload > 0
                and d.payload & (d.payload - 1) == 0
                and id(node) not in wide
            ):
                return [f"{out} = {a[0]} >> {d.payload.bit_length() - 1}"]  # floor division by 2**k
            return [f"{out} = _vfloordiv({a[0]}, {a[1]})"]
        if op == "ceildiv":
            return [f"{out} = -_vfloordiv(-{a[0]}, {a[1]})"]
        if op == "truediv":
            return [f"{out} = _vtruediv({a[0]}, {a[1]})"]
        if op == "min":
            return [f"{out} = np.minimum({a[0]}, {a[1]})"]
        if op == "max":
            return [f"{out} = np.maximum({a[0]}, {a[1]})"]
        if op == "and":
            return [f"{out} = np.logical_and({a[0]}, {a[1]})"]
        if op == "or":
            return [f"{out} = np.logical_or({a[0]}, {a[1]})"]
        if op == "not":
            return [f"{out} = np.logical_not({a[0]})"]
        if op == "where":
            if node.args[2].op == "const" and node.args[2].payload == 0 and node.sort != "bool":
                return [f"{out} = {a[1]} * {a[0]}"]  # where(c, x, 0): a multiply is twice as fast
            return [f"{out} = np.where({a[0]}, {a[1]}, {a[2]})"]
        raise AssertionError(op)

    return emit


def _vfloordiv(a: Any, b: Any) -> Any:
    if np.ndim(b) == 0:
        if b == 0:
            return np.zeros_like(np.asarray(a)) if np.ndim(a) else 0
        return np.floor(a / b) if isinstance(a, float | np.floating) or _is_float(a) else a // b
    with np.errstate(divide="ignore", invalid="ignore"):
        safe = np.where(b == 0, 1, b)
        q = np.floor(np.divide(a, safe)) if _is_float(a) or _is_float(b) else np.floor_divide(a, safe)
        return np.where(b == 0, 0, q)


def _vtruediv(a: Any, b: Any) -> Any:
    with np.errstate(divide="ignore", invalid="ignore"):
        if np.ndim(b) == 0:
            return a / b if b != 0 else np.zeros_like(np.asarray(a, dtype=np.float64))
        safe = np.where(b == 0, 1.0, b)
        return np.where(b == 0, 0.0, np.true_divide(a, safe))


def _is_float(x: Any) -> bool:
    return bool(np.asarray(x).dtype.kind == "f")


def compile_vectorized(
    roots: Sequence[Expr], box: Mapping[str, tuple[Any, Any]] | None = None
) -> Callable[[Mapping[str, Any]], tuple[Any, ...]]:
    """A function ``columns -> tuple of arrays`` evaluating ``roots`` on many assignments at once.

    ``columns`` maps variable names to equally long arrays (or scalars, broadcast). Integer nodes are
    evaluated in ``int64``; when ``box`` (variable bounds) shows a node may exceed ``2**62`` in
    magnitude, it and its integer ancestors use ``float64`` instead.
    """
    return _compile_vectorized(roots, box, gated=True)


def _compile_vectorized(
    roots: Sequence[Expr], box: Mapping[str, tuple[Any, Any]] | None, gated: bool
) -> Callable[[Mapping[str, Any]], tuple[Any, ...]]:
    """:func:`compile_vectorized`; ``gated``: memory peaks whose gates read few variables are
    evaluated as matrix products (:mod:`dnnsat._gated_peaks`; needs ``box``)."""
    wide = _dtype_plan(roots, box)
    factored: dict[int, Any] = {}
    if gated and box is not None:
        from ._gated_peaks import gated_peaks

        factored = gated_peaks(
            roots,
            box,
            wide,
            lambda sizes: _compile_vectorized(sizes, box, gated=False),
            lambda node: _compile_vectorized([node], box, gated=False),
        )
    emit = _emit_vector(wide)

    def emit_or_call(node: Expr, a: list[str], out: str) -> list[str]:
        return [f"{out} = _peaks[{id(node)}](env)"] if id(node) in factored else emit(node, a, out)

    src = _codegen(roots, emit_or_call, "def _f(env):", computed=factored.keys())
    ns: dict[str, Any] = {"np": np, "_vfloordiv": _vfloordiv, "_vtruediv": _vtruediv, "_peaks": factored}
    exec(compile(src, "<dnnsat.expr vectorized>", "exec"), ns)
    return ns["_f"]  # type: ignore[no-any-return]


# ------------------------------------------------------------------------------------------------
# Interval evaluator (vectorized over boxes)


def _imul(alo: Any, ahi: Any, blo: Any, bhi: Any, m: Any) -> tuple[Any, Any]:
    p1, p2, p3, p4 = alo * blo, alo * bhi, ahi * blo, ahi * bhi
    return m.minimum(m.minimum(p1, p2), m.minimum(p3, p4)), m.maximum(m.maximum(p1, p2), m.maximum(p3, p4))


def _idiv(alo: Any, ahi: Any, blo: Any, bhi: Any, m: Any, div: Callable[[Any, Any], Any]) -> tuple[Any, Any]:
    """Bounds of ``div(a, b)`` for a monotone ``div`` (floor/ceil/true division; ``x/0 == 0``)."""
    if m is _PyMath:
        if blo > 0 or bhi < 0:
            qs = [div(x, y) for x in (alo, ahi) for y in (blo, bhi)]
            return min(qs), max(qs)
        if div is _py_truediv:
            return -math.inf, math.inf
        mag = max(abs(alo), abs(ahi))
        return min(-mag, 0), max(mag, 0)
    # numpy: per box
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        sign_ok = (blo > 0) | (bhi < 0)
        sb_lo = np.where(sign_ok, blo, 1)
        sb_hi = np.where(sign_ok, bhi, 1)
        qs = [div(x, y) for x in (alo, ahi) for y in (sb_lo, sb_hi)]
        qlo = np.minimum(np.minimum(qs[0], qs[1]), np.minimum(qs[2], qs[3]))
        qhi = np.maximum(np.maximum(qs[0], qs[1]), np.maximum(qs[2], qs[3]))
        if div is _vtruediv_pos:
            flo, fhi = -np.inf, np.inf
        else:
            mag = np.maximum(np.abs(alo), np.abs(ahi))
            flo, fhi = np.minimum(-mag, 0), np.maximum(mag, 0)
        return np.where(sign_ok, qlo, flo), np.where(sign_ok, qhi, fhi)


def _vfloordiv_pos(a: Any, b: Any) -> Any:
    return np.floor_divide(a, b) if not (_is_float(a) or _is_float(b)) else np.floor(np.divide(a, b))


def _vceildiv_pos(a: Any, b: Any) -> Any:
    return -_vfloordiv_pos(-a, b)


def _vtruediv_pos(a: Any, b: Any) -> Any:
    return np.true_divide(a, b)


class _PyMath:
    """The two functions the interval rules need, for Python numbers."""

    minimum = staticmethod(min)
    maximum = staticmethod(max)


def _interval_rules(python: bool) -> dict[str, Callable[..., tuple[Any, Any]]]:
    """Bounds of the ops that take more than one line: ``(alo, ahi, blo, bhi) -> (lo, hi)``."""
    m: Any = _PyMath if python else np
    fdiv = _py_floordiv if python else _vfloordiv_pos
    cdiv = _py_ceildiv if python else _vceildiv_pos
    tdiv = _py_truediv if python else _vtruediv_pos

    def b_and(x: Any, y: Any) -> Any:
        return (x and y) if python else np.logical_and(x, y)

    def b_not(x: Any) -> Any:
        return (not x) if python else np.logical_not(x)

    def eq_lo(alo: Any, ahi: Any, blo: Any, bhi: Any) -> Any:
        return b_and(b_and(alo == ahi, blo == bhi), alo == blo)

    def eq_hi(alo: Any, ahi: Any, blo: Any, bhi: Any) -> Any:
        return b_and(alo <= bhi, blo <= ahi)

    return {
        "mul": lambda alo, ahi, blo, bhi: _imul(alo, ahi, blo, bhi, m),
        "floordiv": lambda alo, ahi, blo, bhi: _idiv(alo, ahi, blo, bhi, m, fdiv),
        "ceildiv": lambda alo, ahi, blo, bhi: _idiv(alo, ahi, blo, bhi, m, cdiv),
        "truediv": lambda alo, ahi, blo, bhi: _idiv(alo, ahi, blo, bhi, m, tdiv),
        "eq": lambda alo, ahi, blo, bhi: (eq_lo(alo, ahi, blo, bhi), eq_hi(alo, ahi, blo, bhi)),
        "ne": lambda alo, ahi, blo, bhi: (b_not(eq_hi(alo, ahi, blo, bhi)), b_not(eq_lo(alo, ahi, blo, bhi))),
    }


_ONE_LINE = {  # op -> arity, for the ops whose bounds are one line of source (see _interval_text)
    **dict.fromkeys(("add", "sub", "min", "max", "lt", "le", "and", "or"), 2),
    **dict.fromkeys(("neg", "not"), 1),
    "where": 3,
}


def _interval_text(op: str, a: Sequence[tuple[str, str]], python: bool) -> tuple[str, str]:
    """Source of ``(lo, hi)`` of an op in ``_ONE_LINE`` over its arguments' ``(lo, hi)`` source.

    The single definition of these rules: the interpreters compile them into one function per op,
    :func:`compile_interval_scalar` inlines them.
    """

    def lo_min(x: str, y: str) -> str:  # Python: min(x, y) without the call (the same value, NaN too)
        return f"({y} if {y} < {x} else {x})" if python else f"np.minimum({x}, {y})"

    def hi_max(x: str, y: str) -> str:
        return f"({y} if {y} > {x} else {x})" if python else f"np.maximum({x}, {y})"

    def sel(c: str, x: str, y: str) -> str:
        return f"({x} if {c} else {y})" if python else f"np.where({c}, {x}, {y})"

    def logic(name: str, *xs: str) -> str:
        if python:
            return f"(not {xs[0]})" if name == "not" else f"({xs[0]} {name} {xs[1]})"
        return f"np.logical_{name}({', '.join(xs)})"

    (al, ah), (bl, bh) = a[0], a[-1]
    if op == "where":  # (c, x, y): x if surely c, y if surely not c, else the hull of both
        (cl, ch), (al, ah) = a[0], a[1]
        return sel(cl, al, sel(ch, lo_min(al, bl), bl)), sel(cl, ah, sel(ch, hi_max(ah, bh), bh))
    return {
        "add": (f"{al} + {bl}", f"{ah} + {bh}"),
        "sub": (f"{al} - {bh}", f"{ah} - {bl}"),
        "neg": (f"-{ah}", f"-{al}"),
        "min": (lo_min(al, bl), lo_min(ah, bh)),
        "max": (hi_max(al, bl), hi_max(ah, bh)),
        "lt": (f"{ah} < {bl}", f"{al} < {bh}"),
        "le": (f"{ah} <= {bl}", f"{al} <= {bh}"),
        "and": (logic("and", al, bl), logic("and", ah, bh)),
        "or": (logic("or", al, bl), logic("or", ah, bh)),
        "not": (logic("not", ah), logic("not", al)),
    }[op]


@functools.cache
def _interval_functions(python: bool) -> dict[str, Callable[..., tuple[Any, Any]]]:
    """Every op's bound rule as one function ``(alo, ahi, blo, bhi, ...) -> (lo, hi)``."""
    fns = _interval_rules(python)
    for op, arity in _ONE_LINE.items():
        args = [(f"a{k}l", f"a{k}h") for k in range(arity)]
        lo, hi = _interval_text(op, args, python)
        params = ", ".join(x for pair in args for x in pair)
        fns[op] = eval(f"lambda {params}: ({lo}, {hi})", {"np": np})
    return fns


def compile_interval(
    roots: Sequence[Expr], box: Mapping[str, tuple[Any, Any]] | None = None, python: bool = False
) -> Callable[..., tuple[tuple[Any, Any], ...]]:
    """A function ``(lo, hi) -> tuple of (lo, hi)`` giving sound bounds of each root over boxes.

    ``lo`` and ``hi`` map variable names to arrays (one entry per box) or scalars. Bounds are exact
    at the corners for monotone terms and sound always: every value at a point in the box lies inside.
    Booleans are bounded by ``(definitely true, possibly true)``. ``box`` (global variable bounds;
    every box evaluated must lie within it) selects float64 for nodes that may leave int64 and the
    cheaper exact form of ``where(c, x, 0)`` where ``x`` keeps one sign. ``python=True`` evaluates
    Python numbers exactly and takes a third argument, a dict that receives the bounds of every node
    (``id -> (lo, hi)``).
    """
    if python:
        return _interval_interpreter(roots)
    bounds = interval(roots, box) if box is not None else None
    wide = _dtype_plan(roots, box, bounds)
    signs = _gate_signs(roots, bounds, wide) if bounds is not None else None
    ns: dict[str, Any] = {"np": np, "_rules": _interval_rules(python=False), "_w": _as_float64}
    ns.update(_fdiv=_vfloordiv_pos, _cdiv=_vceildiv_pos, _tdiv=_vtruediv_pos)
    src = _interval_source(roots, python=False, wide=wide, signs=signs)
    exec(compile(src, "<dnnsat.expr interval>", "exec"), ns)
    return ns["_f"]  # type: ignore[no-any-return]


def _as_float64(x: Any) -> Any:
    return np.asarray(x, dtype=np.float64)


def _interval_interpreter(
    roots: Sequence[Expr], python: bool = True
) -> Callable[..., tuple[tuple[Any, Any], ...]]:
    """Bounds over one box of Python numbers (``python``; else over numpy columns of boxes), node by
    node without generated code, optionally recording every node's."""
    order = topological(roots)
    rules = _interval_functions(python)
    plan = [(id(node), node.op, node.payload, tuple(id(a) for a in node.args)) for node in order]
    root_ids = [id(r) for r in roots]

    def evaluate(lo: Mapping[str, Any], hi: Mapping[str, Any], out: dict[int, Any] | None = None) -> Any:
        b: dict[int, tuple[Any, Any]] = {} if out is None else out
        for nid, op, payload, arg_ids in plan:
            if op == "var":
                b[nid] = (lo[payload[0]], hi[payload[0]])
            elif op == "const":
                b[nid] = (payload, payload)
            else:
                flat: list[Any] = []
                for aid in arg_ids:
                    flat.extend(b[aid])
                b[nid] = rules[op](*flat)
        return tuple(b[r] for r in root_ids)

    return evaluate


def compile_interval_scalar(roots: Sequence[Expr]) -> Callable[..., tuple[tuple[Any, Any], ...]]:
    """Like :func:`compile_interval` for one box of Python numbers (exact ints): generated code with
    every rule inlined, many times faster than the numpy evaluator on a handful of boxes."""
    ns: dict[str, Any] = {"_rules": _interval_rules(python=True)}
    exec(compile(_interval_source(roots, python=True), "<dnnsat.expr interval scalar>", "exec"), ns)
    return ns["_f"]  # type: ignore[no-any-return]


def _by_constant(node: Expr) -> bool:
    """A product with a constant or a division by a nonzero constant (its bounds: two values, sorted).
    A true division only by ``|c| >= 1``: no overflow, which :func:`_idiv` would have silenced."""
    if node.op == "mul":
        return any(a.op == "const" for a in node.args)
    d = node.args[1] if node.op in _DIV_TEXT else None
    return (
        d is not None and d.op == "const" and d.payload != 0 and (node.op != "truediv" or abs(d.payload) >= 1)
    )


def _reads_once(node: Expr) -> bool:
    """Whether the Python bounds of ``node`` read each bound of each argument at most once, so a
    single-use argument can be written inline (min, max and where read some twice)."""
    return node.op not in ("min", "max", "where")


def _gate_signs(
    roots: Sequence[Expr], bounds: Mapping[int, tuple[Any, Any]], wide: AbstractSet[int]
) -> dict[int, int]:
    """The integer ``where(c, x, 0)`` nodes (a tensor alive or not) whose ``x`` keeps one sign over
    the whole domain (``bounds``: :func:`interval` over it): ``id -> 1`` (``x >= 0``) or ``-1``.

    Over any box inside the domain their bounds then take one ``np.where`` (or product) each, equal
    to the general rule's: with ``x >= 0`` it is ``[where(cl, xl, 0), where(cl | ch, xh, 0)]``.
    """
    out = {}
    for node in topological(roots):
        if node.op != "where" or node.sort != "int" or id(node) in wide:
            continue
        x, y = node.args[1], node.args[2]
        if y.op != "const" or type(y.payload) is not int or y.payload != 0 or x.sort != "int":
            continue
        lo, hi = bounds[id(x)]
        if lo >= 0 or hi <= 0:
            out[id(node)] = 1 if lo >= 0 else -1
    return out


def _interval_source(
    roots: Sequence[Expr],
    python: bool,
    wide: AbstractSet[int] = frozenset(),
    signs: Mapping[int, int] | None = None,
) -> str:
    """Source of ``_f(lo, hi)``: the bounds of ``roots``, one or two lines per stored node.

    The rules are those of :func:`_interval_rules` and :func:`_interval_text` (one-line rules inlined)
    and give the same values: a product with a constant computes the two distinct corner products of
    :func:`_imul` (it computes each twice) and a division by a nonzero constant the two distinct
    quotients of :func:`_idiv`, whose fallback for a divisor range holding 0 cannot apply. Python: a
    node with one use that reads each bound once is written inline (as :func:`compile_scalar` does).
    numpy: variables are cast like the interpreter casts them, the arguments of a ``wide`` node to
    float64, and each node's arrays are deleted after their last reader (memory traffic, not the
    operations, dominated a batch of 2048 boxes when every node's arrays lived to the end: 2-3x);
    ``signs`` (:func:`_gate_signs`) picks the one-``np.where`` bounds of a gated tensor size (the
    general rule's nested ``np.where`` with a scalar was 2-3x slower and most of a memory peak's time).
    """
    order = topological(roots)
    root_ids = {id(r) for r in roots}
    stored = set(root_ids)
    uses: dict[int, int] = {}
    for node in order:
        for a in node.args:
            uses[id(a)] = uses.get(id(a), 0) + 1
            if not (python and _reads_once(node)):
                stored.add(id(a))
    last_use = {id(a): i for i, node in enumerate(order) for a in node.args}
    names: dict[int, tuple[str, str]] = {}
    depth: dict[int, int] = {}
    lines = ["def _f(lo, hi):"]
    for i, node in enumerate(order):
        op = node.op
        if op == "const":
            v = float(node.payload) if id(node) in wide else node.payload
            names[id(node)], depth[id(node)] = (repr(v),) * 2, 0
            continue
        lo, hi = f"l{i}", f"h{i}"
        args = [names[id(a)] for a in node.args]
        if id(node) in wide:
            for k, (al, ah) in enumerate(args):
                lines.append(f"    w{i}_{k}l, w{i}_{k}h = _w({al}), _w({ah})")
            args = [(f"w{i}_{k}l", f"w{i}_{k}h") for k in range(len(args))]
        text: tuple[str, ...]  # (lo, hi) sources, or one source of the pair
        if op == "var":
            if python:
                text = (f"lo[{node.name!r}]", f"hi[{node.name!r}]")
            else:
                dt = "np.float64" if (id(node) in wide or node.sort == "real") else "np.int64"
                dt = "np.bool_" if node.sort == "bool" else dt
                text = (
                    f"np.asarray(lo[{node.name!r}], dtype={dt})",
                    f"np.asarray(hi[{node.name!r}], dtype={dt})",
                )
        elif signs and id(node) in signs:  # where(c, x, 0), x of one sign (see _gate_signs)
            (cl, ch), (xl, xh) = args[0], args[1]
            either = f"({cl} | {ch})"
            low, high = (cl, either) if signs[id(node)] > 0 else (either, cl)
            if node.args[1].op == "const":
                text = (f"np.where({low}, {xl}, 0)", f"np.where({high}, {xh}, 0)")
            else:  # an int64 array times a condition: the same values, 2x faster than np.where
                text = (f"{xl} * {low}", f"{xh} * {high}")
        elif op in _ONE_LINE:
            text = _interval_text(op, args, python)
        elif _by_constant(node):  # c * [xl, xh], [xl, xh] // c: two values (_imul, _idiv: each twice)
            if op == "mul":
                (c, _), (xl, xh) = args if node.args[0].op == "const" else args[::-1]
                lines.append(f"    {lo}, {hi} = {c} * {xl}, {c} * {xh}")
            else:
                template = _DIV_TEXT[op][0 if python else 1]
                (xl, xh), (c, _) = args
                lines.append(f"    {lo}, {hi} = {template.format(x=xl, c=c)}, {template.format(x=xh, c=c)}")
            stored.add(id(node))
            text = tuple(_interval_text(m, [(lo, lo), (hi, hi)], python)[0] for m in ("min", "max"))
        else:  # one call returning both bounds: stored
            text = (f"_rules[{op!r}]({', '.join(x for pair in args for x in pair)})",)
        d = 1 + max((depth[id(a)] for a in node.args), default=0)
        if len(text) == 2 and id(node) not in stored and uses.get(id(node)) == 1 and d < _MAX_NESTING:
            names[id(node)], depth[id(node)] = (f"({text[0]})", f"({text[1]})"), d
            continue
        lines.append(f"    {lo}, {hi} = {', '.join(text)}")
        names[id(node)], depth[id(node)] = (lo, hi), 0
        if not python:  # free what no later node reads: a batch of boxes then holds few arrays at once
            dead = {
                x
                for a in node.args
                if a.op != "const" and last_use[id(a)] == i and id(a) not in root_ids
                for x in names[id(a)]
            }
            dead |= (
                {f"w{i}_{k}{b}" for k in range(len(node.args)) for b in "lh"} if id(node) in wide else set()
            )
            if dead:
                lines.append(f"    del {', '.join(sorted(dead))}")
    lines.append(f"    return ({', '.join(f'({names[id(r)][0]}, {names[id(r)][1]})' for r in roots)},)")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------
# Z3 lowering


def to_z3(expr: Expr, z3vars: Mapping[str, Any], cache: dict[int, Any] | None = None) -> Any:
    """Lower ``expr`` to a Z3 term over ``z3vars`` (name -> z3 Int/Real/Bool); ``cache`` is per-node."""
    import z3

    memo: dict[int, Any] = {} if cache is None else cache
    for node in topological([expr]):
        if id(node) in memo:
            continue
        op = node.op
        if op == "var":
            term = z3vars[node.name]
        elif op == "const":
            v = node.payload
            if node.sort == "bool":
                term = z3.BoolVal(v)
            elif node.sort == "int":
                term = z3.IntVal(v)
            else:
                term = z3.RealVal(v)
        else:
            a = [memo[id(x)] for x in node.args]
            if node.sort == "real" and op in _ARITH or op in _COMPARE and any(z3.is_real(x) for x in a):
                a = [z3.ToReal(x) if z3.is_int(x) else x for x in a]
            term = _z3_op(z3, op, a)
        memo[id(node)] = term
    return memo[id(expr)]


def _z3_op(z3: Any, op: str, a: list[Any]) -> Any:
    if op == "add":
        return a[0] + a[1]
    if op == "sub":
        return a[0] - a[1]
    if op == "mul":
        return a[0] * a[1]
    if op == "neg":
        return -a[0]
    if op == "floordiv":
        return _z3_floordiv(z3, a[0], a[1])
    if op == "ceildiv":
        return -_z3_floordiv(z3, -a[0], a[1])
    if op == "truediv":
        if z3.is_rational_value(a[1]):
            return a[0] / a[1] if a[1].as_fraction() != 0 else z3.RealVal(0)
        return z3.If(a[1] == 0, z3.RealVal(0), a[0] / a[1])
    if op == "min":
        return z3.If(a[0] <= a[1], a[0], a[1])
    if op == "max":
        return z3.If(a[0] >= a[1], a[0], a[1])
    if op == "lt":
        return a[0] < a[1]
    if op == "le":
        return a[0] <= a[1]
    if op == "eq":
        return a[0] == a[1]
    if op == "ne":
        return a[0] != a[1]
    if op == "and":
        return z3.And(a[0], a[1])
    if op == "or":
        return z3.Or(a[0], a[1])
    if op == "not":
        return z3.Not(a[0])
    if op == "where":
        return z3.If(a[0], a[1], a[2])
    raise AssertionError(op)


def _z3_floordiv(z3: Any, a: Any, b: Any) -> Any:
    """Python floor division (``x // 0 == 0``); Z3's ``div`` floors only for positive divisors."""
    if z3.is_int_value(b):
        bv = b.as_long()
        if bv > 0:
            return a / b
        if bv == 0:
            return z3.IntVal(0)
        return (-a) / (-b)
    return z3.If(b > 0, a / b, z3.If(b < 0, (-a) / (-b), z3.IntVal(0)))
