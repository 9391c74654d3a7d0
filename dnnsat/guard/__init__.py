"""Per-trial decisions of a sampler or tuner wrapper over a :class:`~dnnsat.Problem`: the :class:`Guard`
(``Problem.guard()``), what every adapter does with a tool's proposals, and their shared helpers."""

from ._decisions import Decision, DecisionCounts, GuardStats
from ._few_changes import Moves, nearest_changes
from ._guard import DEFAULT_SEED, Guard, sampled_witnesses
from ._pickling import RebuiltOnUnpickle, SharedCounters
from ._proposals import (
    ProposalStats,
    SampleCheck,
    VetCounts,
    Vetted,
    check_sample,
    decision_counts,
    finished_constraints,
    vet,
)
from ._unlaunched import unlaunched
from ._verify import Verifier
from ._within import Within, same_choice

__all__ = [
    "DEFAULT_SEED",
    "Decision",
    "DecisionCounts",
    "Guard",
    "GuardStats",
    "Moves",
    "ProposalStats",
    "RebuiltOnUnpickle",
    "SampleCheck",
    "SharedCounters",
    "VetCounts",
    "Verifier",
    "Vetted",
    "Within",
    "check_sample",
    "decision_counts",
    "finished_constraints",
    "nearest_changes",
    "same_choice",
    "sampled_witnesses",
    "unlaunched",
    "vet",
]
