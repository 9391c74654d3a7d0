"""Feasible grids for Optuna's GridSampler (and the list of feasible configs behind them)."""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ._values import within

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution
    from optuna.study import Study
    from optuna.trial import FrozenTrial

    from dnnsat import Problem
    from dnnsat.guard import Guard

__all__ = ["FeasibleGrid", "GridPlanner", "feasible_grid"]

_Key = tuple[tuple[str, Any], ...]


class FeasibleGrid(dict[str, list[Any]]):
    """``{name: values}`` for ``optuna.samplers.GridSampler``, plus ``configs``: every feasible config.

    GridSampler takes one list per parameter and visits their Cartesian product, so when constraints
    couple parameters the product still holds infeasible points: wrap it,
    ``DnnSATSampler(problem, GridSampler(grid))``, which visits exactly ``grid.configs`` (each once)
    and stops the study when they are done (for spaces without conditions; with conditions it
    forward-checks each grid value instead, which keeps trials feasible but may repeat configs).
    ``configs`` also serves ``study.enqueue_trial`` (any sampler) and objectives that index a config
    list (e.g. with BruteForceSampler).
    """

    configs: list[dict[str, Any]]


def feasible_grid(
    problem: Problem,
    given: Mapping[str, Any | Sequence[Any]] | None = None,
    *,
    limit: int = 100_000,
) -> FeasibleGrid:
    """The feasible part of a grid over the problem's finite parameters.

    ``given`` narrows parameters to one value or a list of values (continuous ``Float`` parameters
    must be given, GridSampler needs finite lists). The box (full domains narrowed by ``given``) may
    hold at most ``limit`` points; a larger one raises ``ValueError`` (GridSampler materialises the
    whole product). Every value of the result occurs in some feasible config; ``configs`` lists the
    feasible configs in depth-first order of the space (inactive conditional parameters omitted).
    """
    space = problem.space
    given = dict(given or {})
    unknown = [k for k in given if k not in set(space.names)]
    if unknown:
        raise ValueError(f"feasible_grid: unknown parameter(s) {unknown}; parameters: {space.names}")
    box: dict[str, list[Any]] = {}
    for name in space.names:
        param = space[name]
        if name in given:
            raw = given[name]
            values = list(raw) if isinstance(raw, Sequence) and not isinstance(raw, str | bytes) else [raw]
            box[name] = [param.decode(param.encode(v)) if param.is_finite else float(v) for v in values]
        elif param.is_finite:
            box[name] = list(param.values())
        else:
            raise ValueError(
                f"feasible_grid: {name!r} is continuous; give it a value list, e.g. given={{{name!r}: [...]}}"
            )
    size = math.prod(len(v) for v in box.values())
    if size > limit:
        raise ValueError(
            f"feasible_grid: the grid box has {size:.3g} points (> limit={limit}); "
            "narrow it with given={name: [values]} or raise limit"
        )

    configs = problem.guard().feasible_configs(box)
    if not configs:
        raise ValueError(f"feasible_grid: no feasible configuration in the grid box {box}")
    grid = FeasibleGrid()
    for name in space.names:
        seen = {space[name].encode(c[name]) for c in configs if name in c}
        grid[name] = [v for v in box[name] if space[name].encode(v) in seen]
    grid.configs = configs
    return grid


