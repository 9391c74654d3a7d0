"""What a :class:`~dnnsat.guard.Guard` decided about a proposed value, and the counters of its outcomes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Decision", "DecisionCounts", "GuardStats"]


@dataclass
class DecisionCounts:
    """Outcomes of per-parameter decisions: ``proposals``, ``kept``, ``repaired`` (``float_repaired``:
    the part that moved a continuous ``Float``; ``repair_steps``: the positions finite values moved in
    their ordered value lists, 1 for an unordered categorical), ``dead_ends`` (no value could rescue the
    proposal) and ``unchecked`` (the problem cannot judge it)."""

    proposals: int = 0
    kept: int = 0
    repaired: int = 0
    float_repaired: int = 0
    repair_steps: float = 0.0
    dead_ends: int = 0
    unchecked: int = 0

    @property
    def mean_repair_steps(self) -> float:
        """Mean positions moved by a repair of a finite parameter (0 without one)."""
        finite = self.repaired - self.float_repaired
        return self.repair_steps / finite if finite else 0.0


@dataclass
class GuardStats(DecisionCounts):
    """Counters of one Guard: the outcomes of :meth:`Guard.decide` (:class:`DecisionCounts`);
    ``repairs``: calls of :meth:`Guard.repair` that changed something;
    ``pool_hits``/``enumerations``/``one_change_repairs``/``two_change_repairs``/``solver_calls``:
    which path answered.
    """

    repairs: int = 0
    pool_hits: int = 0
    enumerations: int = 0
    one_change_repairs: int = 0
    two_change_repairs: int = 0
    solver_calls: int = 0


@dataclass(frozen=True)
class Decision:
    """What :meth:`Guard.decide` did with a proposal.

    ``outcome``: ``"kept"`` (``value`` is the proposal itself), ``"repaired"`` (the nearest value that
    extends), ``"dead_end"`` (no value extends; ``value`` is None) or ``"unchecked"`` (the parameter is
    inactive, or ``within`` holds no value of its domain; ``value`` is the proposal). ``steps``: for a
    repaired finite parameter, positions moved in its ordered value list (1 for unordered choices).
    """

    value: Any
    outcome: str
    steps: float = 0.0
