"""DnnSATSampler: wraps any Optuna sampler so that every trial's configuration is feasible.

Optuna samples define-by-run, one parameter at a time. The wrapper lets the base sampler propose and
forward-checks the proposal: if the parameters already fixed in the trial plus the proposal cannot be
extended to a feasible configuration, the proposal is replaced by the closest value that can
(``problem.feasible_values``). A relative sample (multivariate TPE, CMA-ES, GP, ...) is checked and, if
needed, repaired as a whole. Feasible proposals are kept unchanged, so with a budget that every
configuration satisfies the wrapped sampler behaves exactly like the bare one.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from bisect import bisect_left
from collections import OrderedDict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

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


@dataclass
class SamplerStats:
    """Counters of one sampler instance (one process).

    ``proposals``/``kept``/``repaired`` count independent proposals of problem parameters
    (a GridSampler point counts as one proposal);
    ``repair_steps`` sums, over repairs, how many positions the value moved in the parameter's ordered
    value list (1 for an unordered categorical); ``relative_*`` count relative samples and their changed
    parameters; ``dead_ends`` counts proposals that no value could rescue (e.g. infeasible enqueued
    parameters); ``overhead`` holds ``(trial number, wrapper seconds, base sampler seconds)``.
    """

    proposals: int = 0
    kept: int = 0
    repaired: int = 0
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
        return self.repair_steps / self.repaired if self.repaired else 0.0


class DnnSATSampler(BaseSampler):
    """Sampler wrapper that never proposes an infeasible configuration of ``problem``.

    Args:
        problem: the :class:`dnnsat.Problem`; parameters are matched by name, unknown ones pass through.
        base_sampler: any Optuna sampler (default ``TPESampler(seed=seed)``).
        seed: seeds the default TPE and the wrapper's own choice among unordered categorical values.
        record_constraints: record ``problem.constraint_values`` of each finished trial as Optuna
            constraints (``constraints:<name>`` system attributes, <= 0 means satisfied), so
            constraint-aware samplers (TPE, NSGA-II, GP) learn how close trials are to the limits.
        prune_timeout: seconds to wait for another worker that is computing the pruned space.
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
    ) -> None:
        if base_sampler is None:
            from optuna.samplers import TPESampler

            base_sampler = TPESampler(seed=seed)
        if not isinstance(base_sampler, BaseSampler):
            raise TypeError(f"base_sampler must be an optuna BaseSampler, got {type(base_sampler).__name__}")
        self._problem = problem
        self._space = problem.space
        self._order = list(self._space.conditional_order)
        self._base = base_sampler
        self._rng = np.random.RandomState(seed)
        self._record = record_constraints
        self._prune_timeout = prune_timeout
        self._cache_size = cache_size
        self._enumerate_limit = enumerate_limit
        self._lock = threading.RLock()
        self._pruned: dict[tuple[int, int], PrunedSpace] = {}
        self._pending: dict[int, dict[str, Any]] = {}  # trial id -> (repaired) relative sample / grid point
        self._pending_is_grid: dict[int, bool] = {}
        self._grid_cache: dict[str, list[dict[str, Any]] | None] = {}
        # trial id -> (enqueued fixed params, GridSampler grid or None), read once per trial
        self._trial_attrs: dict[int, tuple[dict[str, Any], dict[str, list[Any]] | None]] = {}
        self._time: dict[int, list[float]] = {}  # trial id -> [wrapper s, base s]
        self._fv_cache: OrderedDict[tuple[str, tuple[tuple[str, Any], ...]], tuple[Any, ...]] = OrderedDict()
        self._warned: set[str] = set()
        self._names = frozenset(self._space.names)  # (``name in space`` raises for unknown names)
        self._index = {  # position of each encoded value in a finite parameter's value list
            n: {self._space[n].encode(v): i for i, v in enumerate(self._space[n].values())}
            for n in self._space.names
            if self._space[n].is_finite
        }
        self._conditional = any(self._space[n].condition for n in self._space.names)
        self._witness: dict[int, dict[str, Any]] = {}  # trial id -> a feasible config agreeing with it
        self._recent: deque[dict[str, Any]] = deque(maxlen=64)  # feasible configs of finished trials
        self._pool: dict[str, np.ndarray] | None = None
        self.stats = SamplerStats()

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

        Called automatically at the first trial; call it yourself to fail before any trial exists.
        """
        key = (id(study._storage), study._study_id)
        ps = self._pruned.get(key)
        if ps is None:
            with self._lock:
                ps = self._pruned.get(key)
                if ps is None:
                    ps = load_or_compute_pruned_space(study, self._problem, self._prune_timeout)
                    self._pruned[key] = ps
                    self.stats.pruned_space_computed = ps.computed
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
        self._rng.seed()

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
            self.stats.relative_samples += 1
            self.stats.relative_params += len(known)
            fixed = self._given(trial)
            for k in known:
                if k not in fixed and not _in_domain(self._space[k], sample[k]):
                    del sample[k]  # outside the problem's domain: sample_independent snaps it back
                    self.stats.relative_changed_params += 1
            known = [k for k in known if k in sample]
            candidate = self._clean({**{k: sample[k] for k in known}, **fixed})
            if not self._extendable(candidate, ps):
                repaired = self._repair(candidate, keep=set(fixed), ps=ps)
                self.stats.relative_repaired += 1
                for k in known:
                    if k in fixed:
                        continue
                    new = repaired.get(k, _MISSING)
                    if new is _MISSING or not _in_distribution(search_space[k], new):
                        # Not representable in the relative space: let sample_independent decide it.
                        del sample[k]
                        self.stats.relative_changed_params += 1
                    elif not _same(self._space[k], new, sample[k]):
                        sample[k] = _as_distribution_value(search_space[k], new)
                        self.stats.relative_changed_params += 1
            self._pending[trial._trial_id] = {k: sample[k] for k in known if k in sample}
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
            if self._record and state in _FINISHED:
                self._record_constraints(study, trial)
        except Exception:  # never lose a trial's result because of bookkeeping
            _logger.warning("could not record constraint values of trial %d", trial.number, exc_info=True)
        finally:
            if self._pending_is_grid.get(trial._trial_id) and state in _FINISHED:
                self._stop_if_grid_done(study, trial)
            self._pending.pop(trial._trial_id, None)
            self._pending_is_grid.pop(trial._trial_id, None)
            self._witness.pop(trial._trial_id, None)
            self._trial_attrs.pop(trial._trial_id, None)
            t1 = time.perf_counter()
            self._base.after_trial(study, trial, state, values)
            spent = self._time.pop(trial._trial_id, [0.0, 0.0])
            wrapper = spent[0] + (t1 - t0)
            base = spent[1] + (time.perf_counter() - t1)
            self.stats.overhead.append((trial.number, wrapper, base))

    # -- forward checking --------------------------------------------------------------------------
    def _check_independent(
        self, study: Study, trial: FrozenTrial, name: str, dist: BaseDistribution, proposal: Any
    ) -> Any:
        ps = self.prepare(study)
        param = self._space[name]
        given = self._clean(self._given(trial, exclude=name))
        if not self._space.is_active(name, given):
            self.stats.unchecked += 1  # the objective asks for a parameter the problem deems inactive
            return proposal
        if not param.is_finite:
            lo, hi = ps.bounds.get(name, param.bounds())
            if isinstance(dist, FloatDistribution):
                lo, hi = max(lo, dist.low), min(hi, dist.high)
            if lo <= hi and isinstance(proposal, int | float) and not lo <= proposal <= hi:
                self.stats.repaired += 1
                return float(min(max(proposal, lo), hi))
            return proposal
        self.stats.proposals += 1
        if _in_distribution(dist, proposal) and self._fast_extendable(
            trial._trial_id, name, proposal, given, ps
        ):
            self.stats.kept += 1
            return proposal
        if not given:
            feasible: Sequence[Any] = ps.values.get(name, [])
        else:
            feasible = self._feasible_values(name, given, ps)
        allowed = [v for v in feasible if _in_distribution(dist, v)]
        if _member(param, proposal, allowed):
            self.stats.kept += 1
            return proposal
        if not allowed:
            self.stats.dead_ends += 1
            self._warn_once(
                f"dead-end:{name}",
                f"no value of {name!r} within {dist} extends {given} to a feasible configuration "
                "(infeasible fixed/enqueued parameters?); keeping the base sampler's proposal",
            )
            return proposal
        value = self._closest(param, dist, proposal, allowed)
        self.stats.repaired += 1
        self.stats.repair_steps += _steps(param, proposal, value)
        _logger.debug("trial %d: %s=%r -> %r (given %s)", trial.number, name, proposal, value, given)
        return _as_distribution_value(dist, value)

    def _fast_extendable(
        self, trial_id: int, name: str, value: Any, given: Mapping[str, Any], ps: PrunedSpace
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
        witness = self._witness.get(trial_id)
        if witness is not None:
            candidate = {**witness, **fixed}
            if self._problem.check(candidate).feasible:
                self._witness[trial_id] = candidate
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
        self._witness[trial_id] = {k: _py(columns[k][i]) for k in columns}
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

    def _attrs(self, trial: FrozenTrial) -> tuple[dict[str, Any], dict[str, list[Any]] | None]:
        """(enqueued fixed problem params, GridSampler grid) of a trial: one storage read per trial."""
        hit = self._trial_attrs.get(trial._trial_id)
        if hit is None:
            attrs = dict(trial.system_attrs)
            fixed = {k: v for k, v in (attrs.get("fixed_params") or {}).items() if k in self._names}
            grid = attrs.get("search_space") if "grid_id" in attrs else None
            hit = (fixed, grid if isinstance(grid, dict) else None)
            self._trial_attrs[trial._trial_id] = hit
        return hit

    def _given(self, trial: FrozenTrial, exclude: str | None = None) -> dict[str, Any]:
        """Problem parameters already decided in this trial: pending relative, enqueued, suggested."""
        fixed = self._attrs(trial)[0]
        given: dict[str, Any] = {}
        for source in (self._pending.get(trial._trial_id, {}), fixed, trial.params):
            for k, v in source.items():
                if k != exclude and k in self._names:
                    given[k] = v
        return given

    def _clean(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """Values normalised to the space's domain; out-of-domain values and inactive ones dropped."""
        out: dict[str, Any] = {}
        for k, v in config.items():
            param = self._space[k]
            try:
                out[k] = param.decode(param.encode(v)) if param.is_finite else float(param.encode(v))
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
        key = (name, tuple(sorted(given.items())))
        with self._lock:
            hit = self._fv_cache.get(key)
            if hit is not None:
                self._fv_cache.move_to_end(key)
                return hit
        values = self._enumerate_values(name, given, ps)
        if values is None:
            values = tuple(self._problem.feasible_values(name, dict(given)))
        with self._lock:
            self._fv_cache[key] = values
            if len(self._fv_cache) > self._cache_size:
                self._fv_cache.popitem(last=False)
        return values

    def _few_completions(self, name: str, given: Mapping[str, Any], ps: PrunedSpace) -> bool:
        free = [k for k in self._order if k not in given]
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
        for k, v in partial.items():
            dom = ps.values.get(k)
            if dom is not None and v not in dom:
                return False
        missing = self._missing(partial)
        if not missing:
            return bool(self._problem.check(partial).feasible)
        finite = [k for k in missing if self._space[k].is_finite]
        if not finite:
            return True  # only unconstrained continuous parameters are left open
        return bool(self._feasible_values(finite[0], partial, ps))

    def _repair(self, candidate: dict[str, Any], keep: set[str], ps: PrunedSpace) -> dict[str, Any]:
        """A feasible (or feasibly extendable) config close to ``candidate``, keeping ``keep``."""
        if not self._missing(candidate):
            single = self._repair_one(candidate, keep, ps)
            if single is not None:
                return single
            try:
                repaired = self._problem.repair(candidate, fixed=tuple(sorted(keep)))
            except ValueError:  # e.g. constrained continuous parameters: use the greedy repair
                repaired = None
            if repaired is not None:
                return dict(repaired)
        # Greedy forward checking in the space's order (works on partial configs too).
        cfg = {k: candidate[k] for k in keep if k in candidate}
        for k in self._order:
            if k in keep or k not in candidate or not self._space.is_active(k, cfg):
                continue
            param = self._space[k]
            if not param.is_finite:
                cfg[k] = candidate[k]
                continue
            allowed = self._feasible_values(k, cfg, ps)
            if not allowed:
                return candidate  # the kept parameters themselves are infeasible
            cfg[k] = (
                candidate[k]
                if _member(param, candidate[k], allowed)
                else self._closest(param, None, candidate[k], list(allowed))
            )
        return cfg

    def _closest(self, param: Param, dist: BaseDistribution | None, proposal: Any, allowed: list[Any]) -> Any:
        from dnnsat.space import Categorical

        if isinstance(param, Categorical) and not param.numeric:
            return allowed[int(self._rng.randint(len(allowed)))]
        if isinstance(param, Categorical):
            ranks = sorted(param.values())
            rank = bisect_left(ranks, proposal)

            def key(v: Any) -> tuple[float, float, float]:
                return (abs(ranks.index(v) - rank), abs(v - proposal), v)

            return min(allowed, key=key)
        log = bool(getattr(dist, "log", getattr(param, "log", False)))
        p = float(proposal)

        def dist_key(v: Any) -> tuple[float, float]:
            if log and v > 0 and p > 0:
                return (abs(math.log(v) - math.log(p)), v)
            return (abs(v - p), v)

        return min(allowed, key=dist_key)

    # -- GridSampler -------------------------------------------------------------------------------
    def _grid_point(self, study: Study, trial: FrozenTrial) -> dict[str, Any]:
        """The config a GridSampler trial evaluates: its grid point, or the nearest unvisited feasible one.

        GridSampler fixes the whole point in ``before_trial`` (system attributes ``grid_id`` and
        ``search_space``), so per-parameter repairs would create duplicates and leave infeasible grid
        points unvisited forever. Instead an infeasible or already visited point is swapped for the
        closest unvisited feasible config of the same grid, and the study stops once none is left.
        """
        chosen = self._pending.get(trial._trial_id)
        if chosen is not None and self._pending_is_grid.get(trial._trial_id):
            return chosen
        ps = self.prepare(study)
        grid = self._attrs(trial)[1]
        assert grid is not None
        configs = self._grid_configs(grid)
        if configs is None:  # the grid does not cover the problem: check parameter by parameter
            with self._lock:
                self._pending_is_grid[trial._trial_id] = True
                self._pending[trial._trial_id] = {}
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
                self.stats.repaired += 1
                self.stats.repair_steps += self._config_distance(known, best)[1]
            else:
                repaired = (
                    self._repair(known, keep=set(), ps=ps) if not self._extendable(known, ps) else known
                )
                result = {**point, **repaired}
                with contextlib.suppress(RuntimeError):
                    study.stop()  # every feasible grid config has been visited
        self.stats.proposals += 1
        self.stats.kept += int(result is point)
        with self._lock:
            self._pending[trial._trial_id] = result
            self._pending_is_grid[trial._trial_id] = True
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
            params = self._pending.get(t._trial_id) if t.state == TrialState.RUNNING else None
            params = params or t.params
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
            with self._lock:
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
        slot = self._time.setdefault(trial._trial_id, [0.0, 0.0])
        slot[0] += max(0.0, total - base)
        slot[1] += base

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
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


def _member(param: Param, value: Any, allowed: Sequence[Any]) -> bool:
    """Whether ``value`` is one of ``allowed`` (values of the parameter's own domain)."""
    try:
        normalised = param.decode(param.encode(value))
    except Exception:
        return False
    return any(a == normalised and type(a) is type(normalised) for a in allowed)


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
