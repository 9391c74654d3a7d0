"""Vector forms: cheaper numpy code for :func:`dnnsat.expr.compile_vectorized` over points of a box.

Used by ``Problem.check_batch`` (columns validated against the space): the point forms of
:func:`dnnsat.expr._point_forms.point_conditions` (conditions constant over the box fold, conditions on
one expression become intervals of it, integer terms take fewer operations), then gated sums are
factored (:func:`factor_gated_sums`). Every rewrite gives the same value at every point of the box.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ._intervals import interval
from ._nodes import INT64_SAFE, Const, Expr, _rebuild, sum_, topological, variables, where
from ._point_forms import point_conditions


def vector_forms(roots: Sequence[Expr], box: Mapping[str, tuple[Any, Any]]) -> list[Expr]:
    """``roots`` rewritten for vectorized evaluation at points of ``box`` (every variable's
    ``(lo, hi)``; integer variables take integer values): the same values there, fewer array
    operations. Outside the box the values are unspecified."""
    return factor_gated_sums(point_conditions(roots, box), box)


def _sum_terms(node: Expr, absorbed: set[int]) -> list[Expr]:
    """The terms of the integer sum rooted at ``node``, left to right, through the ``add`` nodes in
    ``absorbed`` (sums read only by the sum above them)."""
    terms: list[Expr] = []
    stack = [node]
    while stack:
        x = stack.pop()
        if x is node or id(x) in absorbed:
            stack.extend(reversed(x.args))
        else:
            terms.append(x)
    return terms


def factor_gated_sums(roots: Sequence[Expr], box: Mapping[str, tuple[Any, Any]]) -> list[Expr]:
    """``roots`` with every integer sum whose terms include ``x`` under several gates -- terms ``x``
    and ``where(c_i, x, 0)``, a block repeated up to a variable depth -- computed as one product
    ``x * (1 + where(c_1, 1, 0) + ...)``: the count of the gates that hold is shared by every sum
    gating on the same conditions (parameters and FLOPs of one stage), and each sum multiplies once.

    Exact: integer arithmetic, applied only where ``box`` bounds ``x`` times the number of its terms
    below 2**62 (numpy's ``int64`` holds every intermediate value).
    """
    order = topological(roots)
    if not variables(roots) <= box.keys():
        return list(roots)
    readers: dict[int, int] = {id(r): 1 for r in roots}
    for node in order:
        for a in node.args:
            readers[id(a)] = readers.get(id(a), 0) + 1
    absorbed = {  # sums read once, by a sum: terms of that sum
        id(a)
        for node in order
        if node.op == "add" and node.sort == "int"
        for a in node.args
        if a.op == "add" and a.sort == "int" and readers[id(a)] == 1
    }
    bounds: dict[int, tuple[Any, Any]] | None = None
    memo: dict[int, Expr] = {}
    for node in order:
        args = [memo[id(a)] for a in node.args]
        new = node if all(a is b for a, b in zip(args, node.args)) else _rebuild(node.op, args)
        if node.op == "add" and node.sort == "int" and id(node) not in absorbed:
            terms = _sum_terms(node, absorbed)
            if any(_gated(t)[0].op != "const" for t in terms):
                bounds = interval(roots, box) if bounds is None else bounds
                factored = _factored(terms, bounds, memo)
                new = new if factored is None else factored
        memo[id(node)] = new
    return [memo[id(r)] for r in roots]


def _gated(term: Expr) -> tuple[Expr, Expr]:
    """``(c, x)`` of an integer ``term == where(c, x, 0)``; else ``(True, term)``."""
    if term.op == "where" and term.sort == "int" and term.args[2].op == "const" and term.args[2].payload == 0:
        return term.args[0], term.args[1]
    return Const(True), term


def _factored(
    terms: list[Expr], bounds: Mapping[int, tuple[Any, Any]], memo: Mapping[int, Expr]
) -> Expr | None:
    """The sum of ``terms`` (original nodes; ``memo``: their rewritten forms) with the terms of each
    gated ``x`` (``x`` and ``where(c, x, 0)``, two or more) as one product; None when no group has
    two terms."""
    gates: dict[int, list[Expr]] = {}  # id(x) -> the gates of x (Const(True): x itself)
    for t in terms:
        c, x = _gated(t)
        gates.setdefault(id(x), []).append(memo.get(id(c), c))
    factor = {
        key
        for key, cs in gates.items()
        if len(cs) > 1 and max(abs(b) for b in bounds[key]) * len(cs) < INT64_SAFE
    }
    if not factor:
        return None
    out: list[Expr] = []
    for t in terms:
        c, x = _gated(t)
        if id(x) not in factor:
            out.append(memo[id(t)])
        elif id(x) in gates:
            cs = gates.pop(id(x))
            held = sum(1 for g in cs if g.op == "const")
            count = sum_([Const(held)] + [where(g, 1, 0) for g in cs if g.op != "const"])
            out.append(memo[id(x)] * count)
    return sum_(out)
