"""Why nothing, or a given configuration, is feasible: emptiness, the unsat core of the constraints and
the minimal conflicting assignments of a configuration (``explain``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ..expr import interval
from ..solver._boxes import Domain
from ._format import _cfg_text, _fmt
from ._results import Explanation, InfeasibleSpaceError

if TYPE_CHECKING:
    from ._problem import Problem


def _raise_empty(problem: Problem) -> None:
    core = problem.unsat_core()
    raise InfeasibleSpaceError(
        f"no configuration satisfies the constraints; conflicting: {', '.join(core) or '(all)'}", core
    )


def is_empty(problem: Problem) -> bool:
    """Implements :meth:`Problem.is_empty`."""
    comp = problem._c()
    lo, hi = comp.domain.root()
    status, _ = comp.engine.exists(lo, hi)
    return bool(status[0] == 0)


def unsat_core(problem: Problem) -> list[str]:
    """Implements :meth:`Problem.unsat_core`."""
    comp = problem._c()
    symbolic = [c for c in problem.constraints if c.expr is not None]
    lo, hi = comp.domain.root()
    mask = np.ones(len(symbolic), dtype=bool)
    if comp.engine.exists(lo, hi, mask)[0][0] != 0:
        if problem.is_empty():  # only the opaque predicates conflict
            return [c.name for c in problem.constraints if c.predicate is not None]
        return []
    for i in range(len(symbolic)):
        mask[i] = False
        if comp.engine.exists(lo, hi, mask)[0][0] != 0:
            mask[i] = True
    return [c.name for c, m in zip(symbolic, mask) if m]


def explain(problem: Problem, config: Mapping[str, Any]) -> Explanation | None:
    """Implements :meth:`Problem.explain`."""
    verdict = problem.check(config)
    if verdict.feasible:
        return None
    comp = problem._c()
    dom = comp.domain
    cfg = problem.space.validate(config)
    enc = dom.encode_config({k: v for k, v in cfg.items() if problem.space.is_active(k, cfg)})
    core = dict(enc)
    if comp.engine.exists(*dom.box_with(core))[0][0] != 0:
        # only opaque predicates (or inactive-value effects) reject it: the whole config is the core
        names = [v.name for v in verdict.violations]
        return Explanation(dict(cfg), names, f"{_cfg_text(cfg)} violates {', '.join(names)}")
    for name in sorted(enc, key=lambda n: dom.sizes[dom.index[n]]):
        trial = {k: v for k, v in core.items() if k != name}
        if comp.engine.exists(*dom.box_with(trial))[0][0] == 0:
            core = trial
    lo, hi = dom.box_with(core)
    symbolic = [c for c in problem.constraints if c.expr is not None]
    blame = []
    for i, c in enumerate(symbolic):
        mask = np.zeros(len(symbolic), dtype=bool)
        mask[i] = True
        if comp.engine.exists(lo, hi, mask)[0][0] == 0:
            blame.append(c)
    if not blame:
        blame = [c for c in symbolic if c.name in {v.name for v in verdict.violations}]
    user_core = {n: cfg[n] for n in problem.space if n in core}
    reasons = []
    for c in blame:
        if c.lhs is not None and c.limit is not None:
            b_lo, b_hi = interval([c.lhs], _box_bounds(problem, dom, lo, hi))[id(c.lhs)]
            side = "smallest" if c.sense in ("<=", "<") else "largest"
            best = b_lo if c.sense in ("<=", "<") else b_hi
            reasons.append(
                f"{c.name} {c.sense} {_fmt(c.limit, c.name)} "
                f"(the {side} {c.name} possible is {_fmt(best, c.name)})"
            )
        else:
            auto_name = c.name.startswith("c") and c.name[1:].isdigit()
            reasons.append(f"{c.name} ({c.expr})" if auto_name else c.name)
    sentence = (
        f"{_cfg_text(user_core) or 'the space itself'} alone cannot satisfy "
        + "; ".join(reasons or [v.name for v in verdict.violations])
        + ", whatever the other parameters are"
    )
    return Explanation(user_core, [c.name for c in blame], sentence)


def _box_bounds(problem: Problem, dom: Domain, lo: np.ndarray, hi: np.ndarray) -> dict[str, tuple[Any, Any]]:
    out: dict[str, tuple[Any, Any]] = {
        n: (dom.values[d][lo[0, d]].item(), dom.values[d][hi[0, d]].item()) for d, n in enumerate(dom.names)
    }
    out.update(dom.continuous)
    for n in dom.free:
        out[n] = problem.space[n].bounds()
    return out
