"""Boxes of a problem's search domain shared by its queries: the given values fixed (conditional
parents restricted to activating values), continuous values pinned, existence proved by a witness."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ..solver._boxes import Domain
from ..solver._engine import Engine

if TYPE_CHECKING:
    from ._problem import Problem

logger = logging.getLogger("dnnsat.problem")


def _proved(status: np.ndarray, operation: str) -> np.ndarray:
    """Roots of :meth:`Engine.exists` proved feasible (a witness found).

    A root the engine leaves undecided within its box budget (status -1) is not reported as feasible:
    a value a sampler is offered must have a feasible completion. Such roots are logged; prune keeps
    them (it only removes what is proved infeasible).
    """
    undecided = int((status == -1).sum())
    if undecided:
        logger.warning(
            "%s: %d box(es) undecided within the engine's box budget are treated as infeasible",
            operation,
            undecided,
        )
    return status == 1


def _fixed_box(
    problem: Problem, given: Mapping[str, Any] | None, dom: Domain | None = None, active: Iterable[str] = ()
) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Boxes fixing the ``given`` values; a given conditional parameter (and each one in ``active``)
    must be active, so its unfixed parents are restricted to activating values (one box per
    combination); no box when a given parent switches it off."""
    dom = dom or problem._c().domain
    cfg = problem.space.validate(dict(given or {}), partial=True)
    fixed = dom.encode_config(cfg)
    allowed: dict[str, frozenset[int]] = {}
    todo = [n for n in [*cfg, *active] if all(q in dom.index for q in problem.space[n].condition or [0])]
    while todo:
        child = todo.pop()
        for parent in problem.space[child].condition or {}:
            idx = dom.activating(child, parent)
            if parent not in allowed:
                todo.append(parent)
            allowed[parent] = allowed.get(parent, idx) & idx
    lo, hi = dom.box_with(fixed)
    for parent, idx in allowed.items():
        if parent in fixed and fixed[parent] not in idx:
            return lo[:0], hi[:0], cfg
    free = []
    for p, idx in allowed.items():
        if p in fixed:
            continue
        d, run = dom.index[p], sorted(idx)
        if run == list(range(run[0], run[-1] + 1)):  # a run of values: one range, not a box per value
            lo[:, d], hi[:, d] = run[0], run[-1]  # (a chain of N such parents would need 2**N boxes)
        else:
            free.append((d, run))
    if free:
        combos = list(itertools.product(*(idx for _, idx in free)))
        lo, hi = np.repeat(lo, len(combos), axis=0), np.repeat(hi, len(combos), axis=0)
        for j, (d, _) in enumerate(free):
            lo[:, d] = hi[:, d] = [c[j] for c in combos]
    return lo, hi, cfg


def _exists_any(problem: Problem, lo: np.ndarray, hi: np.ndarray, engine: Engine | None = None) -> bool:
    """Whether some box holds a feasible configuration, proved by a witness (see :func:`_proved`)."""
    engine = engine or problem._c().engine
    return bool(len(lo)) and bool(_proved(engine.exists(lo, hi)[0], "is_extendable").any())


def _view(problem: Problem, cfg: Mapping[str, Any], engine: Engine | None = None) -> Engine:
    """The engine with the continuous search variables that ``cfg`` sets (and activates) pinned."""
    engine = engine or problem._c().engine
    pins = {}
    for n in engine.domain.continuous:
        if n in cfg and problem.space.is_active(n, cfg):
            v = float(problem.space[n].encode(cfg[n]))
            pins[n] = (v, v)
    return engine.restricted(pins)


def _ordered(problem: Problem, cfg: Mapping[str, Any]) -> dict[str, Any]:
    return {n: cfg[n] for n in problem.space if n in cfg}
