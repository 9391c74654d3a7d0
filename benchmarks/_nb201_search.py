"""Search drivers for ``benchmarks.nasbench201``: one simulated NAS run = a sequence of trials.

Every run is sequential (one trial at a time). A trial "trains" architecture ``i`` (costing
``bench.trial_seconds[i]``) and then learns its accuracy and, from the ground truth, whether it satisfies
the scenario's limits. Each trial's clock also counts the measured wall time of the tool's own calls
(ask / suggest / tell, or generate / receive / end; with dnnsat's wrapper inside them) in every arm, and
the ``dnnsat`` arm's clock starts with the measured time to compile its Problem (and, for latency, to
measure its calibration architectures on the device). Arms:

* ``plain``: the infeasible trial is discarded — Optuna ``TrialState.FAIL``, NNI ``trial_end(success=False)``.
* ``native``: the tool's own constraint handling, known only after the trial ran: Optuna
  ``trial.set_constraint(key, value / limit - 1)`` for every limit (TPE ranks infeasible trials below
  feasible ones, NSGA-II uses constrained domination; Random ignores them) with the accuracy as value;
  NNI has no constraint API, so the result reported is a penalty (0 %, the worst accuracy).
* ``early``: ``native`` with the objective checking every constraint it can before training (see
  :mod:`benchmarks._early`: all but latency on a device not at hand), at that check's measured cost; a
  rejected trial is reported as a practitioner would: Optuna ``set_constraint`` + ``TrialState.PRUNED``
  (TPE ranks it below the feasible trials), NNI the penalty. Rejected trials cost only the check but
  count as launched trials. With nothing checkable before training, ``early`` is ``native``.
* ``dnnsat``: ``DnnSATSampler`` / ``DnnSATTuner`` (default repair mode) around the same base method,
  deciding feasibility with dnnsat's own model before launch. When that model is wrong (latency), a
  launched trial found infeasible by the ground truth is discarded as in ``plain``.

Notes. Optuna samplers learn nothing from FAIL trials: TPE in the ``plain`` arm stays in its random
start-up phase until 10 trials have COMPLETEd, and Random's ``plain``, ``native`` and ``early`` arms
launch the same sequence. ``DnnSATTuner`` deduplicates (never launches a configuration twice) and NNI's
bare tuners do not, which helps the ``dnnsat`` arm when the feasible space is small; Optuna's samplers
repeat configurations in every arm. Seeds: Optuna samplers and NNI TPE take ``seed``; NNI Evolution
seeds nothing, so its initial population is redrawn with ``RandomState(seed)`` and ``random.seed(seed)``.
Base settings: Optuna defaults except NSGA-II ``population_size=20``; NNI TPE defaults; NNI Evolution
``population_size=16`` (for runs of about 100-300 trained trials).
"""

from __future__ import annotations

import logging
import random
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._nb201_data import EDGES, OPS, Bench

METHODS = ("optuna-random", "optuna-tpe", "optuna-nsga2", "nni-tpe", "nni-evolution")
ARMS = ("plain", "native", "early", "dnnsat")
NSGA_POPULATION = 20
EVOLUTION_POPULATION = 16
NNI_PENALTY = 0.0


