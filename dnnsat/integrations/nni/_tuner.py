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

import logging
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import nni
from nni.tuner import Tuner

from dnnsat.guard import Verifier
from dnnsat.problem._args import check_count, check_seed

from ._layout import Layout
from ._ledger import Ledger
from ._load import (
    MODES,
    DnnSATClassArgsValidator,
    _import_attr,
    adapt_base_args,
    after_base_generate,
    load_problem,
    optimize_mode,
)
from ._vetter import TunerStats, Vetter

__all__ = ["DnnSATTuner", "DnnSATClassArgsValidator", "TunerStats", "load_problem", "MODES"]

_log = logging.getLogger("dnnsat.integrations.nni")

_THIS_CLASS = "dnnsat.integrations.nni.DnnSATTuner"


def create_base_tuner(base_tuner: Any, base_args: Mapping[str, Any]) -> Tuner:
    """Instantiate the base tuner from a built-in/registered name, an import path, a class or an instance."""
    if isinstance(base_tuner, Tuner):
        if base_args:
            raise ValueError("base_args cannot be given together with a tuner instance")
        return base_tuner
    if isinstance(base_tuner, str):
        from nni.tools.package_utils import config_manager, tuner_factory

        meta = config_manager.get_algo_meta(base_tuner)
        if meta is not None:
            if meta.algo_type != "tuner" or meta.is_advisor:
                raise ValueError(
                    f"base_tuner {base_tuner!r} is an NNI {'advisor' if meta.is_advisor else 'assessor'};"
                    " only tuners can be wrapped"
                )
            if meta.class_name == _THIS_CLASS:
                raise ValueError(f"base_tuner {base_tuner!r} is DnnSATTuner itself; name the tuner to wrap")
            return tuner_factory.create_builtin_class_instance(base_tuner, dict(base_args), "tuners")  # type: ignore[no-any-return]
        if ":" not in base_tuner and "." not in base_tuner:
            names = sorted(m.name for m in config_manager.get_all_algo_meta() if m.algo_type == "tuner")
            raise ValueError(f"unknown base_tuner {base_tuner!r}; built-in/registered tuners: {names}")
        base_tuner = _import_attr(base_tuner)
    if isinstance(base_tuner, type):
        if base_tuner.__module__ + "." + base_tuner.__qualname__ == _THIS_CLASS or base_tuner is DnnSATTuner:
            raise ValueError("base_tuner cannot be DnnSATTuner itself")
        instance = base_tuner(**dict(base_args))
        if not hasattr(instance, "generate_parameters") and not hasattr(
            instance, "generate_multiple_parameters"
        ):
            raise TypeError(f"{base_tuner.__name__} is not an NNI tuner")
        return instance  # type: ignore[no-any-return]
    raise TypeError(f"base_tuner must be a tuner name, import path, class or instance; got {base_tuner!r}")


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
        seed = check_seed(seed, "DnnSATTuner")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        max_attempts = check_count(max_attempts, "max_attempts", "DnnSATTuner", minimum=1, example=20)
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
        self._dedup = bool(dedup)  # effective dedup, set by update_search_space
        self._lock = threading.RLock()  # every public method holds it (the dispatcher may use threads)
        self._layout = Layout(self.problem)  # the experiment's, the base tuner's space; conversions
        self._guard = self.problem.guard()  # the pruned space, its witnesses and caches, repairs
        self._ledger = Ledger(self.base, self.penalty, self.optimize_mode)  # ids, results, penalties
        self._by_config = self._ledger.by_config  # config key -> first launched trial (conformance reads it)
        # proposals -> configurations to launch; its ``exhausted``: why nothing more can be generated
        self._vetter = Vetter(self._guard, self._layout, self._ledger, self.stats, mode == "repair", seed)
        self._waiting: dict[int, int] = {}  # base id the base tuner deferred -> NNI parameter id
        self._st_callback: Callable[[int, Any], None] | None = None
        self._pending_import: list[Any] = []
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
            dedup, empty = self._layout.update(dict(search_space), self.base, self._guard, self.dedup)
            if dedup is not None:
                self._dedup = dedup
            if empty is not None:
                self._vetter.exhausted = empty
                _log.error("DnnSAT: %s; the experiment gets no trials", empty)
                return
            self._start_base()

    @property
    def _base_space(self) -> dict[str, Any] | None:
        """The search space the base tuner got (None before ``update_search_space``)."""
        return self._layout.base_space

    def _start_base(self) -> None:
        assert self._base_space is not None
        self._vetter.exhausted = None
        self.base.update_search_space(self._base_space)
        if self._pending_import:
            data, self._pending_import = self._pending_import, []
            self.import_data(data)

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
            if self._layout.nni_space is None:
                raise RuntimeError("update_search_space must be called before generate_parameters")
            if self._vetter.exhausted is not None:
                _log.info("DnnSAT: no more trials: %s", self._vetter.exhausted)
                raise nni.NoMoreTrialError(self._vetter.exhausted)
            ask = lambda base_id: self._ask_base(base_id, parameter_id, kwargs)  # noqa: E731
            found = self._vetter.first_usable(ask, parameter_id, self.max_attempts, self._dedup)
            if found is None:
                raise nni.NoMoreTrialError(self._vetter.exhausted)
            return self._launch(parameter_id, *found)

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
                self._ledger.discard(base_id, raw)
                return
            self.stats.proposals += 1
            config = self._vetter.vet(base_id, raw, self._dedup, force_repair=True)
            if config is None:
                config = self._vetter.fallback()
                base_id_or_none: int | None = None
                if config is None:
                    _log.info("DnnSAT: deferred request %d dropped: %s", parameter_id, self._vetter.exhausted)
                    return
            else:
                base_id_or_none = base_id
            self._st_callback(parameter_id, self._launch(parameter_id, base_id_or_none, config))

    def _launch(self, parameter_id: int, base_id: int | None, full: dict[str, Any]) -> Any:
        """``full`` in the experiment's structure, recorded as launched under ``parameter_id`` only once
        nothing can fail any more: when the conversion or ``verify`` raises, the proposal is closed in the
        base tuner as failed and no parameter id is left open (NNI never gets it, so never ends it)."""
        try:
            out = self._layout.to_experiment(full)
            disagrees = None if self._verifier is None else bool(self._verifier(full))
        except Exception:
            if base_id is not None:
                self._ledger.close(base_id, None)
            raise
        self._ledger.launch(parameter_id, base_id, full)
        self.stats.launched += 1
        if disagrees is not None:
            self.stats.verified += 1
            self.stats.disagreements += disagrees
        return out

    # -- results -----------------------------------------------------------------------------------
    def receive_trial_result(self, parameter_id: int, parameters: Any, value: Any, **kwargs: Any) -> None:
        """Pass a trial's final result to the base tuner, with the parameters as the base tuner gave them."""
        with self._lock:
            self._ledger.result(parameter_id, value, **kwargs)

    def trial_end(self, parameter_id: int, success: bool, **kwargs: Any) -> None:
        """End the trial in the base tuner."""
        with self._lock:
            self._ledger.end(parameter_id, success, **kwargs)

    def import_data(self, data: Sequence[Any]) -> Any:
        """Import finished trials (``[{"parameter": ..., "value": ...}]``): feasible ones go to the base
        tuner in its own space's terms and count as launched; infeasible ones are skipped. Returns what the
        base tuner's ``import_data`` returns (PBT: the epoch to start from)."""
        with self._lock:
            if isinstance(data, str):
                data = nni.load(data)
            if self._base_space is None:
                if self._layout.nni_space is None:
                    self._pending_import.extend(data)
                return None
            accepted = []
            skipped = 0
            for trial in data:
                if isinstance(trial, str):
                    trial = nni.load(trial)
                read = self._layout.imported(trial)
                if read is None:
                    skipped += 1
                    continue
                accepted.append({**trial, "parameter": read[1]})
                self._ledger.imported(read[0], trial)
            if skipped:
                _log.info("DnnSAT: import_data skipped %d infeasible or out-of-space trial(s)", skipped)
            return self.base.import_data(accepted) if accepted else None

    # -- lifecycle ---------------------------------------------------------------------------------
    def _on_exit(self) -> None:
        _log.info("DnnSAT: tuner statistics %s; guard %s", self.stats.as_dict(), self._guard.stats)
        self.base._on_exit()

    def _on_error(self) -> None:
        self.base._on_error()
