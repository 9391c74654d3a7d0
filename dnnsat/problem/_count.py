"""Counting, enumerating and sampling the feasible configurations: exact ``count``, ``estimate_count``,
``enumerate`` and uniform ``sample`` share one decomposition of the space into boxes, kept by the problem."""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterable, Iterator
from decimal import Decimal
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from ..solver._boxes import Domain, share
from ..solver._engine import BATCH, Decomposition
from ._args import check_count, check_request, check_seconds, check_seed
from ._explain import _raise_empty
from ._results import Estimate, TimeLimitError
from ._search import _ordered

if TYPE_CHECKING:
    from ._problem import Problem, _Compiled

#: boxes of :meth:`Problem.sample`'s decomposition (its default ``max_boxes``), kept by the problem
SAMPLE_BOXES = 20_000
#: :meth:`Problem.sample` draws up to ``max(REJECTION_DRAWS, 8 n)`` points from the whole space before it
#: decomposes (a few thousand point checks: about 15 ms on a 13.6k-node memory peak)
REJECTION_DRAWS = 4096
#: the time limit (seconds) of ``count``, ``estimate_count``, ``sample``, ``prune`` and ``enumerate``
#: when none is given (``max_seconds=None`` or ``math.inf``: no limit)
TIME_LIMIT = 60.0
#: ``estimate_count`` draws its sample points this many values (points x dimensions) at a time
ESTIMATE_CELLS = 1 << 22
#: enumerated points are produced this many at a time (a huge surely-feasible box lazily)
ENUMERATE_CHUNK = 4096


def _deadline(limit: float | None) -> float | None:
    return None if limit is None else time.perf_counter() + limit


def _late(deadline: float | None) -> bool:
    return deadline is not None and time.perf_counter() > deadline


def _number(x: Any) -> float:
    """A count as a float, or as an exact int beyond float64's range (a space above 2**1024)."""
    return float(x) if abs(x) < 2**1023 else int(x)  # type: ignore[return-value]


def count(problem: Problem, progress: bool | None = None, max_seconds: float | None = TIME_LIMIT) -> int:
    """Implements :meth:`Problem.count`."""
    limit = check_seconds(max_seconds, "count")
    comp = problem._c()
    dom = comp.domain
    total = 0
    start = time.perf_counter()
    deadline = _deadline(limit)
    if limit is not None:
        boxes, seconds = count_work(problem, give_up=limit, deadline=start + limit / 4)
        if seconds > limit:
            estimate = estimate_count(problem, max_seconds=min(limit / 4, 5.0))
            raise TimeLimitError(
                f"an exact count would visit at least {boxes:.2g} boxes of the space, at least "
                f"{_duration(seconds)} here, over its time limit (max_seconds={limit:g}); about "
                f"{_approx(estimate)} configurations are feasible: use estimate_count() for a 95% "
                "confidence interval, or raise max_seconds (None: no limit)",
                limit,
                estimate,
            )
    done = [0.0]  # share of the space settled so far
    whole = dom.volume(*dom.root()).sum()
    rest_lo: Any
    rest_hi: Any
    with _progress("counting", progress) as report:

        def tick(fraction: float | None = None, settled: Any = 0, volume: Any = whole) -> None:
            if fraction is not None:  # ``fraction`` of ``volume`` after ``settled`` of the space
                done[0] = share(settled, whole) + fraction * share(volume, whole)
                report(done[0])

        def stop(undecided: list[tuple[np.ndarray, np.ndarray]]) -> TimeLimitError:
            lo = np.concatenate([u[0] for u in undecided])
            hi = np.concatenate([u[1] for u in undecided])
            quick = _deadline(min(limit or 1.0, 10.0) / 10)  # the estimate's own time: a tenth, <= 1 s
            estimate = _estimate_rest(problem, total, lo, hi, 20_000, 0, quick)
            return TimeLimitError(
                f"exact counting stopped at its time limit (max_seconds={limit:g}) at {done[0]:.0%} of the "
                f"space, with {total * dom.free_size:,} configurations counted; about {_approx(estimate)} "
                "are feasible: use estimate_count() for a 95% confidence interval, or raise max_seconds "
                "(None: no limit)",
                limit or 0.0,
                estimate,
            )

        pieces: list[Decomposition] = []
        for piece in comp.engine.decompose(max_boxes=SAMPLE_BOXES, progress=tick, deadline=deadline):
            pieces.append(piece)
            total += int(dom.volume(piece.full_lo, piece.full_hi).sum()) + len(piece.points)
        last = pieces[-1] if pieces else None  # the last piece holds the boxes left undecided
        if last is not None and last.timed_out:
            raise stop([(last.rest_lo, last.rest_hi)])
        _keep_pool(comp, SAMPLE_BOXES, pieces)
        empty = np.zeros((0, dom.ndim), dtype=np.int64)
        rest_lo, rest_hi = (last.rest_lo, last.rest_hi) if last is not None else (empty, empty)
        left = dom.volume(rest_lo, rest_hi).sum()
        for s in range(0, len(rest_lo), BATCH):
            lo, hi = rest_lo[s : s + BATCH], rest_hi[s : s + BATCH]
            volume = dom.volume(lo, hi).sum()

            def part(fraction: float, settled: Any = whole - left, volume: Any = volume) -> None:
                tick(fraction, settled, volume)

            for piece in comp.engine.decompose(lo, hi, progress=part, deadline=deadline):
                if piece.timed_out:
                    raise stop([(piece.rest_lo, piece.rest_hi), (rest_lo[s + BATCH :], rest_hi[s + BATCH :])])
                total += int(dom.volume(piece.full_lo, piece.full_hi).sum()) + len(piece.points)
            left -= volume
    return total * dom.free_size


