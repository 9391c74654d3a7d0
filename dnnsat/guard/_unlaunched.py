"""A feasible configuration an adapter has not launched yet, chosen by dnnsat itself.

A wrapper whose tool keeps proposing configurations already launched (a repair maps many proposals
onto one configuration; a small feasible set runs out) asks for a new one instead of ending the
search early: :func:`unlaunched`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from ._guard import Guard

__all__ = ["unlaunched"]

#: Uniform samples (or ``Float`` redraws) tried before enumerating.
_DRAWS = 32


def unlaunched(
    guard: Guard,
    is_new: Callable[[dict[str, Any]], bool],
    rng: np.random.Generator,
    like: Mapping[str, Any] | None,
    limit: int,
) -> dict[str, Any] | None:
    """The first feasible configuration for which ``is_new`` holds, or None.

    Tried in order: 32 uniform samples of the feasible set (from ``problem.sample``'s decomposition,
    seeded from ``rng``); when continuous ``Float`` parameters occur in constraints (``sample`` draws
    finite parameters only), 32 variants of ``like`` with one ``Float`` redrawn
    (:meth:`Guard.redraw_floats`); then, for spaces of finite parameters only, the first ``limit``
    configurations in enumeration order (the caller passes one more than it has launched, so a new
    one is among them when one exists).
    """
    problem = guard.problem
    try:
        # the decomposition's draws (those of earlier releases: the adapters' trial sequences stay the same)
        candidates = problem._sample_decomposed(_DRAWS, seed=int(rng.integers(2**31)))
    except ValueError:
        candidates = [] if like is None else guard.redraw_floats(like, _DRAWS, rng)
    for config in candidates:
        if is_new(dict(config)):
            return dict(config)
    space = guard.space
    if all(space[n].is_finite for n in space.names):
        for config in problem.enumerate(limit=limit):
            if is_new(dict(config)):
                return dict(config)
    return None
