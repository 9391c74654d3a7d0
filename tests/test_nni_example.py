"""``python -m dnnsat.integrations.nni.example --problem mymodule:problem`` works without PYTHONPATH.

The problem module sits in the working directory, as a user's would. NNI builds the tuner in its own
dispatcher process (started in NNI's log directory); the example hands it the module's directory. A
module that cannot be imported is reported in one line before NNI starts. One real local experiment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("nni")

MODULE = "dnnsat_nni_user_problem"
SOURCE = """
import dnnsat as ds

space = ds.Space({"width": ds.Int(16, 128, step=16), "depth": ds.Int(1, 4)})
problem = ds.Problem(space).require(space.vars.width * space.vars.depth <= 128, name="size")
"""


def _example(cwd: Path, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HOME=str(cwd / "home"), NNI_CONFIG_DIR=str(cwd / "nni-config"))
    (cwd / "home").mkdir(exist_ok=True)
    command = [sys.executable, "-m", "dnnsat.integrations.nni.example", *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_a_problem_module_that_cannot_be_imported_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "dnnsat_nni_broken.py").write_text("import dnnsat\nraise RuntimeError('no budget file')\n")
    for problem, expected in (
        ("dnnsat_nni_missing:problem", "ModuleNotFoundError: No module named 'dnnsat_nni_missing'"),
        ("dnnsat_nni_broken:problem", "RuntimeError: no budget file (dnnsat_nni_broken.py, line 2)"),
    ):
        res = _example(tmp_path, "--problem", problem, "--workdir", str(tmp_path / "w"), timeout=120)
        assert res.returncode == 2, res.stderr[-2000:]
        assert res.stderr.strip().count("\n") == 0 and expected in res.stderr, res.stderr
        assert not (tmp_path / "w" / "nni-experiments").exists()  # NNI never started


def test_a_problem_module_in_the_working_directory_reaches_the_tuner(tmp_path: Path) -> None:
    (tmp_path / f"{MODULE}.py").write_text(SOURCE)
    result_file = tmp_path / "result.json"
    res = _example(
        tmp_path,
        "--problem",
        f"{MODULE}:problem",
        "--trials",
        "4",
        "--concurrency",
        "4",
        "--workdir",
        str(tmp_path / "w"),
        "--json",
        str(result_file),
        timeout=300,
    )
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    result = json.loads(result_file.read_text())
    assert result["status"] == "DONE", result["dispatcher_log"][-3000:]
    trials = result["trials"]
    assert len(trials) == 4 and all(t["status"] == "SUCCEEDED" for t in trials)
    assert all(t["parameters"]["width"] * t["parameters"]["depth"] <= 128 for t in trials), trials
    assert "DnnSATTuner: mode=repair" in result["dispatcher_log"]
