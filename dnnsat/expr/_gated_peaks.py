"""Memory peaks for the vectorized evaluator: one matrix product per value of the structural gates.

A training step's peak memory is an integer maximum over hundreds of moments, each a sum of tensor
sizes gated by the network's structure (``where(i < layers, size, 0)``): on the zoo GPT 13.6k numpy
operations per batch of points, whose per-call cost dominates small batches. Its sizes take few
distinct forms (21 there) and its gates read few variables (``layers``), so for each value of the gate
variables the moments are one integer matrix ``A`` (moments x sizes) and the peak of a batch of points
is ``max(V @ A.T + c)``, ``V`` the points' sizes: a few numpy calls per gate value present.

Exact: the moments are integer sums, so their order does not matter (:class:`~dnnsat.expr._point_forms.Peak`
gives the change-per-moment form used to build ``A``); the product runs in float64, whose sums of
integers are exact below 2**53, and a peak is factored only when every moment's magnitude bound over
the compile box stays below that. Points outside the box take the node-by-node code.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ._intervals import _interval_interpreter, interval
from ._nodes import Expr, topological, variables
from ._point_forms import Peak, linear_args, peaks

__all__ = ["GatedPeak", "gated_peaks"]

_GATE_VALUES = 4096  # most value combinations of the gate variables (one table each)
_TABLE_ENTRIES = 1 << 22  # most entries of all tables together (float64: 32 MiB)
_EXACT = 2.0**52  # moment magnitude bound below which float64 sums of integers are exact (with margin)
_ROWS = 4096  # points per matrix product (a block of rows x moments in float64)


class GatedPeak:
    """``max`` of a memory timeline's moments over columns of points: ``peak(env) -> int64 array``.

    ``tables[s]``: sizes x moments (float64) for the gate variables' value combination ``s`` (mixed
    radix over ``gate_vars``, lowest value first), ``consts[s]`` those moments' constants: the moments
    that can be the maximum there (see :func:`_candidates`).
    """

    def __init__(
        self,
        node: Expr,
        gate_vars: list[str],
        lows: np.ndarray,
        sizes: np.ndarray,
        tables: list[np.ndarray],
        consts: list[np.ndarray],
        values: Callable[[Mapping[str, Any]], tuple[Any, ...]],
        box: Mapping[str, tuple[Any, Any]],
        exact: Callable[[Expr], Callable[[Mapping[str, Any]], tuple[Any, ...]]],
    ) -> None:
        self.node = node
        self.gate_vars, self.lows, self.sizes = gate_vars, lows, sizes
        self.tables, self.consts = tables, consts
        self._values = values
        self._box = {n: box[n] for n in sorted(variables([node]))}
        self._exact_factory = exact
        self._exact: Callable[[Mapping[str, Any]], tuple[Any, ...]] | None = None

    def __call__(self, env: Mapping[str, Any]) -> np.ndarray:
        cols = {n: np.asarray(env[n], dtype=np.int64) for n in self._box}
        n = max((c.size for c in cols.values()), default=1)
        if any(((c < lo) | (c > hi)).any() for (lo, hi), c in zip(self._box.values(), cols.values())):
            if self._exact is None:  # outside the box the bounds that make float64 exact do not hold
                self._exact = self._exact_factory(self.node)
            return np.broadcast_to(self._exact(env)[0], (n,))
        out = np.empty(n, dtype=np.int64)
        if not n:
            return out
        s = np.zeros(n, dtype=np.int64)
        for name, low, size in zip(self.gate_vars, self.lows, self.sizes):
            s = s * size + (cols[name] - low)
        v = np.stack(
            [np.broadcast_to(np.asarray(x, dtype=np.float64), (n,)) for x in self._values(env)], axis=1
        )
        order = np.argsort(s, kind="stable")
        ranked = s[order]
        starts = np.flatnonzero(np.concatenate([[True], ranked[1:] != ranked[:-1]]))
        for a, b in zip(starts, [*starts[1:], n]):
            table, const = self.tables[ranked[a]], self.consts[ranked[a]]
            for c in range(a, b, _ROWS):
                rows = order[c : min(b, c + _ROWS)]
                m = np.einsum("ij,jk->ik", v[rows], table)  # numpy's own loops: no BLAS threads
                m += const
                out[rows] = m.max(axis=1)
        return out


def gated_peaks(
    roots: Sequence[Expr],
    box: Mapping[str, tuple[Any, Any]],
    wide: set[int],
    compile_values: Callable[[list[Expr]], Callable[[Mapping[str, Any]], tuple[Any, ...]]],
    compile_exact: Callable[[Expr], Callable[[Mapping[str, Any]], tuple[Any, ...]]],
) -> dict[int, GatedPeak]:
    """The memory peaks under ``roots`` that factor (see the module docstring), by node id.

    ``wide``: nodes the vectorized evaluator computes in float64 (never factored);
    ``compile_values`` compiles the sizes' evaluator, ``compile_exact`` the node-by-node one (used
    only for points outside ``box``, compiled on first need).
    """
    out: dict[int, GatedPeak] = {}
    budget: float = _TABLE_ENTRIES
    for nid, peak in peaks(
        roots, lambda moments: _combos(_gate_variables(moments), box) <= _GATE_VALUES
    ).items():
        gated = _gated(peak, box, wide)
        if gated is None:
            continue
        gates, sizes, column = gated
        names = sorted(variables([g for g in gates if g is not None]))
        lows = np.array([int(box[n][0]) for n in names], dtype=np.int64)
        counts = np.array([int(box[n][1]) - int(box[n][0]) + 1 for n in names], dtype=np.int64)
        entries = int(counts.prod()) * len(peak.ends) * len(sizes)  # accept() bounded the combinations
        if entries > budget:
            continue
        on = _gate_table(gates, names, lows, counts)
        if on is None:
            continue
        tables = _moment_tables(peak, on, column, len(sizes))
        bounds = interval(sizes, box)
        vmax = np.array([max(abs(bounds[id(x)][0]), abs(bounds[id(x)][1])) for x in sizes], dtype=np.float64)
        worst = np.abs(tables).astype(np.float64) @ vmax + np.abs(peak.cmax).astype(np.float64)
        if worst.max() >= _EXACT:
            continue
        budget -= entries
        nonneg = all(bounds[id(x)][0] >= 0 for x in sizes)
        kept = [_candidates(t, peak.cmax, nonneg) for t in tables]
        floats = [np.ascontiguousarray(t.T, dtype=np.float64) for t, _ in kept]
        consts = [c.astype(np.float64) for _, c in kept]
        values = compile_values(sizes)
        out[nid] = GatedPeak(peak.node, names, lows, counts, floats, consts, values, box, compile_exact)
    return out


def _gate_variables(moments: list[Expr]) -> frozenset[str]:
    """Variables read by the conditions of the gated sizes ``where(c, size, 0)`` the moments add up
    (checked before a :class:`Peak` is built: most gates of a CNN read its widths, and none factor)."""
    order = topological(moments, lambda x: [a for a, _ in linear_args(x)])
    return variables([x.args[0] for x in order if x.op == "where" and x.args[2].op == "const"])


def _combos(names: Iterable[str], box: Mapping[str, tuple[Any, Any]]) -> float:
    """Number of value combinations of the variables ``names`` in ``box`` (inf: a variable outside it
    or a non-integer bound)."""
    total = 1.0
    for name in names:
        lo, hi = box.get(name, (0.5, 0.5))
        if not (float(lo).is_integer() and float(hi).is_integer()):
            return math.inf
        total *= int(hi) - int(lo) + 1
    return total


def _gated(
    peak: Peak, box: Mapping[str, tuple[Any, Any]], wide: set[int]
) -> tuple[list[Expr | None], list[Expr], np.ndarray] | None:
    """Per leaf of ``peak`` its gate (``c`` of ``where(c, size, 0)``; None: always on), the distinct
    sizes and each leaf's size column; None when the peak does not factor exactly (a node outside
    integer arithmetic or the box)."""
    if id(peak.node) in wide:
        return None
    gates: list[Expr | None] = []
    index: dict[int, int] = {}
    sizes: list[Expr] = []
    column = []
    for leaf in peak.leaves:
        gate, size = None, leaf
        if leaf.op == "where" and leaf.args[2].op == "const" and leaf.args[2].payload == 0:
            gate, size = leaf.args[0], leaf.args[1]
        gates.append(gate)
        if id(size) not in index:
            index[id(size)] = len(sizes)
            sizes.append(size)
        column.append(index[id(size)])
    nodes = topological([*sizes, *(g for g in gates if g is not None)])
    if any(x.sort == "real" or id(x) in wide for x in nodes):
        return None
    if not variables(nodes) <= box.keys():
        return None
    return gates, sizes, np.array(column, dtype=np.intp)


def _gate_table(
    gates: list[Expr | None], names: list[str], lows: np.ndarray, counts: np.ndarray
) -> np.ndarray | None:
    """``(combos, leaves)`` 0/1 table of every gate at every value combination of ``names``.

    Evaluated as numpy bounds of one-point boxes (no code to compile): a bound pair that meets is
    the value (bounds are sound); None if one does not (e.g. a division by a zero there).
    """
    grid = np.meshgrid(*(low + np.arange(c) for low, c in zip(lows.tolist(), counts.tolist())), indexing="ij")
    point = {n: g.ravel() for n, g in zip(names, grid)}
    combos = math.prod(counts.tolist())
    found = [(k, g) for k, g in enumerate(gates) if g is not None]
    with np.errstate(all="ignore"):
        bounds = _interval_interpreter([g for _, g in found], python=False)(point, point)
    table = np.ones((combos, len(gates)), dtype=np.int64)
    for (k, _), pair in zip(found, bounds):
        lo, hi = (np.broadcast_to(b, (combos,)) for b in pair)
        if not np.array_equal(lo, hi):
            return None
        table[:, k] = lo
    return table


def _moment_tables(peak: Peak, on: np.ndarray, column: np.ndarray, n_sizes: int) -> np.ndarray:
    """``(combos, runs, sizes)`` integer coefficients: run ``r``'s running total at gate combination
    ``s`` is ``sum_j tables[s, r, j] * size_j`` (the sweep of :class:`Peak` with each leaf's size
    column and gate folded in)."""
    change = on[:, peak.idx] * peak.coef  # (combos, changes)
    target = column[peak.idx]
    tables = np.zeros((on.shape[0], len(peak.ends), n_sizes), dtype=np.int64)
    for j in range(n_sizes):
        mine = np.flatnonzero(target == j)
        if not len(mine):
            continue
        running = np.cumsum(change[:, mine], axis=1)
        last = np.searchsorted(mine, peak.ends, side="right") - 1  # this size's last change per run
        has = last >= 0
        tables[:, has, j] = running[:, last[has]]
    return tables


def _candidates(table: np.ndarray, consts: np.ndarray, nonneg: bool) -> tuple[np.ndarray, np.ndarray]:
    """The moments (rows of ``table``: coefficients per size; ``consts``) that can be the maximum: one
    per distinct row, with the largest constant; with sizes that are never negative (``nonneg``), also
    without the rows another row dominates (coefficients and constant at least as large), tried against
    a few likely dominators (each column's largest, the largest constant, the largest sum): about a
    third of the GPT's moments remain, for a few ms per gate value."""
    rows, inverse = np.unique(table, axis=0, return_inverse=True)
    top = np.full(len(rows), np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(top, inverse.ravel(), consts)
    if nonneg and len(rows) > 1:
        pick = np.unique(np.concatenate([rows.argmax(0), [top.argmax(), rows.sum(1).argmax()]]))
        covers = (rows[pick][:, None, :] >= rows[None, :, :]).all(-1) & (top[pick][:, None] >= top[None, :])
        covers[np.arange(len(pick)), pick] = False  # rows are distinct: another row covers strictly
        keep = ~covers.any(0)
        rows, top = rows[keep], top[keep]
    return rows, top
