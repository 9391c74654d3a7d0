"""DnnSATSampler: wraps any Optuna sampler so that every trial's configuration is feasible.

Optuna samples define-by-run, one parameter at a time. The wrapper lets the base sampler propose and
forward-checks the proposal: if the parameters already fixed in the trial plus the proposal cannot be
extended to a feasible configuration, the proposal is replaced by the closest value that can
(``problem.feasible_values`` for finite parameters, ``problem.feasible_intervals`` re-checked with
``problem.is_extendable`` for continuous ``Float`` ones). A relative sample (multivariate TPE,
CMA-ES, GP, ...) is checked and, if needed, repaired as a whole. Feasible proposals are kept
unchanged, and when no constraint can bind (``problem.always_feasible()``) nothing is recorded on the
trials either, so the wrapped sampler then gives exactly the bare sampler's sequence.

Thread-safe (``study.optimize(n_jobs=...)``): per-trial state lives in one object per trial, shared
caches and counters are guarded by one lock, and every Problem call is thread-safe itself. Picklable:
the lock and the study-bound caches are dropped and rebuilt.
"""

from __future__ import annotations

import contextlib
import logging
import math
import secrets
import threading
import time
import weakref
import zlib
from bisect import bisect_left
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.samplers import BaseSampler
from optuna.trial import FrozenTrial, TrialState

from ._cache import PrunedSpace, load_or_compute_pruned_space

if TYPE_CHECKING:
    from optuna.study import Study

    from dnnsat import Problem
    from dnnsat.space import Param

__all__ = ["DnnSATSampler", "SamplerStats", "CONSTRAINT_ATTR_PREFIX"]

_logger = logging.getLogger("dnnsat.integrations.optuna")

#: Optuna 5 stores ``trial.set_constraint(key, value)`` as the trial system attribute ``constraints:<key>``.
CONSTRAINT_ATTR_PREFIX = "constraints:"
_FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
_V = TypeVar("_V")
#: Attributes bound to a process or a study: dropped by pickling, rebuilt by ``_reset_caches``.
_UNPICKLED = ("_lock", "_pruned", "_trials", "_grid_cache", "_fv_cache", "_span_cache", "_recent", "_pool")
#: Seeds the wrapper's own choices when neither ``seed`` nor ``reseed_rng`` gave one ("dnnsat" in ASCII).
_DEFAULT_SALT = 0x646E6E736174
#: Candidate values of a continuous parameter re-checked exactly, nearest first, before giving up.
_MAX_CANDIDATES = 8


@dataclass
class SamplerStats:
    """Counters of one sampler instance (one process).

    ``proposals``/``kept``/``repaired`` count independent proposals of problem parameters, finite and
    continuous (a GridSampler point counts as one proposal); ``float_repaired`` is the part of
    ``repaired`` that moved a continuous ``Float``; ``repair_steps`` sums, over repairs of finite
    parameters, how many positions the value moved in the parameter's ordered value list (1 for an
    unordered categorical); ``relative_*`` count relative samples and their changed parameters;
    ``dead_ends`` counts proposals that no value could rescue (e.g. infeasible enqueued parameters);
    ``unchecked`` counts proposals the problem cannot judge (an inactive conditional parameter, or a
    distribution with no value in the problem's domain); ``overhead`` holds ``(trial number, wrapper
    seconds, base sampler seconds)``.
    """

    proposals: int = 0
    kept: int = 0
    repaired: int = 0
    float_repaired: int = 0
    repair_steps: float = 0.0
    relative_samples: int = 0
    relative_params: int = 0
    relative_repaired: int = 0
    relative_changed_params: int = 0
    dead_ends: int = 0
    unchecked: int = 0
    pruned_space_computed: bool | None = None
    overhead: deque[tuple[int, float, float]] = field(default_factory=lambda: deque(maxlen=100_000))

    @property
    def acceptance(self) -> float:
        """Share of the base sampler's proposed values (independent and relative) kept unchanged."""
        total = self.proposals + self.relative_params
        kept = self.kept + self.relative_params - self.relative_changed_params
        return kept / total if total else 1.0

    @property
    def mean_repair_steps(self) -> float:
        finite = self.repaired - self.float_repaired
        return self.repair_steps / finite if finite else 0.0


@dataclass
class _TrialState:
    """What the wrapper remembers about one running trial (a trial is driven by one thread)."""

    #: enqueued problem parameters (``fixed_params``) and the GridSampler grid (None: not a grid trial),
    #: read from the trial's system attributes once, at the first sampling call
    attrs: tuple[dict[str, Any], dict[str, list[Any]] | None] | None = None
    #: the (repaired) relative sample or grid point, decided before the objective asks for it
    pending: dict[str, Any] = field(default_factory=dict)
    is_grid: bool = False
    #: a feasible configuration agreeing with the trial's parameters so far
    witness: dict[str, Any] | None = None
    wrapper_s: float = 0.0
    base_s: float = 0.0


