"""Regression tests for the defects NNI's built-in tuner test procedure (``python -m conformance.nni``)
found in DnnSATTuner, and a quick run of that procedure itself (the full run is ``make conformance``)."""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import math
import random
import sys
import threading
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("nni")

import nni  # noqa: E402
from nni.algorithms.hpo.evolution_tuner import EvolutionTuner  # noqa: E402
from nni.tools.package_utils import tuner_factory  # noqa: E402
from nni.tuner import Tuner  # noqa: E402

import dnnsat as ds  # noqa: E402
from dnnsat.integrations.nni import DnnSATTuner, load_problem  # noqa: E402
from dnnsat.space import config_from_nni  # noqa: E402


def _float_problem() -> ds.Problem:
    """``w`` in 16..512 step 16 and a log-uniform ``lr`` with ``lr * w <= 1`` (issue 12 §3)."""
    space = ds.Space({"w": ds.Int(16, 512, step=16), "lr": ds.Float(1e-5, 1.0, log=True)})
    problem = ds.Problem(space)
    problem.require(space.vars.lr * space.vars.w <= 1.0, name="lrw")
    return problem


def _grid_problem() -> ds.Problem:
    """a, b in 1..6 with a * b <= 6: 14 feasible configurations out of 36."""
    space = ds.Space({"a": ds.Int(1, 6), "b": ds.Int(1, 6)})
    problem = ds.Problem(space)
    problem.require(space.vars.a * space.vars.b <= 6, name="area")
    return problem


def run_like_nni(tuner: Tuner, n: int, batch: int = 10, seed: int = 0) -> list[Any]:
    """NNI's dispatcher in short: ask ``batch`` ids at a time with an ``st_callback`` queue, then report a
    random result and end every trial (including the ones the tuner sent later through the queue)."""
    rng = random.Random(seed)
    out: list[Any] = []
    queue: deque[tuple[int, Any]] = deque()
    for start in range(0, n, batch):
        ids = list(range(start, min(start + batch, n)))
        params = tuner.generate_multiple_parameters(ids, st_callback=lambda *a: queue.append(a))
        done = list(zip(ids, params))
        while queue:
            done.append(queue.popleft())
        for pid, p in done:
            out.append(p)
            tuner.receive_trial_result(pid, p, rng.uniform(-100, 100))
            tuner.trial_end(pid, True)
        if not params and not done:
            break
    return out


# -- continuous parameters in constraints ------------------------------------------------------------


@pytest.mark.parametrize("base", ["TPE", "Random"])
def test_float_constraint_200_wrapped_trials_all_feasible(base: str) -> None:
    """A proposal with ``lr * w > 1`` used to raise ValueError ("repair needs every constrained parameter to
    be finite"); now ``lr`` moves to the nearest feasible value and the repair is counted."""
    problem = _float_problem()
    tuner = DnnSATTuner(problem, base, {"seed": 0}, seed=0)
    tuner.update_search_space(problem.space.to_nni())
    configs = run_like_nni(tuner, 200)
    assert len(configs) == 200
    flat = [config_from_nni(problem.space, c) for c in configs]
    assert all(problem.check(c).feasible for c in flat)
    assert all(c["lr"] * c["w"] <= 1.0 for c in flat)
    s = tuner.stats
    assert s.launched == 200 and s.proposals == s.feasible + s.repaired + s.rejected
    assert s.float_repairs > 0 and s.float_repairs <= s.repaired
    repaired = [c for c in flat if math.isclose(c["lr"] * c["w"], 1.0, rel_tol=1e-6)]
    assert repaired, "repairs move lr onto the boundary lr * w = 1 (the nearest feasible value)"


# -- BatchTuner ---------------------------------------------------------------------------------------


