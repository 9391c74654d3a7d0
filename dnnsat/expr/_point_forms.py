"""Point forms: cheaper code for :func:`dnnsat.expr.compile_scalar` that gives the same values, bit for bit.

Used only by the point evaluator (interval bounds are not affected): conditions on one expression become
at most two intervals of it (:func:`point_conditions`), a large integer maximum of sums (a memory peak)
is one numpy sweep over the changes between its moments (:class:`Peak`), and locals read only under a
taken branch are computed under that branch's condition (:mod:`dnnsat.expr._branches`). Given the
box the values lie in, conditions constant there fold, integer terms and divisions by constants take
exact cheaper forms (:func:`point_conditions`), and each choice of a structural parameter gets its own
variant (:func:`split_names`, :func:`dnnsat.expr._scalar.split`).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ._intervals import interval
from ._nodes import _COMPARE, _LOGIC, Const, Expr, _py_truediv, _rebuild, topological, variables
from ._scalar_code import _nary_leaves, scalar_function

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


#: real arithmetic on constants, as the generated code computes it (``min``/``max`` as its ternaries)
_REAL_FOLD: dict[str, Callable[..., Any]] = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "neg": lambda a: -a,
    "truediv": _py_truediv,
    "min": lambda a, b: a if a <= b else b,
    "max": lambda a, b: a if a >= b else b,
}


def box_bounds(
    order: Sequence[Expr], box: Mapping[str, tuple[Any, Any]] | None
) -> dict[int, tuple[Any, Any]]:
    """Sound interval bounds over ``box``, by node id, of the nodes under the conditions and divisions
    of ``order`` (all a rewrite reads: a small part of a cost model); empty without a box or when
    ``box`` misses a variable."""
    targets = [n for n in order if n.sort == "bool" or n.op in ("truediv", "floordiv")]
    if not box or not targets or not variables(targets) <= box.keys():
        return {}
    return interval(targets, box)


def _int_form(op: str, args: Sequence[Expr], nonzero: bool, node: Expr | None = None) -> Expr:
    """``op(*args)`` of integers with fewer operations where exact: ``k*x - x -> (k-1)*x``,
    ``x + x -> 2*x``, ``k*x + k*y -> k*(x + y)``, ``k1*(k2*x) -> (k1*k2)*x`` and, when the divisor
    cannot be 0 (``nonzero``), ``x // x -> 1`` (the others fold as usual; ``node``: the original, kept
    when none applies to its own arguments)."""

    def scaled(e: Expr) -> tuple[int, Expr] | None:
        return (e.args[0].payload, e.args[1]) if e.op == "mul" and e.args[0].op == "const" else None

    if len(args) == 2:
        a, b = args
        sa, sb = scaled(a), scaled(b)
        if op == "sub" and sa and sa[1] is b:
            return _int_form("mul", [Const(sa[0] - 1), b], nonzero)
        if op == "add" and a is b:
            return _int_form("mul", [Const(2), a], nonzero)
        if op == "add" and sa and sb and sa[0] == sb[0]:
            return _int_form("mul", [Const(sa[0]), _int_form("add", [sa[1], sb[1]], nonzero)], nonzero)
        if op == "mul" and a.op == "const" and sb:
            return _int_form("mul", [Const(a.payload * sb[0]), sb[1]], nonzero)
        if op == "floordiv" and a is b and nonzero:
            return Const(1)
    if node is not None and all(x is y for x, y in zip(args, node.args)):
        return node
    return _rebuild(op, list(args))


def _division_form(num: Expr, c: float, bounds: Mapping[int, tuple[Any, Any]]) -> tuple[Expr, float] | None:
    """``num / c`` as ``x / c'`` with fewer operations, exactly: ``(1.0 * x) / c -> x / c`` (the same
    conversion of ``x``) and ``(2**m * x) / c -> x / (c / 2**m)`` for an integer ``x`` whose bounds
    keep ``2**m * x`` far from overflow (scaling by a power of two commutes with rounding)."""
    x, changed = num, False
    while x.op == "mul" and x.args[0].op == "const":
        k, y = x.args[0].payload, x.args[1]
        if k.__class__ is float and k == 1.0:
            x, changed = y, True
        elif (
            k.__class__ is int
            and k > 0
            and k & (k - 1) == 0
            and y.sort == "int"
            and id(y) in bounds
            and max(abs(bounds[id(y)][0]), abs(bounds[id(y)][1])) * k < 2**1000
            and abs(c / k) > 2**-1000
        ):
            x, c, changed = y, c / k, True
        else:
            break
    return (x, c) if changed else None


def _comparisons(expr: Expr, subject: Expr, inner: dict[int, int]) -> int:
    """The comparison nodes of ``expr`` (each once), a condition on ``subject``: the walk stops at
    ``subject``, whose own count is computed once into ``inner`` (a deep subject is not walked again
    for every condition on it)."""
    nodes = topological([expr], lambda n: () if n is subject else n.args)
    count = sum(n.op in _COMPARE for n in nodes if n is not subject)
    if any(n is subject for n in nodes):
        if id(subject) not in inner:
            inner[id(subject)] = sum(n.op in _COMPARE for n in topological([subject]))
        count += inner[id(subject)]
    return count


def point_conditions(roots: Sequence[Expr], box: Mapping[str, tuple[Any, Any]] | None = None) -> list[Expr]:
    """``roots`` with every condition that combines comparisons of one expression with constants
    rewritten as at most two intervals of it (the same truth value at every point, NaN included).

    A gate ``layers > i`` or'ed and and'ed along a timeline becomes one comparison; the chains it
    was built from are no longer evaluated. The rewritten nodes serve point evaluation only: their
    interval bounds may differ, so the solver keeps the original ones.

    With ``box`` (every variable's ``(lo, hi)``; the points evaluated must lie inside, with Python
    ints for integer variables), a condition that is constant over the box becomes that constant (a
    layer that cannot be absent, a channel count that cannot be 1), real arithmetic on constants is
    folded as the generated code computes it (a gated chain whose gates are all decided becomes a
    constant), integer terms take fewer operations (:func:`_int_form`) and so do divisions by a
    constant (:func:`_division_form`).
    """
    order = topological(roots)
    bounds = box_bounds(order, box)
    fixed = {  # conditions with one truth value over the box
        key: bool(lo)
        for key, (lo, hi) in bounds.items()
        if isinstance(lo, bool | np.bool_) and bool(lo) == bool(hi)
    }
    rewritten: dict[int, tuple[Any, Any]] = {}  # the bounds of the rewritten nodes (the same values)
    consts: dict[int, list[Any]] = {}
    for node in order:
        if (cmp := _compared(node)) is not None:
            consts.setdefault(id(cmp[0]), []).append(cmp[2])
    if not consts and not bounds:
        return list(roots)
    regions: dict[int, _Regions] = {}
    masks: dict[int, tuple[_Regions, int]] = {}  # bool node -> its subject's regions, mask
    atoms: dict[int, int] = {}  # comparisons the original condition evaluates at most
    memo: dict[int, Expr] = {}
    inner: dict[int, int] = {}  # comparisons inside each subject (counted once: subjects may be deep)
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
                if new is not None and _comparisons(new, r.x, inner) > atoms[id(node)]:
                    new = None  # not cheaper than the original
        args = [memo[id(a)] for a in node.args]
        if id(node) in fixed and node.op != "const":
            new = Const(fixed[id(node)])
        elif new is not None:
            pass
        elif len(args) == 2 and args[0] is args[1] and args[0].sort == "int" and node.op in _SAME_SIDES:
            new = Const(_SAME_SIDES[node.op])  # x - x, x == x, ... of an integer
        elif node.sort == "int" and bounds and node.op in ("add", "sub", "mul", "floordiv"):
            lo, hi = bounds.get(id(node.args[1]), (0, 0))
            new = _int_form(node.op, args, lo > 0 or hi < 0, node)  # (box points: integer values)
        elif (
            node.op == "truediv"
            and bounds
            and args[1].op == "const"
            and args[1].payload.__class__ is float
            and args[1].payload != 0
            and (form := _division_form(args[0], args[1].payload, rewritten)) is not None
        ):
            new = Expr("truediv", (form[0], Const(form[1])), None, "real")
        elif all(a is b for a, b in zip(args, node.args)):
            new = node
        elif node.op in _LOGIC or node.op == "where" or node.sort == "int":  # these fold exactly
            new = _rebuild(node.op, args)
        elif (
            node.op in _REAL_FOLD
            and all(a.op == "const" for a in args)
            and math.isfinite(v := _REAL_FOLD[node.op](*(a.payload for a in args)))
            and v != 0  # constants are interned by value: a folded -0.0 would become 0.0
        ):
            new = Const(v)
        else:  # real arithmetic is rebuilt as it is (no ``x + 0 -> x``: -0.0 + 0 is 0.0)
            new = Expr(node.op, tuple(args), node.payload, node.sort)
        memo[id(node)] = new
        if id(node) in bounds:
            rewritten.setdefault(id(new), bounds[id(node)])
    return [memo[id(r)] for r in roots]


def linear_args(x: Expr) -> list[tuple[Expr, int]]:
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
        order = topological(sums, lambda n: [a for a, _ in linear_args(n)] if n.op != "const" else ())
        uses: dict[int, int] = {}
        for node in order:
            for a, _ in linear_args(node):
                uses[id(a)] = uses.get(id(a), 0) + 1
        self.leaves: dict[int, Expr] = {}
        self.internal = 0  # additions, subtractions, negations and constant factors under the sums
        self.memo: dict[int, tuple[dict[int, int], int]] = {}
        for node in order:
            if linear_args(node):
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
            elif parts := linear_args(x):
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
        #: the last change of each run: the running total there is the run's sum of leaves
        self.ends = np.array([*starts[1:], len(ks)], dtype=np.intp) - 1
        #: the int-sort variables under the leaves: Python ints there make every leaf a Python int
        self.int_vars = sorted(
            {v.name for v in topological(self.leaves) if v.op == "var" and v.sort == "int"}
        )
        #: leaf magnitudes up to this keep every partial sum within int64
        self.limit = (2**63 - 1 - max(abs(c) for c in self.cmax.tolist())) // max(sum(map(abs, coef)), 1)
        self._exact: Callable[[Mapping[str, Any]], tuple[Any, ...]] | None = None

    def __call__(self, env: Mapping[str, Any], values: tuple[Any, ...]) -> Any:
        v = None
        for name in self.int_vars:  # a float or numpy value: fromiter would truncate or change the type
            if env[name].__class__ is not int:
                break
        else:
            with contextlib.suppress(OverflowError):  # a value outside int64: the exact path
                v = np.fromiter(values, np.int64, len(values))
        if v is None or v.max() > self.limit or v.min() < -self.limit:
            if self._exact is None:
                self._exact = scalar_function([self.node], {}, point_forms=False)
            return self._exact(env)[0]
        x = v.take(self.idx)
        x *= self.coef
        np.cumsum(x, out=x)
        d = x.take(self.ends)
        d += self.cmax
        return int(d.max())


def peaks(roots: Sequence[Expr], accept: Callable[[list[Expr]], bool] | None = None) -> dict[int, Peak]:
    """The integer maxima under ``roots`` (whole ``max`` trees) worth a :class:`Peak`, by node id
    (``accept``: a test of the moments before a :class:`Peak` is built)."""
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
        if len(moments) < _PEAK_MIN or accept is not None and not accept(moments):
            continue
        if (peak := Peak(node, moments)).worth:
            out[id(node)] = peak
    return out


_SPLIT_MAX = 4  # most variants compile_scalar compiles for the choices of labelled categoricals


def split_names(roots: Sequence[Expr], box: Mapping[str, tuple[Any, Any]]) -> list[str]:
    """The labelled categoricals (structural choices: a block type, an activation) under ``roots`` that
    ``box`` leaves open, when their choices combine into at most ``_SPLIT_MAX`` variants; else ``[]``."""
    names = sorted(
        {n.payload[0] for n in topological(roots) if n.op == "var" and n.payload[1] is not None} & box.keys()
    )
    names = [n for n in names if box[n][0] < box[n][1]]
    return names if math.prod(int(box[n][1]) - int(box[n][0]) + 1 for n in names) <= _SPLIT_MAX else []
