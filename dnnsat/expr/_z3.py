"""Lowering of expressions to Z3 terms."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._nodes import _ARITH, _COMPARE, Expr, topological

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