def test_batch_tuner_launches_the_feasible_parameter_sets(caplog: pytest.LogCaptureFixture) -> None:
    """BatchTuner returns the chosen parameter set itself; the wrapper used to call every one "outside the
    search space" and the experiment got no trial. Now infeasible sets are dropped up front and each
    feasible one reaches the trial exactly as written."""
    problem = _grid_problem()
    sets = [{"a": 1, "b": 2}, {"a": 3, "b": 3}, {"a": 2, "b": 3, "opt": "sgd"}, {"a": 6, "b": 1}]
    space = {"combined": {"_type": "choice", "_value": sets}}
    tuner = DnnSATTuner(problem, "Batch")
    with caplog.at_level(logging.WARNING, logger="dnnsat.integrations.nni"):
        tuner.update_search_space(space)
    assert "dropped 1 of 4 parameter sets" in caplog.text and "[1]" in caplog.text
    got = run_like_nni(tuner, 10, batch=2)
    assert got == [sets[0], sets[2], sets[3]]
    with pytest.raises(nni.NoMoreTrialError):
        tuner.generate_parameters(10)
    assert tuner.stats.launched == 3 and tuner.stats.feasible == 3


def test_batch_tuner_single_values_and_import() -> None:
    """NNI's test_batch layout: the choice values are the one parameter's values, returned bare."""
    space = ds.Space({"choice_num": ds.Categorical([10, 20, 30, 40, 50, 60])})
    problem = ds.Problem(space)
    problem.require(space.vars.choice_num <= 40, name="small")
    tuner = DnnSATTuner(problem, "Batch")
    tuner.update_search_space(space.to_nni())
    assert tuner.base._values == [10, 20, 30, 40]  # type: ignore[attr-defined]
    tuner.import_data([{"parameter": 20, "value": 1.0}, {"parameter": 60, "value": 2.0}])  # 60: infeasible
    assert tuner.base._values == [10, 30, 40]  # type: ignore[attr-defined]  # BatchTuner dropped 20 itself
    assert run_like_nni(tuner, 10) == [10, 30, 40]


def test_batch_tuner_refuses_a_space_it_cannot_read() -> None:
    problem = _grid_problem()
    with pytest.raises(ValueError, match="one 'choice' key whose values are parameter sets"):
        DnnSATTuner(problem, "Batch").update_search_space(problem.space.to_nni())
    with pytest.raises(ValueError, match=r"parameter set 1 of 'c'.*'zz'"):
        DnnSATTuner(problem, "Batch").update_search_space(
            {"c": {"_type": "choice", "_value": [{"a": 1, "b": 1}, {"a": 1, "zz": 2}]}}
        )


# -- repeats with dedup=False ---------------------------------------------------------------------------