def quiet() -> None:
    """Silence Optuna, NNI and dnnsat logging and warnings (call in every worker process)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    for name in ("nni", "dnnsat", "optuna", "hyperopt"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    import nni.algorithms.hpo.evolution_tuner  # noqa: F401 - NNI sets up its INFO handlers on import

    logging.disable(logging.INFO)  # NNI's tuners log every trial at INFO through their own handlers


@dataclass
class Sim:
    """A scenario as the drivers see it: ground truth, the early check and dnnsat's Problem factory.

    ``ok``: truth per architecture; ``values``: normalised constraint values (``value / limit - 1``);
    ``pre_ok``: truth of the constraints checkable before training (``None``: none is);
    ``check_s``: seconds of that check per architecture; ``problem``: dnnsat's Problem, compiled once
    and its measured ``compile_s`` charged to every dnnsat run (each experiment compiles it once);
    ``calib_s``: seconds of measuring dnnsat's calibration architectures (charged to the dnnsat arm too).
    """

    bench: Bench
    ok: np.ndarray
    values: dict[str, np.ndarray]
    pre_ok: np.ndarray | None
    check_s: np.ndarray
    problem: Any
    compile_s: float
    calib_s: float = 0.0


class Trials:
    """What a run did, trial by trial, and the budget bookkeeping (all times in seconds).

    ``archs``: launched architecture indices; ``trained``: whether each was trained (``False``: rejected
    by an early check); ``seconds``: each trial's clock time (training, check, tool calls);
    ``tool_s``: the part of it spent in the tool's calls; ``setup_s``: clock time before the first
    trial (dnnsat's compile).
    """

    def __init__(self, sim: Sim, budget_s: float, max_trials: int, stop_at: float | None) -> None:
        self.sim, self.budget_s, self.max_trials, self.stop_at = sim, budget_s, max_trials, stop_at
        self.archs: list[int] = []
        self.trained: list[bool] = []
        self.seconds: list[float] = []
        self.tool_s: list[float] = []
        self.setup_s = 0.0
        self.spent = 0.0
        self.done = False

    @property
    def more(self) -> bool:
        """True while either budget (hours, launched trials) is left and the optimum is not reached."""
        return (self.spent < self.budget_s or len(self.archs) < self.max_trials) and not self.done

    def setup(self, seconds: float) -> None:
        self.setup_s += seconds
        self.spent += seconds

    def launch(self, i: int, tool_s: float, early: bool) -> bool | None:
        """Launch architecture ``i`` after ``tool_s`` seconds in the tool; with ``early``, check first.

        Returns ``None`` when the early check rejects it, else its ground-truth feasibility after training.
        """
        sim = self.sim
        seconds = tool_s + (float(sim.check_s[i]) if early else 0.0)
        rejected = early and sim.pre_ok is not None and not sim.pre_ok[i]
        if not rejected:
            seconds += float(sim.bench.trial_seconds[i])
        self.archs.append(i)
        self.trained.append(not rejected)
        self.seconds.append(seconds)
        self.tool_s.append(tool_s)
        self.spent += seconds
        if rejected:
            return None
        ok = bool(sim.ok[i])
        if ok and self.stop_at is not None and sim.bench.acc[i] >= self.stop_at:
            self.done = True
        return ok

    def record(self) -> dict[str, Any]:
        keys = ("archs", "trained", "seconds", "tool_s", "setup_s")
        return {k: getattr(self, k) for k in keys}


def run(
    method: str,
    arm: str,
    seed: int,
    sim: Sim,
    budget_s: float,
    max_trials: int = 0,
    stop_at: float | None = None,
) -> dict[str, Any]:
    """One run until both budgets (``budget_s`` clock seconds, ``max_trials`` launched trials) are spent or
    a feasible trial reaches ``stop_at`` (the feasible optimum: nothing can improve after it).

    Returns :meth:`Trials.record`.
    """
    if method not in METHODS or arm not in ARMS:
        raise ValueError(f"method must be one of {METHODS} and arm one of {ARMS}; got {method!r}, {arm!r}")
    trials = Trials(sim, budget_s, max_trials, stop_at)
    driver = _optuna if method.startswith("optuna") else _nni
    driver(method.split("-", 1)[1], arm, seed, trials)
    return trials.record()


def _problem(arm: str, trials: Trials) -> Any:
    """dnnsat's Problem, its compile time charged to the run's clock (``None`` outside the dnnsat arm)."""
    if arm != "dnnsat":
        return None
    sim = trials.sim
    trials.setup(sim.compile_s + sim.calib_s)
    return sim.problem


def _optuna(name: str, arm: str, seed: int, trials: Trials) -> None:
    import optuna
    from optuna.trial import TrialState

    from dnnsat.integrations.optuna import DnnSATSampler

    samplers: dict[str, Callable[[], optuna.samplers.BaseSampler]] = {
        "random": lambda: optuna.samplers.RandomSampler(seed=seed),
        "tpe": lambda: optuna.samplers.TPESampler(seed=seed),
        "nsga2": lambda: optuna.samplers.NSGAIISampler(seed=seed, population_size=NSGA_POPULATION),
    }
    problem = _problem(arm, trials)
    t0 = time.perf_counter()
    sampler = samplers[name]()
    if arm == "dnnsat":
        sampler = DnnSATSampler(problem, sampler, seed=seed)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    trials.setup(time.perf_counter() - t0 if arm == "dnnsat" else 0.0)
    choices = list(OPS)
    bench, values = trials.sim.bench, trials.sim.values
    constrained = arm in ("native", "early")
    tool_s = 0.0  # the previous trial's tell, charged to the next trial
    while trials.more:
        t0 = time.perf_counter()
        trial = study.ask()
        i = bench.index({e: trial.suggest_categorical(e, choices) for e in EDGES})
        feasible = trials.launch(i, tool_s + time.perf_counter() - t0, early=arm == "early")
        t0 = time.perf_counter()
        if constrained:
            for key, v in values.items():
                trial.set_constraint(key, float(v[i]))
        if feasible is None:
            study.tell(trial, state=TrialState.PRUNED)
        elif feasible or constrained:
            study.tell(trial, float(bench.acc[i]))
        else:
            study.tell(trial, state=TrialState.FAIL)
        tool_s = time.perf_counter() - t0


def _nni(name: str, arm: str, seed: int, trials: Trials) -> None:
    import nni
    from nni.tools.package_utils.tuner_factory import create_builtin_class_instance

    from dnnsat.integrations.nni import DnnSATTuner
    from dnnsat.space import config_from_nni
    from dnnsat.zoo import get as zoo_get

    builtin, args = {
        "tpe": ("TPE", {"optimize_mode": "maximize", "seed": seed}),
        "evolution": ("Evolution", {"optimize_mode": "maximize", "population_size": EVOLUTION_POPULATION}),
    }[name]
    random.seed(seed)  # NNI Evolution draws its mutation positions from ``random``
    problem = _problem(arm, trials)
    t0 = time.perf_counter()
    space = problem.space if problem is not None else zoo_get("nasbench201").space()
    if arm == "dnnsat":
        tuner: Any = DnnSATTuner(problem, builtin, args, seed=seed)
        base = tuner.base
    else:
        tuner = base = create_builtin_class_instance(builtin, dict(args), "tuners")
    tuner.update_search_space(space.to_nni())
    if builtin == "Evolution":  # it seeds nothing itself: redraw its initial population reproducibly
        base.random_state = np.random.RandomState(seed)
        base.population = []
        for _ in range(base.population_size):
            base._random_generate_individual()
    trials.setup(time.perf_counter() - t0 if arm == "dnnsat" else 0.0)
    bench = trials.sim.bench
    pid = 0
    tool_s = 0.0  # the previous trial's report, charged to the next trial
    while trials.more:
        t0 = time.perf_counter()
        try:
            got = tuner.generate_multiple_parameters([pid], st_callback=lambda *_: None)
        except nni.NoMoreTrialError:
            got = []
        if not got:  # nothing feasible left unseen (DnnSATTuner with dedup) or the tuner gave up
            break
        params = got[0]
        i = bench.index(config_from_nni(space, params))
        feasible = trials.launch(i, tool_s + time.perf_counter() - t0, early=arm == "early")
        t0 = time.perf_counter()
        if feasible or arm in ("native", "early"):
            tuner.receive_trial_result(pid, params, float(bench.acc[i]) if feasible else NNI_PENALTY)
            tuner.trial_end(pid, True)
        else:
            tuner.trial_end(pid, False)
        tool_s = time.perf_counter() - t0
        pid += 1