def count_work(
    problem: Problem,
    walkers: int = 256,
    seed: int = 0,
    give_up: float | None = None,
    deadline: float | None = None,
) -> tuple[float, float]:
    """Predicted work of ``problem.count()``: ``(boxes, seconds)``, estimated in a fraction of a second.

    Exact counting splits the space into boxes, depth first, until each is decided. The number of boxes
    it will visit is estimated level by level (Knuth's tree-size estimate, with ``walkers`` boxes
    resampled per level so that rare deep branches are not lost): ``boxes`` is usually within a factor
    of two. ``seconds`` applies this machine's measured time per box during the estimate, which is
    optimistic (real counting also yields and sums pieces): read it as a lower bound. The levels are
    walked until the prediction exceeds ``give_up`` seconds or until ``deadline`` (a
    ``time.perf_counter()`` value): both then answer the lower bound reached so far.
    """
    comp = problem._c()
    engine, domain = comp.engine, comp.domain
    rng = np.random.default_rng(seed)
    lo, hi = domain.root()
    level_nodes, boxes, visited = 1.0, 0.0, 0
    start = time.perf_counter()
    while len(lo):
        boxes += level_nodes
        visited += len(lo)
        seconds = boxes * (time.perf_counter() - start) / max(visited, 1)
        if (give_up is not None and seconds > give_up) or _late(deadline):
            return boxes, seconds
        rest = [(d.rest_lo, d.rest_hi) for d in engine.decompose(lo, hi, max_boxes=len(lo)) if len(d.rest_lo)]
        if not rest:
            break
        child_lo, child_hi = np.concatenate([r[0] for r in rest]), np.concatenate([r[1] for r in rest])
        level_nodes *= len(child_lo) / len(lo)  # boxes at the next depth, estimated
        keep = rng.integers(0, len(child_lo), size=walkers) if len(child_lo) > walkers else slice(None)
        lo, hi = child_lo[keep], child_hi[keep]
    return boxes, boxes * (time.perf_counter() - start) / max(visited, 1)


