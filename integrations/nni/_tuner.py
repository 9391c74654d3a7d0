"""``DnnSATTuner``: an NNI tuner that wraps a built-in tuner and only ever returns feasible configurations.

The wrapper sits between NNI's dispatcher and a base tuner (TPE, Random, Anneal, Evolution, GridSearch,
Batch, GP, Metis, PBT, ...). It checks the experiment's search space against the problem's
:class:`~dnnsat.Space`, gives the base tuner the *pruned* space, and vets every proposal with the problem
before it becomes a trial:

* ``mode="repair"``: an infeasible proposal is replaced by its repair (``problem.guard().repair``, the
  answer of ``problem.repair``: fewest changed parameters; continuous ``Float`` values move to the
  nearest feasible value in their own scale). The base
  tuner keeps its own record of what it proposed and later receives the repaired trial's result for it: it
  optimises ``f(repair(x))``, a deterministic function of its proposal.
* ``mode="reject"``: an infeasible proposal is discarded and the base tuner is asked again.

A discarded proposal (rejected, unrepairable) is closed in the base tuner under a synthetic parameter id
(negative integers; NNI's own ids are >= 0) with a *penalty* result, reported before ``trial_end`` as
TPE's liar bookkeeping requires. The penalty is worse than every real result seen so far (below them for
``optimize_mode="maximize"``, above them for ``"minimize"``); before the first real result, and without an
explicit ``penalty``, the proposal is closed as a failed trial without a result. With ``dedup`` on (the
default while a constraint can bind), a proposal that repeats a configuration already launched is not
launched again: it receives that trial's result, or is closed as failed while that trial still runs.
When the base tuner is exhausted, when the feasible space is empty, or when no unseen feasible
configuration is left, ``nni.NoMoreTrialError`` ends the experiment and the reason is logged (NNI's
``dispatcher.log``).

When no constraint can bind (``problem.always_feasible()``) the wrapper is a pass-through: the base tuner
gets the experiment's search space unchanged and NNI gets exactly the base tuner's sequence. ``BatchTuner``
is supported with its own layout (one ``choice`` whose values are whole parameter sets): infeasible sets are
dropped before the base tuner sees them. Every public method holds one lock, so the dispatcher may call
from several threads.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import nni
import numpy as np
from nni.tuner import Tuner

from dnnsat._verify import Verifier

from ._load import (
    MODES,
    DnnSATClassArgsValidator,
    _import_attr,
    adapt_base_args,
    adapt_space,
    after_base_generate,
    create_base_tuner,
    load_problem,
    optimize_mode,
)
from ._spaces import BatchLayout, base_space, batch_layout, check_space, config_key, plain

__all__ = ["DnnSATTuner", "DnnSATClassArgsValidator", "TunerStats", "load_problem", "MODES"]

_log = logging.getLogger("dnnsat.integrations.nni")


def _is_batch_tuner(base: Any) -> bool:
    from nni.algorithms.hpo.batch_tuner import BatchTuner

    return isinstance(base, BatchTuner)


def _scalar(value: Any) -> float | None:
    """The scalar metric of an NNI result (a number or a dict with ``"default"``), or ``None``."""
    if isinstance(value, Mapping):
        value = value.get("default")
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        return None
    v = float(value)
    return v if math.isfinite(v) else None


# -- bookkeeping ---------------------------------------------------------------------------------------


@dataclass
class _Launched:
    """One configuration handed to NNI as a trial (or imported as a finished one)."""

    real_id: int | None
    base_id: int | None = None  # the base tuner's id of the proposal (None: sampled by dnnsat, imported)
    value: Any = None
    has_value: bool = False
    ended: bool = False


@dataclass
class TunerStats:
    """Counters of what the wrapper did (see ``DnnSATTuner.stats``)."""

    proposals: int = 0  # configurations asked from the base tuner
    feasible: int = 0  # proposals that were feasible as proposed
    repaired: int = 0  # infeasible proposals replaced by their repair
    float_repairs: int = 0  # repaired proposals in which a continuous Float value moved
    rejected: int = 0  # proposals discarded (reject mode, or unrepairable) and penalised
    duplicates: int = 0  # proposals equal to an already launched configuration (dedup on)
    fallbacks: int = 0  # configurations sampled by dnnsat after max_attempts failed proposals
    launched: int = 0  # configurations returned to NNI
    verified: int = 0  # launched configurations checked against the real module (verify=)
    disagreements: int = 0  # verified configurations where the real module disagreed

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


class DnnSATTuner(Tuner):
    """An NNI tuner that returns only configurations feasible for a :class:`dnnsat.Problem`.

    Parameters
    ----------
    problem:
        A ``dnnsat.Problem``, a zero-argument factory, or an import path ``"pkg.module:attr"`` to either
        (the form to use in ``classArgs``).
    base_tuner:
        The tuner to wrap: a built-in or registered NNI name (``"TPE"``, ``"Random"``, ``"Anneal"``,
        ``"Evolution"``, ``"GridSearch"``, ``"Batch"``, ``"GP"``, ``"Metis"``, ``"PBT"``, ...), an import
        path, a ``Tuner`` class or instance.
    base_args:
        Keyword arguments of the base tuner (its ``classArgs``, e.g. ``{"optimize_mode": "maximize"}``).
    mode:
        ``"repair"`` (replace an infeasible proposal by its repair) or ``"reject"`` (ask again).
    problem_args:
        Keyword arguments for a problem factory (e.g. ``{"flops_limit": 1e11, "params_limit": 2e6}``).
    penalty:
        The result reported to the base tuner for a discarded proposal. ``None`` (default): adaptive,
        worse than every real result seen by the spread of real results (at least 1, or ``|worst|``).
    max_attempts:
        Base-tuner proposals per requested configuration. In reject mode the last one is repaired
        instead of discarded; if it cannot be used either (a repeat), dnnsat samples an unlaunched
        feasible configuration itself.
    dedup:
        ``True``: never launch the same configuration twice (a repeat gets the first trial's result, or
        is closed as failed while that trial runs). ``False``: launch repeats as separate trials, like the
        bare tuner. ``None`` (default): on when a constraint can bind (repairs map many proposals onto one
        configuration), off when none can (``problem.always_feasible()``), so the wrapper then gives the
        bare tuner's sequence.
    seed:
        Seed of dnnsat's own fallback sampling.
    verify:
        The :func:`dnnsat.from_torch` model the problem was built on (any object with
        ``disagreements(problem, config)``), or an import path ``"pkg.module:attr"`` to it: every
        configuration is then checked against the real module before it is launched (params, FLOPs,
        validity: one meta-device build and forward), counted in ``stats.verified`` /
        ``stats.disagreements``, and a disagreement is logged as a warning.
    """

    def __init__(
        self,
        problem: Any,
        base_tuner: Any = "TPE",
        base_args: Mapping[str, Any] | None = None,
        mode: str = "repair",
        problem_args: Mapping[str, Any] | None = None,
        penalty: float | None = None,
        max_attempts: int = 20,
        dedup: bool | None = None,
        seed: int | None = None,
        verify: Any = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        if penalty is not None and not math.isfinite(float(penalty)):
            raise ValueError(f"penalty must be a finite number, got {penalty!r}")
        self.problem = load_problem(problem, problem_args)
        self.mode = mode
        self.max_attempts = int(max_attempts)
        self.dedup = None if dedup is None else bool(dedup)
        self.penalty = None if penalty is None else float(penalty)
        self._base_args = adapt_base_args(base_tuner, base_args or {})
        self.base: Tuner = create_base_tuner(base_tuner, self._base_args)
        self.optimize_mode = optimize_mode(self.base, self._base_args)
        self.stats = TunerStats()
        model = _import_attr(verify) if isinstance(verify, str) else verify
        self._verifier = None if model is None else Verifier(model, self.problem, _log)
        self._rng = np.random.default_rng(seed)
        self._dedup = bool(dedup)  # effective dedup, set by update_search_space
        self._lock = threading.RLock()  # every public method holds it (the dispatcher may use threads)
        self._nni_space: dict[str, Any] | None = None  # the experiment's search space
        self._base_space: dict[str, Any] | None = None  # what the base tuner got (pruned)
        self._pruned: Any = None  # the dnnsat Space whose NNI form the base tuner got
        self._guard = self.problem.guard()  # the pruned space, its witnesses and caches, repairs
        self._batch: BatchLayout | None = None  # BatchTuner's layout
        self._problem_keys: list[str] = []  # top-level NNI keys that belong to the problem
        self._exhausted: str | None = None  # reason, once nothing more can be generated
        self._trials: dict[int, _Launched] = {}  # NNI parameter id -> launched trial
        self._by_config: dict[str, _Launched] = {}  # config key -> first launched (or imported) trial
        self._base_raw: dict[int, Any] = {}  # open base id -> parameters as the base tuner returned them
        self._next_synthetic = -1
        self._waiting: dict[int, int] = {}  # base id the base tuner deferred -> NNI parameter id
        self._st_callback: Callable[[int, Any], None] | None = None
        self._pending_import: list[Any] = []
        self._reals: list[float] = []  # real scalar results seen
        self._worst_penalty: float | None = None
        self._last_extras: dict[str, Any] = {}
        self._last_full: dict[str, Any] | None = None  # the last proposal's configuration (+ extras)
        _log.info(
            "DnnSATTuner: mode=%s, base tuner %s, optimize_mode=%s",
            mode,
            type(self.base).__name__,
            self.optimize_mode,
        )

    # -- search space -----------------------------------------------------------------------------
    def update_search_space(self, search_space: Mapping[str, Any]) -> None:
        """Check the experiment's space against the problem and give the base tuner the pruned space.

        Top-level entries of the NNI space that the problem does not know are passed through unchanged
        (unchecked); every problem parameter must be present with exactly the problem's domain. When no
        constraint can bind, the base tuner gets the experiment's space unchanged. For ``BatchTuner`` the
        space is one ``choice`` of parameter sets; the infeasible ones are dropped.
        """
        with self._lock:
            space = dict(search_space)
            self._batch = None
            if _is_batch_tuner(self.base):
                self._update_batch_space(space)
                return
            self._problem_keys = check_space(self.problem, space)
            self._nni_space = space
            if self.problem.is_empty():
                self._set_empty()
                return
            passthrough = bool(self.problem.always_feasible())
            self._dedup = self.dedup if self.dedup is not None else not passthrough
            if passthrough:  # the base tuner sees the experiment as is
                self._pruned = self.problem.space
                base = space
                _log.info(
                    "DnnSAT: no constraint can bind; %s gets the search space as is", type(self.base).__name__
                )
            else:
                self._pruned = self._guard.pruned
                base, self._problem_keys = base_space(self.problem, self._pruned, space, self._problem_keys)
            self._base_space = adapt_space(self.base, base)
            _log.info(
                "DnnSAT: pruned search space given to %s: %s",
                type(self.base).__name__,
                json.dumps(self._base_space, default=repr),
            )
            self._start_base()

    def _update_batch_space(self, space: Mapping[str, Any]) -> None:
        """BatchTuner: every value of the one ``choice`` is a parameter set; keep the feasible ones."""
        self._problem_keys = list(self.problem.space.to_nni())
        self._nni_space = dict(space)
        self._pruned = self.problem.space
        self._dedup = self.dedup if self.dedup is not None else not self.problem.always_feasible()
        read = functools.partial(self._split, layout=self.problem.space)
        self._batch, self._base_space = batch_layout(self.problem, space, read, self._dedup)
        if self._base_space is None:
            self._set_empty("none of BatchTuner's parameter sets is feasible")
            return
        self._start_base()

    def _set_empty(self, reason: str | None = None) -> None:
        if reason is None:
            core = self._unsat_core()
            reason = "the feasible space is empty: no configuration satisfies the constraints" + (
                f" {core}" if core else ""
            )
        self._exhausted = reason
        _log.error("DnnSAT: %s; the experiment gets no trials", reason)

    def _start_base(self) -> None:
        assert self._base_space is not None
        self._exhausted = None
        self.base.update_search_space(self._base_space)
        if self._pending_import:
            data, self._pending_import = self._pending_import, []
            self.import_data(data)

    def _unsat_core(self) -> list[str]:
        try:
            return list(self.problem.unsat_core())
        except Exception:  # the reason is a courtesy; never fail on it
            return []

    # -- generating ----------------------------------------------------------------------------------
    def generate_multiple_parameters(self, parameter_id_list: list[int], **kwargs: Any) -> list[Any]:
        """Feasible configurations for the given ids; fewer than asked when nothing more can be generated."""
        with self._lock:
            if "st_callback" in kwargs:
                self._st_callback = kwargs["st_callback"]
            result = []
            for parameter_id in parameter_id_list:
                try:
                    result.append(self.generate_parameters(parameter_id, **kwargs))
                except nni.NoMoreTrialError:
                    break
            return result

    def generate_parameters(self, parameter_id: int, **kwargs: Any) -> Any:
        """One feasible configuration, in the structure of the experiment's search space."""
        with self._lock:
            if self._nni_space is None:
                raise RuntimeError("update_search_space must be called before generate_parameters")
            if self._exhausted is not None:
                _log.info("DnnSAT: no more trials: %s", self._exhausted)
                raise nni.NoMoreTrialError(self._exhausted)
            base_id = parameter_id
            for attempt in range(self.max_attempts):
                raw = self._ask_base(base_id, parameter_id, kwargs)
                # reject mode repairs the last allowed proposal instead of discarding it
                config = self._vet(base_id, raw, force_repair=attempt == self.max_attempts - 1)
                if config is not None:
                    return self._launch(parameter_id, base_id, config)
                base_id = self._synthetic_id()
            config = self._fallback()
            if config is None:
                raise nni.NoMoreTrialError(self._exhausted)
            self.stats.fallbacks += 1
            _log.warning(
                "DnnSAT: %d proposals in a row were repeated or unusable; parameter id %d gets a "
                "feasible configuration sampled by dnnsat (its result is not reported to the base tuner)",
                self.max_attempts,
                parameter_id,
            )
            return self._launch(parameter_id, None, config)

    def _synthetic_id(self) -> int:
        self._next_synthetic -= 1
        return self._next_synthetic + 1

    def _ask_base(self, base_id: int, parameter_id: int, kwargs: Mapping[str, Any]) -> Any:
        kw = {k: v for k, v in kwargs.items() if k != "st_callback"}
        out = self.base.generate_multiple_parameters([base_id], st_callback=self._on_base_callback, **kw)
        if not out:
            self._waiting[base_id] = parameter_id
            _log.info("DnnSAT: base tuner %s has no more parameters", type(self.base).__name__)
            raise nni.NoMoreTrialError("base tuner has no more parameters")
        after_base_generate(self.base, base_id)
        self.stats.proposals += 1
        return out[0]

    def _on_base_callback(self, base_id: int, raw: Any) -> None:
        """A configuration the base tuner sends later on its own (Evolution's and PBT's deferred requests)."""
        with self._lock:
            parameter_id = self._waiting.pop(base_id, None)
            if parameter_id is None or self._st_callback is None:
                _log.warning(
                    "DnnSAT: dropped an unsolicited configuration from the base tuner (id %s)", base_id
                )
                self._close_discarded(base_id, raw)
                return
            self.stats.proposals += 1
            config = self._vet(base_id, raw, force_repair=True)
            if config is None:
                config = self._fallback()
                base_id_or_none: int | None = None
                if config is None:
                    _log.info("DnnSAT: deferred request %d dropped: %s", parameter_id, self._exhausted)
                    return
            else:
                base_id_or_none = base_id
            self._st_callback(parameter_id, self._launch(parameter_id, base_id_or_none, config))

    def _split(self, raw: Any, layout: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
        """NNI parameters -> (problem config in the problem's value types, extra top-level parameters).

        ``layout`` is the space whose NNI form produced ``raw`` (default: the space the base tuner got);
        raises ``SpaceError`` when ``raw`` is outside it.
        """
        from dnnsat._space_io import config_from_nni

        if self._batch is not None and not isinstance(raw, Mapping):
            raw = {self._batch.key: raw}  # BatchTuner: a value that is not a dict is that key's value
        if not isinstance(raw, Mapping):
            raise TypeError(f"expected a dict of parameters, got {type(raw).__name__}")
        layout = self._pruned if layout is None else layout
        values = plain(raw)
        config = config_from_nni(layout, values)
        config = dict(self.problem.space.validate(config))
        extras = {k: v for k, v in values.items() if k not in self._problem_keys}
        return config, extras

    def _to_nni(self, full: Mapping[str, Any]) -> Any:
        """A flat config (+ extras) -> parameters in the structure of the experiment's search space
        (BatchTuner: the parameter set as written in the search space)."""
        from dnnsat._space_io import config_to_nni

        if self._batch is not None:
            return self._batch.written[config_key(full)]
        extras = {k: v for k, v in full.items() if k not in self.problem.space}
        nested = config_to_nni(self.problem.space, {k: v for k, v in full.items() if k in self.problem.space})
        assert self._nni_space is not None
        out = {
            k: nested[k] if k in nested else extras[k] for k in self._nni_space if k in nested or k in extras
        }
        out.update({k: v for k, v in extras.items() if k not in out})  # e.g. PBT's checkpoint directories
        return plain(out)

    def _to_base(self, full: Mapping[str, Any]) -> dict[str, Any]:
        """A flat config (+ extras) -> parameters in the structure of the base tuner's (pruned) space."""
        from dnnsat._space_io import config_to_nni

        names = self.problem.space.names
        nested = config_to_nni(self._pruned, {k: v for k, v in full.items() if k in names})
        nested.update({k: v for k, v in full.items() if k not in names})
        return plain(nested)  # type: ignore[no-any-return]

    def _vet(self, base_id: int, raw: Any, force_repair: bool = False) -> dict[str, Any] | None:
        """The configuration to launch for this proposal, or ``None`` after closing it in the base tuner."""
        try:
            config, extras = self._split(raw)
        except Exception as err:
            _log.warning("DnnSAT: proposal %s is outside the search space (%s); discarded", raw, err)
            self._close_discarded(base_id, raw)
            self.stats.rejected += 1
            return None
        self._last_extras = extras
        verdict = self.problem.check(config)
        if verdict.feasible:
            self.stats.feasible += 1
        elif self.mode == "repair" or force_repair:
            fixed = self._guard.repair(config)
            if fixed is None:
                _log.debug("DnnSAT: proposal %s cannot be repaired; discarded", config)
                self._close_discarded(base_id, raw)
                self.stats.rejected += 1
                return None
            _log.debug("DnnSAT: repaired %s -> %s", config, fixed)
            space = self.problem.space
            if any(not space[n].is_finite and fixed.get(n) != v for n, v in config.items()):
                self.stats.float_repairs += 1
            config = dict(fixed)
            self.stats.repaired += 1
        else:
            _log.debug("DnnSAT: rejected %s (%s)", config, ", ".join(v.name for v in verdict.violations))
            self._close_discarded(base_id, raw)
            self.stats.rejected += 1
            return None
        full = {**config, **extras}
        launched = self._by_config.get(config_key(full)) if self._dedup else None
        self._base_raw[base_id] = raw
        self._last_full = full
        if launched is not None:
            # an alias: the result at once, or closed as failed while the first trial still runs (the
            # wrapper asks the base tuner again, and tuners such as Evolution hold a population slot per
            # open proposal: waiting would drain them)
            self.stats.duplicates += 1
            self._close(base_id, launched.value if launched.has_value else None)
            return None
        return full

    def _launch(self, parameter_id: int, base_id: int | None, full: dict[str, Any]) -> Any:
        launched = _Launched(parameter_id, base_id)
        self._trials[parameter_id] = launched
        self._by_config.setdefault(config_key(full), launched)
        self.stats.launched += 1
        if self._verifier is not None:
            self.stats.verified += 1
            self.stats.disagreements += bool(self._verifier(full))
        return self._to_nni(full)

    def _fallback(self) -> dict[str, Any] | None:
        """A feasible configuration not launched yet, sampled by dnnsat; ``None`` when there is none."""
        if self._batch is not None:  # BatchTuner launches only the parameter sets the user listed
            self._exhausted = "every feasible parameter set of BatchTuner's search space has been launched"
            return None
        try:
            candidates = self.problem.sample(32, seed=int(self._rng.integers(2**31)))
        except ValueError:  # continuous Floats in constraints: sample draws finite parameters only
            last = self._last_full
            candidates = [] if last is None else self._guard.redraw_floats(last, 32, self._rng)
        for config in candidates:
            full = {**dict(config), **self._last_extras}
            if config_key(full) not in self._by_config:
                return full
        for config in self._enumerate_unlaunched():
            return config
        if self._last_extras and self._last_full is not None:
            # parameters the problem does not know are passed through: dnnsat cannot tell which of their
            # values are unseen, so the base tuner's last proposal runs again rather than end the experiment
            _log.warning("DnnSAT: no unlaunched configuration found; %s runs again", self._last_full)
            return self._last_full
        self._exhausted = "every feasible configuration has been launched"
        _log.info("DnnSAT: %s", self._exhausted)
        return None

    def _enumerate_unlaunched(self) -> Iterator[dict[str, Any]]:
        if not all(self.problem.space[n].is_finite for n in self.problem.space.names):
            return
        for config in self.problem.enumerate(limit=len(self._by_config) + 1):
            full = {**dict(config), **self._last_extras}
            if config_key(full) not in self._by_config:
                yield full

    # -- results -----------------------------------------------------------------------------------
    def _penalty(self) -> float | None:
        if self.penalty is not None:
            return self.penalty
        if not self._reals:
            return None
        lo, hi = min(self._reals), max(self._reals)
        spread = hi - lo
        if spread <= 0:
            spread = max(1.0, abs(lo))
        p = lo - spread if self.optimize_mode == "maximize" else hi + spread
        if self._worst_penalty is not None:
            p = (
                min(p, self._worst_penalty)
                if self.optimize_mode == "maximize"
                else max(p, self._worst_penalty)
            )
        self._worst_penalty = p
        return p

    def _close_discarded(self, base_id: int, raw: Any) -> None:
        self._base_raw[base_id] = raw
        penalty = self._penalty()
        self._close(base_id, penalty)

    def _close(self, base_id: int, value: Any) -> None:
        """Report ``value`` (``None``: failed, no result) for a base id, then end it (result first: TPE)."""
        raw = self._base_raw.pop(base_id, None)
        if value is not None:
            self.base.receive_trial_result(base_id, raw, value)
        self.base.trial_end(base_id, value is not None)

    def receive_trial_result(self, parameter_id: int, parameters: Any, value: Any, **kwargs: Any) -> None:
        """Pass a trial's final result to the base tuner, with the parameters as the base tuner gave them."""
        with self._lock:
            launched = self._trials.get(parameter_id)
            if launched is None:
                _log.info("DnnSAT: result for unknown parameter id %s ignored", parameter_id)
                return
            launched.value, launched.has_value = value, True
            scalar = _scalar(value)
            if scalar is not None:
                self._reals.append(scalar)
            if launched.base_id is not None and not launched.ended:
                raw = self._base_raw.get(launched.base_id)
                self.base.receive_trial_result(launched.base_id, raw, value, **kwargs)

    def trial_end(self, parameter_id: int, success: bool, **kwargs: Any) -> None:
        """End the trial in the base tuner."""
        with self._lock:
            launched = self._trials.get(parameter_id)
            if launched is None or launched.ended:
                return
            launched.ended = True
            if launched.base_id is not None:
                self._base_raw.pop(launched.base_id, None)
                self.base.trial_end(launched.base_id, success, **kwargs)

    def import_data(self, data: Sequence[Any]) -> Any:
        """Import finished trials (``[{"parameter": ..., "value": ...}]``): feasible ones go to the base
        tuner in its own space's terms and count as launched; infeasible ones are skipped. Returns what the
        base tuner's ``import_data`` returns (PBT: the epoch to start from)."""
        with self._lock:
            if isinstance(data, str):
                data = nni.load(data)
            if self._base_space is None:
                if self._nni_space is None:
                    self._pending_import.extend(data)
                return None
            accepted = []
            skipped = 0
            for trial in data:
                if isinstance(trial, str):
                    trial = nni.load(trial)
                try:
                    config, extras = self._split(trial["parameter"], layout=self.problem.space)
                    feasible = self.problem.check(config).feasible
                except Exception as err:
                    _log.debug("DnnSAT: imported trial %s not in the space: %s", trial, err)
                    feasible = False
                if not feasible:
                    skipped += 1
                    continue
                full = {**config, **extras}
                as_base = trial["parameter"] if self._batch is not None else self._to_base(full)
                accepted.append({**trial, "parameter": as_base})
                self._by_config.setdefault(
                    config_key(full), _Launched(None, None, trial.get("value"), "value" in trial, True)
                )
                scalar = _scalar(trial.get("value"))
                if scalar is not None:
                    self._reals.append(scalar)
            if skipped:
                _log.info("DnnSAT: import_data skipped %d infeasible or out-of-space trial(s)", skipped)
            return self.base.import_data(accepted) if accepted else None

    # -- lifecycle ---------------------------------------------------------------------------------
    def _on_exit(self) -> None:
        _log.info("DnnSAT: tuner statistics %s; guard %s", self.stats.as_dict(), self._guard.stats)
        self.base._on_exit()

    def _on_error(self) -> None:
        self.base._on_error()
