"""Feasibility engine: vectorized interval branch-and-bound over boxes, exact enumeration, Z3 fallback.

Each step takes a batch of boxes, bounds every constraint over every box at once (numpy), drops boxes
that surely violate a constraint, accepts boxes that surely satisfy all, tries cheap witness points
(corners, centre) in the rest, enumerates small boxes exactly and halves the others. A box whose search
dimensions are all fixed but which still has continuous (Float) variables goes to Z3; a Z3 ``unknown``
never removes anything (callers treat it as possibly feasible).
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..expr import (
    INT64_SAFE,
    Expr,
    compile_interval,
    compile_interval_scalar,
    compile_scalar,
    compile_vectorized,
    interval,
    topological,
)
from ._boxes import Domain, share

__all__ = ["Engine", "Decomposition", "OpaqueLimitError"]

logger = logging.getLogger("dnnsat.solver")

ENUM_LIMIT = 4096  # a mixed box with at most this many points is enumerated exactly ...
ENUM_WORK = 1 << 20  # ... or fewer, so that points x expression nodes stays under this (big constraints
# such as a memory peak prune better by splitting further than by evaluating thousands of points)
BATCH = 2048  # boxes per vectorized step
POINTS_PER_STEP = 1 << 18
FEW = 32  # up to this many boxes / points are evaluated one by one in generated Python code, not numpy
POINT_NODES = 1 << 24  # points x live node arrays of one vectorized evaluation (about 128 MiB of float64)
WITNESSES = 6  # points tried per box before it is split (see Engine._witness_candidates)
PINNED_BOXES = 200  # boxes per root of each finite search with the continuous variables pinned (before Z3)
OPAQUE_LIMIT = 1_000_000  # Python predicates are evaluated at most this many times per operation


@dataclass
class Decomposition:
    """A partition of (part of) the feasible set: surely-feasible boxes plus feasible points.

    ``rest_lo``/``rest_hi`` hold undecided boxes when the decomposition was stopped early; ``timed_out``
    says it was stopped by its deadline (not by ``max_boxes``).
    """

    full_lo: np.ndarray
    full_hi: np.ndarray
    points: np.ndarray
    rest_lo: np.ndarray
    rest_hi: np.ndarray
    timed_out: bool = False


Predicate = Callable[[np.ndarray], np.ndarray]  # points (n, dims) -> feasible (n,), for opaque checks
#: when an operation must stop: a ``time.perf_counter()`` value, or a function that says it has passed
Deadline = float | Callable[[], bool]


def _expired(deadline: Deadline | None) -> bool:
    if deadline is None:
        return False
    return deadline() if callable(deadline) else time.perf_counter() > deadline


class OpaqueLimitError(ValueError):
    """An operation would evaluate Python predicates on more configurations than ``OPAQUE_LIMIT``."""


class Engine:
    """Decides constraints over a :class:`Domain`.

    ``constraints`` are boolean expressions; ``opaque`` a function testing points that the symbolic
    part cannot see (Python predicates), or None; ``opaque_label`` names it in errors. ``mask``
    arguments select a subset of constraints. An engine is safe to share between threads: its Z3
    backend (Z3 itself is not thread-safe) is used under a lock.
    """

    def __init__(
        self,
        domain: Domain,
        constraints: Sequence[Expr],
        opaque: Predicate | None = None,
        z3_timeout_ms: int = 2000,
        opaque_label: str = "a Python predicate",
    ) -> None:
        self.domain = domain
        self.z3_timeout_ms = z3_timeout_ms
        self.constraints = list(constraints)
        self.opaque = opaque
        self.opaque_label = opaque_label
        self._opaque_used = 0
        self._root_domain = domain  # restricted views keep it: the Z3 backend holds the full bounds
        box = self._box = domain.value_box()
        # Constraints that hold on the whole domain (e.g. a memory budget no configuration reaches) are
        # never evaluated again: bounds and points only look at the others.
        whole = interval(self.constraints, box)
        self._open = [i for i, c in enumerate(self.constraints) if not whole[id(c)][0]]
        open_exprs = [self.constraints[i] for i in self._open]
        order = topological(open_exprs)
        # integer arithmetic that stays in int64 over the whole domain: bounds then hold every point
        # value exactly, which Engine._witness_pairs relies on
        self._exact = all(
            n.sort in ("int", "bool") and max(map(abs, whole[id(n)])) <= INT64_SAFE for n in order
        )
        self.enum_limit = min(ENUM_LIMIT, max(16, ENUM_WORK // max(1, len(order))))
        # a numpy evaluation holds at most ``_live_arrays`` node arrays at once: bound points x those
        self.points_per_call = max(FEW + 1, min(POINTS_PER_STEP, POINT_NODES // _live_arrays(order)))
        self._open_exprs = open_exprs
        # shared with the restricted views of this engine: one Z3 backend, built once under the lock,
        # and the evaluators of the open constraints, each compiled on first use (see _evaluator)
        self._shared: dict[str, Any] = {"z3": None, "lock": threading.Lock(), "compile": threading.Lock()}
        self.stats = {"boxes": 0, "points": 0, "z3_calls": 0}

    def restricted(self, bounds: dict[str, tuple[float, float]]) -> Engine:
        """A view of this engine with continuous variables restricted (``(v, v)`` pins one to ``v``).

        Compiled evaluators and the Z3 backend are shared; with every continuous variable pinned the
        view decides by bounds and exact point evaluation alone, like a finite problem.
        """
        if not bounds:
            return self
        view = copy.copy(self)
        view.domain = self.domain.with_continuous(bounds)
        view._opaque_used = 0
        return view

    # -- primitives -------------------------------------------------------------------------------
    def bounds(
        self, lo: np.ndarray, hi: np.ndarray, mask: np.ndarray | None, split: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(surely all satisfied, possibly all satisfied) per box.

        ``split`` (numpy path only): boxes known to hold a point where the last stage's constraints
        (see :func:`_stages`) all hold and one where they do not; when ``mask`` keeps all of them,
        their sound bounds are (not surely, possibly) there and are not computed (see
        :meth:`_witness_pairs`).
        """
        m = lo.shape[0]
        surely = np.ones(m, dtype=bool)
        possibly = np.ones(m, dtype=bool)
        if not self._open_exprs:
            return surely, possibly
        if m <= FEW:
            vlo, vhi = self.domain.value_columns(lo, hi)
            res = _by_row(self._evaluator("interval_scalar"), m, vlo, vhi)
            stages = [(range(len(self._open)), res, slice(None))]
        else:
            stages = []
            last = len(self._evaluator("interval")) - 1
            for s, (part, evaluate) in enumerate(self._evaluator("interval")):
                rows: Any = slice(None)
                if split is not None and s == last and all(mask is None or mask[self._open[k]] for k in part):
                    rows = np.flatnonzero(~split)  # the points decide this stage's constraints together
                    surely &= ~split
                    if not len(rows):
                        continue
                stages.append((part, evaluate(*self.domain.value_columns(lo[rows], hi[rows])), rows))
        for part, res, rows in stages:
            for k, (dt, pt) in zip(part, res):
                if mask is None or mask[self._open[k]]:
                    surely[rows] &= dt
                    possibly[rows] &= pt
        return surely, possibly

    def feasible_points(self, idx: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        """Exact feasibility of points (index arrays, canonical), including opaque predicates."""
        n = idx.shape[0]
        if n > self.points_per_call:
            step = self.points_per_call
            return np.concatenate([self.feasible_points(idx[i : i + step], mask) for i in range(0, n, step)])
        self.stats["points"] += n
        ok = np.ones(n, dtype=bool)
        if self._open_exprs and n:
            if self.domain.unpinned:
                raise AssertionError("points with unpinned continuous variables need Z3")
            if n > FEW:
                ok = self._staged_points(idx, mask)
            else:
                cols, _ = self.domain.value_columns(idx)
                for i, v in zip(self._open, _by_row(self._evaluator("scalar"), n, cols)):
                    if mask is None or mask[i]:
                        ok &= np.broadcast_to(v, (n,))
        if self.opaque is not None and n and ok.any():
            sel = np.flatnonzero(ok)
            self._opaque_used += len(sel)
            if self._opaque_used > OPAQUE_LIMIT:
                raise OpaqueLimitError(
                    f"{self.opaque_label} would be evaluated on more than {OPAQUE_LIMIT:,} configurations: "
                    "dnnsat evaluates Python predicates one configuration at a time. Declare the "
                    "parameters it reads with require(f, uses=[...]), or write it as an expression over "
                    "space.vars"
                )
            ok[sel] = self.opaque(idx[sel])
        return ok

    def _staged_points(self, idx: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
        """Exact feasibility of points in numpy, stage by stage (see :func:`_stages`): a later stage
        evaluates only the points every earlier one kept (on a memory budget, the small divisibility
        constraints reject 42 % of the enumerated points before the 13.6k-node peak sees them)."""
        n = idx.shape[0]
        ok = np.ones(n, dtype=bool)
        for part, evaluate in self._evaluator("vectorized"):
            keep = np.flatnonzero(ok)
            if not len(keep):
                break
            cols, _ = self.domain.value_columns(idx if len(keep) == n else idx[keep])
            sub = np.ones(len(keep), dtype=bool)
            for k, v in zip(part, evaluate(cols)):
                if mask is None or mask[self._open[k]]:
                    sub &= np.broadcast_to(v, (len(keep),))
            ok[keep] = sub
        return ok

    def _evaluator(self, kind: str) -> Any:
        """The open constraints' evaluator of ``kind`` (see ``_COMPILERS``), compiled on first use:
        generated code of thousands of nodes takes a noticeable time to compile, and an engine often
        needs only some of its evaluators (e.g. only one box or point at a time)."""
        shared = self._shared
        fn = shared.get(kind)
        if fn is None:
            with shared["compile"]:
                fn = shared.get(kind)
                if fn is None:
                    fn = shared[kind] = _COMPILERS[kind](self._open_exprs, self._box)
        return fn

    def warm(self) -> None:
        """Compile every evaluator now (e.g. before timing the engine)."""
        if self._open_exprs:
            for kind in _COMPILERS:
                self._evaluator(kind)

    def feasible_configurations(self, idx: np.ndarray) -> np.ndarray:
        """Feasible points that are configurations (inactive conditional dims at index 0)."""
        return self.feasible_points(idx) & np.all(self.domain.canonical(idx) == idx, axis=1)

    def _witness_candidates(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """``WITNESSES`` points per box, stacked box-major per kind: the low and high corners, the
        middle, and seeded random points (they find a witness in a box where each corner misses a
        different constraint, long before splitting would)."""
        rng = np.random.default_rng(len(lo))
        random = [
            lo + np.floor(rng.random(lo.shape) * (hi - lo + 1)).astype(lo.dtype) for _ in range(WITNESSES - 3)
        ]
        return self.domain.canonical(np.concatenate([lo, hi, (lo + hi) // 2, *random]))

    # -- existence ----------------------------------------------------------------------------------
    def exists(
        self,
        lo: np.ndarray,
        hi: np.ndarray,
        mask: np.ndarray | None = None,
        max_boxes: int = 200_000,
        deadline: float | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """For each root box: 1 feasible, 0 infeasible, -1 unknown; and a witness point per root.

        Roots still open after ``max_boxes`` boxes, or at ``deadline`` (a ``time.perf_counter()``
        value), are unknown.

        A witness found for one root is reused for every other root that contains it. Two split orders
        share ``max_boxes``: widest dimension first (a fortieth of the boxes), then, for the roots still
        open, fewest values first (:meth:`Domain.narrowest_open`). Neither order is good everywhere: on
        ResNet memory budgets each leaves boxes undecided after 200,000 splits that the other decides
        in a few hundred.
        """
        first = max(1, max_boxes // 40)
        status, witness = self._exists(lo, hi, mask, first, self.domain.widest, deadline)
        open_ = np.flatnonzero(status == -1)
        if len(open_) and (deadline is None or time.perf_counter() < deadline):
            status[open_], witness[open_] = self._exists(
                lo[open_], hi[open_], mask, max_boxes - first, self.domain.narrowest_open, deadline
            )
        return status, witness

    def _exists(
        self,
        lo: np.ndarray,
        hi: np.ndarray,
        mask: np.ndarray | None,
        max_boxes: int,
        refute: Callable[[np.ndarray, np.ndarray], np.ndarray],
        deadline: float | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """One pass of :meth:`exists` splitting the dimension ``refute`` picks."""
        roots = lo.shape[0]
        status = np.zeros(roots, dtype=np.int8)
        settled = np.zeros(roots, dtype=bool)
        witness = np.full((roots, self.domain.ndim), -1, dtype=np.int64)
        stack: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = [(lo, hi, np.arange(roots))]
        root_lo, root_hi = lo, hi
        processed = 0
        needs_z3 = bool(self.domain.unpinned)
        self._opaque_used = 0

        def settle(points: np.ndarray, owners: np.ndarray) -> None:
            """Feasible ``points`` found in boxes of roots ``owners``: settle those roots, and try the
            first few points on every other open root that contains them."""
            if not len(points):
                return
            first = np.unique(owners, return_index=True)[1]
            for r, i in zip(owners[first], first):
                if not settled[r]:
                    status[r], witness[r], settled[r] = 1, points[i], True
            open_roots = np.flatnonzero(~settled)
            for p in points[first[:16]]:
                if not len(open_roots):
                    return
                inside = np.all((root_lo[open_roots] <= p) & (p <= root_hi[open_roots]), axis=1)
                hit = open_roots[inside]
                status[hit], witness[hit], settled[hit] = 1, p, True
                open_roots = open_roots[~inside]

        while stack:
            blo, bhi, rid = stack.pop()
            keep = ~settled[rid]
            if not keep.all():
                blo, bhi, rid = blo[keep], bhi[keep], rid[keep]
            if not len(rid):
                continue
            processed += len(rid)
            self.stats["boxes"] += len(rid)
            if processed > max_boxes or (deadline is not None and time.perf_counter() > deadline):
                status[np.unique(rid)] = -1
                settled[rid] = True
                for _, _, rest_rid in stack:
                    open_ = rest_rid[~settled[rest_rid]]
                    status[open_] = -1
                    settled[open_] = True
                break
            nb = self.domain.normalize(blo, bhi)
            blo, bhi = nb.lo, nb.hi
            surely, possibly = self.bounds(blo, bhi, mask)
            alive = possibly
            if needs_z3 and self.opaque is None:
                self._pinned_witnesses(blo[alive], bhi[alive], rid[alive], mask, settle)
                alive &= ~settled[rid]
                self._z3_leaves(blo, bhi, rid, alive, mask, status, witness, settled, self.z3_timeout_ms)
                continue
            if needs_z3 and self.opaque is not None:
                # Python predicates too: they test each finite point, Z3 decides its continuous part
                blo, bhi, rid, split_dim = _take(alive & ~settled[rid], blo, bhi, rid, nb.split_dim)
                small = self.domain.volume(blo, bhi) <= self.enum_limit
                if small.any():
                    pts, box = self.domain.points(blo[small], bhi[small])
                    pts, prid = self.domain.canonical(pts), rid[small][box]
                    ok = self.opaque(pts) if len(pts) else np.zeros(0, dtype=bool)
                    pts, prid = pts[ok], prid[ok]
                    possible = self.bounds(pts, pts, mask)[1]
                    timeout = self.z3_timeout_ms
                    self._z3_leaves(pts, pts, prid, possible, mask, status, witness, settled, timeout)
                if (~small).any():
                    self._push_split(stack, blo[~small], bhi[~small], rid[~small], split_dim[~small], refute)
                continue
            full = surely & ~nb.undecided & alive
            if self.opaque is None and full.any():
                roots, first = np.unique(rid[full], return_index=True)
                new = ~settled[roots]
                roots = roots[new]  # one canonical call for all of them (a long condition chain is slow)
                status[roots] = 1
                witness[roots] = self.domain.canonical(blo[np.flatnonzero(full)[first[new]]])
                settled[roots] = True
            blo, bhi, rid, split_dim = _take(alive & ~settled[rid], blo, bhi, rid, nb.split_dim)
            if not len(rid):
                continue
            cand = self._witness_candidates(blo, bhi)
            ok = self.feasible_points(cand, mask)
            settle(cand[ok], np.tile(rid, WITNESSES)[ok])
            blo, bhi, rid, split_dim = _take(~settled[rid], blo, bhi, rid, split_dim)
            if not len(rid):
                continue
            vol = self.domain.volume(blo, bhi)
            small = vol <= self.enum_limit
            if small.any():
                self._enumerate_exists(blo[small], bhi[small], rid[small], mask, settle)
            big = ~small
            if big.any():
                self._push_split(stack, blo[big], bhi[big], rid[big], split_dim[big], refute)
        open_ = ~settled
        status[open_] = 0
        return status, witness

    def _enumerate_exists(
        self, lo: np.ndarray, hi: np.ndarray, rid: np.ndarray, mask: np.ndarray | None, settle: Any
    ) -> None:
        vol = self.domain.volume(lo, hi)
        start = 0
        while start < len(vol):
            stop = start + 1
            total = int(vol[start])
            while stop < len(vol) and total + int(vol[stop]) <= POINTS_PER_STEP:
                total += int(vol[stop])
                stop += 1
            pts, box = self.domain.points(lo[start:stop], hi[start:stop])
            pts = self.domain.canonical(pts)
            ok = self.feasible_points(pts, mask)
            if ok.any():
                settle(pts[ok], rid[start:stop][box[ok]])
            start = stop

    def _push_split(
        self,
        stack: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
        lo: np.ndarray,
        hi: np.ndarray,
        rid: np.ndarray,
        split_dim: np.ndarray,
        choose: Callable[[np.ndarray, np.ndarray], np.ndarray],
    ) -> None:
        dim = np.where(split_dim >= 0, split_dim, choose(lo, hi))
        clo, chi = self.domain.split(lo, hi, dim)
        crid = np.repeat(rid, 2, axis=0)
        for s in range((len(crid) - 1) // BATCH * BATCH, -1, -BATCH):
            stack.append((clo[s : s + BATCH], chi[s : s + BATCH], crid[s : s + BATCH]))

    def _pinned_witnesses(
        self, lo: np.ndarray, hi: np.ndarray, rid: np.ndarray, mask: np.ndarray | None, settle: Any
    ) -> None:
        """Cheap witnesses before Z3: the continuous variables pinned to their lows, highs or middles
        (one choice for all of them), each box searched as a finite problem (``PINNED_BOXES`` boxes per box).

        A point feasible under such a pin is a feasible configuration of the unpinned problem; boxes it
        settles never reach Z3 (a constraint on one Float, e.g. ``lr <= 0.1``, made Z3 decide every box
        of every other parameter before).
        """
        cont = self.domain.continuous
        for pick in (0, 1, 2):
            if not len(rid):
                return
            pins = {n: (v, v) for n, (a, b) in cont.items() if a != b for v in [(a, b, (a + b) / 2)[pick]]}
            status, found = self.restricted(pins).exists(lo, hi, mask, max_boxes=PINNED_BOXES * len(rid))
            ok = status == 1
            settle(found[ok], rid[ok])
            lo, hi, rid = lo[~ok], hi[~ok], rid[~ok]

    def _z3_leaves(
        self,
        lo: np.ndarray,
        hi: np.ndarray,
        rid: np.ndarray,
        alive: np.ndarray,
        mask: np.ndarray | None,
        status: np.ndarray,
        witness: np.ndarray,
        settled: np.ndarray,
        timeout_ms: int,
    ) -> None:
        """Continuous variables present: decide each surviving box with Z3 (unknown -> -1)."""
        z = self.z3()
        for i in np.flatnonzero(alive):
            r = rid[i]
            if settled[r]:
                continue
            self.stats["z3_calls"] += 1
            res, point = z.exists(lo[i], hi[i], mask, timeout_ms, self.domain.continuous)
            if res is True and self.opaque is not None and not self.opaque(point[None, :])[0]:
                res = None  # Z3 cannot see Python predicates: a witness they reject decides nothing
            if res is True:
                status[r], witness[r], settled[r] = 1, point, True
            elif res is None:
                status[r], settled[r] = -1, True

    def z3(self) -> Any:
        shared = self._shared
        with shared["lock"]:
            if shared["z3"] is None:
                from ._z3 import Z3_LOCK, Z3Backend

                with Z3_LOCK:
                    shared["z3"] = Z3Backend(self._root_domain, self.constraints)
            return shared["z3"]

    # -- decomposition ------------------------------------------------------------------------------
    def decompose(
        self,
        lo: np.ndarray | None = None,
        hi: np.ndarray | None = None,
        max_boxes: int | None = None,
        progress: Callable[[float], None] | None = None,
        enum_limit: int = 64,
        deadline: Deadline | None = None,
    ) -> Iterator[Decomposition]:
        """Partition the feasible part of the boxes (default: the whole domain), depth first.

        Yields pieces in a deterministic order; with ``max_boxes``, or at ``deadline`` (a
        ``time.perf_counter()`` value, or a function that says it has passed), the last piece carries the
        boxes left undecided (``timed_out`` set at the deadline). ``progress`` receives the settled share
        of the volume (0..1).
        """
        self.require_finite("this operation")
        self._opaque_used = 0
        if lo is None or hi is None:
            lo, hi = self.domain.root()
        total = self.domain.volume(lo, hi).sum()  # Python ints beyond float64 (see Domain.volume)
        settled_volume: Any = 0
        # per box, points known to satisfy and to violate the last stage (see _witness_pairs)
        known = np.full((len(lo), 2 * self.domain.ndim), -1, dtype=np.int64)
        stack: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = [(lo, hi, known)]
        processed = 0
        empty = np.zeros((0, self.domain.ndim), dtype=np.int64)
        last_report = time.perf_counter()
        exact = self._exact and bool(self._open_exprs)
        while stack:
            blo, bhi, known = stack.pop()
            processed += len(blo)
            self.stats["boxes"] += len(blo)
            late = _expired(deadline)
            if late or (max_boxes is not None and processed > max_boxes):
                rest = [(blo, bhi)] + [(a, b) for a, b, _ in stack]
                yield Decomposition(
                    empty,
                    empty,
                    empty,
                    np.concatenate([r[0] for r in rest]),
                    np.concatenate([r[1] for r in rest]),
                    timed_out=late,
                )
                return
            nb = self.domain.normalize(blo, bhi)
            blo, bhi = nb.lo, nb.hi
            split = None
            if exact and len(blo) > FEW:
                known, split = self._witness_pairs(blo, bhi, known)
            surely, possibly = self.bounds(blo, bhi, None, split)
            full = surely & possibly & ~nb.undecided & (self.opaque is None)
            vol = self.domain.volume(blo, bhi)
            settled_volume += vol[~possibly].sum() + vol[full].sum()
            mixed = possibly & ~full
            small = mixed & (vol <= enum_limit) & ~nb.undecided
            pts = empty
            if small.any():
                pts, _ = self.domain.points(blo[small], bhi[small])
                pts = pts[self.feasible_points(pts)]
                settled_volume += vol[small].sum()
            # yield in box order: full boxes and enumerated points of this batch
            if full.any() or len(pts):
                yield Decomposition(blo[full], bhi[full], pts, empty, empty)
            big = mixed & ~small
            if big.any():
                self._push_split(stack, blo[big], bhi[big], known[big], nb.split_dim[big], self.domain.widest)
            if progress is not None and time.perf_counter() - last_report > 0.2:
                progress(share(settled_volume, total))
                last_report = time.perf_counter()
        if progress is not None:
            progress(1.0)

    def _witness_pairs(
        self, lo: np.ndarray, hi: np.ndarray, known: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per box a point where the last stage's constraints all hold and one where they do not.

        ``known`` holds both points side by side (``(boxes, 2 * dims)``, -1 rows where none is known):
        a box keeps its parent's when they lie inside it, and one that kept one tries its low corner
        for a missing satisfying point or its high corner for a missing violating one (a memory
        peak grows with the sizes, and a halving keeps one of its parent's corners).
        Returns the points and the boxes holding both: sound bounds of that stage are (not surely,
        possibly) there (a point value lies within the bounds), so :meth:`bounds` need not compute
        them: a point costs less than bounds, and on memory budgets most boxes hold both.
        """
        d = self.domain.ndim
        known = known.copy()
        for j in (0, d):
            p = known[:, j : j + d]
            p[np.any((p < lo) | (p > hi), axis=1)] = -1  # outside this half (or none)
        have_t, have_f = known[:, 0] >= 0, known[:, d] >= 0
        # boxes that kept neither point seldom hold both (measured on a GPT memory budget: 3 of
        # 2,700): they try only when no box of the batch kept one (the first boxes)
        tries = have_t ^ have_f if (have_t | have_f).any() else np.ones(len(lo), dtype=bool)
        need = [np.flatnonzero(tries & ~have_t), np.flatnonzero(tries & ~have_f)]
        cand = np.concatenate([lo[need[0]], hi[need[1]]])
        if len(cand):
            part, evaluate = self._evaluator("vectorized")[-1]
            ok = np.ones(len(cand), dtype=bool)
            for v in evaluate(self.domain.value_columns(cand)[0]):
                ok &= np.broadcast_to(v, (len(cand),))
            rows = np.concatenate(need)
            for holds, j in ((ok, 0), (~ok, d)):
                fill = holds & (known[rows, j] < 0)
                known[rows[fill], j : j + d] = cand[fill]
        return known, (known[:, 0] >= 0) & (known[:, d] >= 0)

    # -- optimisation -------------------------------------------------------------------------------
    def minimize(
        self,
        lo: np.ndarray,
        hi: np.ndarray,
        lower_bound: Callable[[np.ndarray, np.ndarray], np.ndarray],
        value: Callable[[np.ndarray], np.ndarray],
        mask: np.ndarray | None = None,
        max_boxes: int = 2_000_000,
    ) -> tuple[np.ndarray | None, float, bool]:
        """Feasible point minimising ``value`` within the boxes; returns (point, value, proven optimal).

        ``lower_bound(lo, hi)`` must bound ``value`` from below over each box. Ties go to the point
        found first (depth first, lower halves first), so results are deterministic. Only what can still
        beat the best point so far is evaluated: points of smaller value, boxes of smaller bound.
        """
        self.require_finite("optimisation")
        self._opaque_used = 0
        best: np.ndarray | None = None
        best_val = np.inf
        stack: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = [(lo, hi, np.zeros(len(lo), dtype=np.int64))]
        processed = 0

        def offer(points: np.ndarray) -> None:
            nonlocal best, best_val
            if not len(points):
                return
            if best is None:
                ok = self.feasible_points(points, mask)
                if not ok.any():
                    return
                points = points[ok]
                vals = value(points)
            else:  # as checking every point: only smaller values replace the best (NaN kept, as
                vals = value(points)  # argmin over every point would pick it and then keep the best)
                points, vals = _take(~(vals >= best_val), points, vals)
                ok = self.feasible_points(points, mask)
                if not ok.any():
                    return
                points, vals = points[ok], vals[ok]
            i = int(np.argmin(vals))
            if vals[i] < best_val:
                best_val = float(vals[i])
                best = points[i]

        while stack:
            blo, bhi, rid = stack.pop()
            processed += len(blo)
            if processed > max_boxes:
                return best, best_val, False
            nb = self.domain.normalize(blo, bhi)
            blo, bhi = nb.lo, nb.hi
            lb = lower_bound(blo, bhi)
            keep = lb < best_val  # then only these boxes need constraint bounds
            if not keep.any():
                continue
            keep[keep] = self.bounds(blo[keep], bhi[keep], mask)[1]
            if not keep.any():
                continue
            blo, bhi, lb, split_dim, und = _take(keep, blo, bhi, lb, nb.split_dim, nb.undecided)
            offer(self._witness_candidates(blo, bhi))
            blo, bhi, lb, split_dim, und = _take(lb < best_val, blo, bhi, lb, split_dim, und)
            if not len(blo):
                continue
            vol = self.domain.volume(blo, bhi)
            small = (vol <= self.enum_limit) & ~und
            if small.any():
                pts, _ = self.domain.points(blo[small], bhi[small])
                offer(self.domain.canonical(pts))
            big = ~small
            if big.any():
                order = np.argsort(-lb[big], kind="stable")  # best bound popped first
                self._push_split(
                    stack,
                    blo[big][order],
                    bhi[big][order],
                    np.zeros(int(big.sum()), dtype=np.int64),
                    split_dim[big][order],
                    self.domain.narrowest_open,
                )
        return best, best_val, True

    def reset_opaque_count(self) -> None:
        """Count Python-predicate evaluations from zero: a new operation (see ``OPAQUE_LIMIT``)."""
        self._opaque_used = 0

    def require_finite(self, what: str) -> None:
        """Raise a ValueError naming the continuous Floats used in constraints (``what`` needs none)."""
        if self.domain.unpinned:
            names = ", ".join(sorted(self.domain.unpinned))
            raise ValueError(
                f"{what} needs every constrained parameter to be finite, but {names} is a continuous Float "
                "used in a constraint: give it a step (Float(low, high, step=...))"
            )


#: Evaluators of the open constraints: boxes or points in numpy, or one box or point in Python numbers;
#: the numpy ones are lists of ``(positions, evaluator)`` stages (see :func:`_stages`).
_COMPILERS: dict[str, Callable[[list[Expr], dict[str, Any]], Any]] = {
    "interval": lambda exprs, box: [
        (part, compile_interval([exprs[k] for k in part], box=box)) for part in _stages(exprs)
    ],
    "vectorized": lambda exprs, box: [
        (part, compile_vectorized([exprs[k] for k in part], box=box)) for part in _stages(exprs)
    ],
    "interval_scalar": lambda exprs, box: compile_interval_scalar(exprs),
    "scalar": lambda exprs, box: compile_scalar(exprs),
}


STAGE_RATIO = 16  # constraints this many times smaller than the largest are evaluated first


def _stages(exprs: Sequence[Expr]) -> list[list[int]]:
    """Positions of ``exprs`` in the order numpy evaluates them (points and boxes): the small
    constraints, then the large ones (on the points the small ones keep; one stage when there is no
    such gap in size)."""
    sizes = [len(topological([e])) for e in exprs]
    small = [s * STAGE_RATIO <= max(sizes, default=0) for s in sizes]
    parts = [[k for k, x in enumerate(small) if x], [k for k, x in enumerate(small) if not x]]
    return parts if parts[0] else parts[1:]


def _by_row(f: Callable[..., tuple[Any, ...]], m: int, *columns: dict[str, Any]) -> list[Any]:
    """``f`` (boolean outputs, or ``(lo, hi)`` pairs of them) applied to each of the ``m`` rows of
    ``columns`` (name -> array or scalar), stacked per output as a vectorized evaluator returns them."""
    lists = [{k: np.broadcast_to(v, (m,)).tolist() for k, v in c.items()} for c in columns]
    rows = [f(*({k: v[j] for k, v in c.items()} for c in lists)) for j in range(m)]
    outputs = zip(*rows) if rows else ()
    return [
        tuple(np.array(x, dtype=bool) for x in zip(*col))
        if isinstance(col[0], tuple)
        else np.array(col, dtype=bool)
        for col in outputs
    ]


def _live_arrays(order: Sequence[Expr]) -> int:
    """Most node arrays alive at once while generated code evaluates ``order`` (topological, roots
    last): each node's array lives from its own line to its last reader's (roots to the end)."""
    last = {id(a): i for i, node in enumerate(order) for a in node.args}
    live = peak = 0
    for i, node in enumerate(order):
        live += 1
        peak = max(peak, live)
        live -= len({id(a) for a in node.args if last[id(a)] == i})
    return max(1, peak)


def _take(mask: np.ndarray, *arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """The rows of each array where ``mask`` holds."""
    return tuple(a[mask] for a in arrays)


def interval_bound(
    engine: Engine, expr_interval: Callable[..., Any]
) -> Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """(lo, hi) of an objective over boxes, from its compiled interval function."""

    def f(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        vlo, vhi = engine.domain.value_columns(lo, hi)
        (res,) = expr_interval(vlo, vhi)
        m = lo.shape[0]
        return np.broadcast_to(res[0], (m,)).astype(np.float64), np.broadcast_to(res[1], (m,)).astype(
            np.float64
        )

    return f


def index_distance(domain: Domain, origin: np.ndarray, weight: np.ndarray) -> tuple[Any, Any]:
    """Lower bound and value of the repair objective over boxes and points.

    Objective: changed dims * (n + 1) + sum of index distances / (domain length - 1); dims with
    ``weight`` 0 (not given in the config) are free of charge.
    """
    n = domain.ndim
    scale = np.maximum(domain.sizes - 1, 1).astype(np.float64) / np.maximum(weight, 1e-300)
    on = weight > 0

    def bound(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        gap = (np.maximum(lo - origin, 0) + np.maximum(origin - hi, 0)) * on
        return ((gap > 0).sum(axis=1) * (n + 1) + (gap / scale).sum(axis=1)).astype(np.float64)

    def value(points: np.ndarray) -> np.ndarray:
        diff = np.abs(points - origin) * on
        return ((diff > 0).sum(axis=1) * (n + 1) + (diff / scale).sum(axis=1)).astype(np.float64)

    return bound, value
