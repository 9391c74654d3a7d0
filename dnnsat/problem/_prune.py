"""``prune``: the reduced space of every value that occurs in some feasible configuration."""

from __future__ import annotations

import dataclasses
import time
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np

from ..space import Categorical, Float, Int, Space
from ._args import check_seconds
from ._count import TIME_LIMIT
from ._explain import _raise_empty
from ._results import PartialResultWarning
from ._search import _fixed_box

if TYPE_CHECKING:
    from ._problem import Problem


def prune(problem: Problem, max_seconds: float | None = TIME_LIMIT) -> Space:
    """Implements :meth:`Problem.prune`."""
    limit = check_seconds(max_seconds, "prune")
    deadline = None if limit is None else time.perf_counter() + limit
    comp = problem._c()
    dom = comp.domain
    if dom.ndim == 0:
        if problem.is_empty():
            _raise_empty(problem)
        return _narrow_floats(problem, problem.space)
    roots_lo: list[np.ndarray] = []
    roots_hi: list[np.ndarray] = []
    owner: list[tuple[int, int]] = []
    for d, name in enumerate(dom.names):
        if deadline is not None and time.perf_counter() > deadline:
            break  # the roots not built are undecided (kept)
        # a conditional parameter's value occurs only where it is active: parents restricted to that
        base_lo, base_hi, _ = _fixed_box(problem, {}, dom, active=[name])
        n, m = int(dom.sizes[d]), len(base_lo)
        lo, hi = np.repeat(base_lo, n, axis=0), np.repeat(base_hi, n, axis=0)
        lo[:, d] = hi[:, d] = np.tile(np.arange(n), m)
        roots_lo.append(lo)
        roots_hi.append(hi)
        owner.extend((d, j) for _ in range(m) for j in range(n))
    status = np.zeros(0, dtype=np.int8)
    if roots_lo:
        status, _ = comp.engine.exists(np.concatenate(roots_lo), np.concatenate(roots_hi), deadline=deadline)
    unbuilt = [(d, j) for d in range(len(roots_lo), dom.ndim) for j in range(int(dom.sizes[d]))]
    owner.extend(unbuilt)
    status = np.concatenate([status, np.full(len(unbuilt), -1, dtype=status.dtype)])
    if deadline is not None and time.perf_counter() > deadline and (status == -1).any():
        warnings.warn(
            f"prune stopped at its time limit (max_seconds={limit:g}) with {int((status == -1).sum())} "
            "(parameter, value) pairs undecided: they are kept, so the pruned space is sound but may "
            "keep values no feasible configuration uses; raise max_seconds (None: no limit)",
            PartialResultWarning,
            stacklevel=3,
        )
    found = {(d, j) for (d, j), s in zip(owner, status) if s != 0}
    keep: dict[int, list[int]] = {d: sorted(j for e, j in found if e == d) for d in range(dom.ndim)}
    # a conditional parameter may keep no value (never active in a feasible configuration: it is
    # dropped below); an unconditional one keeping none means nothing is feasible
    unconditional = [d for d, n in enumerate(dom.names) if not problem.space[n].condition]
    if not any(keep.values()) or any(not keep[d] for d in unconditional):
        _raise_empty(problem)
    params: dict[str, Any] = {}
    kept_values = {name: {dom.values[d][j].item() for j in keep[d]} for name, d in dom.index.items()}
    for name in problem.space.conditional_order:
        p = problem.space[name]
        cond: dict[str, tuple[Any, ...]] | None = None
        if p.condition:
            cond = {  # a parent outside the search (a pass-through child's) keeps every value
                parent: tuple(
                    v
                    for v in values
                    if parent not in kept_values or problem.space[parent].encode(v) in kept_values[parent]
                )
                for parent, values in p.condition.items()
            }
            if any(not vals or parent not in params for parent, vals in cond.items()):
                continue  # never active in a feasible configuration
        dim = dom.index.get(name)
        if dim is None or len(keep[dim]) == len(dom.values[dim]):
            params[name] = dataclasses.replace(p, condition=cond) if cond else p
            continue
        idx = keep[dim]
        users = [p.decode(dom.values[dim][j].item()) for j in idx]
        contiguous = idx == list(range(idx[0], idx[-1] + 1))
        if isinstance(p, Int) and contiguous:
            params[name] = Int(users[0], users[-1], step=p.step, log=p.log, condition=cond)
        elif isinstance(p, Float) and contiguous and p.step is not None:
            params[name] = Float(users[0], users[-1], step=p.step, condition=cond)
        else:
            order = [c for c in (p.choices if isinstance(p, Categorical) else users) if c in users]
            params[name] = Categorical(order, condition=cond)
    return _narrow_floats(problem, Space({n: params[n] for n in problem.space if n in params}))


def _narrow_floats(problem: Problem, space: Space) -> Space:
    """``space`` with each constrained continuous Float narrowed to the hull of its feasible values."""
    params = {n: space[n] for n in space}
    for name in problem._c().domain.continuous:
        p = params.get(name)
        spans = problem.feasible_intervals(name) if p is not None else []
        if spans and isinstance(p, Float) and (spans[0][0], spans[-1][1]) != p.bounds():
            params[name] = Float(spans[0][0], spans[-1][1], log=p.log, condition=p.condition)
    return Space(params)
