"""Feasible grids for Optuna's GridSampler (and the list of feasible configs behind them)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dnnsat import Problem

__all__ = ["FeasibleGrid", "feasible_grid"]


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

    order = list(space.conditional_order)
    if not any(space[n].condition for n in order) and all(space[n].is_finite for n in order):
        configs = _vectorized(problem, box)
    else:
        configs = _forward_checked(problem, box)
    if not configs:
        raise ValueError(f"feasible_grid: no feasible configuration in the grid box {box}")
    grid = FeasibleGrid()
    for name in space.names:
        seen = {space[name].encode(c[name]) for c in configs if name in c}
        grid[name] = [v for v in box[name] if space[name].encode(v) in seen]
    grid.configs = configs
    return grid


def _vectorized(problem: Problem, box: dict[str, list[Any]], chunk: int = 200_000) -> list[dict[str, Any]]:
    """Every feasible point of the box, checked in vectorized chunks (unconditional spaces)."""
    import numpy as np

    names = list(box)
    sizes = [len(box[n]) for n in names]
    total = math.prod(sizes)
    out: list[dict[str, Any]] = []
    for start in range(0, total, chunk):
        flat = np.arange(start, min(total, start + chunk))
        idx = np.unravel_index(flat, sizes)
        columns = {n: np.asarray(box[n], dtype=object)[i] for n, i in zip(names, idx)}
        ok = problem.check_batch({n: np.array(c.tolist()) for n, c in columns.items()})
        for r in np.flatnonzero(ok):
            out.append({n: columns[n][r] for n in names})
    return out


def _forward_checked(problem: Problem, box: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Depth-first over the space with forward checking (conditional spaces, continuous values)."""
    space = problem.space
    order = list(space.conditional_order)
    configs: list[dict[str, Any]] = []

    def walk(i: int, partial: dict[str, Any]) -> None:
        while i < len(order) and not space.is_active(order[i], partial):
            i += 1
        if i == len(order):
            configs.append(dict(partial))
            return
        name = order[i]
        param = space[name]
        if param.is_finite:
            feasible = problem.feasible_values(name, dict(partial))
            encoded = {param.encode(v) for v in feasible}
            candidates = [v for v in box[name] if param.encode(v) in encoded]
        else:
            candidates = box[name]
        for value in candidates:
            partial[name] = value
            walk(i + 1, partial)
            del partial[name]

    walk(0, {})
    if any(not space[n].is_finite for n in order):  # continuous values are not forward-checked
        configs = [c for c in configs if problem.check(c).feasible]
    return configs
