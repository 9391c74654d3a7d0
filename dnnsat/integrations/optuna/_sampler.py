"""DnnSATSampler: wraps any Optuna sampler so that every trial's configuration is feasible.

Optuna samples define-by-run, one parameter at a time. The wrapper lets the base sampler propose and
asks the problem's :class:`~dnnsat.Guard` about each proposal: kept when the parameters already fixed
in the trial plus the proposal extend to a feasible configuration, else replaced by the closest value
within the proposal's distribution that does. A relative sample (multivariate TPE, CMA-ES, GP, ...) is
checked and, if needed, repaired as a whole. Feasible proposals are kept unchanged, and when no
constraint can bind (``problem.always_feasible()``) nothing is recorded on the trials either, so the
wrapped sampler then gives exactly the bare sampler's sequence. What stays here is Optuna's: its
distributions, trial attributes, relative sampling, GridSampler and the pruned space stored on the study.

Thread-safe (``study.optimize(n_jobs=...)``): per-trial state lives in one object per trial, shared
counters are guarded by one lock, and the Guard is thread-safe itself. Picklable: the lock and the
study-bound state are dropped and rebuilt.
"""

from __future__ import annotations

import logging
import math
import secrets
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler
from optuna.trial import FrozenTrial, TrialState

from dnnsat.guard import (
    DEFAULT_SEED,
    Guard,
    ProposalStats,
    RebuiltOnUnpickle,
    SharedCounters,
    Verifier,
    Within,
    check_sample,
    decision_counts,
    finished_constraints,
)
from dnnsat.problem._args import check_seed

from ._cache import PrunedSpace, check_prune_timeout, load_or_compute_pruned_space
from ._grid import GridPlanner
from ._trials import TrialBook, fail_refused_trial
from ._values import as_distribution_value, within

if TYPE_CHECKING:
    from optuna.study import Study

    from dnnsat import Problem

__all__ = ["DnnSATSampler", "SamplerStats", "CONSTRAINT_ATTR_PREFIX"]

_logger = logging.getLogger("dnnsat.integrations.optuna")

#: Optuna 5 stores ``trial.set_constraint(key, value)`` as the trial system attribute ``constraints:<key>``.
CONSTRAINT_ATTR_PREFIX = "constraints:"
_FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
#: Attributes bound to a process or a study: dropped by pickling, rebuilt by ``_reset``.
_UNPICKLED = ("_lock", "_pruned", "_trials", "_grid")


@dataclass
class SamplerStats(ProposalStats):
    """Counters of one sampler instance (one process): :class:`~dnnsat.guard.ProposalStats`
    over independent proposals (a GridSampler point counts as one proposal; ``dead_ends`` also counts
    parameters of relative samples that no value could rescue, e.g. infeasible enqueued parameters),
    plus ``relative_*``: relative samples and their changed parameters; ``verified`` counts the
    configurations of :meth:`DnnSATSampler.verify`; ``overhead`` holds ``(trial number, wrapper
    seconds, base sampler seconds)``.
    """

    relative_samples: int = 0
    relative_params: int = 0
    relative_repaired: int = 0
    relative_changed_params: int = 0
    pruned_space_computed: bool | None = None
    overhead: deque[tuple[int, float, float]] = field(default_factory=lambda: deque(maxlen=100_000))

    @property
    def acceptance(self) -> float:
        """Share of the base sampler's proposed values (independent and relative) kept unchanged."""
        total = self.proposals + self.relative_params
        kept = self.kept + self.relative_params - self.relative_changed_params
        return kept / total if total else 1.0


