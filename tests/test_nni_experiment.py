"""Real NNI experiments (local training service on 127.0.0.1) with the DnnSAT tuner wrapping TPE.

Three experiments run concurrently, each in its own process with ``HOME`` and ``NNI_CONFIG_DIR`` in a
temporary directory (NNI writes ``~/nni-experiments/.experiment`` and its algorithm registry there):

* by class name through ``CustomAlgorithmConfig`` (tight limits, 10 trials);
* by the name ``DnnSAT`` after ``nnictl algo register --meta dnnsat_tuner.yml`` (10 trials), then
  ``nnictl algo unregister DnnSAT``;
* on an empty feasible space: no trial, the reason in the tuner's log.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("nni")

from dnnsat.integrations.nni import registration_file  # noqa: E402
from dnnsat.space import config_from_nni  # noqa: E402
from dnnsat.zoo import synthetic_resnet_problem  # noqa: E402

TIMEOUT = 420  # seconds per experiment process (a loaded 2-core machine needs ~60-120 s for all three)
TIGHT = ["--flops-limit", "1e11", "--params-limit", "2e6"]


def _example(workdir: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "dnnsat.integrations.nni.example", "--workdir", str(workdir / "w"),
            "--json", str(workdir / "result.json"), *args]  # fmt: skip


@pytest.fixture(scope="module")
def experiments() -> Iterator[dict[str, tuple[subprocess.Popen[str], Path]]]:
    root = Path(tempfile.mkdtemp(prefix="dnnsat-nni-"))
    env = {**os.environ, "HOME": str(root / "home"), "NNI_CONFIG_DIR": str(root / "nni-config")}
    (root / "home").mkdir()
    nnictl = str(Path(sys.executable).with_name("nnictl"))
    commands: dict[str, list[str]] = {}
    for name in ("custom", "registered", "empty"):
        (root / name).mkdir()
    commands["custom"] = _example(root / "custom", "--trials", "10", "--concurrency", "5", *TIGHT)
    commands["empty"] = _example(root / "empty", "--trials", "5", "--flops-limit", "1")
    reg = root / "registered"
    run = " ".join(_example(reg, "--trials", "10", "--concurrency", "5", "--registered", "DnnSAT"))
    script = (
        f"set -e; {nnictl} algo register --meta {registration_file()} > {reg}/register.txt 2>&1; "
        f"set +e; {run} "
        f"> {reg}/run.txt 2>&1; rc=$?; "
        f"{nnictl} algo unregister DnnSAT > {reg}/unregister.txt 2>&1; "
        f"{nnictl} algo list > {reg}/list.txt 2>&1; exit $rc"
    )
    commands["registered"] = ["bash", "-c", script]
    procs = {}
    for name, cmd in commands.items():
        out = open(root / name / "output.txt", "w")  # noqa: SIM115 - closed at teardown
        procs[name] = (
            subprocess.Popen(cmd, env=env, cwd=root / name, stdout=out, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True),
            root / name,
        )  # fmt: skip
    yield procs
    for proc, _ in procs.values():
        if proc.poll() is None:
            os.killpg(proc.pid, 15)
            proc.wait(30)
    shutil.rmtree(root, ignore_errors=True)


def _result(experiments: dict[str, tuple[subprocess.Popen[str], Path]], name: str) -> dict[str, Any]:
    proc, workdir = experiments[name]
    try:
        proc.wait(TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(
            f"experiment {name} did not finish in {TIMEOUT} s:\n"
            + (workdir / "output.txt").read_text()[-3000:]
        )
    result_file = workdir / "result.json"
    assert result_file.exists(), (workdir / "output.txt").read_text()[-3000:]
    result: dict[str, Any] = json.loads(result_file.read_text())
    result["returncode"] = proc.returncode
    return result


def _assert_feasible_trials(result: dict[str, Any], problem: Any, n: int) -> None:
    assert result["status"] == "DONE", result["dispatcher_log"][-3000:]
    trials = result["trials"]
    assert len(trials) >= n
    assert all(t["status"] == "SUCCEEDED" for t in trials), [t["status"] for t in trials]
    configs = [config_from_nni(problem.space, t["parameters"]) for t in trials]
    assert all(problem.check(c).feasible for c in configs), configs
    assert len({json.dumps(c, sort_keys=True) for c in configs}) == len(configs)
    assert all(isinstance(t["value"], float) for t in trials)
    assert "DnnSATTuner: mode=repair, base tuner TpeTuner" in result["dispatcher_log"]
    assert "pruned search space given to TpeTuner" in result["dispatcher_log"]


def test_experiment_with_custom_algorithm_config(experiments: Any) -> None:
    result = _result(experiments, "custom")
    assert result["returncode"] == 0
    _assert_feasible_trials(result, synthetic_resnet_problem(flops_limit=1e11, params_limit=2e6), 10)


def test_experiment_by_registered_builtin_name(experiments: Any) -> None:
    result = _result(experiments, "registered")
    workdir = experiments["registered"][1]
    assert "DnnSAT registered sucessfully" in (workdir / "register.txt").read_text()  # NNI's spelling
    _assert_feasible_trials(result, synthetic_resnet_problem(), 10)
    assert result["returncode"] == 0
    assert "DnnSAT unregistered sucessfully" in (workdir / "unregister.txt").read_text()
    listing = (workdir / "list.txt").read_text()
    assert "TPE" in listing and "DnnSAT" not in listing


def test_empty_feasible_space_ends_the_experiment_cleanly(experiments: Any) -> None:
    result = _result(experiments, "empty")
    assert result["returncode"] == 0
    assert result["status"] == "TUNER_NO_MORE_TRIAL"
    assert result["trials"] == []
    log = result["dispatcher_log"]
    assert "feasible space is empty" in log and "flops" in log
    assert "Traceback" not in log
