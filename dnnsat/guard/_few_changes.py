"""Repairs that change one or two parameters, found by vectorized checks instead of a search.

Most infeasible proposals of a tuner lie one or two steps from a feasible configuration.
``problem.repair`` finds the nearest feasible one with a search over boxes (interval bounds per subset
of changed parameters, then branch and bound), tens to hundreds of milliseconds on large memory
constraints. Here every configuration that changes one parameter, and every one that changes two, are
checked in one ``check_batch`` call. A unique nearest feasible candidate is exactly ``problem.repair``'s
answer (its objective: fewest changed parameters, then the summed index distance over the domain's
length - 1); on a tie, or when two changes do not suffice, the caller lets ``problem.repair`` decide.

Finite parameters of spaces without conditions only: candidate values come from the pruned domains
(every value of every feasible configuration is there). Pairs are tried only when every parameter is
ordered (unordered choices make equally distant pairs, i.e. ties, common) and few pairs exist.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ..problem import Problem
    from ..space import Space

__all__ = ["Moves", "nearest_changes"]

#: Two changes are tried only up to this many pairs of moves: one call checks them all (about 15 ms
#: CPU for 4096 on the zoo GPT's training memory, where ``problem.repair``'s search takes 100-250 ms;
#: resnet-memory's 10.6k pairs cost more than its search).
MAX_PAIRS = 4096
#: Objective values closer than this are a tie (``problem.repair``'s search then decides).
_TIE = 1e-9


@dataclass(frozen=True)
class Moves:
    """The single-parameter moves of a configuration: row ``r`` sets parameter ``names[param[r]]`` to
    ``values[param[r]][choice[r]]`` at distance ``dist[r]``; rows in the space's order, then the
    pruned domain's order."""

    names: list[str]
    values: list[list[Any]]
    param: np.ndarray
    choice: np.ndarray
    dist: np.ndarray
    ordered: bool

    @classmethod
    def of(
        cls,
        space: Space,
        candidate: Mapping[str, Any],
        order: Sequence[str],
        domains: Mapping[str, Sequence[Any]],
        keep: set[str],
        by_length: bool,
    ) -> Moves:
        """Moves of each parameter of ``candidate`` (in ``order``, not in ``keep``) to another value of
        its pruned domain (``domains``); distance: positions in the parameter's value list over its
        length (``by_length``) or its length - 1."""
        names: list[str] = []
        values: list[list[Any]] = []
        param: list[int] = []
        choice: list[int] = []
        dist: list[float] = []
        for k in order:
            if k in keep or k not in candidate:
                continue
            p = space[k]
            index = {p.encode(v): i for i, v in enumerate(p.values())}
            origin = index[p.encode(candidate[k])]
            scale = len(index) if by_length else max(len(index) - 1, 1)
            moved = [(v, abs(index[p.encode(v)] - origin) / scale) for v in domains.get(k, [])]
            moved = [(v, d) for v, d in moved if d > 0]
            if not moved:
                continue
            param += [len(names)] * len(moved)
            choice += range(len(moved))
            dist += [d for _, d in moved]
            names.append(k)
            values.append([v for v, _ in moved])
        ordered = all(space[k].labels is None for k in names)
        as_int = functools.partial(np.array, dtype=np.int64)
        return cls(names, values, as_int(param), as_int(choice), np.array(dist, dtype=np.float64), ordered)


def nearest_changes(
    problem: Problem,
    candidate: Mapping[str, Any],
    moves: Moves,
    ties: str,
) -> tuple[dict[str, Any] | None, int]:
    """The best feasible configuration that changes one parameter of ``candidate`` (a complete
    infeasible configuration), else two (``ties="solver"`` only); returns it and the number of changed
    parameters, or ``(None, 0)`` when none is found or (``ties="solver"``) two are equally good.

    ``ties="order"``: ties between single changes go to the earlier row of ``moves``. Single changes
    are checked in one call; pairs (when tried, see the module's docstring) in a second one, only when
    no single change is feasible.
    """
    n = len(moves.dist)
    if not n:
        return None, 0
    singles = np.stack([np.arange(n), np.full(n, -1)], axis=1)  # rows of move indices (-1: none)
    hits = np.flatnonzero(_feasible(problem, candidate, moves, singles))
    if len(hits):
        d = moves.dist[hits]
        if ties == "solver" and len(hits) > 1 and np.sort(d)[1] - d.min() <= 1e-12:
            return None, 0
        return _apply(candidate, moves, [int(hits[np.argmin(d)])]), 1  # argmin: the first of ties
    if ties != "solver" or not moves.ordered:
        return None, 0
    pairs, dist = _pairs(moves)
    if not len(pairs) or len(pairs) > MAX_PAIRS:
        return None, 0
    hits = np.flatnonzero(_feasible(problem, candidate, moves, pairs))  # pairs nearest first
    if not len(hits) or len(hits) > 1 and dist[hits[1]] - dist[hits[0]] <= _TIE:
        return None, 0  # none, or a tie (problem.repair's search decides)
    return _apply(candidate, moves, [int(m) for m in pairs[hits[0]]]), 2


def _pairs(moves: Moves) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of moves of two different parameters (rows of move indices), nearest first (ties in
    row order), and their summed distances."""
    a, b = np.triu_indices(len(moves.dist), k=1)
    keep = moves.param[a] != moves.param[b]
    a, b = a[keep], b[keep]
    dist = moves.dist[a] + moves.dist[b]
    order = np.argsort(dist, kind="stable")
    return np.stack([a[order], b[order]], axis=1), dist[order]


def _feasible(problem: Problem, candidate: Mapping[str, Any], moves: Moves, rows: np.ndarray) -> np.ndarray:
    """Feasibility of ``candidate`` with each row's moves applied (``rows[r]``: move indices, -1 for
    none), in one vectorized check."""
    n = len(rows)
    columns: dict[str, np.ndarray] = {}
    for k, v in candidate.items():
        # dtype=object: a numpy string array would be fixed-width and cut longer labels ("skip_connect")
        columns[k] = np.empty(n, dtype=object)
        columns[k][:] = [v] * n
    values = np.empty(len(moves.dist), dtype=object)
    values[:] = [moves.values[p][c] for p, c in zip(moves.param, moves.choice)]
    for m in rows.T:
        on = m >= 0
        for p, name in enumerate(moves.names):
            at = np.flatnonzero(on & (moves.param[np.maximum(m, 0)] == p))
            columns[name][at] = values[m[at]]
    return problem.check_batch(columns, validate=False)


def _apply(candidate: Mapping[str, Any], moves: Moves, chosen: Sequence[int]) -> dict[str, Any]:
    """``candidate`` with the moves of the given indices applied."""
    out = dict(candidate)
    for m in chosen:
        p = int(moves.param[m])
        out[moves.names[p]] = moves.values[p][int(moves.choice[m])]
    return out
