"""Vector forms: cheaper numpy code for :func:`dnnsat.expr.compile_vectorized` over points of a box.

Used by ``Problem.check_batch`` (columns validated against the space): the point forms of
:func:`dnnsat.expr._point_forms.point_conditions` (conditions constant over the box fold, conditions on
one expression become intervals of it, integer terms take fewer operations), then integer sums take
fewer operations (:func:`factor_sums`). Every rewrite gives the same value at every point of the box.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ._intervals import interval
from ._nodes import INT64_SAFE, Const, Expr, _rebuild, sum_, topological, variables, where
from ._point_forms import point_conditions

Bounds = Mapping[int, tuple[Any, Any]]
_TRUE = Const(True)


def vector_forms(roots: Sequence[Expr], box: Mapping[str, tuple[Any, Any]]) -> list[Expr]:
    """``roots`` rewritten for vectorized evaluation at points of ``box`` (every variable's
    ``(lo, hi)``; integer variables take integer values): the same values there, fewer array
    operations. Outside the box the values are unspecified."""
    return factor_sums(point_conditions(roots, box), box)


def factor_sums(roots: Sequence[Expr], box: Mapping[str, tuple[Any, Any]]) -> list[Expr]:
    """``roots`` with each integer sum (its ``add`` nodes read only by one another, as one) computed
    with fewer operations, exactly. Terms ``x`` and ``where(c_i, x, 0)`` (a block repeated up to a
    variable depth) become one product ``x * (k + where(c_1, 1, 0) + ...)``, the count of the gates
    that hold, shared by every sum gating on the same conditions (parameters and FLOPs of one stage);
    then common factors come out, ``a*b*k + c*k -> k*(a*b + c)``, greedily (the factor most terms
    share first, then again inside and outside), over the factors of each term's product (its
    products read only there, as one).

    Applied only where ``box`` bounds the sum of the magnitudes of the terms' products below 2**62:
    numpy's ``int64`` holds every partial sum and product.
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
    bounds: Bounds = {}
    memo: dict[int, Expr] = {}
    for node in order:
        args = [memo[id(a)] for a in node.args]
        new = node if all(a is b for a, b in zip(args, node.args)) else _rebuild(node.op, args)
        if node.op == "add" and node.sort == "int" and id(node) not in absorbed:
            bounds = bounds or interval(roots, box)
            factored = _factored(_sum_terms(node, absorbed), bounds, memo, readers)
            new = new if factored is None else factored
        memo[id(node)] = new
    return [memo[id(r)] for r in roots]


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


def _gated(term: Expr) -> tuple[Expr, Expr]:
    """``(c, x)`` of an integer ``term == where(c, x, 0)``; else ``(True, term)``."""
    if term.op == "where" and term.sort == "int" and term.args[2].op == "const" and term.args[2].payload == 0:
        return term.args[0], term.args[1]
    return _TRUE, term


def _factors(term: Expr, readers: Mapping[int, int]) -> list[Expr]:
    """The factors of an integer product ``term``, left to right, through the products read only
    there."""
    out: list[Expr] = []
    stack = [term]
    while stack:
        x = stack.pop()
        if x.op == "mul" and x.sort == "int" and (x is term or readers[id(x)] == 1):
            stack.extend(reversed(x.args))
        else:
            out.append(x)
    return out


def _factored(
    terms: list[Expr], bounds: Bounds, memo: Mapping[int, Expr], readers: Mapping[int, int]
) -> Expr | None:
    """The sum of ``terms`` (original nodes; ``memo``: their rewritten forms) as :func:`factor_sums`
    computes it; None when nothing changes or the magnitudes are too large."""
    gates: dict[int, list[Expr]] = {}  # id(x) -> the gates of x (Const(True): x itself)
    for t in terms:
        c, x = _gated(t)
        gates.setdefault(id(x), []).append(memo.get(id(c), c))
    products: list[list[Expr]] = []  # each term's factors (rewritten)
    total, grouped = 0, False
    for t in terms:
        c, x = _gated(t)
        cs = gates.pop(id(x), None)
        if cs is None:  # a later term of a group: counted in its first one
            continue
        factors = _factors(t if len(cs) == 1 else x, readers)
        magnitude = math.prod(max(abs(b) for b in bounds[id(f)]) for f in factors)
        factors = [memo[id(f)] for f in factors]
        if len(cs) > 1:
            held = sum(1 for g in cs if g.op == "const")
            factors.append(sum_([Const(held)] + [where(g, 1, 0) for g in cs if g.op != "const"]))
            magnitude *= len(cs)
            grouped = True
        products.append(factors)
        total += magnitude
    if total >= INT64_SAFE or not (grouped or _most_shared(products) is not None):
        return None
    return _take_out(products)


def _most_shared(products: list[list[Expr]]) -> Expr | None:
    """The factor the most products have (at least two; the first such), or None."""
    seen: dict[int, tuple[int, Expr]] = {}
    for factors in products:
        for f in {id(f): f for f in factors}.values():
            seen[id(f)] = (seen.get(id(f), (0, f))[0] + 1, f)
    best = max(seen.values(), key=lambda cf: cf[0], default=(0, None))
    return best[1] if best[0] > 1 else None


def _take_out(products: list[list[Expr]]) -> Expr:
    """The sum of ``products`` with the most shared factor taken out, recursively."""
    shared = _most_shared(products)
    if shared is None:
        return sum_([_product(factors) for factors in products])
    inner, rest = [], []
    for factors in products:
        if any(f is shared for f in factors):
            k = next(i for i, f in enumerate(factors) if f is shared)
            inner.append(factors[:k] + factors[k + 1 :])
        else:
            rest.append(factors)
    out = shared * _take_out(inner)
    return out + _take_out(rest) if rest else out


def _product(factors: list[Expr]) -> Expr:
    out: Expr = Const(1)
    for f in factors:
        out = out * f
    return out
