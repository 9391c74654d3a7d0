"""Forward checking: whether a partial configuration extends to a feasible one, the values of a
parameter that do (finite: ``feasible_values``; continuous: ``feasible_intervals``) and the nearest one."""

from __future__ import annotations

import collections
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ..solver._engine import Engine
from ..space import Categorical, SpaceError
from ._search import _exists_any, _fixed_box, _proved, _view

if TYPE_CHECKING:
    from ._problem import Problem

ENUMERATE_FREE = 16_384  # feasible_values enumerates every completion when there are at most this many
FLOAT_TOL = (
    1e-9  # feasible_intervals: relative width (of the parameter's range, in its scale) of undecided ends
)
FLOAT_STEPS = 4000  # feasible_intervals: at most this many sub-intervals are examined per query


def is_extendable(problem: Problem, partial: Mapping[str, Any]) -> bool:
    """Implements :meth:`Problem.is_extendable`."""
    cfg = problem.space.validate(partial, partial=True)
    if all(n in cfg or not problem.space.is_active(n, cfg) for n in problem.space):
        return problem.check(cfg).feasible
    lo, hi, cfg = _fixed_box(problem, cfg)
    return _exists_any(problem, lo, hi, _view(problem, cfg))


def feasible_values(problem: Problem, name: str, given: Mapping[str, Any] | None = None) -> list[Any]:
    """Implements :meth:`Problem.feasible_values`."""
    p = problem.space[name]
    comp = problem._c()
    given = {k: v for k, v in (given or {}).items() if k != name}
    if not p.is_finite:
        spans = problem.feasible_intervals(name, given)
        return [spans[0][0], spans[-1][1]] if spans else []
    lo, hi, cfg = _fixed_box(problem, given, active=[name])
    engine = _view(problem, cfg)
    d = comp.domain.index.get(name)
    if d is None:
        # not constrained: every value works if anything does
        return list(p.values()) if _exists_any(problem, lo, hi, engine) else []
    vals = comp.domain.values[d]
    if not engine.domain.unpinned and 0 < comp.domain.volume(lo, hi).sum() <= ENUMERATE_FREE:
        # few completions left: test them all in one vectorized call
        pts, _ = comp.domain.points(lo, hi)
        pts = comp.domain.canonical(pts)
        ok_idx = np.unique(pts[engine.feasible_points(pts), d])
        ok = {vals[j].item() for j in ok_idx}
        return [v for v in p.values() if p.encode(v) in ok]
    n, m = int(comp.domain.sizes[d]), len(lo)
    los, his = np.tile(lo, (n, 1)), np.tile(hi, (n, 1))
    values_idx = np.repeat(np.arange(n), m)
    pinned = los[:, d] == his[:, d]
    los[:, d] = his[:, d] = values_idx
    # a box that pinned `name` to an activating value only admits that value
    conflict = pinned & (lo[np.tile(np.arange(m), n), d] != values_idx) if m else pinned
    status, _ = engine.exists(los, his)
    status = np.where(conflict, 0, status)
    ok = {vals[j].item() for j in set(values_idx[_proved(status, "feasible_values")].tolist())}
    return [v for v in p.values() if p.encode(v) in ok]