class _LRU(Generic[_V]):
    """A bounded least-recently-used map that threads share; values are computed outside the lock."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._data: OrderedDict[Hashable, _V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, compute: Callable[[], _V]) -> _V:
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                return self._data[key]
        value = compute()
        with self._lock:
            self._data[key] = value
            if len(self._data) > self._size:
                self._data.popitem(last=False)
        return value


_CACHES: weakref.WeakKeyDictionary[Problem, tuple[str, _LRU[Any], _LRU[Any]]] = weakref.WeakKeyDictionary()
_CACHES_LOCK = threading.Lock()


def _problem_caches(problem: Problem, size: int) -> tuple[_LRU[Any], _LRU[Any]]:
    """The (feasible values, feasible intervals) caches of a problem: one pair per process, renewed
    when the problem's constraints changed since (its fingerprint)."""
    fingerprint = problem.fingerprint()
    with _CACHES_LOCK:
        hit = _CACHES.get(problem)
        if hit is None or hit[0] != fingerprint:
            hit = _CACHES[problem] = (fingerprint, _LRU(size), _LRU(size))
        return hit[1], hit[2]


class DnnSATSampler(BaseSampler):
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
    """

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
    ) -> None:
        if base_sampler is None:
            from optuna.samplers import TPESampler

            base_sampler = TPESampler(seed=seed)
        if not isinstance(base_sampler, BaseSampler):
            raise TypeError(f"base_sampler must be an optuna BaseSampler, got {type(base_sampler).__name__}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int | np.integer)):
            raise TypeError(f"seed must be an int or None, got {seed!r}")
        self._problem = problem
        self._space = problem.space
        self._order = list(self._space.conditional_order)
        self._base = base_sampler
        self._salt = _DEFAULT_SALT if seed is None else int(seed) % 2**64
        self._record = record_constraints
        self._prune_timeout = prune_timeout
        self._allow_problem_change = allow_problem_change
        self._cache_size = cache_size
        self._enumerate_limit = enumerate_limit
        self._names = frozenset(self._space.names)  # (``name in space`` raises for unknown names)
        self._index = {  # position of each encoded value in a finite parameter's value list
            n: {self._space[n].encode(v): i for i, v in enumerate(self._space[n].values())}
            for n in self._space.names
            if self._space[n].is_finite
        }
        self._conditional = any(self._space[n].condition for n in self._space.names)
        self._always_feasible: bool | None = None  # problem.always_feasible(), asked once by prepare()
        self._warned: set[str] = set()
        self.stats = SamplerStats()
        self._reset_caches()

    def _reset_caches(self) -> None:
        """The lock and every cache bound to a study or a process (rebuilt after unpickling)."""
        self._lock = threading.RLock()
        self._pruned: dict[tuple[int, int], PrunedSpace] = {}
        self._trials: dict[int, _TrialState] = {}
        self._grid_cache: dict[str, list[dict[str, Any]] | None] = {}
        # (name, sorted given items) -> feasible values of a finite parameter / intervals of a continuous
        # one: exact answers about the problem alone, shared by every sampler of the problem in a process
        self._fv_cache, self._span_cache = _problem_caches(self._problem, self._cache_size)
        self._recent: deque[dict[str, Any]] = deque(maxlen=64)  # feasible configs of finished trials
        self._pool: dict[str, np.ndarray] | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for name in _UNPICKLED:
            del state[name]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset_caches()

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
        key = (id(study._storage), study._study_id)
        ps = self._pruned.get(key)
        if ps is None:
            with self._lock:
                ps = self._pruned.get(key)
                if ps is None:
                    ps = load_or_compute_pruned_space(
                        study,
                        self._problem,
                        self._prune_timeout,
                        allow_problem_change=self._allow_problem_change,
                    )
                    self._pruned[key] = ps
                    self.stats.pruned_space_computed = ps.computed
                    if self._always_feasible is None:
                        self._always_feasible = bool(self._problem.always_feasible())
        if ps.empty:
            from dnnsat import InfeasibleSpaceError

            core = ", ".join(ps.core) or "(no core available)"
            raise InfeasibleSpaceError(
                f"no configuration of the search space satisfies the constraints; conflicting: {core}",
                ps.core,
            )
        return ps

    # -- BaseSampler -------------------------------------------------------------------------------
    def reseed_rng(self) -> None:
        self._base.reseed_rng()
        with self._lock:
            self._salt = secrets.randbits(63)

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        from dnnsat import InfeasibleSpaceError

        t0 = time.perf_counter()
        try:
            self.prepare(study)
        except InfeasibleSpaceError:
            # Fail fast: the trial Optuna just created never reaches the objective.
            study._storage.set_trial_system_attr(trial._trial_id, "dnnsat:infeasible_space", True)
            study._storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
            raise
        t1 = time.perf_counter()
        self._base.before_trial(study, trial)
        t2 = time.perf_counter()
        self._charge(trial, base=t2 - t1, total=t2 - t0)

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        t0 = time.perf_counter()
        out = self._base.infer_relative_search_space(study, trial)
        elapsed = time.perf_counter() - t0
        self._charge(trial, base=elapsed, total=elapsed)
        return out

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        t0 = time.perf_counter()
        sample = self._base.sample_relative(study, trial, search_space)
        t1 = time.perf_counter()
        known = [k for k in sample if k in self._names]
        if known:
            ps = self.prepare(study)
            fixed = self._clean(self._given(trial))
            proposed = {k: sample[k] for k in known if k not in fixed}
            candidate = {**proposed, **fixed}
            in_domain = all(_in_domain(self._space[k], v) for k, v in proposed.items())
            repair = not (in_domain and self._extendable(self._clean(candidate), ps))
            changed = dead = 0
            if repair:
                repaired = self._repair(trial, candidate, set(fixed), ps, search_space)
                for k, old in proposed.items():
                    new = _MISSING if repaired is None else repaired.get(k, _MISSING)
                    if new is _MISSING or not _in_distribution(search_space[k], new):
                        dead += 1  # no feasible value within the relative distribution: keep it
                    elif not _same(self._space[k], new, old):
                        sample[k] = _as_distribution_value(search_space[k], new)
                        changed += 1
            self._trial(trial).pending = {k: sample[k] for k in known}
            self._bump(
                relative_samples=1,
                relative_params=len(known),
                relative_repaired=int(repair),
                relative_changed_params=changed,
                dead_ends=dead,
            )
        t2 = time.perf_counter()
        self._charge(trial, base=t1 - t0, total=t2 - t0)
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
            if self._attrs(trial)[1] is not None:
                chosen = self._grid_point(study, trial)
                if param_name in chosen and _in_distribution(param_distribution, chosen[param_name]):
                    return _as_distribution_value(param_distribution, chosen[param_name])
            return self._check_independent(study, trial, param_name, param_distribution, proposal)
        finally:
            self._charge(trial, base=t1 - t0, total=time.perf_counter() - t0)

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
            with self._lock:
                st = self._trials.pop(trial._trial_id, None)
            if st is not None and st.is_grid and state in _FINISHED:
                self._stop_if_grid_done(study, trial)
            t1 = time.perf_counter()
            self._base.after_trial(study, trial, state, values)
            wrapper = (st.wrapper_s if st else 0.0) + (t1 - t0)
            base = (st.base_s if st else 0.0) + (time.perf_counter() - t1)
            with self._lock:
                self.stats.overhead.append((trial.number, wrapper, base))

    # -- forward checking --------------------------------------------------------------------------
    def _check_independent(
        self, study: Study, trial: FrozenTrial, name: str, dist: BaseDistribution, proposal: Any
    ) -> Any:
        ps = self.prepare(study)
        param = self._space[name]
        given = self._clean(self._given(trial, exclude=name))
        if not self._space.is_active(name, given) or not _representable(param, dist):
            # An inactive conditional parameter, or a distribution without a value of the problem's domain.
            self._bump(unchecked=1)
            return proposal
        self._bump(proposals=1)
        if _in_distribution(dist, proposal) and self._extends(trial, name, proposal, given, ps):
            self._bump(kept=1)
            return proposal
        value = self._nearest(trial, name, dist, proposal, given, ps)
        if value is None:
            self._bump(dead_ends=1)
            self._warn_once(
                f"dead-end:{name}",
                f"no value of {name!r} within {dist} extends {given} to a feasible configuration "
                "(infeasible fixed/enqueued parameters?); keeping the base sampler's proposal",
            )
            return proposal
        if param.is_finite:
            self._bump(repaired=1, repair_steps=_steps(param, proposal, value))
        else:
            self._bump(repaired=1, float_repaired=1)
        _logger.debug("trial %d: %s=%r -> %r (given %s)", trial.number, name, proposal, value, given)
        return _as_distribution_value(dist, value)

    def _nearest(
        self,
        trial: FrozenTrial,
        name: str,
        dist: BaseDistribution,
        proposal: Any,
        given: Mapping[str, Any],
        ps: PrunedSpace,
    ) -> Any:
        """The value of ``name`` within ``dist`` closest to ``proposal`` that extends ``given``, or None."""
        if self._space[name].is_finite:
            return self._nearest_finite(trial, name, dist, proposal, given, ps)
        return self._nearest_float(name, dist, proposal, given)

    def _nearest_finite(
        self,
        trial: FrozenTrial,
        name: str,
        dist: BaseDistribution,
        proposal: Any,
        given: Mapping[str, Any],
        ps: PrunedSpace,
    ) -> Any:
        """The closest value of a finite parameter within ``dist`` that extends ``given``, or None.

        Ordered values: the nearest few values of the pruned domain are re-checked one by one (cheap
        exact checks, the usual repair moves a step or two), then every feasible value is computed.
        Unordered choices: one drawn at random among the feasible ones.
        """
        param = self._space[name]
        domain = [v for v in ps.values.get(name, []) if _in_distribution(dist, v)]
        key = _closeness(param, dist, proposal)
        if key is None:  # unordered: a random feasible choice
            allowed = list(self._feasible_values(name, given, ps)) if given else domain
            allowed = [v for v in allowed if _in_distribution(dist, v)]
            return allowed[int(self._choice_rng(trial, name).integers(len(allowed)))] if allowed else None
        domain.sort(key=key)
        for value in domain[:_MAX_CANDIDATES]:
            if not given or self._extendable({**given, name: value}, ps):
                return value
        feasible = set(self._feasible_values(name, given, ps))
        return next((v for v in domain[_MAX_CANDIDATES:] if v in feasible), None)

    def _nearest_float(
        self, name: str, dist: BaseDistribution, proposal: Any, given: Mapping[str, Any]
    ) -> float | None:
        """The closest value of a continuous ``Float`` that lies in ``dist`` and extends ``given``.

        None: no value of ``dist`` extends ``given``. Candidates come from ``problem.feasible_intervals``
        (cached per ``given``: each call bisects the parameter's range) intersected with ``dist`` (its
        range, grid or choices), nearest first in the parameter's own scale, and each is re-checked
        exactly with ``problem.is_extendable`` before it is returned.
        """
        param = self._space[name]
        spans = self._span_cache.get(
            (name, tuple(sorted(given.items()))),
            lambda: tuple(self._problem.feasible_intervals(name, dict(given))),
        )
        candidates = _candidates_in(spans, dist, proposal, log=bool(getattr(param, "log", False)))
        for value in candidates[:_MAX_CANDIDATES]:
            if self._problem.is_extendable({**given, name: value}):
                return value
        return None

    def _extends(
        self, trial: FrozenTrial, name: str, value: Any, given: Mapping[str, Any], ps: PrunedSpace
    ) -> bool:
        """Exact: ``given`` plus ``name=value`` extends feasibly (known witnesses first, then the solver)."""
        if self._fast_extendable(trial, name, value, given, ps):
            return True
        try:
            value = _domain_value(self._space[name], value)
        except Exception:
            return False  # outside the problem's domain
        return self._extendable({**given, name: value}, ps)

    def _fast_extendable(
        self, trial: FrozenTrial, name: str, value: Any, given: Mapping[str, Any], ps: PrunedSpace
    ) -> bool:
        """Cheap sufficient test: some known feasible config agrees with ``given`` + ``name=value``.

        Tries the trial's current witness (one exact check), then a pool of feasible configs (one
        vectorized ``check_batch``). A True answer is exact (a concrete feasible completion exists);
        False only means "ask the solver". Used on spaces without conditions.
        """
        if self._conditional:
            return False
        param = self._space[name]
        try:
            fixed = {**given, name: param.decode(param.encode(value))}
        except Exception:
            return False
        dom = ps.values.get(name)
        if dom is not None and fixed[name] not in dom:
            return False
        st = self._trial(trial)
        if st.witness is not None:
            candidate = {**st.witness, **fixed}
            if self._problem.check(candidate).feasible:
                st.witness = candidate
                return True
        if self._few_completions(name, given, ps):
            return False  # the exact enumeration is about as cheap as the pool: let the caller run it
        pool = self._pool_columns(ps)
        if pool is None:
            return False
        n = len(next(iter(pool.values())))
        columns = {
            k: (np.full(n, fixed[k], dtype=col.dtype) if k in fixed else col) for k, col in pool.items()
        }
        ok = self._problem.check_batch(columns)
        if not ok.any():
            return False
        i = int(np.argmax(ok))
        st.witness = {k: _py(columns[k][i]) for k in columns}
        return True

    def _pool_columns(self, ps: PrunedSpace) -> dict[str, np.ndarray] | None:
        """Columns of the witness pool: sampled feasible configs plus recent feasible trials."""
        with self._lock:
            if self._pool is None:
                configs = list(ps.witnesses) + list(self._recent)
                if not configs:
                    return None
                self._pool = {k: np.array([c[k] for c in configs]) for k in self._space.names}
            return self._pool

    def _trial(self, trial: FrozenTrial) -> _TrialState:
        st = self._trials.get(trial._trial_id)
        if st is None:
            with self._lock:
                st = self._trials.setdefault(trial._trial_id, _TrialState())
        return st

    def _attrs(self, trial: FrozenTrial) -> tuple[dict[str, Any], dict[str, list[Any]] | None]:
        """(enqueued fixed problem params, GridSampler grid) of a trial: one storage read per trial."""
        st = self._trial(trial)
        if st.attrs is None:
            attrs = dict(trial.system_attrs)
            fixed = {k: v for k, v in (attrs.get("fixed_params") or {}).items() if k in self._names}
            grid = attrs.get("search_space") if "grid_id" in attrs else None
            st.attrs = (fixed, grid if isinstance(grid, dict) else None)
        return st.attrs

    def _given(self, trial: FrozenTrial, exclude: str | None = None) -> dict[str, Any]:
        """Problem parameters already decided in this trial: pending relative, enqueued, suggested."""
        fixed = self._attrs(trial)[0]
        given: dict[str, Any] = {}
        for source in (self._trial(trial).pending, fixed, trial.params):
            for k, v in source.items():
                if k != exclude and k in self._names:
                    given[k] = v
        return given

    def _choice_rng(self, trial: FrozenTrial, name: str) -> np.random.Generator:
        """The wrapper's random choices for ``name`` in ``trial``: a function of the salt, the trial
        number and the name only, so they never depend on thread interleaving."""
        return np.random.default_rng([self._salt, trial.number, zlib.crc32(name.encode())])

    def _clean(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """Values normalised to the space's domain; out-of-domain values and inactive ones dropped."""
        out: dict[str, Any] = {}
        for k, v in config.items():
            param = self._space[k]
            try:
                out[k] = _domain_value(param, v)
            except Exception:
                self._warn_once(
                    f"domain:{k}", f"value {v!r} of {k!r} is outside the problem's domain; ignored"
                )
        for k in [k for k in self._order if k in out]:
            if not self._space.is_active(k, out):
                del out[k]
        return out

    def _feasible_values(self, name: str, given: Mapping[str, Any], ps: PrunedSpace) -> tuple[Any, ...]:
        for k, v in given.items():  # quick reject against the pruned domains
            dom = ps.values.get(k)
            if dom is not None and v not in dom:
                return ()

        def compute() -> tuple[Any, ...]:
            values = self._enumerate_values(name, given, ps)
            return tuple(self._problem.feasible_values(name, dict(given))) if values is None else values

        return self._fv_cache.get((name, tuple(sorted(given.items()))), compute)

    def _few_completions(self, name: str, given: Mapping[str, Any], ps: PrunedSpace) -> bool:
        free = [k for k in self._order if k not in given]
        if any(not self._space[k].is_finite for k in free):
            return False  # a free continuous parameter: no enumeration
        return math.prod(len(ps.values.get(k) or ()) for k in free) <= self._enumerate_limit

    def _enumerate_values(
        self, name: str, given: Mapping[str, Any], ps: PrunedSpace
    ) -> tuple[Any, ...] | None:
        """Exact feasible values by one vectorized check of every completion, when few remain.

        Completions range over the pruned domains (which hold every value of every feasible config),
        so the answer equals ``problem.feasible_values``; None when the enumeration would be too big.
        """
        if self._conditional:
            return None
        free = [k for k in self._order if k not in given and k != name]
        domains = [ps.values.get(k) for k in [name, *free]]
        if any(d is None for d in domains) or any(not self._space[k].is_finite for k in free):
            return None
        size = math.prod(len(d) for d in domains if d is not None)
        if size == 0:
            return ()
        if size > self._enumerate_limit:
            return None
        grids = np.meshgrid(*[np.arange(len(d)) for d in domains if d is not None], indexing="ij")
        columns: dict[str, np.ndarray] = {k: np.full(size, v) for k, v in given.items()}
        for k, d, g in zip([name, *free], domains, grids):
            assert d is not None
            columns[k] = np.asarray(d)[g.ravel()]
        ok = self._problem.check_batch(columns)
        own = ps.values[name]
        hit = set(np.unique(grids[0].ravel()[ok]).tolist())
        return tuple(own[i] for i in range(len(own)) if i in hit)

    def _repair_one(
        self, candidate: dict[str, Any], keep: set[str], ps: PrunedSpace
    ) -> dict[str, Any] | None:
        """The best repair that changes one parameter (one vectorized check), or None if none does.

        Same order as ``problem.repair`` (fewest changed parameters, then index distance over domain
        length), so when a one-change repair exists this is the solver's answer without the search.
        """
        if self._conditional or any(not self._space[k].is_finite for k in candidate):
            return None
        rows: list[tuple[str, Any, float]] = []
        for k in self._order:
            if k in keep or k not in candidate:
                continue
            param, index = self._space[k], self._index[k]
            origin = index[param.encode(candidate[k])]
            for v in ps.values.get(k, []):
                i = index[param.encode(v)]
                if i != origin:
                    rows.append((k, v, abs(i - origin) / len(index)))
        if not rows:
            return None
        n = len(rows)
        # dtype=object: a numpy string array would be fixed-width and cut longer labels ("skip_connect")
        columns: dict[str, np.ndarray] = {k: np.array([v0] * n, dtype=object) for k, v0 in candidate.items()}
        for r, (name, v, _) in enumerate(rows):
            columns[name][r] = v
        ok = self._problem.check_batch(columns)
        if not ok.any():
            return None
        best = min((rows[r][2], r) for r in np.flatnonzero(ok))[1]
        name, value, _ = rows[best]
        return {**candidate, name: value}

    def _missing(self, partial: Mapping[str, Any]) -> list[str]:
        return [k for k in self._order if k not in partial and self._space.is_active(k, partial)]

    def _extendable(self, partial: dict[str, Any], ps: PrunedSpace) -> bool:
        for k, v in partial.items():  # quick reject against the pruned domains
            dom = ps.values.get(k)
            if dom is not None and v not in dom:
                return False
        return bool(self._problem.is_extendable(partial))

    def _repair(
        self,
        trial: FrozenTrial,
        candidate: Mapping[str, Any],
        keep: set[str],
        ps: PrunedSpace,
        dists: Mapping[str, BaseDistribution],
    ) -> dict[str, Any] | None:
        """A feasible (or feasibly extendable) config close to ``candidate`` with every value in ``dists``.

        ``candidate`` may hold values outside the problem's domain; ``keep`` names values that must not
        change. A complete config in the domain gets the best one-parameter change, else
        ``problem.repair`` (fewest changed parameters, then smallest moves). Otherwise (a relative
        sample of some parameters, or a repair that leaves ``dists``), forward checking in the space's
        order: each value is kept when it extends the values before it, else replaced by the closest
        one within its distribution (default: the parameter's own domain) that does -
        ``problem.repair`` would search every completion of the open parameters. None when no repair
        exists (the kept parameters are infeasible).
        """
        clean = self._clean(candidate)
        if len(clean) == len(candidate) and not self._missing(clean):
            repaired = self._repair_one(clean, keep, ps) or self._problem.repair(clean, fixed=sorted(keep))
            if repaired is None:
                return None
            if all(k not in dists or _in_distribution(dists[k], v) for k, v in repaired.items()):
                return dict(repaired)
        from ._suggest import distribution

        cfg = {k: clean[k] for k in keep if k in clean}
        for k in self._order:
            if k in keep or k not in candidate or not self._space.is_active(k, cfg):
                continue
            if self._extends(trial, k, candidate[k], cfg, ps):
                cfg[k] = _domain_value(self._space[k], candidate[k])
                continue
            dist = dists.get(k) or distribution(self._space[k])
            value = self._nearest(trial, k, dist, candidate[k], cfg, ps)
            if value is None:
                return None
            cfg[k] = value
        return cfg

    # -- GridSampler -------------------------------------------------------------------------------
    def _grid_point(self, study: Study, trial: FrozenTrial) -> dict[str, Any]:
        """The config a GridSampler trial evaluates: its grid point, or the nearest unvisited feasible one.

        GridSampler fixes the whole point in ``before_trial`` (system attributes ``grid_id`` and
        ``search_space``), so per-parameter repairs would create duplicates and leave infeasible grid
        points unvisited forever. Instead an infeasible or already visited point is swapped for the
        closest unvisited feasible config of the same grid, and the study stops once none is left.
        """
        st = self._trial(trial)
        if st.is_grid:
            return st.pending
        ps = self.prepare(study)
        grid = self._attrs(trial)[1]
        assert grid is not None
        configs = self._grid_configs(grid)
        if configs is None:  # the grid does not cover the problem: check parameter by parameter
            st.is_grid, st.pending = True, {}
            return {}
        dists = {k: CategoricalDistribution(v) for k, v in grid.items() if v}
        point = {k: self._base.sample_independent(study, trial, k, d) for k, d in dists.items()}
        known = self._clean({k: v for k, v in point.items() if k in self._names})
        visited = self._visited(study, trial, set(known))
        key = self._config_key(known)
        if key in {self._config_key(c) for c in configs} and key not in visited:
            result = point
        else:
            fresh = [c for c in configs if self._config_key(c) not in visited]
            if fresh:
                best = min(fresh, key=lambda c: self._config_distance(known, c))
                result = {**point, **best}
                self._bump(repaired=1, repair_steps=self._config_distance(known, best)[1])
            else:
                if not self._extendable(known, ps):
                    known = self._repair(trial, known, set(), ps, dists) or known
                result = {**point, **known}
                with contextlib.suppress(RuntimeError):
                    study.stop()  # every feasible grid config has been visited
        self._bump(proposals=1, kept=int(result is point))
        st.is_grid, st.pending = True, result
        return result

    def _stop_if_grid_done(self, study: Study, trial: FrozenTrial) -> None:
        """Stop the study once every feasible config of the trial's grid has been evaluated."""
        grid = trial.system_attrs.get("search_space")
        configs = self._grid_configs(grid) if isinstance(grid, dict) else None
        if not configs:
            return
        names = set(configs[0])
        visited = self._visited(study, trial, names)
        visited.add(self._config_key(self._clean({k: v for k, v in trial.params.items() if k in names})))
        if all(self._config_key(c) in visited for c in configs):
            with contextlib.suppress(RuntimeError):  # outside study.optimize (ask/tell): nothing to stop
                study.stop()

    def _grid_configs(self, grid: Mapping[str, list[Any]]) -> list[dict[str, Any]] | None:
        """Feasible configs of a GridSampler grid; None unless it spans every problem parameter."""
        from ._grid import feasible_grid

        key = repr(sorted((k, list(v)) for k, v in grid.items()))
        with self._lock:
            if key in self._grid_cache:
                return self._grid_cache[key]
        hit: list[dict[str, Any]] | None = None
        if not self._conditional and all(k in grid for k in self._space.names):
            try:
                hit = feasible_grid(
                    self._problem, {k: grid[k] for k in self._space.names}, limit=10**7
                ).configs
            except ValueError:
                hit = None  # empty or huge: fall back to parameter-wise forward checking
        with self._lock:
            self._grid_cache[key] = hit
        return hit

    def _config_key(self, config: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
        return tuple(sorted((k, self._space[k].encode(v)) for k, v in config.items() if k in self._names))

    def _visited(self, study: Study, trial: FrozenTrial, names: set[str]) -> set[tuple[tuple[str, Any], ...]]:
        states = (TrialState.RUNNING, TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
        out = set()
        for t in study._storage.get_all_trials(study._study_id, deepcopy=False, states=states):
            if t._trial_id == trial._trial_id:
                continue
            running = self._trials.get(t._trial_id) if t.state == TrialState.RUNNING else None
            params = (running.pending if running is not None else None) or t.params
            cfg = self._clean({k: v for k, v in params.items() if k in names})
            out.add(self._config_key(cfg))
        return out

    def _config_distance(self, a: Mapping[str, Any], b: Mapping[str, Any]) -> tuple[int, float]:
        changed, steps = 0, 0.0
        for k in set(a) | set(b):
            if k not in a or k not in b:
                changed += 1
                steps += 1.0
            elif not _same(self._space[k], a[k], b[k]):
                changed += 1
                steps += _steps(self._space[k], a[k], b[k])
        return changed, steps

    # -- constraints -------------------------------------------------------------------------------
    def _record_constraints(self, study: Study, trial: FrozenTrial) -> None:
        config = self._clean({k: v for k, v in trial.params.items() if k in self._names})
        if not config or self._missing(config):
            return  # incomplete configuration (the trial stopped early): nothing exact to record
        values = self._problem.constraint_values(config)
        if not self._conditional and all(v <= 0 for v in values.values()) and len(config) == len(self._space):
            with self._lock:  # a new witness for _fast_extendable
                self._recent.append(config)
                self._pool = None
        attrs = trial.system_attrs
        for key, value in values.items():
            attr = CONSTRAINT_ATTR_PREFIX + str(key)
            value = float(value)
            if attr in attrs or math.isnan(value):
                continue
            study._storage.set_trial_system_attr(trial._trial_id, attr, value)
            attrs[attr] = value

    # -- misc --------------------------------------------------------------------------------------
    def _charge(self, trial: FrozenTrial, base: float, total: float) -> None:
        st = self._trial(trial)
        st.wrapper_s += max(0.0, total - base)
        st.base_s += base

    def _bump(self, **deltas: float) -> None:
        """Add to counters of ``stats`` (threads share them)."""
        with self._lock:
            for name, delta in deltas.items():
                setattr(self.stats, name, getattr(self.stats, name) + delta)

    def _warn_once(self, key: str, message: str) -> None:
        with self._lock:
            first = key not in self._warned
            self._warned.add(key)
        if first:
            _logger.warning(message)
        else:
            _logger.debug(message)


_MISSING = object()


def _py(x: Any) -> Any:
    item = getattr(x, "item", None)
    return item() if callable(item) else x


def _in_distribution(dist: BaseDistribution, value: Any) -> bool:
    """Whether the (problem-domain) value lies in an Optuna distribution."""
    if isinstance(dist, CategoricalDistribution):
        return any(_choice_equal(c, value) for c in dist.choices)
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        return False
    v = float(value)
    if isinstance(dist, IntDistribution):
        return v == int(v) and dist.low <= v <= dist.high and (int(v) - dist.low) % dist.step == 0
    if isinstance(dist, FloatDistribution):
        tol = 1e-9 * max(1.0, abs(dist.low), abs(dist.high))
        if not dist.low - tol <= v <= dist.high + tol:
            return False
        if dist.step is not None:
            k = round((v - dist.low) / dist.step)
            return abs(dist.low + k * dist.step - v) <= tol
        return True
    return False


def _choice_equal(choice: Any, value: Any) -> bool:
    if isinstance(choice, bool) or isinstance(value, bool):
        return type(choice) is type(value) and choice == value
    if isinstance(choice, int | float) and isinstance(value, int | float | np.integer | np.floating):
        return bool(choice == value)
    return type(choice) is type(value) and bool(choice == value)


def _as_distribution_value(dist: BaseDistribution, value: Any) -> Any:
    """The value in the Python type the distribution returns (int, float or the choice object)."""
    if isinstance(dist, CategoricalDistribution):
        for c in dist.choices:
            if _choice_equal(c, value):
                return c
        return value
    if isinstance(dist, IntDistribution):
        return int(value)
    if isinstance(dist, FloatDistribution):
        return float(value)
    return value


def _domain_value(param: Param, value: Any) -> Any:
    """The value normalised to the parameter's domain; raises when it lies outside."""
    return param.decode(param.encode(value)) if param.is_finite else float(param.encode(value))


def _in_domain(param: Param, value: Any) -> bool:
    try:
        param.encode(value)
    except Exception:
        return False
    return True


def _same(param: Param, a: Any, b: Any) -> bool:
    try:
        return bool(param.encode(a) == param.encode(b))
    except Exception:
        return False


def _steps(param: Param, proposal: Any, value: Any) -> float:
    """Positions between two values in the parameter's ordered value list (1 for unordered choices)."""
    from dnnsat.space import Categorical

    if isinstance(param, Categorical) and not param.numeric:
        return 1.0
    try:
        enc = param.encoded()
        a = float(np.searchsorted(enc, float(proposal)))
        b = float(np.searchsorted(enc, float(value)))
        return abs(a - b) if a != b else 1.0
    except Exception:
        return 1.0


def _closeness(
    param: Param, dist: BaseDistribution, proposal: Any
) -> Callable[[Any], tuple[float, ...]] | None:
    """Sort key of a finite parameter's values by closeness to ``proposal``; None for unordered choices.

    Rank distance for numeric categoricals, distance in the distribution's scale (log for ``log=True``)
    for numbers; ties go to the smaller value.
    """
    from dnnsat.space import Categorical

    if (isinstance(param, Categorical) and not param.numeric) or not _is_number(proposal):
        return None
    p = float(proposal)
    if isinstance(param, Categorical):
        ranks = sorted(param.values())
        rank = bisect_left(ranks, p)
        return lambda v: (abs(ranks.index(v) - rank), abs(v - p), v)
    log = bool(getattr(dist, "log", getattr(param, "log", False)))
    if log and p > 0:
        return lambda v: (abs(math.log(v) - math.log(p)) if v > 0 else math.inf, v)
    return lambda v: (abs(v - p), v)


def _is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float | np.integer | np.floating)


def _representable(param: Param, dist: BaseDistribution) -> bool:
    """Whether ``dist`` can hold some value of the parameter's domain (else the problem cannot judge)."""
    from dnnsat.space import Categorical

    if isinstance(dist, CategoricalDistribution):
        return any(_in_domain(param, c) for c in dist.choices)
    if isinstance(param, Categorical) and not param.numeric:
        return False
    if not isinstance(dist, IntDistribution | FloatDistribution):
        return False
    low, high = param.bounds()
    return bool(dist.low <= high and low <= dist.high)


def _candidates_in(
    spans: Sequence[tuple[float, float]], dist: BaseDistribution, proposal: Any, log: bool
) -> list[float]:
    """Values of ``dist`` inside the feasible intervals ``spans``, nearest to ``proposal`` first.

    Per interval: the proposal clamped into it and, as a fallback strictly inside, its middle
    (continuous ``dist``); the nearest grid point of a stepped ``dist`` (int or float step); or every
    numeric choice of a categorical ``dist`` inside it. Distances are taken in log scale for ``log``.
    """
    p = float(proposal) if _is_number(proposal) else None
    out: list[float] = []
    for a, b in spans:
        if isinstance(dist, CategoricalDistribution):
            out += [float(c) for c in dist.choices if _is_number(c) and a <= float(c) <= b]  # type: ignore[arg-type]
            continue
        if not isinstance(dist, IntDistribution | FloatDistribution):
            continue
        lo, hi = max(a, float(dist.low)), min(b, float(dist.high))
        if lo > hi:
            continue
        target = min(max(p, lo), hi) if p is not None else lo
        step = dist.step
        if step is None:
            out += [target, (lo + hi) / 2]
            continue
        k_lo = math.ceil((lo - dist.low) / step - 1e-9)
        k_hi = math.floor((hi - dist.low) / step + 1e-9)
        if k_lo <= k_hi:
            k = min(max(round((target - dist.low) / step), k_lo), k_hi)
            out.append(float(dist.low + k * step))
    if p is None:
        return out

    def distance(v: float) -> float:
        if log and v > 0 and p > 0:
            return abs(math.log(v) - math.log(p))
        return abs(v - p)

    return sorted(out, key=distance)
