"""``maximize`` and ``minimize``: the feasible configuration with the best objective (branch and bound
over the problem's engine)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ..expr import as_expr, compile_interval, compile_vectorized
from ..solver._engine import interval_bound
from ._results import Optimum
from ._search import _fixed_box, _ordered, _view

if TYPE_CHECKING:
    from ._problem import Problem


def _optimize(
    problem: Problem, objective: Any, given: Mapping[str, Any] | None, sign: float
) -> Optimum | None:
    if isinstance(objective, str):
        if objective in problem.cost_exprs:
            expr = problem.cost_exprs[objective]
        elif objective in problem.space:
            expr = problem.space.vars[objective]
        else:
            raise ValueError(
                f"unknown objective {objective!r}: use a cost name {list(problem.cost_exprs)}, a parameter "
                "name or an expression"
            )
    else:
        expr = as_expr(objective)
    if expr.sort == "bool":
        raise TypeError("the objective must be numeric, not a condition")
    if expr.op == "var" and expr.payload[1] is not None:
        raise TypeError(
            f"the objective {expr.payload[0]!r} is a categorical of non-numeric choices: it has no order "
            "to optimise; optimise a cost or a numeric expression instead"
        )
    comp = problem._c()
    engine = comp.engine
    outside = expr.variables() - set(engine.domain.names)
    continuous = sorted(n for n in outside if not problem.space[n].is_finite)
    if continuous:
        raise ValueError(
            f"the objective uses the continuous parameter(s) {continuous}: optimisation ranges over "
            "finite values; give them a step (Float(..., step=...))"
        )
    if outside:  # parameters no constraint reads: search over them too
        with problem._lock:
            engine = comp.extra_engines.get(frozenset(outside)) or problem._engine(outside)
            comp.extra_engines[frozenset(outside)] = engine
    dom = engine.domain
    lo, hi, cfg = _fixed_box(problem, given, dom)
    box = engine._box
    engine = _view(problem, cfg, engine)
    f_int = compile_interval([expr], box=box)
    f_vec = compile_vectorized([expr], box=box)
    bounds = interval_bound(engine, f_int)

    def lower(blo: np.ndarray, bhi: np.ndarray) -> np.ndarray:
        a, b = bounds(blo, bhi)
        return sign * a if sign > 0 else sign * b

    def value(points: np.ndarray) -> np.ndarray:
        cols, _ = dom.value_columns(points)
        (v,) = f_vec(cols)
        return sign * np.broadcast_to(np.asarray(v, dtype=np.float64), (len(points),))

    best, val, proven = engine.minimize(lo, hi, lower, value)
    if best is None:
        return None
    config = dom.decode_point(best)
    config.update({k: v for k, v in cfg.items() if k not in config})
    for name in dom.free:
        config.setdefault(name, problem.space[name].values()[0])
    return Optimum(_ordered(problem, config), sign * val, proven)