class RecordingEvolution(EvolutionTuner):
    """NNI's real EvolutionTuner that logs the results and ends it receives (instrumentation, not a mock)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.events: list[tuple[str, int]] = []

    def receive_trial_result(self, parameter_id: int, parameters: Any, value: Any, **kwargs: Any) -> None:
        self.events.append(("result", parameter_id))
        super().receive_trial_result(parameter_id, parameters, value, **kwargs)

    def trial_end(self, parameter_id: int, success: bool, **kwargs: Any) -> None:
        self.events.append(("end", parameter_id))
        super().trial_end(parameter_id, success, **kwargs)


def test_dedup_false_gives_every_base_id_its_own_result() -> None:
    """With dedup=False a repeated configuration is launched again; the second launch used to overwrite the
    first's bookkeeping, so one base id never got its result and another got two (Evolution then raised
    "Received parameter_id ... not in running_trials")."""
    np.random.seed(3)
    tuner = DnnSATTuner(_grid_problem(), RecordingEvolution, {"population_size": 6}, dedup=False)
    tuner.update_search_space(_grid_problem().space.to_nni())
    configs = run_like_nni(tuner, 60, batch=3)
    keys = [json.dumps(c, sort_keys=True) for c in configs]
    assert len(set(keys)) < len(keys), "Evolution repeats configurations on this 14-configuration space"
    assert tuner.stats.duplicates == 0
    events = tuner.base.events  # type: ignore[attr-defined]
    results = [i for kind, i in events if kind == "result"]
    ends = [i for kind, i in events if kind == "end"]
    assert len(results) == len(set(results)), "a base id got two results"
    assert len(ends) == len(set(ends)), "a base id ended twice"
    assert set(results) == set(ends) == set(range(60)), "every trial's own base id gets its result and end"


# -- threads ----------------------------------------------------------------------------------------------


def test_dispatcher_threads() -> None:
    """NNI's dispatcher calls trial_end from its assessor thread while its default thread generates and
    reports results: both at once, 120 trials, no error, every base id closed once, all feasible."""
    problem = _float_problem()
    tuner = DnnSATTuner(problem, "TPE", {"seed": 1}, seed=0)
    tuner.update_search_space(problem.space.to_nni())
    ended: deque[int] = deque()
    errors: list[BaseException] = []
    done = threading.Event()
    configs: list[Any] = []

    def default_thread() -> None:
        try:
            for pid in range(120):
                (params,) = tuner.generate_multiple_parameters([pid])
                configs.append(params)
                tuner.receive_trial_result(pid, params, float(pid % 7))
                ended.append(pid)
        except BaseException as err:  # reported below
            errors.append(err)
        finally:
            done.set()

    def assessor_thread() -> None:
        try:
            while not done.is_set() or ended:
                if ended:
                    tuner.trial_end(ended.popleft(), True)
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=default_thread), threading.Thread(target=assessor_thread)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert errors == []
    assert len(configs) == 120
    assert all(problem.check(config_from_nni(problem.space, c)).feasible for c in configs)
    assert tuner.base._running_params == {}  # type: ignore[attr-defined]  # every TPE id closed


# -- no constraint can bind: the bare tuner's sequence --------------------------------------------------

# a hand-written space (choice lists and randint where to_nni() would write quniform), an extra parameter
SPACE = {
    "w": {"_type": "choice", "_value": [16, 32, 48, 64]},
    "d": {"_type": "randint", "_value": [1, 5]},
    "lr": {"_type": "loguniform", "_value": [1e-4, 1e-1]},
    "drop": {"_type": "uniform", "_value": [0.0, 0.5]},
    "b": {"_type": "qloguniform", "_value": [8, 512, 8]},  # dnnsat writes this domain as quniform
    "opt": {"_type": "choice", "_value": ["sgd", "adam"]},
}
SEEDED: dict[str, dict[str, Any]] = {
    "TPE": {"seed": 0},
    "Random": {"seed": 0},
    "Evolution": {"population_size": 8},
    "Anneal": {},
    "GridSearch": {},
}


class _SeededRandomState(np.random.RandomState):
    """``np.random.RandomState()`` seeded with 0 instead of OS entropy."""

    def __init__(self, seed: Any = None) -> None:
        super().__init__(0 if seed is None else seed)


def _holds_problem(base: str) -> ds.Problem:
    space = ds.Space.from_nni(
        {k: v for k, v in SPACE.items() if k != "opt" and (base != "Anneal" or k != "b")}
    )
    problem = ds.Problem(space)
    problem.require(space.vars.w * space.vars.d <= 256, name="never binds")
    problem.require(space.vars.lr <= 0.5, name="never binds either")
    return problem


@pytest.mark.parametrize("base", list(SEEDED))
def test_always_feasible_gives_the_bare_sequence(base: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """When no constraint can bind, the wrapper passes the experiment's space through unchanged and NNI
    gets exactly the bare tuner's configurations, repeats included (it used to hand the base tuner the
    pruned space in dnnsat's NNI form and alias repeats)."""
    problem = _holds_problem(base)
    assert problem.always_feasible()
    # Evolution and Anneal seed themselves with np.random.RandomState() (OS entropy): make that seed 0
    monkeypatch.setattr(np.random, "RandomState", _SeededRandomState)

    def run(wrapped: bool) -> list[Any]:
        np.random.seed(0)
        random.seed(0)
        if wrapped:
            tuner: Tuner = DnnSATTuner(problem, base, dict(SEEDED[base]))
        else:
            tuner = tuner_factory.create_builtin_class_instance(base, dict(SEEDED[base]), "tuners")
        # bare Anneal fails on q-types with numpy 2 (the wrapper works around it): no "b" for Anneal
        tuner.update_search_space({k: v for k, v in SPACE.items() if base != "Anneal" or k != "b"})
        return run_like_nni(tuner, 40, batch=4)

    bare, wrapped = run(False), run(True)
    assert len(bare) == 40
    assert wrapped == bare
    assert {type(v) for c in wrapped for v in c.values()} <= {int, float, str}  # numpy scalars made plain