def _duration(seconds: float) -> str:
    for unit, size in (("days", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.2g} s"


def _approx(e: Estimate) -> str:
    """An estimate in words: its value and 95% interval, exact when it is."""
    if e.exact:
        return f"{int(e.value):,} (exactly)"
    return f"{_g(e.value)} (95% CI {_g(e.low)} - {_g(e.high)})"


def _g(x: float) -> str:
    """``x`` to 3 significant digits, also an int beyond float64's range."""
    return format(Decimal(x), ".3g")


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
    problem: Problem,
    samples: int = 20_000,
    seed: int | None = 0,
    max_boxes: int = 50_000,
    max_seconds: float | None = TIME_LIMIT,
) -> Estimate:
    """Implements :meth:`Problem.estimate_count`."""
    samples = check_count(samples, "samples", "estimate_count", minimum=1, example=20_000)
    seed = check_seed(seed, "estimate_count")
    max_boxes = check_count(max_boxes, "max_boxes", "estimate_count", minimum=1, example=50_000)
    limit = check_seconds(max_seconds, "estimate_count")
    comp = problem._c()
    # the draws: indices, their canonical copy and the box of each (the decomposition is bounded apart)
    check_request("estimate_count", "samples", samples, 24 * comp.domain.ndim + 32)
    deadline = _deadline(limit)
    # half the time for the decomposition (exact where it settles the space), the rest for sampling
    bounds_deadline = None if limit is None else time.perf_counter() + limit / 2
    exact = 0
    rest_lo, rest_hi = [], []
    for piece in comp.engine.decompose(max_boxes=max_boxes, deadline=bounds_deadline):
        exact += int(comp.domain.volume(piece.full_lo, piece.full_hi).sum()) + len(piece.points)
        if len(piece.rest_lo):
            rest_lo.append(piece.rest_lo)
            rest_hi.append(piece.rest_hi)
    if not rest_lo:
        f = comp.domain.free_size
        return Estimate(_number(exact * f), _number(exact * f), _number(exact * f), exact=True)
    lo, hi = np.concatenate(rest_lo), np.concatenate(rest_hi)
    return _estimate_rest(problem, exact, lo, hi, samples, seed, deadline)