def feasible_intervals(
    problem: Problem, name: str, given: Mapping[str, Any] | None = None
) -> list[tuple[float, float]]:
    """Implements :meth:`Problem.feasible_intervals`."""
    p = problem.space[name]
    if p.is_finite:
        raise TypeError(f"parameter {name!r} is finite: use feasible_values({name!r}, given)")
    comp = problem._c()
    given = {k: v for k, v in (given or {}).items() if k != name}
    lo, hi, cfg = _fixed_box(problem, given, active=[name])
    low, high = (float(b) for b in p.bounds())
    base = _view(problem, cfg)
    if name not in comp.domain.continuous:  # unconstrained: all or nothing
        return [(low, high)] if _exists_any(problem, lo, hi, base) else []
    if not len(lo):
        return []
    to_t, from_t = (math.log, math.exp) if getattr(p, "log", False) else (float, float)
    t_lo, t_hi = to_t(low), to_t(high)
    tol = FLOAT_TOL * (t_hi - t_lo)

    def x(t: float) -> float:
        return low if t == t_lo else high if t == t_hi else min(max(from_t(t), low), high)

    others = [n for n in base.domain.unpinned if n != name]  # other Floats a witness must pin too
    witnesses: list[tuple[np.ndarray, dict[str, tuple[float, float]]]] = []
    proved: list[tuple[float, float]] = []
    queue = collections.deque([(t_lo, t_hi)])  # widest sub-intervals first
    for _ in range(FLOAT_STEPS):
        if not queue:
            break
        a, b = queue.popleft()
        engine = base.restricted({name: (x(a), x(b))})
        nb = engine.domain.normalize(lo, hi)
        if not engine.bounds(nb.lo, nb.hi, None)[1].any():
            continue  # the bounds prove the whole sub-interval infeasible
        if any(_holds_on(engine.restricted(pins), w) for w, pins in witnesses[-8:]):
            proved.append((x(a), x(b)))
            continue
        mid = x((a + b) / 2)
        at_mid = base.restricted({name: (mid, mid)})
        status, found = at_mid.exists(lo, hi)
        hit = np.flatnonzero(status == 1)
        if len(hit):
            point, pins = found[hit[0]], {}
            if others:
                cont = at_mid.domain.continuous
                values = at_mid.z3().continuous_witness(point, cont, problem.z3_timeout_ms) or {}
                pins = {n: (values[n], values[n]) for n in others if n in values}
            witnesses.append((point, pins))
            if len(pins) == len(others) and _holds_on(engine.restricted(pins), point):
                proved.append((x(a), x(b)))
                continue
        elif not (engine.exists(lo, hi)[0] != 0).any():
            continue  # Z3 proves the whole sub-interval infeasible
        if b - a > tol:
            queue += [(a, (a + b) / 2), ((a + b) / 2, b)]
    spans: list[tuple[float, float]] = []
    for a2, b2 in sorted(proved):
        if spans and spans[-1][1] >= a2:
            spans[-1] = (spans[-1][0], max(spans[-1][1], b2))
        else:
            spans.append((a2, b2))
    return spans


def nearest_feasible_value(
    problem: Problem, name: str, value: Any, given: Mapping[str, Any] | None = None, *, rng: Any = None
) -> Any:
    """Implements :meth:`Problem.nearest_feasible_value`."""
    p = problem.space[name]
    given = {k: v for k, v in (given or {}).items() if k != name}
    if p.is_finite:
        try:
            value = p.decode(p.encode(value))
        except (SpaceError, ValueError, TypeError, KeyError):
            pass  # outside the domain: replaced by a feasible value below
        else:
            if problem.is_extendable({**given, name: value}):
                return value
        allowed = problem.feasible_values(name, given)
        if not allowed:
            return None
        if isinstance(p, Categorical) and not p.numeric:
            rng = rng if rng is not None else np.random.default_rng(0)
            pick = rng.integers(len(allowed)) if hasattr(rng, "integers") else rng.randint(len(allowed))
            return allowed[int(pick)]
        if isinstance(p, Categorical) or not isinstance(value, int | float) or isinstance(value, bool):
            ranks = list(p.values())
            where = _rank(ranks, value)
            return min(allowed, key=lambda v: (abs(ranks.index(v) - where), ranks.index(v)))
        scale = _scale(p)
        return min(allowed, key=lambda v: (abs(scale(v) - scale(value)), v))
    low, high = (float(b) for b in p.bounds())
    v = min(max(float(value), low), high) if isinstance(value, int | float) and math.isfinite(value) else low
    if v == value and problem.is_extendable({**given, name: v}):
        return v
    spans = problem.feasible_intervals(name, given)
    if not spans:
        return None
    scale = _scale(p)
    best = min((min(max(v, a), b) for a, b in spans), key=lambda c: abs(scale(c) - scale(v)))
    a, b = next((a, b) for a, b in spans if a <= best <= b)
    for _ in range(60):  # the end of a proved interval is feasible; guard against rounding anyway
        if problem.is_extendable({**given, name: best}):
            return best
        best = best + ((a + b) / 2 - best) / 2
    return None


def _holds_on(engine: Engine, point: np.ndarray) -> bool:
    """Whether every constraint surely holds at the finite ``point`` over the engine's continuous ranges."""
    box = point[None, :]
    nb = engine.domain.normalize(box, box)
    if not engine.bounds(nb.lo, nb.hi, None)[0][0]:
        return False
    return engine.opaque is None or bool(engine.opaque(box)[0])


def _scale(p: Any) -> Callable[[Any], float]:
    """The parameter's own scale for distances: log for ``log=True``, else linear."""
    if getattr(p, "log", False):
        return lambda v: math.log(float(v))
    return float


def _rank(ordered: list[Any], value: Any) -> float:
    """Position of ``value`` among the ordered values (between two when it is not one of them)."""
    if value in ordered:
        return float(ordered.index(value))
    try:
        return float(np.searchsorted(np.asarray(ordered, dtype=float), float(value))) - 0.5
    except (TypeError, ValueError):
        return 0.0
