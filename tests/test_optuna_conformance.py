"""Regression tests for the defects Optuna's own sampler suite found in DnnSATSampler (conformance/optuna).

Threads (``n_jobs``), continuous parameters in constraints, the bare sequence when no constraint can
bind (GP included), pickling, seeding, ``reseed_rng`` and ``allow_problem_change``.
"""

from __future__ import annotations

import pickle
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import optuna
import pytest
from optuna.samplers import (
    BaseSampler,
    CmaEsSampler,
    GPSampler,
    NSGAIISampler,
    QMCSampler,
    RandomSampler,
    TPESampler,
)
from optuna.trial import TrialState

import dnnsat as ds
from dnnsat.integrations.optuna import DnnSATSampler, ProblemMismatchError, suggest
from dnnsat.zoo import synthetic_resnet_problem

optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
warnings.filterwarnings("ignore", message=".*sampled independently.*")


def _lr_width_problem() -> ds.Problem:
    """Issue 12 §3: a continuous learning rate coupled with a finite width."""
    space = ds.Space({"w": ds.Int(16, 512, step=16), "lr": ds.Float(1e-5, 1.0, log=True)})
    p = ds.Problem(space)
    p.require(space.vars.lr * space.vars.w <= 1.0, name="lrw")
    return p


def _act_problem() -> ds.Problem:
    """An unordered categorical with two feasible choices (of four) whenever the width is large."""
    space = ds.Space(
        {"width": ds.Int(16, 512, step=16), "act": ds.Categorical(["relu", "gelu", "silu", "tanh"])}
    )
    v = space.vars
    p = ds.Problem(space)
    p.require((v.width <= 128) | (v.act == "relu") | (v.act == "gelu"), name="act_width")
    return p


def _feasible(problem: ds.Problem, study: optuna.Study) -> list[bool]:
    names = set(problem.space.names)
    return [problem.check({k: v for k, v in t.params.items() if k in names}).feasible for t in study.trials]


# -- threads ---------------------------------------------------------------------------------------


def test_four_threads_200_trials_memory_budget_all_feasible() -> None:
    problem = ds.zoo.resnet(budget=ds.Budget(memory="8GiB"))
    sampler = DnnSATSampler(problem, RandomSampler(seed=0))
    study = optuna.create_study(sampler=sampler)
    study.optimize(lambda t: float(problem.costs(suggest(t, problem))["memory"]), n_trials=200, n_jobs=4)
    assert len(study.trials) == 200
    assert all(t.state == TrialState.COMPLETE for t in study.trials)
    assert all(_feasible(problem, study))
    stats = sampler.stats
    n_params = sum(len(t.params) for t in study.trials)
    assert stats.proposals == n_params  # RandomSampler: every value is an independent proposal
    assert stats.kept + stats.repaired == stats.proposals and stats.dead_ends == 0
    assert stats.repaired > 0  # the budget binds
    assert len(stats.overhead) == 200 and sampler._trials == {}  # per-trial state released


# -- continuous parameters -------------------------------------------------------------------------


@pytest.mark.parametrize("order", ["w-then-lr", "lr-then-w"])
def test_float_in_a_constraint_is_repaired_in_both_orders(order: str) -> None:
    problem = _lr_width_problem()
    sampler = DnnSATSampler(problem, TPESampler(seed=0))
    study = optuna.create_study(sampler=sampler)

    def objective(trial: optuna.Trial) -> float:
        if order == "w-then-lr":
            w = trial.suggest_int("w", 16, 512, step=16)
            lr = trial.suggest_float("lr", 1e-5, 1.0, log=True)
        else:
            lr = trial.suggest_float("lr", 1e-5, 1.0, log=True)
            w = trial.suggest_int("w", 16, 512, step=16)
        return lr * w

    study.optimize(objective, n_trials=15)
    assert all(_feasible(problem, study))
    assert sampler.stats.repaired > 0 and sampler.stats.dead_ends == 0
    if order == "w-then-lr":  # lr is asked last, so every repair moves the float
        assert sampler.stats.float_repaired == sampler.stats.repaired
    lrs = [t.params["lr"] for t in study.trials]
    assert all(1e-5 <= lr <= 1.0 for lr in lrs)