# -- the problem's import path -------------------------------------------------------------------------


def test_problem_module_in_the_experiment_code_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NNI's dispatcher runs in its log directory with neither the user's directory nor the experiment's
    code on sys.path; the module is now looked for in the trial code directory of --exp_params."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "dnnsat_conf_problem.py").write_text(
        "import dnnsat as ds\n"
        "space = ds.Space({'a': ds.Int(1, 6)})\n"
        "problem = ds.Problem(space).require(space.vars.a <= 3, name='a3')\n"
    )
    params = base64.b64encode(json.dumps({"trialCodeDirectory": str(code)}).encode()).decode()
    monkeypatch.setattr(sys, "argv", ["nni", "--exp_params", params])
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    problem = load_problem("dnnsat_conf_problem:problem")
    assert problem.count() == 3
    assert str(code) in sys.path


def test_missing_problem_module_is_one_clear_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["nni"])
    before = list(sys.path)
    with pytest.raises(ModuleNotFoundError) as info:
        DnnSATTuner("no_such_dnnsat_module:problem")
    message = str(info.value)
    assert "\n" not in message and info.value.__cause__ is None
    assert "'no_such_dnnsat_module:problem'" in message and str(tmp_path) in message
    assert "trial code directory" in message and "PYTHONPATH" in message
    assert sys.path == before  # the directories tried are taken off again
    (tmp_path / "dnnsat_conf_broken.py").write_text("import no_such_dependency_xyz\n")
    with pytest.raises(ModuleNotFoundError, match="imports 'no_such_dependency_xyz'.*install it"):
        load_problem("dnnsat_conf_broken:problem")


# -- what the base tuner sees and holds ---------------------------------------------------------------------


def test_pruned_parameter_keeps_its_nni_type() -> None:
    """A narrowed ``qloguniform`` used to reach the base tuner as ``quniform`` (dnnsat's own NNI form): a
    log-scaled parameter sampled uniformly, and Metis, which refuses qloguniform, accepted it."""
    space = ds.Space.from_nni(
        {"b": {"_type": "qloguniform", "_value": [8, 512, 8]}, "u": {"_type": "uniform", "_value": [0, 1]}}
    )
    problem = ds.Problem(space).require(space.vars.b <= 312, name="b").require(space.vars.u <= 0.5, name="u")
    tuner = DnnSATTuner(problem, "TPE", {"seed": 0})
    tuner.update_search_space(
        {"b": {"_type": "qloguniform", "_value": [8, 512, 8]}, "u": {"_type": "uniform", "_value": [0, 1]}}
    )
    assert tuner._base_space is not None
    assert tuner._base_space["b"] == {"_type": "qloguniform", "_value": [8, 312, 8]}
    assert tuner._base_space["u"]["_type"] == "uniform" and tuner._base_space["u"]["_value"][1] <= 0.5
    with pytest.raises(Exception, match="qloguniform"):
        DnnSATTuner(problem, "Metis").update_search_space(
            space.to_nni() | {"b": {"_type": "qloguniform", "_value": [8, 512, 8]}}
        )


def test_repeats_do_not_drain_evolution() -> None:
    """Repeats of running trials used to stay open in the base tuner while the wrapper asked again: with 24
    requests at once on a 14-configuration space, Evolution (population 30) raised "The population is
    empty". Now such a repeat is closed as failed at once."""
    np.random.seed(0)
    tuner = DnnSATTuner(_grid_problem(), "Evolution", {"population_size": 30})
    tuner.update_search_space(_grid_problem().space.to_nni())
    configs = run_like_nni(tuner, 24, batch=24)
    assert len(configs) == 14  # every feasible configuration once (dedup), then no more
    assert tuner.stats.duplicates > 0


