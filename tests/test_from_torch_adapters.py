"""A ``from_torch`` model in a real Optuna study (SQLite) and behind the NNI tuner: every launched
configuration is feasible, and its params and FLOPs are PyTorch's own for the module the user builds."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
optuna = pytest.importorskip("optuna")
pytest.importorskip("nni")

from torch import nn  # noqa: E402

import dnnsat as ds  # noqa: E402
from dnnsat.integrations.nni import DnnSATTuner, config_from_nni  # noqa: E402
from dnnsat.integrations.optuna import DnnSATSampler, suggest  # noqa: E402


class Net(nn.Module):
    """A plain CNN: ``depth`` conv blocks of ``width`` channels (grouped), a dense head."""

    def __init__(self, width: int, depth: int, groups: int, kernel: int) -> None:
        super().__init__()
        blocks: list[nn.Module] = [nn.Conv2d(3, width, 3, padding=1)]
        for _ in range(depth):
            blocks += [nn.Conv2d(width, width, kernel, groups=groups), nn.BatchNorm2d(width), nn.ReLU()]
        self.body = nn.Sequential(*blocks)
        self.head = nn.Linear(width, 10)

    def forward(self, x: Any) -> Any:
        return self.head(self.body(x).mean(dim=(2, 3)))


def build(cfg: dict[str, Any]) -> nn.Module:
    return Net(cfg["width"], cfg["depth"], cfg["groups"], cfg["kernel"])


SPACE = ds.Space(
    {
        "batch_size": ds.Categorical([8, 16]),
        "width": ds.Int(8, 96, step=8),
        "depth": ds.Int(1, 4),
        "groups": ds.Categorical([1, 3, 4, 8]),
        "kernel": ds.Categorical([3, 5, 7]),
        "lr": ds.Float(1e-4, 1e-1, log=True),
    }
)


def inputs(cfg: dict[str, Any]) -> tuple[Any, ...]:
    return (torch.empty(cfg["batch_size"], 3, 12, 12),)


MODEL = ds.from_torch(build, inputs=inputs)  # module-level functions: picklable


@pytest.fixture(scope="module")
def setup() -> tuple[Any, ds.Problem]:
    return MODEL, ds.Problem(SPACE, model=MODEL, budget=ds.Budget(params=60_000))


def _exact(model: Any, problem: ds.Problem, cfg: dict[str, Any]) -> None:
    real = model.measure(cfg)  # PyTorch's (params, FLOPs) of build(cfg), None when it raises
    assert real is not None, cfg  # valid: groups divide the width, the kernels fit 12x12
    assert real[0] <= 60_000 and model.disagreements(problem, cfg) == []


def test_optuna_study_on_sqlite(setup: tuple[Any, ds.Problem], tmp_path: Path) -> None:
    model, problem = setup
    sampler = DnnSATSampler(problem, optuna.samplers.TPESampler(seed=0, n_startup_trials=4), seed=0)
    study = optuna.create_study(
        storage=f"sqlite:///{tmp_path / 's.db'}", sampler=sampler, direction="maximize"
    )
    study.optimize(lambda t: problem.costs(suggest(t, problem))["params"], n_trials=12)
    for t in study.trials:
        _exact(model, problem, t.params)
    assert sampler.stats.proposals > 0 and sampler.stats.dead_ends == 0


def test_nni_tuner(setup: tuple[Any, ds.Problem]) -> None:
    model, problem = setup
    tuner = DnnSATTuner(problem, "TPE", {"optimize_mode": "maximize", "seed": 0}, seed=0)
    tuner.update_search_space(problem.space.to_nni())
    for i in range(12):
        cfg = config_from_nni(problem.space, tuner.generate_parameters(i))
        _exact(model, problem, cfg)
        tuner.receive_trial_result(i, None, float(problem.costs(cfg)["params"]))
        tuner.trial_end(i, True)
    assert tuner.stats.launched == 12


class Rogue(Net):
    """The same network with a hidden extra layer that the trace cannot see (it is created after
    ``from_torch`` traced ``Net``): the real module then has more parameters than the problem says."""

    def __init__(self, width: int, depth: int, groups: int, kernel: int) -> None:
        super().__init__(width, depth, groups, kernel)
        self.extra = nn.Linear(10, 10)

    def forward(self, x: Any) -> Any:
        return self.extra(super().forward(x))


class Swapped:
    """A model whose ``disagreements`` measures ``Rogue``: what a verify= safety net is for."""

    def __init__(self, model: Any) -> None:
        self.real = ds.from_torch(
            lambda c: Rogue(c["width"], c["depth"], c["groups"], c["kernel"]), model.inputs
        )

    def disagreements(self, problem: ds.Problem, cfg: dict[str, Any]) -> list[str]:
        return self.real.disagreements(problem, cfg)


def test_verify_counts_agreements_and_disagreements(setup: tuple[Any, ds.Problem], caplog: Any) -> None:
    caplog.set_level(logging.WARNING, logger="dnnsat")  # other tests' set-ups may raise the root level
    model, problem = setup
    sampler = DnnSATSampler(problem, optuna.samplers.RandomSampler(seed=1), verify=model)
    study = optuna.create_study(sampler=sampler)
    study.optimize(lambda t: float(problem.costs(suggest(t, problem))["params"]), n_trials=4)
    assert (sampler.stats.verified, sampler.stats.disagreements) == (4, 0)

    sampler = DnnSATSampler(problem, optuna.samplers.RandomSampler(seed=1), verify=Swapped(model))
    study = optuna.create_study(sampler=sampler)
    study.optimize(lambda t: float(problem.costs(suggest(t, problem))["params"]), n_trials=3)
    assert (sampler.stats.verified, sampler.stats.disagreements) == (3, 3)
    lines = study.trials[0].user_attrs["dnnsat:disagreements"]
    assert lines[0].startswith("params: PyTorch ") and "the real module disagrees" in caplog.text

    tuner = DnnSATTuner(problem, "Random", {"seed": 0}, verify=Swapped(model))
    tuner.update_search_space(problem.space.to_nni())
    for i in range(3):
        tuner.generate_parameters(i)
    assert (tuner.stats.verified, tuner.stats.disagreements) == (3, 3)
    with pytest.raises(TypeError, match="disagreements"):
        DnnSATSampler(problem, verify=build)
    with pytest.raises(TypeError, match="disagreements"):
        DnnSATTuner(problem, "Random", verify=build)


def test_a_verifying_sampler_pickles(setup: tuple[Any, ds.Problem]) -> None:
    import pickle

    problem = ds.Problem(SPACE, model=MODEL, budget=ds.Budget(params=60_000))
    sampler = pickle.loads(pickle.dumps(DnnSATSampler(problem, verify=MODEL)))
    study = optuna.create_study(sampler=sampler)
    study.optimize(lambda t: float(problem.costs(suggest(t, problem))["params"]), n_trials=2)
    assert sampler.stats.verified == 2 and sampler.stats.disagreements == 0


def test_tuner_verify_by_import_path(setup: tuple[Any, ds.Problem]) -> None:
    _, problem = setup
    tuner = DnnSATTuner(problem, "Random", {"seed": 0}, verify="tests.test_from_torch_adapters:MODEL")
    tuner.update_search_space(problem.space.to_nni())
    tuner.generate_parameters(0)
    assert (tuner.stats.verified, tuner.stats.disagreements) == (1, 0)
    from dnnsat.integrations.nni import DnnSATClassArgsValidator

    DnnSATClassArgsValidator().validate_class_args(
        problem="m:p", verify="tests.test_from_torch_adapters:MODEL"
    )