def test_float_gap_of_a_single_parameter() -> None:
    """Optuna's test_nan_objective_value: ``suggest_float("x", 0.1, 0.2)`` with ``x <= 0.18``."""
    space = ds.Space({"x": ds.Float(0.1, 0.2)})
    problem = ds.Problem(space).require(space.vars.x <= 0.18, name="cap")
    sampler = DnnSATSampler(problem, RandomSampler(seed=0))
    study = optuna.create_study(sampler=sampler)
    study.optimize(lambda t: t.suggest_float("x", 0.1, 0.2), n_trials=30)
    xs = np.array([t.params["x"] for t in study.trials])
    assert (xs <= 0.18).all() and (xs >= 0.1).all()
    assert sampler.stats.float_repaired > 0  # about a fifth of uniform draws land above 0.18


def test_float_repair_lands_on_the_objectives_grid() -> None:
    """The objective asks for a stepped / integer distribution of a continuous Float of the problem."""
    problem = _lr_width_problem()
    sampler = DnnSATSampler(problem, RandomSampler(seed=1))
    study = optuna.create_study(sampler=sampler)

    def objective(trial: optuna.Trial) -> float:
        w = trial.suggest_int("w", 256, 512, step=16)  # lr must be <= 1/256
        lr = trial.suggest_float("lr", 0.0005, 0.5, step=0.0005)
        return lr * w

    study.optimize(objective, n_trials=20)
    assert all(_feasible(problem, study))
    for t in study.trials:
        k = t.params["lr"] / 0.0005
        assert abs(k - round(k)) < 1e-6 and 0.0005 <= t.params["lr"] <= 1 / t.params["w"]
    assert sampler.stats.float_repaired > 0


def test_relative_samplers_keep_floats_feasible() -> None:
    problem = _lr_width_problem()
    for base in (
        TPESampler(seed=2, multivariate=True, n_startup_trials=3),
        CmaEsSampler(seed=2, n_startup_trials=3),
    ):
        sampler = DnnSATSampler(problem, base)
        study = optuna.create_study(sampler=sampler)
        study.optimize(lambda t: float(suggest(t, problem)["lr"]), n_trials=20)
        assert all(_feasible(problem, study)), base
        assert sampler.stats.relative_samples > 0


def test_a_distribution_without_a_value_of_the_domain_passes_through_unchecked() -> None:
    problem = _lr_width_problem()
    sampler = DnnSATSampler(problem, RandomSampler(seed=3))
    study = optuna.create_study(sampler=sampler)
    study.optimize(lambda t: len(t.suggest_categorical("lr", ["a", "b"])), n_trials=5)
    assert sampler.stats.unchecked == 5 and sampler.stats.proposals == 0
    assert {t.params["lr"] for t in study.trials} <= {"a", "b"}


# -- the bare sequence when no constraint can bind ---------------------------------------------------


LOOSE: dict[str, Callable[[], BaseSampler]] = {
    "random": lambda: RandomSampler(seed=4),
    "tpe": lambda: TPESampler(seed=4, n_startup_trials=3),
    "nsga2": lambda: NSGAIISampler(seed=4, population_size=4),
    "qmc": lambda: QMCSampler(seed=4),
    "cmaes": lambda: CmaEsSampler(seed=4, n_startup_trials=3),
    "gp": lambda: GPSampler(seed=4, n_startup_trials=3),
}


@pytest.mark.parametrize("base", list(LOOSE))
def test_a_budget_every_config_satisfies_gives_the_bare_sequence(base: str) -> None:
    problem = synthetic_resnet_problem(flops_limit=1e30, params_limit=1e30)
    assert problem.always_feasible()
    n = 6 if base == "gp" else 12  # GP refits per trial: seconds each on 2 busy cores

    def objective(trial: optuna.Trial) -> float:
        cfg = suggest(trial, problem)
        return float(problem.costs(cfg)["flops"]) / 1e12 + trial.suggest_float("dropout", 0.0, 0.5)

    wrapped = optuna.create_study(sampler=DnnSATSampler(problem, LOOSE[base]()))
    wrapped.optimize(objective, n_trials=n)
    bare = optuna.create_study(sampler=LOOSE[base]())
    bare.optimize(objective, n_trials=n)
    assert [t.params for t in wrapped.trials] == [t.params for t in bare.trials]
    assert all(t.constraints == {} for t in wrapped.trials)  # nothing recorded: GP keeps its acquisition


