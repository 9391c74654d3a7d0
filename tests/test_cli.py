"""The ``dnnsat`` command keeps its contract: one-line errors, documented exit codes, bounded work."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import dnnsat as ds
from dnnsat.cli import DEFAULT_MAX_TIME, EXIT_CODES
from dnnsat.cli import main as cli
from dnnsat.problem._count import count_work
from dnnsat.zoo import synthetic_resnet_problem
from dnnsat.zoo._synthetic import synthetic_resnet_costs


def run_cli(*args: str) -> tuple[Result, float]:
    start = time.perf_counter()
    res = CliRunner().invoke(cli, list(args))
    return res, time.perf_counter() - start


def make_1e8_problem() -> ds.Problem:
    """The synthetic ResNet on a 1e8-configuration subspace: an exact count takes seconds."""
    space = ds.Space(
        {
            **{f"w{i}": ds.Int(32, 512, step=32) for i in range(4)},
            **{f"d{i}": ds.Int(1, 4) for i in range(4)},
            "b": ds.Categorical([64, 128]),
            "r": ds.Categorical([128, 160, 224]),
            "k": ds.Categorical([3]),
        }
    )
    flops, params = synthetic_resnet_costs(space)
    return ds.Problem(space).require(flops <= 2e12, name="flops").require(params <= 20e6, name="params")


BROKEN_MODULES = {
    # module source, the error type and the place the one-line message must name
    "runtime": ("import dnnsat as ds\nx = undefined_name + 1\n", "NameError", "line 2"),
    "syntax": ("def broken(:\n    pass\n", "SyntaxError", "line 1"),
    "dependency": ("import dnnsat_no_such_dependency\n", "ModuleNotFoundError", "line 1"),
}


@pytest.mark.parametrize("case", sorted(BROKEN_MODULES))
def test_a_problem_module_that_fails_to_import_is_one_line_and_exit_2(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, error, where = BROKEN_MODULES[case]
    module = f"dnnsat_cli_broken_{case}"
    (tmp_path / f"{module}.py").write_text(source)
    monkeypatch.chdir(tmp_path)
    for command in ("check", "count", "prune", "sample", "explain"):
        res, _ = run_cli(command, f"{module}:problem")
        assert res.exit_code == 2, (command, res.output, res.exception)
        lines = res.output.strip().splitlines()
        assert len(lines) == 1, res.output
        assert f"'{module}'" in lines[0] and error in lines[0] and where in lines[0], lines[0]
        assert "--debug" in lines[0] and "Traceback" not in res.output


def test_a_missing_module_and_a_failing_factory_are_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    res, _ = run_cli("check", "dnnsat_cli_no_such_module:problem")
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1
    assert "No module named 'dnnsat_cli_no_such_module'" in res.output and "current directory" in res.output
    assert "(PROBLEM dnnsat_cli_no_such_module:problem)" in res.output
    (tmp_path / "dnnsat_cli_factory.py").write_text(
        "def make():\n    raise RuntimeError('budget file missing')\n"
    )
    res, _ = run_cli("check", "dnnsat_cli_factory:make")
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1
    assert "make() failed: RuntimeError: budget file missing (dnnsat_cli_factory.py, line 2)" in res.output


def test_debug_shows_the_traceback_before_or_after_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "dnnsat_cli_broken_debug.py").write_text("x = undefined_name\n")
    monkeypatch.chdir(tmp_path)
    for args in (
        ["--debug", "check", "dnnsat_cli_broken_debug:p"],
        ["check", "dnnsat_cli_broken_debug:p", "--debug"],
    ):
        res, _ = run_cli(*args)
        assert res.exit_code == 2
        assert "Traceback" in res.output and 'dnnsat_cli_broken_debug.py", line 1' in res.output
        assert res.output.strip().splitlines()[-1].startswith("Error: cannot import module")


def test_count_refuses_at_once_a_space_too_large_to_count_exactly() -> None:
    res, seconds = run_cli("count", "zoo:synthetic_resnet", "--max-time", "30")
    assert res.exit_code == 3, res.output
    assert (
        "--estimate" in res.output
        and "--max-time" in res.output
        and len(res.output.strip().splitlines()) == 1
    )
    assert seconds < 15  # the work estimate, not the count (hours)
    res, _ = run_cli("count", "zoo:synthetic_resnet", "--estimate", "--json")
    assert res.exit_code == 0 and 1e9 < json.loads(res.output)["estimate"] < 4e9


def test_count_never_runs_past_max_time() -> None:
    res, seconds = run_cli("count", "tests.test_cli:make_1e8_problem", "--max-time", "1")
    assert res.exit_code == 3, res.output
    assert "--estimate" in res.output and len(res.output.strip().splitlines()) == 1
    assert seconds < 1 + 6  # compile and estimate, plus at most the second allowed


def test_count_within_the_limit_is_exact() -> None:
    res, _ = run_cli("count", "zoo:synthetic_resnet", "--budget", "flops=4G,params=200k", "--json")
    assert res.exit_code == 0 and json.loads(res.output)["count"] == 16525
    res, _ = run_cli("count", "zoo:synthetic_resnet", "--budget", "flops=4G,params=200k", "--max-time", "0")
    assert res.exit_code == 0 and "16,525 feasible" in res.output


def test_count_work_predicts_the_boxes_exact_counting_visits() -> None:
    p = synthetic_resnet_problem(flops_limit=4e9, params_limit=2e5)
    boxes, seconds = count_work(p)
    engine = p._c().engine
    before = engine.stats["boxes"]
    assert p.count(max_seconds=None) == 16525
    visited = engine.stats["boxes"] - before
    assert visited / 2 < boxes < visited * 2, (boxes, visited)
    assert 0 < seconds < 10
    big_boxes, big_seconds = count_work(synthetic_resnet_problem())
    assert big_boxes > 1e7 and big_seconds > DEFAULT_MAX_TIME


def test_count_of_an_empty_space_exits_1() -> None:
    for extra in ([], ["--json"], ["--estimate"]):
        res, _ = run_cli("count", "zoo:synthetic_resnet", "--budget", "flops=1M", *extra)
        assert res.exit_code == 1, (extra, res.output)
    res, _ = run_cli("count", "zoo:synthetic_resnet", "--budget", "flops=1M", "--json")
    assert json.loads(res.stdout)["count"] == 0


def test_calibrate_validates_out_before_measuring(tmp_path: Path) -> None:
    cases = {
        str(tmp_path / "missing" / "cpu.json"): "does not exist",
        str(tmp_path): "is a directory",
    }
    if os.geteuid() != 0:  # root may write anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        cases[str(locked / "cpu.json")] = "not writable"
    for out, message in cases.items():
        res, seconds = run_cli("calibrate", "--quick", "--out", out)
        assert res.exit_code == 2, (out, res.output, res.exception)
        assert message in res.output and "--out" in res.output and len(res.output.strip().splitlines()) == 1
        assert seconds < 2  # nothing measured
    assert not (tmp_path / "missing").exists()


def test_exit_codes_are_listed_in_the_help() -> None:
    res, _ = run_cli("--help")
    assert res.exit_code == 0
    text = " ".join(res.output.split())
    assert all(f"{code} {meaning.split()[0]}" in text for code, meaning in EXIT_CODES.items())