def _estimate_rest(
    problem: Problem,
    exact: int,
    lo: np.ndarray,
    hi: np.ndarray,
    samples: int,
    seed: int | None,
    deadline: float | None,
) -> Estimate:
    """``exact`` feasible points counted plus the feasible share of the undecided boxes, estimated from up
    to ``samples`` uniform points (fewer at ``deadline``: a wider interval), with a 95% Wilson interval."""
    comp = problem._c()
    f = comp.domain.free_size
    if not len(lo):
        return Estimate(_number(exact * f), _number(exact * f), _number(exact * f), exact=True)
    rng = np.random.default_rng(seed)
    # drawn in chunks of about ESTIMATE_CELLS values (one chunk below ESTIMATE_CELLS / samples dimensions,
    # the draws of earlier releases), the deadline checked between them
    rows = max(256, ESTIMATE_CELLS // max(comp.domain.ndim, 1))
    hits = drawn = 0
    while drawn < samples and (not drawn or not _late(deadline)):
        step = min(samples - drawn, rows)
        pts, _ = _draw(comp, lo, hi, step, rng)
        hits += int(comp.engine.feasible_configurations(pts).sum())
        drawn += step
    vol = comp.domain.volume(lo, hi).sum()
    p = hits / drawn
    z = 1.96
    denom = 1 + z * z / drawn
    centre = (p + z * z / (2 * drawn)) / denom
    half = z * math.sqrt(p * (1 - p) / drawn + z * z / (4 * drawn * drawn)) / denom

    def scaled(q: float) -> float:  # exact rational arithmetic: volumes may exceed float64
        return _number((exact + int(vol) * Fraction(q)) * f)

    return Estimate(scaled(p), scaled(max(centre - half, 0.0)), scaled(centre + half))


def _draw(
    comp: _Compiled, lo: np.ndarray, hi: np.ndarray, n: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    which = rng.choice(len(lo), size=n, p=comp.domain.shares(lo, hi))
    return comp.domain.random_points(lo[which], hi[which], rng), which


def _enumerate(
    problem: Problem, limit: int | None, max_seconds: float | None = TIME_LIMIT
) -> Iterator[dict[str, Any]]:
    seconds = check_seconds(max_seconds, "enumerate")
    if limit == 0:
        return
    comp = problem._c()
    free = comp.domain.free
    free_values = [problem.space[n].values() for n in free]
    produced = 0
    used, resumed = 0.0, time.perf_counter()  # time spent in this generator, not in its consumer

    def expired() -> bool:
        return seconds is not None and used + time.perf_counter() - resumed > seconds

    for piece in comp.engine.decompose(deadline=expired if seconds is not None else None):
        if piece.timed_out or expired():
            raise TimeLimitError(
                f"enumerate stopped at its time limit (max_seconds={seconds:g}) after {produced:,} "
                "configurations: the configurations so far were yielded; raise max_seconds (None: no "
                "limit), or use sample() or count()",
                seconds or 0.0,
            )
        for pts in _piece_points(comp.domain, piece):
            for p in pts:
                base = comp.domain.decode_point(p)
                for combo in itertools.product(*free_values):
                    cfg = dict(base)
                    cfg.update(zip(free, combo))
                    used += time.perf_counter() - resumed
                    yield _ordered(problem, cfg)
                    resumed = time.perf_counter()
                    produced += 1
                    if limit is not None and produced >= limit:
                        return


def sample(
    problem: Problem,
    n: int,
    seed: int | None = None,
    max_boxes: int = SAMPLE_BOXES,
    max_seconds: float | None = TIME_LIMIT,
) -> list[dict[str, Any]]:
    """Implements :meth:`Problem.sample`."""
    n = check_count(n, "n", "sample")
    seed = check_seed(seed, "sample")
    max_boxes = check_count(max_boxes, "max_boxes", "sample", minimum=1, example=SAMPLE_BOXES)
    deadline = _deadline(check_seconds(max_seconds, "sample"))
    comp = problem._c()
    check_request("sample", "n", n, _sample_bytes(problem, comp))
    comp.engine.require_finite("sample")
    rng = np.random.default_rng(seed)
    lo, hi = comp.domain.root()
    whole = (lo, hi, np.ones(1, dtype=bool))
    points = _feasible_draws(problem, comp, whole, n, rng, max(REJECTION_DRAWS, 8 * n), deadline)
    if len(points) < n or not n:
        try:
            if _late(deadline):  # the rejection draws were cut short: the pool's would depend on timing
                raise TimeLimitError("sample: time limit reached while drawing", 0.0)
            pool = _sample_pool(problem, comp, max_boxes, deadline)
            more = _feasible_draws(problem, comp, pool, n - len(points), rng, deadline=deadline)
        except TimeLimitError as err:
            raise TimeLimitError(
                f"sample stopped at its time limit (max_seconds={max_seconds:g}) with {len(points)} of {n} "
                "configurations (in .partial): raise max_seconds (None: no limit)",
                err.limit,
                partial=_configs(problem, comp, points, rng),
            ) from None
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
    deadline: float | None = None,
) -> np.ndarray:
    """Up to ``n`` feasible points drawn uniformly from the pool ``(lo, hi, undecided)``: a box by
    volume, a point inside it, kept when its box is surely feasible or the point is feasible.
    ``limit``: stop after that many draws (else an empty pool or no feasible point raises). At
    ``deadline``, returns what it has with ``limit`` and raises :class:`TimeLimitError` without."""
    lo, hi, undecided = pool
    if not len(lo) and limit is None:
        _raise_empty(problem)
    comp.engine.reset_opaque_count()
    chosen: list[np.ndarray] = [np.zeros((0, comp.domain.ndim), dtype=np.int64)]
    got = attempts = 0
    while got < n and (limit is None or attempts < limit):
        if _late(deadline):
            if limit is not None:
                break
            raise TimeLimitError("sample: time limit reached while drawing", 0.0)
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
    problem: Problem, comp: _Compiled, max_boxes: int, deadline: float | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lo, hi, undecided) of one pool of boxes covering the feasible set: surely-feasible boxes,
    single feasible points, then boxes left undecided after ``max_boxes`` (computed once). A
    decomposition cut at ``deadline`` is not kept (the draws would depend on timing): it raises
    :class:`TimeLimitError`."""
    pool = comp.pools.get(max_boxes)
    if pool is not None:
        return pool
    pieces = list(comp.engine.decompose(max_boxes=max_boxes, deadline=deadline))
    if pieces and pieces[-1].timed_out:
        raise TimeLimitError("sample: time limit reached while decomposing the space", 0.0)
    return _keep_pool(comp, max_boxes, pieces)


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
            yield from _box_points(domain, piece.full_lo[i], piece.full_hi[i])
    if len(piece.points):
        yield piece.points


def _box_points(domain: Domain, lo: np.ndarray, hi: np.ndarray) -> Iterator[np.ndarray]:
    """The points of one box in lexicographic order, ``ENUMERATE_CHUNK`` or so at a time: a huge box
    (2**1000 points) is walked lazily, its leading dimensions fixed one combination at a time."""
    widths = [int(w) for w in hi - lo + 1]
    tail, lead = 1, len(widths)
    while lead and tail * widths[lead - 1] <= ENUMERATE_CHUNK:
        lead -= 1
        tail *= widths[lead]
    for prefix in itertools.product(*(range(int(lo[d]), int(hi[d]) + 1) for d in range(lead))):
        sub_lo, sub_hi = lo.copy(), hi.copy()
        sub_lo[:lead] = sub_hi[:lead] = prefix
        yield domain.points(sub_lo[None, :], sub_hi[None, :])[0]


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