class DnnSATSampler(RebuiltOnUnpickle, SharedCounters, BaseSampler):
    """Sampler wrapper that never proposes an infeasible configuration of ``problem``.

    Args:
        problem: the :class:`dnnsat.Problem`; parameters are matched by name, unknown ones pass through.
        base_sampler: any Optuna sampler (default ``TPESampler(seed=seed)``).
        seed: seeds the default TPE and the wrapper's own choice among unordered categorical values.
            Without it those choices are still deterministic (derived from the trial number and the
            parameter name), so a seeded base sampler alone gives a reproducible study;
            ``reseed_rng()`` draws fresh randomness for both.
        record_constraints: record ``problem.constraint_values`` of each finished trial as Optuna
            constraints (``constraints:<name>`` system attributes, <= 0 means satisfied), so
            constraint-aware samplers (TPE, NSGA-II, GP) learn how close trials are to the limits.
            Nothing is recorded when no constraint can bind (``problem.always_feasible()``).
        prune_timeout: seconds to wait for another worker that is computing the pruned space.
        allow_problem_change: accept a study whose recorded problem fingerprint differs from this
            problem's (by default a different problem on the same study is refused).
        verify: the :func:`dnnsat.from_torch` model the problem was built on (any object with
            ``disagreements(problem, config)``): :meth:`verify` then checks each trial's configuration
            against the real module (params, FLOPs, validity: one meta-device build and forward),
            counts it in ``stats.verified`` / ``stats.disagreements``, logs a warning and stores the
            lines in the trial's user attribute ``dnnsat:disagreements``. :func:`suggest` calls it before it
            returns the configuration, i.e. before the objective trains anything.
    """

    _unpickled = _UNPICKLED
    _log = _logger

    def __init__(
        self,
        problem: Problem,
        base_sampler: BaseSampler | None = None,
        seed: int | None = None,
        *,
        record_constraints: bool = True,
        prune_timeout: float = 600.0,
        cache_size: int = 200_000,
        enumerate_limit: int = 4096,
        allow_problem_change: bool = False,
        verify: Any = None,
    ) -> None:
        seed = check_seed(seed, "DnnSATSampler")
        if base_sampler is None:
            from optuna.samplers import TPESampler

            base_sampler = TPESampler(seed=seed)
        if not isinstance(base_sampler, BaseSampler):
            raise TypeError(f"base_sampler must be an optuna BaseSampler, got {type(base_sampler).__name__}")
        check_prune_timeout(prune_timeout)
        self._problem = problem
        self._space = problem.space
        self._base = base_sampler
        self._salt = DEFAULT_SEED if seed is None else seed % 2**64
        self._record = record_constraints
        self._prune_timeout = prune_timeout
        self._allow_problem_change = allow_problem_change
        self._cache_size = cache_size
        self._enumerate_limit = enumerate_limit
        self._names = frozenset(self._space.names)  # (``name in space`` raises for unknown names)
        self._always_feasible: bool | None = None  # problem.always_feasible(), asked once by prepare()
        self._warned: set[str] = set()
        self.stats = SamplerStats()
        self._verifier = None if verify is None else Verifier(verify, problem, _logger)
        self._reset()

    def _reset(self) -> None:
        """The lock and the state bound to a study or a process (rebuilt after unpickling)."""
        self._lock = threading.RLock()
        self._pruned: dict[tuple[int, int], tuple[PrunedSpace, Guard]] = {}
        self._trials = TrialBook(self._names)
        self._grid = GridPlanner(self._problem)

    def __str__(self) -> str:
        return f"DnnSATSampler({self._base})"

    @property
    def base_sampler(self) -> BaseSampler:
        return self._base

    @property
    def problem(self) -> Problem:
        return self._problem

    # -- pruned space ------------------------------------------------------------------------------
    def prepare(self, study: Study) -> PrunedSpace:
        """Load (or compute once per study) the pruned space; raises ``InfeasibleSpaceError`` if empty.

        Also asks ``problem.always_feasible()`` once per sampler (one-off work, kept out of the trials).
        Called automatically at the first trial; call it yourself to fail before any trial exists.
        """
        return self._prepared(study)[0]

    def _prepared(self, study: Study) -> tuple[PrunedSpace, Guard]:
        """The study's pruned space and the Guard over it."""
        key = (id(study._storage), study._study_id)
        hit = self._pruned.get(key)
        if hit is None:
            with self._lock:
                hit = self._pruned.get(key)
                if hit is None:
                    ps = load_or_compute_pruned_space(
                        study,
                        self._problem,
                        self._prune_timeout,
                        allow_problem_change=self._allow_problem_change,
                    )
                    limits = self._enumerate_limit, self._cache_size
                    hit = self._pruned[key] = (ps, ps.guard(self._problem, self._salt, *limits))
                    self.stats.pruned_space_computed = ps.computed
                    if self._always_feasible is None:
                        self._always_feasible = bool(self._problem.always_feasible())
        hit[0].raise_if_empty()
        return hit

    # -- BaseSampler -------------------------------------------------------------------------------
    def reseed_rng(self) -> None:
        self._base.reseed_rng()
        with self._lock:
            self._salt = secrets.randbits(63)
            for _, guard in self._pruned.values():
                guard.seed = self._salt

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        """Prepare the study (see :meth:`prepare`), then the base sampler's ``before_trial``.

        A refusal here (``InfeasibleSpaceError``, ``ProblemMismatchError``, a bad ``prune_timeout``, an
        error of the base sampler, Ctrl-C while waiting for the pruning) marks the trial Optuna has just
        created FAIL, with the reason in its system attribute ``dnnsat:refused``, and is re-raised: the
        objective never runs and no trial is left RUNNING.
        """
        t0 = time.perf_counter()
        try:
            self.prepare(study)
            t1 = time.perf_counter()
            self._base.before_trial(study, trial)
        except (Exception, KeyboardInterrupt) as err:
            fail_refused_trial(study._storage, trial, err)
            raise
        t2 = time.perf_counter()
        self._trials.charge(trial, base=t2 - t1, total=t2 - t0)

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        t0 = time.perf_counter()
        out = self._base.infer_relative_search_space(study, trial)
        elapsed = time.perf_counter() - t0
        self._trials.charge(trial, base=elapsed, total=elapsed)
        return out

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        t0 = time.perf_counter()
        sample = self._base.sample_relative(study, trial, search_space)
        t1 = time.perf_counter()
        known = [k for k in sample if k in self._names]
        if known:
            guard = self._prepared(study)[1]
            proposed = {k: sample[k] for k in known}
            limits = self._limits(search_space)
            check = check_sample(guard, proposed, self._trials.given(trial), limits, trial.number)
            for k, new in check.changes.items():
                sample[k] = as_distribution_value(search_space[k], new)
            self._trials.state(trial).pending = {k: sample[k] for k in known}
            self._bump(
                relative_samples=1,
                relative_params=len(known),
                relative_repaired=int(check.repaired),
                relative_changed_params=len(check.changes),
                dead_ends=check.dead,
            )
        t2 = time.perf_counter()
        self._trials.charge(trial, base=t1 - t0, total=t2 - t0)
        return sample

    def sample_independent(
        self, study: Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        t0 = time.perf_counter()
        proposal = self._base.sample_independent(study, trial, param_name, param_distribution)
        t1 = time.perf_counter()
        try:
            if param_name not in self._names:
                return proposal
            if self._trials.attrs(trial)[1] is not None:
                chosen = self._grid_point(study, trial)
                if param_name in chosen and within(param_distribution).contains(chosen[param_name]):
                    return as_distribution_value(param_distribution, chosen[param_name])
            return self._check_independent(study, trial, param_name, param_distribution, proposal)
        finally:
            self._trials.charge(trial, base=t1 - t0, total=time.perf_counter() - t0)

    def after_trial(
        self, study: Study, trial: FrozenTrial, state: TrialState, values: Sequence[float] | None
    ) -> None:
        t0 = time.perf_counter()
        try:
            if self._record and state in _FINISHED and not self._always_feasible:
                self._record_constraints(study, trial)
        except Exception:  # never lose a trial's result because of bookkeeping
            _logger.warning("could not record constraint values of trial %d", trial.number, exc_info=True)
        finally:
            st = self._trials.release(trial)
            if st is not None and st.is_grid and state in _FINISHED:
                self._grid.stop_if_done(study, trial, self._prepared(study)[1], self._trials.running_points())
            t1 = time.perf_counter()
            self._base.after_trial(study, trial, state, values)
            wrapper = (st.wrapper_s if st else 0.0) + (t1 - t0)
            base = (st.base_s if st else 0.0) + (time.perf_counter() - t1)
            with self._lock:
                self.stats.overhead.append((trial.number, wrapper, base))

    def verify(self, trial: Any, config: Mapping[str, Any] | None = None) -> list[str]:
        """Check ``config`` (default: the trial's parameters) against the real module given as
        ``verify=`` (nothing without it); returns the disagreements (see the class docstring)."""
        if self._verifier is None:
            return []
        lines = self._verifier(trial.params if config is None else config)
        self._bump(verified=1, disagreements=int(bool(lines)))
        if lines:
            trial.set_user_attr("dnnsat:disagreements", lines)
        return lines

    # -- forward checking --------------------------------------------------------------------------
    def _check_independent(
        self, study: Study, trial: FrozenTrial, name: str, dist: BaseDistribution, proposal: Any
    ) -> Any:
        guard = self._prepared(study)[1]
        given = self._trials.given(trial, exclude=name)
        decision = guard.decide(name, proposal, given, within=within(dist), key=trial.number)
        self._bump(**decision_counts(guard, name, decision))
        if decision.outcome == "dead_end":
            self._warn_once(
                f"dead-end:{name}",
                f"no value of {name!r} within {dist} extends {given} to a feasible configuration "
                "(infeasible fixed/enqueued parameters?); keeping the base sampler's proposal",
            )
        if decision.outcome != "repaired":
            return proposal
        _logger.debug("trial %d: %s=%r -> %r (given %s)", trial.number, name, proposal, decision.value, given)
        return as_distribution_value(dist, decision.value)

    def _limits(self, dists: Mapping[str, BaseDistribution]) -> dict[str, Within]:
        """The values each problem parameter's distribution accepts."""
        return {k: within(d) for k, d in dists.items() if k in self._names}

    # -- GridSampler -------------------------------------------------------------------------------
    def _grid_point(self, study: Study, trial: FrozenTrial) -> dict[str, Any]:
        """The config a GridSampler trial evaluates (see :meth:`GridPlanner.point`), decided once."""
        st = self._trials.state(trial)
        if st.is_grid:
            return st.pending
        guard = self._prepared(study)[1]
        grid = self._trials.attrs(trial)[1]
        assert grid is not None

        def propose(dists: Mapping[str, BaseDistribution]) -> dict[str, Any]:
            return {k: self._base.sample_independent(study, trial, k, d) for k, d in dists.items()}

        running = self._trials.running_points()
        result, kept, steps = self._grid.point(study, trial, grid, guard, propose, running)
        if result is not None:
            self._bump(proposals=1, kept=int(kept))
        if steps is not None:
            self._bump(repaired=1, repair_steps=steps)
        st.is_grid, st.pending = True, result or {}
        return st.pending

    # -- constraints -------------------------------------------------------------------------------
    def _record_constraints(self, study: Study, trial: FrozenTrial) -> None:
        values = finished_constraints(self._prepared(study)[1], trial.params)
        attrs = trial.system_attrs
        for key, value in (values or {}).items():
            attr = CONSTRAINT_ATTR_PREFIX + key
            if attr in attrs or math.isnan(value):
                continue
            study._storage.set_trial_system_attr(trial._trial_id, attr, value)
            attrs[attr] = value
