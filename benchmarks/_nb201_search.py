"""Search drivers for ``benchmarks.nasbench201``: one simulated NAS run = a sequence of trial indices.

Every run is sequential (one trial at a time) and stops launching once the simulated training time spent
reaches the budget. A trial "trains" architecture ``i`` (costing ``bench.trial_seconds[i]``) and then
learns its accuracy and, from the ground truth, whether it satisfies the scenario's limits. Arms:

* ``plain``: the infeasible trial is discarded — Optuna ``TrialState.FAIL``, NNI ``trial_end(success=False)``.
* ``native``: the tool's own constraint handling, known only after the trial ran: Optuna
  ``trial.set_constraint(key, value / limit - 1)`` for every limit (TPE ranks infeasible trials below
  feasible ones, NSGA-II uses constrained domination; Random ignores them) with the accuracy as value;
  NNI has no constraint API, so the result reported is a penalty (0 %, the worst accuracy).
* ``dnnsat``: ``DnnSATSampler`` / ``DnnSATTuner`` (default repair mode) around the same base method,
  deciding feasibility with dnnsat's own model before launch. When that model is wrong (latency), a
  launched trial found infeasible by the ground truth is discarded as in ``plain``.

Notes. Optuna samplers learn nothing from FAIL trials: TPE in the ``plain`` arm stays in its random
start-up phase until 10 trials have COMPLETEd, and Random's ``plain`` and ``native`` arms launch the
same sequence. ``DnnSATTuner`` deduplicates (never launches a configuration twice) and NNI's bare
tuners do not, which helps the ``dnnsat`` arm when the feasible space is small; Optuna's samplers
repeat configurations in every arm. Seeds: Optuna samplers and NNI TPE take ``seed``; NNI Evolution
seeds nothing, so its initial population is redrawn with ``RandomState(seed)`` and ``random.seed(seed)``.
Base settings: Optuna defaults except NSGA-II ``population_size=20``; NNI TPE defaults; NNI Evolution
``population_size=16`` (for runs of about 100-300 trials).
"""

from __future__ import annotations

import logging
import random
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from ._nb201_data import EDGES, OPS, Bench

METHODS = ("optuna-random", "optuna-tpe", "optuna-nsga2", "nni-tpe", "nni-evolution")
ARMS = ("plain", "native", "dnnsat")
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


class Trials:
    """What a run did: architecture indices in launch order, and the budget bookkeeping."""

    def __init__(self, bench: Bench, ok: np.ndarray, budget_s: float, stop_at: float | None) -> None:
        self.bench, self.ok, self.budget_s, self.stop_at = bench, ok, budget_s, stop_at
        self.archs: list[int] = []
        self.spent = 0.0
        self.done = False

    @property
    def more(self) -> bool:
        """True while budget is left and (with ``stop_at``) the best feasible accuracy is below it."""
        return self.spent < self.budget_s and not self.done

    def run(self, i: int) -> bool:
        """Train architecture ``i``; returns its ground-truth feasibility."""
        self.archs.append(i)
        self.spent += float(self.bench.trial_seconds[i])
        ok = bool(self.ok[i])
        if ok and self.stop_at is not None and self.bench.acc[i] >= self.stop_at:
            self.done = True
        return ok


def run(
    method: str,
    arm: str,
    seed: int,
    bench: Bench,
    ok: np.ndarray,
    values: dict[str, np.ndarray],
    problem: Any,
    budget_s: float,
    stop_at: float | None = None,
) -> list[int]:
    """One run; returns the launched architecture indices in order.

    ``ok``/``values``: ground-truth feasibility and normalised constraint values; ``problem``: dnnsat's
    Problem (used by the ``dnnsat`` arm only); ``stop_at``: stop once a feasible trial reaches this
    accuracy (the feasible optimum: nothing can improve after it).
    """
    if method not in METHODS or arm not in ARMS:
        raise ValueError(f"method must be one of {METHODS} and arm one of {ARMS}; got {method!r}, {arm!r}")
    trials = Trials(bench, ok, budget_s, stop_at)
    driver = _optuna if method.startswith("optuna") else _nni
    driver(method.split("-", 1)[1], arm, seed, trials, values, problem)
    return trials.archs


def _optuna(
    name: str, arm: str, seed: int, trials: Trials, values: dict[str, np.ndarray], problem: Any
) -> None:
    import optuna
    from dnnsat.integrations.optuna import DnnSATSampler
    from optuna.trial import TrialState

    samplers: dict[str, Callable[[], optuna.samplers.BaseSampler]] = {
        "random": lambda: optuna.samplers.RandomSampler(seed=seed),
        "tpe": lambda: optuna.samplers.TPESampler(seed=seed),
        "nsga2": lambda: optuna.samplers.NSGAIISampler(seed=seed, population_size=NSGA_POPULATION),
    }
    sampler = samplers[name]()
    if arm == "dnnsat":
        sampler = DnnSATSampler(problem, sampler, seed=seed)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    choices = list(OPS)
    bench = trials.bench
    while trials.more:
        trial = study.ask()
        i = bench.index({e: trial.suggest_categorical(e, choices) for e in EDGES})
        feasible = trials.run(i)
        if arm == "native":
            for key, v in values.items():
                trial.set_constraint(key, float(v[i]))
            study.tell(trial, float(bench.acc[i]))
        elif feasible:
            study.tell(trial, float(bench.acc[i]))
        else:
            study.tell(trial, state=TrialState.FAIL)


def _nni(name: str, arm: str, seed: int, trials: Trials, values: dict[str, np.ndarray], problem: Any) -> None:
    import nni
    from dnnsat.integrations.nni import DnnSATTuner
    from nni.tools.package_utils.tuner_factory import create_builtin_class_instance

    from dnnsat._space_io import config_from_nni

    builtin, args = {
        "tpe": ("TPE", {"optimize_mode": "maximize", "seed": seed}),
        "evolution": ("Evolution", {"optimize_mode": "maximize", "population_size": EVOLUTION_POPULATION}),
    }[name]
    random.seed(seed)  # NNI Evolution draws its mutation positions from ``random``
    space = problem.space
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
    bench = trials.bench
    pid = 0
    while trials.more:
        try:
            got = tuner.generate_multiple_parameters([pid], st_callback=lambda *_: None)
        except nni.NoMoreTrialError:
            got = []
        if not got:  # nothing feasible left unseen (DnnSATTuner with dedup) or the tuner gave up
            break
        params = got[0]
        i = bench.index(config_from_nni(space, params))
        feasible = trials.run(i)
        if feasible or arm == "native":
            tuner.receive_trial_result(pid, params, float(bench.acc[i]) if feasible else NNI_PENALTY)
            tuner.trial_end(pid, True)
        else:
            tuner.trial_end(pid, False)
        pid += 1
