"""Counting, enumerating and sampling the feasible configurations: exact ``count``, ``estimate_count``,
``enumerate`` and uniform ``sample`` share one decomposition of the space into boxes, kept by the problem."""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from ..solver._boxes import Domain
from ..solver._engine import BATCH, Decomposition
from ._args import check_count, check_request, check_seed
from ._explain import _raise_empty
from ._results import Estimate
from ._search import _ordered

if TYPE_CHECKING:
    from ._problem import Problem, _Compiled

#: boxes of :meth:`Problem.sample`'s decomposition (its default ``max_boxes``), kept by the problem
SAMPLE_BOXES = 20_000
#: :meth:`Problem.sample` draws up to ``max(REJECTION_DRAWS, 8 n)`` points from the whole space before it
#: decomposes (a few thousand point checks: about 15 ms on a 13.6k-node memory peak)
REJECTION_DRAWS = 4096


def count(problem: Problem, progress: bool | None = None, max_seconds: float | None = None) -> int:
    """Implements :meth:`Problem.count`."""
    comp = problem._c()
    dom = comp.domain
    total = 0
    deadline = None if max_seconds is None else time.perf_counter() + max_seconds
    done = [0.0]  # share of the space settled so far
    whole = float(dom.volume(*dom.root()).sum())
    with _progress("counting", progress) as report:

        def tick(fraction: float | None = None, settled: float = 0.0, volume: float = whole) -> None:
            if fraction is not None:  # ``fraction`` of ``volume`` after ``settled`` of the space
                done[0] = (settled + fraction * volume) / whole if whole else 1.0
                report(done[0])
            if deadline is not None and time.perf_counter() > deadline and done[0] < 1.0:
                raise TimeoutError(
                    f"exact counting stopped after {max_seconds:g} s at {done[0]:.0%} of the space; "
                    "use estimate_count() (CLI: --estimate) or allow more time"
                )

        pieces: list[Decomposition] = []
        for piece in comp.engine.decompose(max_boxes=SAMPLE_BOXES, progress=tick):
            pieces.append(piece)
            total += int(dom.volume(piece.full_lo, piece.full_hi).sum()) + len(piece.points)
            tick()
        _keep_pool(comp, SAMPLE_BOXES, pieces)
        last = pieces[-1] if pieces else None  # the last piece holds the boxes left undecided
        empty = np.zeros((0, dom.ndim), dtype=np.int64)
        rest_lo, rest_hi = (last.rest_lo, last.rest_hi) if last is not None else (empty, empty)
        left = float(dom.volume(rest_lo, rest_hi).sum())
        for s in range(0, len(rest_lo), BATCH):
            lo, hi = rest_lo[s : s + BATCH], rest_hi[s : s + BATCH]
            volume = float(dom.volume(lo, hi).sum())

            def part(fraction: float, settled: float = whole - left, volume: float = volume) -> None:
                tick(fraction, settled, volume)

            for piece in comp.engine.decompose(lo, hi, progress=part):
                total += int(dom.volume(piece.full_lo, piece.full_hi).sum()) + len(piece.points)
                tick()
            left -= volume
    return total * dom.free_size


def always_feasible(problem: Problem) -> bool:
    """Implements :meth:`Problem.always_feasible`."""
    comp = problem._c()
    if comp.always_feasible is None:
        engine = comp.engine
        if engine.opaque is None and not engine._open:
            comp.always_feasible = True
        elif engine.domain.unpinned:  # continuous variables: ask Z3 for a violating configuration
            comp.always_feasible = engine.opaque is None and engine.z3().violable(2000) is False
        else:
            try:
                comp.always_feasible = problem.count(progress=False, max_seconds=1.0) == problem.space.size()
            except TimeoutError:
                comp.always_feasible = False
    return comp.always_feasible


def estimate_count(
    problem: Problem, samples: int = 20_000, seed: int | None = 0, max_boxes: int = 50_000
) -> Estimate:
    """Implements :meth:`Problem.estimate_count`."""
    samples = check_count(samples, "samples", "estimate_count", minimum=1, example=20_000)
    seed = check_seed(seed, "estimate_count")
    max_boxes = check_count(max_boxes, "max_boxes", "estimate_count", minimum=1, example=50_000)
    comp = problem._c()
    # the draws: indices, their canonical copy and the box of each (the decomposition is bounded apart)
    check_request("estimate_count", "samples", samples, 24 * comp.domain.ndim + 32)
    exact = 0
    rest_lo, rest_hi = [], []
    for piece in comp.engine.decompose(max_boxes=max_boxes):
        exact += int(comp.domain.volume(piece.full_lo, piece.full_hi).sum()) + len(piece.points)
        if len(piece.rest_lo):
            rest_lo.append(piece.rest_lo)
            rest_hi.append(piece.rest_hi)
    f = comp.domain.free_size
    if not rest_lo:
        return Estimate(float(exact * f), float(exact * f), float(exact * f), exact=True)
    lo, hi = np.concatenate(rest_lo), np.concatenate(rest_hi)
    rng = np.random.default_rng(seed)
    hits, vol = _rejection_hits(problem, comp, lo, hi, samples, rng)
    p = hits / samples
    z = 1.96
    denom = 1 + z * z / samples
    centre = (p + z * z / (2 * samples)) / denom
    half = z * math.sqrt(p * (1 - p) / samples + z * z / (4 * samples * samples)) / denom
    return Estimate(
        (exact + vol * p) * f,
        (exact + vol * max(centre - half, 0.0)) * f,
        (exact + vol * (centre + half)) * f,
    )


