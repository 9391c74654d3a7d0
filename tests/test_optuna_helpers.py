"""suggest / distributions / feasible_grid / reject_infeasible, and GridSampler through the wrapper."""

from __future__ import annotations

import itertools
import warnings

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState

import dnnsat as ds
from dnnsat.integrations.optuna import (
    DnnSATSampler,
    distributions,
    feasible_grid,
    infeasibility,
    reject_infeasible,
    suggest,
)
from dnnsat.zoo import synthetic_resnet_problem

optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

BOX = {"w0": 32, "w1": 64, "w2": [64, 128], "w3": [128, 256], "d0": 1, "d1": 2, "d2": [1, 2], "d3": 1}


def _space() -> ds.Space:
    return ds.Space(
        {
            "width": ds.Int(16, 256, step=16),
            "act": ds.Categorical(["relu", "gelu"]),
            "k": ds.Int(1, 3, condition={"act": ["gelu"]}),
            "lr": ds.Float(1e-4, 1e-1, log=True),
            "drop": ds.Float(0.0, 0.5, step=0.1),
        }
    )


def test_distributions_match_the_space() -> None:
    d = distributions(_space())
    assert d["width"] == IntDistribution(16, 256, step=16)
    assert d["act"] == CategoricalDistribution(["relu", "gelu"])
    assert d["lr"] == FloatDistribution(1e-4, 1e-1, log=True)
    assert d["drop"] == FloatDistribution(0.0, 0.5, step=0.1)


def test_suggest_respects_conditions() -> None:
    space = _space()
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    configs = []
    for _ in range(30):
        trial = study.ask()
        cfg = suggest(trial, space)
        configs.append(cfg)
        assert trial.params == cfg
        assert ("k" in cfg) == (cfg["act"] == "gelu")
        space.validate(cfg)
        study.tell(trial, 0.0)
    assert {c["act"] for c in configs} == {"relu", "gelu"}


def test_feasible_grid_is_exactly_the_feasible_part_of_the_box() -> None:
    problem = synthetic_resnet_problem(flops_limit=1e11, params_limit=2e6)
    grid = feasible_grid(problem, BOX)
    space = problem.space
    box = {
        n: ([BOX[n]] if not isinstance(BOX.get(n), list) else BOX[n]) if n in BOX else list(space[n].values())
        for n in space.names
    }
    brute = [dict(zip(box, vals)) for vals in itertools.product(*box.values())]
    feasible = [c for c in brute if problem.check(c).feasible]
    assert len(grid.configs) == len(feasible) == 87
    assert sorted(map(lambda c: tuple(c.values()), grid.configs)) == sorted(
        tuple(c.values()) for c in feasible
    )
    for name, values in grid.items():
        assert values == [v for v in box[name] if any(c[name] == v for c in feasible)]
    with pytest.raises(ValueError, match="limit"):
        feasible_grid(problem)  # 3.95e10 points: GridSampler could not hold them
    with pytest.raises(ValueError, match="no feasible"):
        feasible_grid(problem, {**BOX, "w3": 512, "d3": 4})


def test_feasible_grid_with_conditions_and_continuous_values() -> None:
    space = _space()
    p = ds.Problem(space)
    p.require(space.vars.width * space.vars.k <= 256, name="kernel")
    with pytest.raises(ValueError, match="continuous"):
        feasible_grid(p)
    grid = feasible_grid(p, {"lr": [1e-3, 1e-2]})
    assert all(p.check(c).feasible for c in grid.configs)
    assert all(("k" in c) == (c["act"] == "gelu") for c in grid.configs)
    # relu: 16 widths; gelu: widths w with w*k <= 256 -> 16 + 8 + 5 = 29; times 2 lr, 6 drop values
    assert len(grid.configs) == (16 + 29) * 2 * 6


def test_grid_sampler_through_the_wrapper_visits_each_feasible_config_once() -> None:
    problem = synthetic_resnet_problem(flops_limit=1e11, params_limit=2e6)
    grid = feasible_grid(problem, BOX)
    sampler = DnnSATSampler(problem, optuna.samplers.GridSampler(grid, seed=0))
    study = optuna.create_study(sampler=sampler)
    study.optimize(lambda t: float(problem.costs(suggest(t, problem))["flops"]), n_trials=1000)
    seen = [tuple(sorted(t.params.items())) for t in study.trials]
    assert len(seen) == len(set(seen)) == len(grid.configs)  # the study stopped by itself
    assert set(seen) == {tuple(sorted(c.items())) for c in grid.configs}


def test_infeasibility_and_reject_without_the_wrapper() -> None:
    problem = synthetic_resnet_problem(flops_limit=1e11, params_limit=2e6)
    assert infeasibility(problem, {"w0": 64}) is None
    assert "cannot be completed" in (infeasibility(problem, {"w0": 512}) or "")
    calls = []

    @reject_infeasible(problem)
    def objective(trial: optuna.Trial) -> float:
        calls.append(trial.number)
        return 0.0

    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    study.enqueue_trial({"w0": 512})  # a partial, infeasible enqueue with a plain sampler
    study.enqueue_trial({"w0": 64})
    study.optimize(objective, n_trials=2)
    assert [t.state for t in study.trials] == [TrialState.PRUNED, TrialState.COMPLETE]
    assert calls == [1]
    pruned = study.trials[0]
    assert set(pruned.constraints) == {"flops", "params"} and max(pruned.constraints.values()) > 0
    assert set(pruned.params) == set(problem.space.names)  # completed so the values are exact


def test_infeasibility_when_only_a_continuous_parameter_is_left_open() -> None:
    """``lr * w <= 1`` with ``lr >= 0.01``: an enqueued ``w = 512`` leaves no feasible ``lr``."""
    space = ds.Space({"w": ds.Int(16, 512, step=16), "lr": ds.Float(0.01, 1.0, log=True)})
    problem = ds.Problem(space).require(space.vars.lr * space.vars.w <= 1.0, name="lrw")
    assert "cannot be completed" in (infeasibility(problem, {"w": 512}) or "")
    assert infeasibility(problem, {"w": 64}) is None  # lr <= 1/64 is left
    assert "cannot be completed" in (infeasibility(problem, {"lr": 0.5}) or "")
    assert "violates lrw" in (infeasibility(problem, {"lr": 0.05, "w": 512}) or "")