# -- pickling, seeding -------------------------------------------------------------------------------


def test_pickled_sampler_resumes_the_same_sequence() -> None:
    problem = synthetic_resnet_problem(flops_limit=1e11, params_limit=2e6)
    sampler = DnnSATSampler(problem, TPESampler(seed=5, n_startup_trials=4))

    def objective(trial: optuna.Trial) -> float:
        return float(problem.costs(suggest(trial, problem))["flops"])

    first = optuna.create_study(sampler=sampler)
    first.optimize(objective, n_trials=6)
    restored = pickle.loads(pickle.dumps(sampler))
    assert isinstance(restored, DnnSATSampler) and restored.stats.proposals == sampler.stats.proposals
    second = optuna.create_study(sampler=restored)
    second.add_trials(first.trials)
    first.optimize(objective, n_trials=6)
    second.optimize(objective, n_trials=6)
    assert [t.params for t in first.trials] == [t.params for t in second.trials]
    assert all(_feasible(problem, second))


def test_pickling_a_problem_with_a_lambda_names_the_constraint() -> None:
    space = ds.Space({"w": ds.Int(16, 64, step=16)})
    problem = ds.Problem(space).require(lambda c: c["w"] <= 32, name="opaque")
    with pytest.raises(TypeError, match="opaque"):
        pickle.dumps(DnnSATSampler(problem, RandomSampler(seed=0)))


def _act_sequence(sampler: DnnSATSampler, n: int = 25) -> list[dict[str, Any]]:
    problem = sampler.problem
    study = optuna.create_study(sampler=sampler)
    study.optimize(lambda t: float(suggest(t, problem)["width"]), n_trials=n)
    assert all(_feasible(problem, study))
    return [t.params for t in study.trials]


def test_same_base_seed_same_sequence_when_repairing_an_unordered_categorical() -> None:
    problem = _act_problem()
    a, b = DnnSATSampler(problem, RandomSampler(seed=1)), DnnSATSampler(problem, RandomSampler(seed=1))
    seq_a, seq_b = _act_sequence(a), _act_sequence(b)
    assert a.stats.repaired > 3  # "act" is repaired at random among the feasible choices
    assert seq_a == seq_b
    c = DnnSATSampler(problem, RandomSampler(seed=1), seed=7)  # the wrapper's own seed changes its choices
    assert _act_sequence(c) != seq_a


def test_reseed_rng_reseeds_the_base_sampler_once_and_the_wrappers_choices() -> None:
    problem = _act_problem()
    base = RandomSampler(seed=1)
    calls: list[int] = []
    reseed = base.reseed_rng
    base.reseed_rng = lambda: calls.append(1) or reseed()  # type: ignore[method-assign]
    sampler = DnnSATSampler(problem, base)
    state = str(base._rng.rng.get_state())
    sampler.reseed_rng()
    assert calls == [1] and str(base._rng.rng.get_state()) != state
    reference = _act_sequence(DnnSATSampler(problem, RandomSampler(seed=1)))
    assert _act_sequence(sampler) != reference


# -- one problem per study -----------------------------------------------------------------------------


def test_allow_problem_change_is_passed_to_the_study_cache() -> None:
    loose, tight = synthetic_resnet_problem(), synthetic_resnet_problem(flops_limit=1e11, params_limit=2e6)
    study = optuna.create_study(sampler=DnnSATSampler(loose, RandomSampler(seed=0)))
    study.optimize(lambda t: len(suggest(t, loose)), n_trials=2)
    study.sampler = DnnSATSampler(tight, RandomSampler(seed=0))
    with pytest.raises(ProblemMismatchError):
        study.optimize(lambda t: len(suggest(t, tight)), n_trials=1)
    study.sampler = DnnSATSampler(tight, RandomSampler(seed=0), allow_problem_change=True)
    study.optimize(lambda t: len(suggest(t, tight)), n_trials=3)
    assert all(tight.check(t.params).feasible for t in study.trials[-3:])
