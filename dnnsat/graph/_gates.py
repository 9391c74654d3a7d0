"""Gate algebra of a network: conjuncts of a gate, implication between gates, merged branch shapes."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..expr import Expr, any_, where
from ._catalog import lin


def _conjuncts(e: Expr) -> frozenset[int]:
    if e.op == "and":
        return _conjuncts(e.args[0]) | _conjuncts(e.args[1])
    if e.is_const and e.value:
        return frozenset()
    return frozenset([id(e)])


def _split_gate(g: Expr) -> tuple[frozenset[int], dict[int, Any]]:
    """Conjuncts of a gate: (other conjuncts, {id(n): i} for depth conjuncts ``i < n``)."""
    rest: set[int] = set()
    depth: dict[int, Any] = {}
    stack = [g]
    while stack:
        e = stack.pop()
        if e.op == "and":
            stack.extend(e.args)
        elif e.op == "lt" and e.args[0].is_const and e.args[0].sort == "int":
            key = id(e.args[1])
            depth[key] = max(depth.get(key, e.args[0].value), e.args[0].value)
        elif not (e.is_const and e.value):
            rest.add(id(e))
    return frozenset(rest), depth


def _implies(a: tuple[frozenset[int], dict[int, Any]], b: tuple[frozenset[int], dict[int, Any]]) -> bool:
    """Gate ``a`` implies gate ``b`` (b's conjuncts are among a's; ``i < n`` implies ``j < n`` for j <= i)."""
    return b[0] <= a[0] and all(k in a[1] and a[1][k] >= v for k, v in b[1].items())


def _absorb(gates: list[Expr]) -> list[Expr]:
    """Drop gates implied by another one (``a | (a & b) == a``; ``0 < n | 3 < n == 0 < n``)."""
    parts = [_split_gate(g) for g in gates]
    keep = []
    for i, g in enumerate(gates):
        implied = any(
            j != i and _implies(parts[i], parts[j]) and not (_implies(parts[j], parts[i]) and j > i)
            for j in range(len(gates))
        )
        if not implied:
            keep.append(g)
    return keep


def _merge_dim(cond: Expr, d: Expr, s: Expr) -> Expr:
    """``where(cond, d, s)``, folded when equal, or when ``cond`` is ``d == s`` itself (then it is ``s``)."""
    d, s = lin(d), lin(s)
    if d is s:
        return d
    if cond.op == "eq" and {id(lin(a)) for a in cond.args} == {id(d), id(s)}:
        return s
    return where(cond, d, s)


def any_true(conds: Iterable[Expr]) -> Expr:
    return any_(conds)


def _contradicts(gate: tuple[frozenset[int], dict[int, Any]], cond: Expr) -> bool:
    """Whether ``cond`` has a conjunct ``not (i < n)`` while the (split) gate implies ``j < n``, j >= i."""
    stack = [cond]
    while stack:
        e = stack.pop()
        if e.op == "and":
            stack.extend(e.args)
        elif e.op == "not" and e.args[0].op == "lt" and e.args[0].args[0].is_const:
            i, n = e.args[0].args[0].value, e.args[0].args[1]
            if gate[1].get(id(n), i - 1) >= i:
                return True
    return False