def test_pass_through_parameters_do_not_end_the_experiment() -> None:
    """With a parameter the problem does not know, dnnsat cannot tell which combinations are unseen; after
    max_attempts repeats it used to declare every configuration launched and end the experiment."""
    space = ds.Space({"z": ds.Int(0, 4)})
    problem = ds.Problem(space).require(space.vars.z <= 3, name="z")
    tuner = DnnSATTuner(problem, "Evolution", {"population_size": 4}, max_attempts=3)
    tuner.update_search_space(
        {"z": {"_type": "randint", "_value": [0, 5]}, "opt": {"_type": "choice", "_value": ["a", "b", "c"]}}
    )
    configs = run_like_nni(tuner, 40, batch=2)
    assert len(configs) == 40
    assert all(c["z"] <= 3 and c["opt"] in ("a", "b", "c") for c in configs)


# -- spaces whose names NNI's reader changes ----------------------------------------------------------------


def test_child_active_under_two_parent_values() -> None:
    """``Int(condition={"mode": ["b", "c"]})`` becomes one key in two NNI branches, which NNI's reader names
    ``mode__b__extra`` and ``mode__c__extra``: the wrapper used to refuse the problem's own NNI space
    ("problem parameter 'extra' is missing")."""
    space = ds.Space(
        {
            "mode": ds.Categorical(["a", "b", "c"]),
            "w": ds.Int(1, 4),
            "extra": ds.Int(1, 3, condition={"mode": ["b", "c"]}),
        }
    )
    problem = ds.Problem(space).require(space.vars.w * space.vars.extra <= 6, name="cost")
    tuner = DnnSATTuner(problem, "Random", {"seed": 0})
    tuner.update_search_space(space.to_nni())
    configs = [config_from_nni(space, c) for c in run_like_nni(tuner, 12)]
    assert len(configs) == 12 and all(problem.check(c).feasible for c in configs)
    assert any("extra" in c for c in configs) and any("extra" not in c for c in configs)


# -- PBT ----------------------------------------------------------------------------------------------------


def test_pbt_checkpoint_directories_reach_the_trial(tmp_path: Path) -> None:
    """PBT adds save/load checkpoint directories to every configuration; the wrapper used to drop every key
    that is not in the search space, so PBT's trials never got them."""
    problem = _grid_problem()
    args = {"all_checkpoint_dir": str(tmp_path), "population_size": 4}
    tuner = DnnSATTuner(problem, "PBT", args)
    tuner.update_search_space(problem.space.to_nni())
    configs = run_like_nni(tuner, 12, batch=4)
    assert len(configs) == 12
    assert all(isinstance(c["save_checkpoint_dir"], str) for c in configs)
    assert sum("load_checkpoint_dir" in c for c in configs) >= 4  # the second epoch loads the first's
    assert all(c["a"] * c["b"] <= 6 for c in configs)


def test_import_data_returns_what_the_base_tuner_returns(tmp_path: Path) -> None:
    """NNI's import_data_test_for_pbt checks the epoch PBT's import_data returns; the wrapper gave None."""
    space = ds.Space({"choice_str": ds.Categorical(["cat", "dog", "cow"])})
    args = {"all_checkpoint_dir": str(tmp_path), "population_size": 2}
    tuner = DnnSATTuner(ds.Problem(space), "PBT", args)
    tuner.update_search_space(space.to_nni())
    dirs = [tmp_path / str(i) / "0" for i in range(2)]
    for d in dirs:
        d.mkdir(parents=True)
    data = [{"parameter": {"choice_str": c, "save_checkpoint_dir": str(d)}, "value": v}
            for c, d, v in zip(["cat", "dog"], dirs, [1.0, 2.0])]  # fmt: skip
    assert tuner.import_data(data) == 1


# -- the procedure itself --------------------------------------------------------------------------------


def test_conformance_procedure_quick() -> None:
    """``python -m conformance.nni`` for Random and Batch on every single-key search space: nothing fails
    (the all-keys space is left to ``make conformance``)."""
    from conformance.nni._harness import TUNERS, Outcome, run_tuner

    out: list[Outcome] = []
    for case in TUNERS:
        if case.name in ("Random", "Batch"):
            run_tuner(dataclasses.replace(case, full_space=False), ["holds", "binds"], out, lambda key: True)
    failed = [(o.tuner, o.case, o.detail) for o in out if o.status == "failed"]
    assert failed == []
    assert sum(o.status == "passed" for o in out) >= 60
