"""Optuna integration: a sampler wrapper that never proposes an infeasible configuration, and helpers.

``DnnSATSampler(problem, base_sampler)`` forward-checks every proposal of any Optuna sampler;
``suggest(trial, space)`` suggests a whole space; ``feasible_grid(problem)`` feeds GridSampler;
``reject_infeasible(problem)`` guards objectives against infeasible enqueued parameters.
Needs the ``optuna`` extra (``pip install dnnsat[optuna]``).
"""

from ._cache import ProblemMismatchError, PrunedSpace, prune_count_key, pruned_space_key
from ._demo import demo_study
from ._grid import FeasibleGrid, feasible_grid
from ._reject import infeasibility, reject_infeasible
from ._sampler import CONSTRAINT_ATTR_PREFIX, DnnSATSampler, SamplerStats
from ._suggest import distribution, distributions, suggest
from ._trials import REFUSED_ATTR

__all__ = [
    "CONSTRAINT_ATTR_PREFIX",
    "DnnSATSampler",
    "FeasibleGrid",
    "ProblemMismatchError",
    "PrunedSpace",
    "REFUSED_ATTR",
    "SamplerStats",
    "demo_study",
    "distribution",
    "distributions",
    "feasible_grid",
    "infeasibility",
    "prune_count_key",
    "pruned_space_key",
    "reject_infeasible",
    "suggest",
]
