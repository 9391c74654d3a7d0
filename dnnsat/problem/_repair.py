"""``repair``: the feasible configuration nearest to a given one (fewest changed parameters, then the
smallest moves)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ..solver._engine import Engine, index_distance
from ..space import SpaceError
from ._feasible import _scale
from ._search import _fixed_box, _ordered, _view

if TYPE_CHECKING:
    from ._problem import Problem

_MISSING = object()
#: :func:`_unique_nearest` looks at boxes of at most this many points and checks at most this many of them
_NEAREST_POINTS = 1 << 16
_NEAREST_CHECKS = 1 << 13


def repair(problem: Problem, config: Mapping[str, Any], fixed: Iterable[str] = ()) -> dict[str, Any] | None:
    """Implements :meth:`Problem.repair`."""
    cfg = problem.space.validate(config, partial=True)
    fixed = set(fixed)
    unknown = fixed - set(problem.space)
    if unknown:
        raise SpaceError(f"repair: fixed names {sorted(unknown)} are not parameters of the space")
    if (
        all(n in cfg or not problem.space.is_active(n, cfg) for n in problem.space)
        and problem.check(cfg).feasible
    ):
        return _ordered(problem, cfg)
    comp = problem._c()
    floats = [n for n in comp.domain.continuous if n in cfg and problem.space.is_active(n, cfg)]
    candidates = []
    engine = _view(problem, cfg)
    if not engine.domain.unpinned:
        finite = _repair_finite(problem, cfg, fixed, engine)
        if finite is not None:
            candidates.append(finite)
    for name in floats:
        if name not in fixed:
            others = {k: v for k, v in cfg.items() if k != name}
            value = problem.nearest_feasible_value(name, cfg[name], others)
            if value is not None and problem.is_extendable({**others, name: value}):
                candidates.append(_ordered(problem, {**cfg, name: value}))
    if candidates or not comp.domain.continuous:
        return min(candidates, key=lambda c: _change(problem, cfg, c)) if candidates else None
    complete = all(n in cfg or not problem.space.is_active(n, cfg) for n in problem.space)
    out = {k: cfg[k] for k in fixed if k in cfg}
    for name in problem.space.conditional_order:
        if name in out or not problem.space.is_active(name, {**cfg, **out}):
            continue
        if name not in cfg and not complete:
            continue  # a partial configuration stays partial
        p = problem.space[name]
        start = cfg.get(name, p.values()[0] if p.is_finite else p.bounds()[0])
        value = problem.nearest_feasible_value(name, start, out)
        if value is None:
            return None
        out[name] = value
    return _ordered(problem, out) if problem.is_extendable(out) else None


def _change(problem: Problem, old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[int, float]:
    """(changed parameters, summed distance over domain length) between two configurations."""
    changed, dist = 0, 0.0
    for name in set(old) | set(new):
        a, b = old.get(name, _MISSING), new.get(name, _MISSING)
        if a is _MISSING or b is _MISSING:
            changed, dist = changed + 1, dist + 1.0
            continue
        p = problem.space[name]
        if p.encode(a) == p.encode(b):
            continue
        changed += 1
        if p.is_finite:
            enc = list(p.encoded())
            dist += abs(enc.index(p.encode(a)) - enc.index(p.encode(b))) / max(len(enc) - 1, 1)
        else:
            scale = _scale(p)
            low, high = p.bounds()
            dist += abs(scale(a) - scale(b)) / max(scale(high) - scale(low), 1e-300)
    return changed, dist


def _repair_finite(
    problem: Problem, cfg: dict[str, Any], fixed: set[str], engine: Engine
) -> dict[str, Any] | None:
    """The finite part repaired (continuous values pinned in ``engine``), or None when impossible."""
    dom = engine.domain
    # a fixed conditional child stays: its parents are restricted to values that activate it
    los, his, _ = _fixed_box(problem, {k: cfg[k] for k in fixed if k in cfg}, dom)
    enc = dom.encode_config({k: v for k, v in cfg.items() if k in fixed or problem.space.is_active(k, cfg)})
    origin = np.array([enc.get(n, 0) for n in dom.names], dtype=np.int64)
    weight = np.array([1.0 if n in enc else 0.0 for n in dom.names])
    given = [d for d, n in enumerate(dom.names) if n in enc and n not in fixed]
    distance = index_distance(dom, origin, weight)[1]
    found: list[np.ndarray] = []
    for r in range(len(los)):
        point = _repair_search(engine, los[r : r + 1], his[r : r + 1], origin, weight, given)
        if point is not None:
            found.append(point)
    if not found:
        return None
    best = min(found, key=lambda b: float(distance(b[None, :])[0]))
    out = {k: v for k, v in cfg.items() if k not in dom.index}
    out.update(dom.decode_point(best))
    for name in dom.free:
        out.setdefault(name, problem.space[name].values()[0])
    return _ordered(problem, {k: v for k, v in out.items() if problem.space.is_active(k, out)})


def _repair_search(
    engine: Engine,
    lo: np.ndarray,
    hi: np.ndarray,
    origin: np.ndarray,
    weight: np.ndarray,
    given: list[int],
) -> np.ndarray | None:
    """Fewest changed dims first (all k-subsets as one batch of boxes), then the nearest point."""
    dom = engine.domain
    bound, value = index_distance(dom, origin, weight)
    for k in range(len(given) + 1):
        if math.comb(len(given), k) > 20_000:
            break  # too many subsets: one search over everything instead
        subsets = list(itertools.combinations(given, k))
        los = np.repeat(lo, len(subsets), axis=0)
        his = np.repeat(hi, len(subsets), axis=0)
        for row, sub in enumerate(subsets):
            pin = [d for d in given if d not in sub]
            los[row, pin] = his[row, pin] = origin[pin]
        status, witness = engine.exists(los, his)
        ok = status == 1
        if ok.any():
            best = _unique_nearest(engine, los[ok], his[ok], witness[ok], value)
            if best is None:
                best, _, _ = engine.minimize(los[ok], his[ok], bound, value)
            return best
        if not (status == -1).any() and k == len(given):
            return None
    best, _, _ = engine.minimize(lo, hi, bound, value)
    return best


def _unique_nearest(
    engine: Engine,
    lo: np.ndarray,
    hi: np.ndarray,
    witness: np.ndarray,
    value: Callable[[np.ndarray], np.ndarray],
) -> np.ndarray | None:
    """The feasible point of the boxes with the smallest ``value``, found by checking at once every point
    no farther than the nearest ``witness`` (feasible points of the boxes); None when several points share
    that value (:meth:`Engine.minimize` then decides by its search order) or the boxes are too big.

    A unique nearest point is the one every exact search returns, so this answers as ``minimize`` does,
    without its branch and bound (tens of small numpy calls on big constraints).
    """
    dom = engine.domain
    if engine.opaque is not None or dom.volume(lo, hi).sum() > _NEAREST_POINTS:
        return None
    pts = dom.canonical(dom.points(lo, hi)[0])  # the points minimize can return
    pts = np.unique(pts[value(pts) <= value(witness).min()], axis=0)  # boxes may share points
    if len(pts) > _NEAREST_CHECKS:
        return None
    pts = pts[engine.feasible_points(pts)]
    if not len(pts):  # cannot happen (the witnesses are among them), but then the search decides
        return None
    vals = value(pts)
    i = int(np.argmin(vals))
    return pts[i] if int((vals <= vals[i] + 1e-9).sum()) == 1 else None