def _rejection_hits(
    problem: Problem, comp: _Compiled, lo: np.ndarray, hi: np.ndarray, n: int, rng: np.random.Generator
) -> tuple[int, float]:
    """Feasible share of ``n`` points drawn uniformly from the union of the (undecided) boxes."""
    pts, _ = _draw(comp, lo, hi, n, rng)
    hits = int(comp.engine.feasible_configurations(pts).sum())
    return hits, float(comp.domain.volume(lo, hi).sum())


def _draw(
    comp: _Compiled, lo: np.ndarray, hi: np.ndarray, n: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    vol = comp.domain.volume(lo, hi).astype(np.float64)
    which = rng.choice(len(vol), size=n, p=vol / vol.sum())
    return comp.domain.random_points(lo[which], hi[which], rng), which


def _enumerate(problem: Problem, limit: int | None) -> Iterator[dict[str, Any]]:
    if limit == 0:
        return
    comp = problem._c()
    free = comp.domain.free
    free_values = [problem.space[n].values() for n in free]
    produced = 0
    for piece in comp.engine.decompose():
        for pts in _piece_points(comp.domain, piece):
            for p in pts:
                base = comp.domain.decode_point(p)
                for combo in itertools.product(*free_values):
                    cfg = dict(base)
                    cfg.update(zip(free, combo))
                    yield _ordered(problem, cfg)
                    produced += 1
                    if limit is not None and produced >= limit:
                        return


def sample(
    problem: Problem, n: int, seed: int | None = None, max_boxes: int = SAMPLE_BOXES
) -> list[dict[str, Any]]:
    """Implements :meth:`Problem.sample`."""
    n = check_count(n, "n", "sample")
    seed = check_seed(seed, "sample")
    max_boxes = check_count(max_boxes, "max_boxes", "sample", minimum=1, example=SAMPLE_BOXES)
    comp = problem._c()
    check_request("sample", "n", n, _sample_bytes(problem, comp))
    comp.engine.require_finite("sample")
    rng = np.random.default_rng(seed)
    lo, hi = comp.domain.root()
    whole = (lo, hi, np.ones(1, dtype=bool))
    points = _feasible_draws(problem, comp, whole, n, rng, max(REJECTION_DRAWS, 8 * n))
    if len(points) < n or not n:
        more = _feasible_draws(problem, comp, _sample_pool(problem, comp, max_boxes), n - len(points), rng)
        points = np.concatenate([points, more])
    return _configs(problem, comp, points, rng)


def _sample_bytes(problem: Problem, comp: _Compiled) -> int:
    """About the bytes :func:`sample` allocates per configuration: two draws of domain indices (with their
    canonical copy and box) at a time, and the configuration returned as a dict of Python values."""
    return 2 * (24 * comp.domain.ndim + 32) + 240 + 80 * len(problem.space)


def _sample_decomposed(problem: Problem, n: int, seed: int | None) -> list[dict[str, Any]]:
    """:meth:`Problem.sample`'s draws from the decomposition alone (its behaviour before the draws from the
    whole space): the witnesses of :class:`~dnnsat.Guard` and of the Optuna adapter's pruned
    space, and the new configurations of ``dnnsat.guard._unlaunched``, so that the adapters' trial
    sequences stay those of earlier releases."""
    comp = problem._c()
    rng = np.random.default_rng(seed)
    points = _feasible_draws(problem, comp, _sample_pool(problem, comp, SAMPLE_BOXES), n, rng)
    return _configs(problem, comp, points, rng)


def _feasible_draws(
    problem: Problem,
    comp: _Compiled,
    pool: tuple[np.ndarray, np.ndarray, np.ndarray],
    n: int,
    rng: np.random.Generator,
    limit: int | None = None,
) -> np.ndarray:
    """Up to ``n`` feasible points drawn uniformly from the pool ``(lo, hi, undecided)``: a box by
    volume, a point inside it, kept when its box is surely feasible or the point is feasible.
    ``limit``: stop after that many draws (else an empty pool or no feasible point raises)."""
    lo, hi, undecided = pool
    if not len(lo) and limit is None:
        _raise_empty(problem)
    comp.engine.reset_opaque_count()
    chosen: list[np.ndarray] = [np.zeros((0, comp.domain.ndim), dtype=np.int64)]
    got = attempts = 0
    while got < n and (limit is None or attempts < limit):
        want = max(2 * (n - got), 64)
        if limit is not None:
            want = min(want, limit - attempts)
        cand, which = _draw(comp, lo, hi, want, rng)
        ok = np.ones(len(cand), dtype=bool)
        u = undecided[which]
        if u.any():
            ok[np.flatnonzero(u)] = comp.engine.feasible_configurations(cand[u])
        good = cand[ok][: n - got]
        chosen.append(good)
        got += len(good)
        attempts += want
        if limit is None and attempts > 1000 * max(n, 1) + 100_000 and got == 0:
            _raise_empty(problem)
    return np.concatenate(chosen)


def _configs(
    problem: Problem, comp: _Compiled, points: np.ndarray, rng: np.random.Generator
) -> list[dict[str, Any]]:
    """Configurations of domain points: unconstrained finite parameters and unconstrained active
    continuous ones drawn from ``rng``."""
    dom = comp.domain
    out = []
    for p in points:
        cfg = dom.decode_point(p)
        for name in dom.free:
            vals = problem.space[name].values()
            cfg[name] = vals[int(rng.integers(len(vals)))]
        for name in problem.space:
            prm = problem.space[name]
            if not prm.is_finite and name not in dom.continuous and problem.space.is_active(name, cfg):
                cfg[name] = _draw_float(prm, rng)
        out.append(_ordered(problem, cfg))
    return out


def _sample_pool(
    problem: Problem, comp: _Compiled, max_boxes: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lo, hi, undecided) of one pool of boxes covering the feasible set: surely-feasible boxes,
    single feasible points, then boxes left undecided after ``max_boxes`` (computed once)."""
    pool = comp.pools.get(max_boxes)
    if pool is not None:
        return pool
    return _keep_pool(comp, max_boxes, comp.engine.decompose(max_boxes=max_boxes))


def _keep_pool(
    comp: _Compiled, max_boxes: int, pieces: Iterable[Decomposition]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pool of :func:`_sample_pool` from the pieces of ``decompose(max_boxes=max_boxes)``, kept."""
    dom = comp.domain
    full_lo, full_hi, points, rest_lo, rest_hi = [], [], [], [], []
    for piece in pieces:
        full_lo.append(piece.full_lo)
        full_hi.append(piece.full_hi)
        points.append(piece.points)
        rest_lo.append(piece.rest_lo)
        rest_hi.append(piece.rest_hi)
    empty = np.zeros((0, dom.ndim), dtype=np.int64)
    flo = np.concatenate(full_lo) if full_lo else empty
    fhi = np.concatenate(full_hi) if full_hi else empty
    pts = np.concatenate(points) if points else empty
    rlo = np.concatenate(rest_lo) if rest_lo else empty
    rhi = np.concatenate(rest_hi) if rest_hi else empty
    lo = np.concatenate([flo, pts, rlo])
    hi = np.concatenate([fhi, pts, rhi])
    undecided = np.concatenate([np.zeros(len(flo) + len(pts), dtype=bool), np.ones(len(rlo), dtype=bool)])
    for a in (lo, hi, undecided):
        a.flags.writeable = False  # shared by every later call
    pool = comp.pools[max_boxes] = (lo, hi, undecided)
    return pool


def _piece_points(domain: Domain, piece: Any) -> Iterator[np.ndarray]:
    if len(piece.full_lo):
        for i in range(len(piece.full_lo)):
            pts, _ = domain.points(piece.full_lo[i : i + 1], piece.full_hi[i : i + 1])
            yield pts
    if len(piece.points):
        yield piece.points


def _draw_float(p: Any, rng: np.random.Generator) -> float:
    if p.log:
        return float(math.exp(rng.uniform(math.log(p.low), math.log(p.high))))
    return float(rng.uniform(p.low, p.high))


class _progress:
    """A rich progress bar shown only when work runs past a second on a terminal (or when forced)."""

    def __init__(self, label: str, enabled: bool | None) -> None:
        self.label = label
        self.enabled = enabled
        self._bar: Any = None
        self._task: Any = None
        self._start = 0.0

    def __enter__(self) -> Callable[[float], None]:
        import sys
        import time

        self._start = time.perf_counter()
        show = self.enabled if self.enabled is not None else sys.stderr.isatty()

        def report(fraction: float) -> None:
            if not show:
                return
            if self._bar is None:
                if time.perf_counter() - self._start < 1.0 and fraction < 1.0:
                    return
                from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

                self._bar = Progress(
                    TextColumn(self.label),
                    BarColumn(),
                    TextColumn("{task.percentage:>5.1f}%"),
                    TimeElapsedColumn(),
                    transient=True,
                )
                self._bar.start()
                self._task = self._bar.add_task(self.label, total=1.0)
            self._bar.update(self._task, completed=fraction)

        return report

    def __exit__(self, *exc: Any) -> None:
        if self._bar is not None:
            self._bar.stop()
