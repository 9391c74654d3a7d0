"""Point forms: cheaper code for :func:`dnnsat.expr.compile_scalar` that gives the same values, bit for bit.

Used only by the point evaluator (interval bounds are not affected): conditions on one expression become
at most two intervals of it (:func:`point_conditions`), a large integer maximum of sums (a memory peak)
is one numpy sweep over the changes between its moments (:class:`Peak`), and locals read only under a
taken branch are computed under that branch's condition (:func:`guards`, :func:`schedule`,
:func:`reassigns`).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

import numpy as np

from .expr import _COMPARE, _LOGIC, Const, Expr, _nary_leaves, _rebuild, compile_scalar, topological

_PEAK_MIN = 64  # fewest operands of an integer maximum that compile_scalar evaluates as a Peak
_FLIP = {"lt": "gt", "le": "ge", "eq": "eq", "ne": "ne"}  # c OP x  ->  x FLIP[OP] c
_SAME_SIDES = {"sub": 0, "eq": True, "le": True, "lt": False, "ne": False}  # x OP x of an integer x


class _Regions:
    """Conditions on one expression ``x`` as sets of regions of the real line cut at ``x``'s constants.

    With sorted constants ``c_0 < ... < c_{m-1}``, bit ``2i + 1`` is the point ``x == c_i``, bit ``2i``
    the open interval below it, bit ``2m`` the interval above ``c_{m-1}`` and bit ``2m + 1`` NaN (where
    every comparison but ``!=`` is false). ``and``/``or``/``not`` of comparisons of ``x`` with
    constants are then ``&``/``|``/complement of bit masks, exact at every point.
    """

    def __init__(self, x: Expr, consts: Iterable[Any]) -> None:
        self.x = x
        self.cuts = sorted(set(consts))
        self.consts = [Const(c) for c in self.cuts]
        self.pos = {c: i for i, c in enumerate(self.cuts)}
        self.real = (1 << (2 * len(self.cuts) + 1)) - 1
        self.nan = self.real + 1

    def atom(self, op: str, c: Any) -> int:
        """Mask of ``x OP c`` (``op`` in lt, le, gt, ge, eq, ne)."""
        below = (1 << (2 * self.pos[c] + 1)) - 1  # x < c
        point = below + 1
        return {
            "lt": below,
            "le": below | point,
            "gt": self.real & ~(below | point),
            "ge": self.real & ~below,
            "eq": point,
            "ne": (self.real | self.nan) & ~point,
        }[op]

    def expr(self, mask: int) -> Expr | None:
        """The condition of ``mask`` in at most two intervals (``None``: more)."""
        if mask & self.nan:
            inner = self.expr((self.real | self.nan) & ~mask)
            return None if inner is None else ~inner
        starts, ends = mask & ~(mask << 1), mask & ~(mask >> 1)
        if bin(starts).count("1") > 2:
            return None
        runs: list[tuple[int, int]] = []
        while starts:
            lo, hi = (starts & -starts).bit_length() - 1, (ends & -ends).bit_length() - 1
            runs.append((lo, hi))
            starts, ends = starts & (starts - 1), ends & (ends - 1)
        if mask == self.real:  # x == x: NaN is its only false point; keep the original
            return None
        out: Expr = Const(False)
        for lo, hi in runs:
            out = out | self._run(lo, hi)
        return out

    def _run(self, lo: int, hi: int) -> Expr:
        x, cuts = self.x, self.consts  # built directly: x may be a categorical's index
        if lo == hi and lo % 2:
            return Expr("eq", (x, cuts[lo // 2]), None, "bool")
        cond: Expr = Const(True)
        if lo > 0:
            cond = (
                Expr("lt", (cuts[lo // 2 - 1], x), None, "bool")
                if lo % 2 == 0
                else Expr("le", (cuts[lo // 2], x), None, "bool")
            )
        if hi < 2 * len(cuts):
            cond = cond & Expr("lt" if hi % 2 == 0 else "le", (x, cuts[hi // 2]), None, "bool")
        return cond


def _compared(node: Expr) -> tuple[Expr, str, Any] | None:
    """``(x, op, c)`` when ``node`` compares an expression with a numeric constant (``x op c``)."""
    if node.op not in _COMPARE:
        return None
    a, b = node.args
    for x, c, op in ((a, b, node.op), (b, a, _FLIP[node.op])):
        if c.op == "const" and x.op != "const" and not isinstance(c.payload, bool) and c.payload == c.payload:
            return x, op, c.payload  # (a NaN constant has no place among the cuts)
    return None


def point_conditions(roots: Sequence[Expr]) -> list[Expr]:
    """``roots`` with every condition that combines comparisons of one expression with constants
    rewritten as at most two intervals of it (the same truth value at every point, NaN included).

    A gate ``layers > i`` or'ed and and'ed along a timeline becomes one comparison; the chains it
    was built from are no longer evaluated. The rewritten nodes serve point evaluation only: their
    interval bounds may differ, so the solver keeps the original ones.
    """
    order = topological(roots)
    consts: dict[int, list[Any]] = {}
    for node in order:
        if (cmp := _compared(node)) is not None:
            consts.setdefault(id(cmp[0]), []).append(cmp[2])
    if not consts:
        return list(roots)
    regions: dict[int, _Regions] = {}
    masks: dict[int, tuple[_Regions, int]] = {}  # bool node -> its subject's regions, mask
    atoms: dict[int, int] = {}  # comparisons the original condition evaluates at most
    memo: dict[int, Expr] = {}
    for node in order:
        new = None
        if (cmp := _compared(node)) is not None:
            x, op, c = cmp
            r = regions.get(id(x)) or regions.setdefault(id(x), _Regions(memo[id(x)], consts[id(x)]))
            masks[id(node)], atoms[id(node)] = (r, r.atom(op, c)), 1
        elif node.op in _LOGIC and all(id(a) in masks for a in node.args):
            (r, m), *rest = (masks[id(a)] for a in node.args)
            if all(s is r for s, _ in rest):
                if node.op == "not":
                    m = (r.real | r.nan) & ~m
                elif node.op == "and":
                    m &= rest[0][1]
                else:
                    m |= rest[0][1]
                masks[id(node)], atoms[id(node)] = (r, m), sum(atoms[id(a)] for a in node.args)
                new = r.expr(m)
                if new is not None and sum(n.op in _COMPARE for n in topological([new])) > atoms[id(node)]:
                    new = None  # not cheaper than the original
        args = [memo[id(a)] for a in node.args]
        if new is not None:
            pass
        elif len(args) == 2 and args[0] is args[1] and args[0].sort == "int" and node.op in _SAME_SIDES:
            new = Const(_SAME_SIDES[node.op])  # x - x, x == x, ... of an integer
        elif all(a is b for a, b in zip(args, node.args)):
            new = node
        elif node.op in _LOGIC or node.op == "where" or node.sort == "int":  # these fold exactly
            new = _rebuild(node.op, args)
        else:  # real arithmetic is rebuilt as it is (no ``x + 0 -> x``: -0.0 + 0 is 0.0)
            new = Expr(node.op, tuple(args), node.payload, node.sort)
        memo[id(node)] = new
    return [memo[id(r)] for r in roots]


def _linear_args(x: Expr) -> list[tuple[Expr, int]]:
    """``x`` as (argument, factor) pairs when it is an integer ``+``, ``-``, negation or product with a
    constant; else ``[]`` (a leaf of the sums)."""
    op = x.op
    if op == "add":
        return [(x.args[0], 1), (x.args[1], 1)]
    if op == "sub":
        return [(x.args[0], 1), (x.args[1], -1)]
    if op == "neg":
        return [(x.args[0], -1)]
    if op == "mul" and x.args[0].op == "const":
        return [(x.args[1], x.args[0].payload)]
    return []


class _Sums:
    """Integer sums as ``({id(leaf): coef}, const)``, memoised at the sums several others share (the
    moments of a timeline share their running totals): a sum copies its largest shared part."""

    def __init__(self, sums: Sequence[Expr]) -> None:
        order = topological(sums, lambda n: [a for a, _ in _linear_args(n)] if n.op != "const" else ())
        uses: dict[int, int] = {}
        for node in order:
            for a, _ in _linear_args(node):
                uses[id(a)] = uses.get(id(a), 0) + 1
        self.leaves: dict[int, Expr] = {}
        self.internal = 0  # additions, subtractions, negations and constant factors under the sums
        self.memo: dict[int, tuple[dict[int, int], int]] = {}
        for node in order:
            if _linear_args(node):
                self.internal += 1
                if uses.get(id(node), 0) > 1:
                    self.memo[id(node)] = self.expand(node)

    def expand(self, e: Expr) -> tuple[dict[int, int], int]:
        terms: dict[int, int] = {}
        shared: list[tuple[dict[int, int], int]] = []
        const = 0
        stack = [(e, 1)]
        while stack:
            x, c = stack.pop()
            if x.op == "const":
                const += c * x.payload
            elif x is not e and id(x) in self.memo:
                part, k = self.memo[id(x)]
                shared.append((part, c))
                const += c * k
            elif parts := _linear_args(x):
                stack += ((y, c * f) for y, f in parts)
            else:
                self.leaves[id(x)] = x
                terms[id(x)] = terms.get(id(x), 0) + c
        ones = [i for i, (_, c) in enumerate(shared) if c == 1]
        base = max(ones, key=lambda i: len(shared[i][0]), default=None)
        out = dict(shared.pop(base)[0]) if base is not None else {}
        for part, c in [*shared, (terms, 1)]:
            if c == 1 and out.keys().isdisjoint(part):
                out.update(part)
            else:
                for key, v in part.items():
                    out[key] = out.get(key, 0) + c * v
        return out, const


class Peak:
    """The point form of an integer ``max`` of sums of leaves (a memory timeline's moments).

    Consecutive moments differ by a few leaves, so the moments are a cumulative sum of those changes:
    one numpy sweep over the leaves' values instead of every moment's additions in Python. Integer
    sums do not depend on their order, so the value is the expression's. When the leaf values are not
    all ``int64`` or their sums could leave ``int64``, the expression itself is evaluated.
    """

    def __init__(self, node: Expr, moments: Sequence[Expr]) -> None:
        self.node = node
        sums = _Sums(moments)
        index: dict[int, int] = {}
        ks: list[int] = []
        idx: list[int] = []
        coef: list[int] = []
        consts: list[int] = []
        prev: dict[int, int] = {}
        for k, m in enumerate(moments):
            terms, const = sums.expand(m)
            consts.append(const)
            for key in {key for key, _ in terms.items() ^ prev.items()}:
                if d := terms.get(key, 0) - prev.get(key, 0):
                    ks.append(k)
                    idx.append(index.setdefault(key, len(index)))
                    coef.append(d)
            prev = terms
        self.leaves = [sums.leaves[key] for key in index]
        #: worth it: the Python additions it replaces outnumber the leaves numpy converts (measured)
        self.worth = bool(self.leaves) and sums.internal > 2 * len(self.leaves)
        if not ks or ks[0] != 0:  # the first moment starts the sweep, also without leaves
            ks, idx, coef = [0, *ks], [0, *idx], [0, *coef]
        starts = [i for i in range(len(ks)) if i == 0 or ks[i] != ks[i - 1]]
        bounds = [ks[s] for s in starts] + [len(moments)]
        #: a run of moments with the same leaves peaks at its largest constant
        self.cmax = np.array([max(consts[a:b]) for a, b in zip(bounds, bounds[1:])], dtype=np.int64)
        self.idx, self.coef = np.array(idx, dtype=np.intp), np.array(coef, dtype=np.int64)
        self.starts = np.array(starts, dtype=np.intp)
        #: leaf magnitudes up to this keep every partial sum within int64
        self.limit = (2**63 - 1 - max(abs(c) for c in self.cmax.tolist())) // max(sum(map(abs, coef)), 1)
        self._exact: Callable[[Mapping[str, Any]], tuple[Any, ...]] | None = None

    def __call__(self, env: Mapping[str, Any], values: tuple[Any, ...]) -> Any:
        try:  # ints only: a float or numpy value makes the sum another type (fromiter would truncate)
            v = np.fromiter(values, np.int64, len(values)) if type(sum(values)) is int else None
        except OverflowError:
            v = None
        if v is None or v.max() > self.limit or v.min() < -self.limit:
            if self._exact is None:
                self._exact = compile_scalar([self.node], point_forms=False)
            return self._exact(env)[0]
        x = v.take(self.idx)
        x *= self.coef
        d = np.add.reduceat(x, self.starts)
        np.cumsum(d, out=d)
        d += self.cmax
        return int(d.max())


def peaks(roots: Sequence[Expr]) -> dict[int, Peak]:
    """The integer maxima under ``roots`` (whole ``max`` trees) worth a :class:`Peak`, by node id."""
    order = topological(roots)
    uses: dict[int, int] = {id(n): 0 for n in order}
    for r in roots:
        uses[id(r)] += 2
    under_max: set[int] = set()
    for node in order:
        for x in node.args:
            uses[id(x)] += 1
            if node.op == "max":
                under_max.add(id(x))
    out: dict[int, Peak] = {}
    for node in order:
        if node.op != "max" or node.sort != "int" or uses[id(node)] == 1 and id(node) in under_max:
            continue
        moments = _nary_leaves(node, uses)
        if len(moments) >= _PEAK_MIN and (peak := Peak(node, moments)).worth:
            out[id(node)] = peak
    return out


_GUARD_DEPTH = 8  # most nested conditions a local is computed under (Python allows 20 blocks)


def guards(
    roots: Sequence[Expr],
    order: list[Expr],
    args_of: Callable[[Expr], Sequence[Expr]],
    stored: AbstractSet[int],
) -> tuple[dict[int, tuple[int, ...]], dict[int, tuple[int, ...]]]:
    """Per node, the stored conditions (ids, outermost first) that hold whenever its value is read,
    and per ``where``, those of its taken branch:
    a node read only by the taken branch of ``where(c, a, b)`` (``a``) is computed under ``if c:``,
    and under ``if g:`` for each stored conjunct ``g`` of ``c`` (so nodes read under ``g & h1`` and
    ``g & h2`` are computed under ``if g:``)."""
    position = {id(n): i for i, n in enumerate(order)}
    conjuncts: dict[int, tuple[int, ...]] = {}

    def conditions(c: Expr) -> tuple[int, ...]:
        """The stored nodes of the ``and`` tree of ``c`` (``c`` included), earliest first."""
        if id(c) not in conjuncts:
            found, stack = [], [c]
            while stack:
                x = stack.pop()
                if id(x) in stored:
                    found.append(id(x))
                if x.op == "and":
                    stack += x.args
            conjuncts[id(c)] = tuple(sorted(set(found), key=position.__getitem__))
        return conjuncts[id(c)]

    seen: dict[int, list[tuple[int, ...]]] = {id(r): [()] for r in roots}
    guards: dict[int, tuple[int, ...]] = {}
    branch: dict[int, tuple[int, ...]] = {}
    for node in reversed(order):
        reads = seen.pop(id(node), [()])
        guard = reads[0]
        for g in reads[1:]:
            k = 0
            while k < min(len(g), len(guard)) and g[k] == guard[k]:
                k += 1
            guard = guard[:k]
        guards[id(node)] = guard
        args = args_of(node)
        for k, x in enumerate(args):
            g = guard
            if node.op == "where" and k == 1:
                g = branch[id(node)] = (*guard, *(c for c in conditions(args[0]) if c not in guard))[
                    :_GUARD_DEPTH
                ]
            seen.setdefault(id(x), []).append(g)
    return guards, branch


def schedule(
    order: list[Expr],
    needs: Callable[[Expr], Sequence[Expr]],
    guards: Mapping[int, tuple[int, ...]],
    stored: AbstractSet[int],
) -> list[Expr]:
    """``order`` re-sorted so that each local is computed after what it ``needs`` and locals under the
    same conditions follow each other (one ``if`` block): the earliest ready local next, but the open
    block's locals first."""
    position = {id(n): i for i, n in enumerate(order)}
    waiting: dict[int, int] = {}
    users: dict[int, list[Expr]] = {}
    for node in order:
        deps = {id(x): x for x in needs(node)}
        waiting[id(node)] = len(deps)
        for key in deps:
            users.setdefault(key, []).append(node)
    free = [n for n in order if not waiting[id(n)]]  # inlined nodes and constants: no statement
    ready: list[tuple[int, Expr]] = []  # stored nodes, earliest first
    by_guard: dict[tuple[int, ...], list[tuple[int, Expr]]] = {}
    out: list[Expr] = []
    current: tuple[int, ...] = ()

    def release(node: Expr) -> None:
        if id(node) in stored:
            item = (position[id(node)], node)
            heapq.heappush(ready, item)
            heapq.heappush(by_guard.setdefault(guards[id(node)], []), item)
        else:
            free.append(node)

    pending, free = free, []
    for node in pending:
        release(node)
    done: set[int] = set()
    while True:
        if free:
            node = free.pop()
        else:
            while ready and id(ready[0][1]) in done:
                heapq.heappop(ready)
            if not ready:
                break
            block = by_guard.get(current)
            while block and id(block[0][1]) in done:
                heapq.heappop(block)
            node = heapq.heappop(block)[1] if block else heapq.heappop(ready)[1]
            current = guards[id(node)]
        done.add(id(node))
        out.append(node)
        for user in users.get(id(node), ()):
            waiting[id(user)] -= 1
            if not waiting[id(user)]:
                release(user)
    return out


def reassigns(node: Expr, stored: AbstractSet[int], last: Mapping[int, int], at: Mapping[int, int]) -> bool:
    """Whether ``where(c, a, b)`` can assign ``a`` to ``b``'s local under ``if c:``: both stored, and
    nothing reads ``b`` after it."""
    c, _, b = node.args
    return (
        id(node) in stored
        and id(c) in stored
        and id(b) in stored
        and last[id(b)] == at[id(node)]
        and b.op != "var"
    )