class GridPlanner:
    """What ``DnnSATSampler`` does with GridSampler: one feasible, unvisited grid point per trial.

    GridSampler fixes the whole point in ``before_trial`` (system attributes ``grid_id`` and
    ``search_space``), so per-parameter repairs would create duplicates and leave infeasible grid
    points unvisited forever. Instead an infeasible or already visited point is swapped for the
    closest unvisited feasible config of the same grid, and the study stops once none is left.
    """

    def __init__(self, problem: Problem) -> None:
        self._problem = problem
        self._space = problem.space
        self._names = frozenset(self._space.names)
        self._conditional = any(self._space[n].condition for n in self._space.names)
        self._lock = threading.Lock()
        self._cache: dict[str, list[dict[str, Any]] | None] = {}

    def point(
        self,
        study: Study,
        trial: FrozenTrial,
        grid: Mapping[str, list[Any]],
        guard: Guard,
        propose: Callable[[Mapping[str, BaseDistribution]], dict[str, Any]],
        running: Mapping[int, Mapping[str, Any]],
    ) -> tuple[dict[str, Any] | None, bool, float | None]:
        """(config, kept, repair steps) of a grid trial; None when the grid does not cover the problem
        (then each parameter is checked on its own).

        ``propose`` asks the base sampler for the grid point, ``running`` maps the ids of running
        trials to their decided points. ``kept``:
        the base sampler's point is used; repair steps (None unless the point was swapped for the
        closest unvisited feasible one) count positions moved.
        """
        from optuna.distributions import CategoricalDistribution

        configs = self._configs(grid)
        if configs is None:
            return None, False, None
        dists = {k: CategoricalDistribution(v) for k, v in grid.items() if v}
        point = propose(dists)
        known = guard.clean(point)
        visited = self._visited(study, trial, set(known), guard, running)
        key = self._key(known)
        if key in {self._key(c) for c in configs} and key not in visited:
            return point, True, None
        fresh = [c for c in configs if self._key(c) not in visited]
        if fresh:
            best = min(fresh, key=lambda c: self._distance(guard, known, c))
            return {**point, **best}, False, self._distance(guard, known, best)[1]
        if not guard.is_extendable(known):  # repaired within the grid's values
            limits = {k: within(d) for k, d in dists.items() if k in self._names}
            known = guard.repair(known, (), within=limits, key=trial.number, ties="order") or known
        with contextlib.suppress(RuntimeError):
            study.stop()  # every feasible grid config has been visited
        return {**point, **known}, False, None

    def stop_if_done(
        self, study: Study, trial: FrozenTrial, guard: Guard, running: Mapping[int, Mapping[str, Any]]
    ) -> None:
        """Stop the study once every feasible config of the trial's grid has been evaluated."""
        grid = trial.system_attrs.get("search_space")
        configs = self._configs(grid) if isinstance(grid, dict) else None
        if not configs:
            return
        names = set(configs[0])
        visited = self._visited(study, trial, names, guard, running)
        visited.add(self._key(guard.clean({k: v for k, v in trial.params.items() if k in names})))
        if all(self._key(c) in visited for c in configs):
            with contextlib.suppress(RuntimeError):  # outside study.optimize (ask/tell): nothing to stop
                study.stop()

    def _configs(self, grid: Mapping[str, list[Any]]) -> list[dict[str, Any]] | None:
        """Feasible configs of a GridSampler grid; None unless it spans every problem parameter."""
        key = repr(sorted((k, list(v)) for k, v in grid.items()))
        with self._lock:
            if key in self._cache:
                return self._cache[key]
        hit: list[dict[str, Any]] | None = None
        if not self._conditional and all(k in grid for k in self._space.names):
            try:
                hit = feasible_grid(
                    self._problem, {k: grid[k] for k in self._space.names}, limit=10**7
                ).configs
            except ValueError:
                hit = None  # empty or huge: fall back to parameter-wise forward checking
        with self._lock:
            self._cache[key] = hit
        return hit

    def _key(self, config: Mapping[str, Any]) -> _Key:
        return tuple(sorted((k, self._space[k].encode(v)) for k, v in config.items() if k in self._names))

    def _visited(
        self,
        study: Study,
        trial: FrozenTrial,
        names: set[str],
        guard: Guard,
        running: Mapping[int, Mapping[str, Any]],
    ) -> set[_Key]:
        from optuna.trial import TrialState

        states = (TrialState.RUNNING, TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
        out = set()
        for t in study._storage.get_all_trials(study._study_id, deepcopy=False, states=states):
            if t._trial_id == trial._trial_id:
                continue
            params = (running.get(t._trial_id) if t.state == TrialState.RUNNING else None) or t.params
            out.add(self._key(guard.clean({k: v for k, v in params.items() if k in names})))
        return out

    def _distance(self, guard: Guard, a: Mapping[str, Any], b: Mapping[str, Any]) -> tuple[int, float]:
        changed, steps = 0, 0.0
        for k in set(a) | set(b):
            if k not in a or k not in b:
                changed += 1
                steps += 1.0
            elif self._space[k].encode(a[k]) != self._space[k].encode(b[k]):
                changed += 1
                steps += guard.steps(k, a[k], b[k])
        return changed, steps
