"""A tool's proposals checked over a :class:`~dnnsat.guard.Guard`: what every sampler or tuner
wrapper does, whatever its tool.

:class:`ProposalStats` counts the outcomes of per-parameter proposals (:func:`decision_counts` maps a
:class:`~dnnsat.guard.Decision` to its counters); :func:`check_sample` keeps or repairs a proposal of
several parameters at once (a relative sample), keeping the parameters already decided;
:func:`vet` checks a whole configuration and repairs it on request (:class:`VetCounts` counts its
outcomes); :func:`finished_constraints`
gives the constraint values of a finished configuration and adds a feasible one to the witness pool.
The adapters keep only their tool's terms (distributions, ids, attributes) around these answers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ._decisions import DecisionCounts

if TYPE_CHECKING:
    from ._decisions import Decision
    from ._guard import Guard
    from ._within import Within

__all__ = [
    "ProposalStats",
    "SampleCheck",
    "VetCounts",
    "Vetted",
    "check_sample",
    "decision_counts",
    "finished_constraints",
    "vet",
]


@dataclass
class ProposalStats(DecisionCounts):
    """Counters of the per-parameter proposals an adapter checked (one adapter, one process): the
    outcomes (:class:`~dnnsat.guard.DecisionCounts`, proposals of problem parameters, finite and
    continuous); ``verified`` counts configurations checked against the real module and
    ``disagreements`` those where it disagreed.
    """

    verified: int = 0
    disagreements: int = 0


def decision_counts(guard: Guard, name: str, decision: Decision) -> dict[str, float]:
    """The :class:`ProposalStats` increments of one :meth:`Guard.decide` answer for ``name``."""
    if decision.outcome == "unchecked":
        return {"unchecked": 1}
    if decision.outcome == "kept":
        return {"proposals": 1, "kept": 1}
    if decision.outcome == "dead_end":
        return {"proposals": 1, "dead_ends": 1}
    if guard.space[name].is_finite:
        return {"proposals": 1, "repaired": 1, "repair_steps": decision.steps}
    return {"proposals": 1, "repaired": 1, "float_repaired": 1}


@dataclass(frozen=True)
class SampleCheck:
    """What :func:`check_sample` did with a proposal of several parameters.

    ``repaired``: the proposal did not extend as a whole and was repaired; ``changes``: the parameters
    whose value changed and their new values (in the problem's domain); ``dead``: proposed parameters
    for which no feasible value within their limits was found (their proposals stand).
    """

    repaired: bool = False
    changes: dict[str, Any] = field(default_factory=dict)
    dead: int = 0


def check_sample(
    guard: Guard,
    sample: Mapping[str, Any],
    given: Mapping[str, Any],
    within: Mapping[str, Within],
    key: int = 0,
) -> SampleCheck:
    """Keep ``sample`` (problem parameters only) when, with the parameters already decided
    (``given``, which win over the sample), it extends to a feasible configuration; else repair it
    with :meth:`Guard.repair` keeping ``given``, every value in ``within`` (ties between single
    changes: the earlier parameter in the space's order)."""
    fixed = guard.clean(given)
    proposed = {k: v for k, v in sample.items() if k not in fixed}
    candidate = {**proposed, **fixed}
    in_domain = all(guard.in_domain(k, v) for k, v in proposed.items())
    if in_domain and guard.is_extendable(guard.clean(candidate)):
        return SampleCheck()
    repaired = guard.repair(candidate, set(fixed), within=within, key=key, ties="order")
    changes: dict[str, Any] = {}
    dead = 0
    for k, old in proposed.items():
        new = None if repaired is None else repaired.get(k)
        if new is None or not within[k].contains(new):
            dead += 1  # no feasible value within the limits: the proposal stands
        elif not _same(guard, k, new, old):
            changes[k] = new
    return SampleCheck(True, changes, dead)


@dataclass(frozen=True)
class Vetted:
    """What :func:`vet` did with a whole configuration.

    ``outcome``: ``"feasible"`` (``config`` is the proposal), ``"repaired"`` (``config`` is its
    repair; ``float_moved``: a continuous ``Float`` value moved), ``"rejected"`` (infeasible, no repair
    asked; ``violations`` names the violated constraints) or ``"unrepairable"``; ``config`` is None for
    the last two.
    """

    config: dict[str, Any] | None
    outcome: str
    float_moved: bool = False
    violations: tuple[str, ...] = ()


def vet(guard: Guard, config: Mapping[str, Any], repair: bool) -> Vetted:
    """Check a complete configuration of problem parameters; when infeasible and ``repair``, replace
    it by ``problem.repair``'s answer (:meth:`Guard.repair`: fewest changed parameters, then the
    smallest moves)."""
    verdict = guard.problem.check(config)
    if verdict.feasible:
        return Vetted(dict(config), "feasible")
    if not repair:
        return Vetted(None, "rejected", violations=tuple(v.name for v in verdict.violations))
    fixed = guard.repair(config)
    if fixed is None:
        return Vetted(None, "unrepairable")
    space = guard.space
    moved = any(not space[n].is_finite and fixed.get(n) != v for n, v in config.items())
    return Vetted(dict(fixed), "repaired", moved)


@dataclass
class VetCounts:
    """Outcomes of whole configurations a tool proposed: ``proposals`` (counted by the caller, also
    those it could not read), ``feasible`` as proposed, ``repaired`` (``float_repairs``: the part in
    which a continuous ``Float`` moved) and ``rejected`` (discarded: rejected, unrepairable or
    unreadable)."""

    proposals: int = 0
    feasible: int = 0
    repaired: int = 0
    float_repairs: int = 0
    rejected: int = 0

    def count(self, vetted: Vetted | None) -> None:
        """Count one :func:`vet` answer (None: a proposal that could not be read)."""
        if vetted is None or vetted.config is None:
            self.rejected += 1
        elif vetted.outcome == "feasible":
            self.feasible += 1
        else:
            self.repaired += 1
            self.float_repairs += vetted.float_moved


def finished_constraints(guard: Guard, params: Mapping[str, Any]) -> dict[str, float] | None:
    """``problem.constraint_values`` (<= 0: satisfied) of a finished trial's parameters; None when
    they hold no complete configuration (the trial stopped early: nothing exact to tell). A feasible
    configuration joins the Guard's witness pool."""
    config = guard.clean(params)
    if not config or guard.missing(config):
        return None
    values = guard.problem.constraint_values(config)
    if all(v <= 0 for v in values.values()):
        guard.add_witness(config)
    return {str(k): float(v) for k, v in values.items()}


def _same(guard: Guard, name: str, a: Any, b: Any) -> bool:
    param = guard.space[name]
    try:
        return bool(param.encode(a) == param.encode(b))
    except Exception:
        return False
