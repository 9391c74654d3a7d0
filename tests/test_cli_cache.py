"""The CLI answers fast on a traced model (trace cache), with units, and never cuts a piped table."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import dnnsat as ds
from dnnsat import cli as cli_module

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]

HELPER = "WIDTH_OUT = 10\n"
MODULE = """
import os
import torch
import torch.nn as nn
import dnnsat as ds
from cache_helper import WIDTH_OUT


def build(cfg):
    with open(os.environ["TRACE_MARKER"], "a") as f:  # one line per call: the test counts the traces
        f.write("x\\n")
    layers = [nn.Conv2d(3, cfg["width"], 3, padding=1), nn.ReLU()]
    if cfg["deep"]:
        layers += [nn.Conv2d(cfg["width"], cfg["width"], 3, padding=1), nn.ReLU()]
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cfg["width"], WIDTH_OUT)]
    return nn.Sequential(*layers)


def inputs(cfg):
    return torch.empty(cfg["batch"], 3, 32, 32)


space = ds.Space({"width": ds.Int(16, 128, step=16), "deep": ds.Categorical([True, False]),
                  "batch": ds.Categorical([8, 16])})
problem = ds.Problem(space, model=ds.from_torch(build, inputs), budget=ds.Budget(params="1M", device="a100"))
"""


def dnnsat(tmp: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -X importtime -m dnnsat.cli ARGS`` in ``tmp`` with its output piped (as in a script);
    stderr lists every module imported (see :func:`imported`)."""
    full_env = {k: v for k, v in os.environ.items() if k != "DNNSAT_NO_CACHE"}
    full_env.update(PYTHONPATH=f"{ROOT}{os.pathsep}{tmp}", TRACE_MARKER=str(tmp / "traces"))
    full_env.update(DNNSAT_CACHE_DIR=str(tmp / "cache"), **env)
    return subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "dnnsat.cli", *args],
        cwd=tmp,
        env=full_env,
        capture_output=True,
        text=True,
    )


def imported(run: subprocess.CompletedProcess[str]) -> set[str]:
    """The modules a :func:`dnnsat` call imported by import statements (the PROBLEM module itself is
    imported by ``importlib`` and not listed: ``cache_helper``, which it imports, stands for it)."""
    lines = (line for line in run.stderr.splitlines() if line.startswith("import time:"))
    return {line.rsplit("|", 1)[-1].strip() for line in lines}


def traces(tmp: Path) -> int:
    marker = tmp / "traces"
    return len(marker.read_text().splitlines()) if marker.exists() else 0


def test_a_second_call_reads_the_trace_and_any_change_traces_again(tmp_path: Path) -> None:
    (tmp_path / "cache_helper.py").write_text(HELPER)
    (tmp_path / "cache_model.py").write_text(MODULE)
    args = ("check", "cache_model:problem", "--set=width=64", "--set=deep=true", "--set=batch=8", "--json")

    first = dnnsat(tmp_path, *args)
    assert first.returncode == 0, first.stderr
    traced = traces(tmp_path)
    assert traced > 0
    stored = list((tmp_path / "cache").glob("*.pickle"))
    assert len(stored) == 1

    (problem,) = (tmp_path / "cache" / "problems").glob("*.pickle")
    assert {"torch", "cache_helper"} <= imported(first)

    second = dnnsat(tmp_path, *args)  # same source, space, versions: no trace, same answer
    assert second.returncode == 0, second.stderr
    assert traces(tmp_path) == traced
    assert json.loads(second.stdout) == json.loads(first.stdout)
    # the stored problem: neither the module nor PyTorch is imported
    assert "dnnsat.problem" in imported(second) and not {"torch", "cache_helper"} & imported(second)

    # another limit on PyTorch's CPU kernels (CPU memory costs follow it): built again, from the trace
    other_cpu = dnnsat(tmp_path, *args, DNNL_MAX_CPU_ISA="SSE41")
    assert other_cpu.returncode == 0, other_cpu.stderr
    assert "cache_helper" in imported(other_cpu) and traces(tmp_path) == traced
    assert "cache_helper" not in imported(dnnsat(tmp_path, *args, DNNL_MAX_CPU_ISA="SSE41"))

    problem.write_bytes(b"not a pickle")  # a corrupt problem: ignored, built from the stored trace
    third = dnnsat(tmp_path, *args)
    assert json.loads(third.stdout) == json.loads(first.stdout) and "torch" in imported(third)
    assert traces(tmp_path) == traced and problem.read_bytes() != b"not a pickle"

    stored[0].write_bytes(b"not a pickle")  # a corrupt trace (and no problem): ignored, traced, rewritten
    problem.unlink()
    assert json.loads(dnnsat(tmp_path, *args).stdout) == json.loads(first.stdout)
    assert traces(tmp_path) == 2 * traced
    assert stored[0].read_bytes() != b"not a pickle"
    problem.unlink()
    dnnsat(tmp_path, *args)
    assert traces(tmp_path) == 2 * traced  # the rewritten trace is read back
    assert "torch" not in imported(dnnsat(tmp_path, *args))

    for off in ({"DNNSAT_NO_CACHE": "1"}, {}):  # disabled: traced every time
        extra = () if off else ("--no-cache",)
        assert dnnsat(tmp_path, *args, *extra, **off).returncode == 0
    assert traces(tmp_path) == 4 * traced

    # a helper module the PROBLEM module imports changes the answer: traced again, new params
    (tmp_path / "cache_helper.py").write_text("WIDTH_OUT = 1000\n")
    changed = dnnsat(tmp_path, *args)
    assert traces(tmp_path) == 5 * traced
    params = json.loads(changed.stdout)["costs"]["params"]
    assert params == json.loads(first.stdout)["costs"]["params"] + 990 * 65

    # the space changes: traced again
    (tmp_path / "cache_model.py").write_text(MODULE.replace("Int(16, 128", "Int(16, 256"))
    assert dnnsat(tmp_path, *args).returncode == 0
    assert traces(tmp_path) > 5 * traced
    assert len(list((tmp_path / "cache").glob("*.pickle"))) == 3


def test_a_problem_that_cannot_be_pickled_is_not_stored(tmp_path: Path) -> None:
    (tmp_path / "cache_helper.py").write_text(HELPER)
    (tmp_path / "cache_model.py").write_text(MODULE + "problem.require(lambda cfg: True, name='anything')\n")
    args = ("check", "cache_model:problem", "--set=width=64", "--set=deep=true", "--set=batch=8", "--json")
    for _ in range(2):
        run = dnnsat(tmp_path, *args)
        assert run.returncode == 0, run.stderr
        assert json.loads(run.stdout)["feasible"] and "cache_helper" in imported(run)
    assert not list((tmp_path / "cache" / "problems").glob("*.pickle"))
    assert len(list((tmp_path / "cache").glob("*.pickle"))) == 1  # the trace is still kept


UNITS_MODULE = """
import dnnsat as ds
from dnnsat.graph import Network

NAMES = [f"a_rather_long_parameter_name_{i}" for i in range(8)]
space = ds.Space({"w": ds.Int(8, 64, step=8), **{n: ds.Categorical([1, 2]) for n in NAMES}})


def model(v):
    net = Network()
    net.output(net.linear(net.input((32, 128)), v["w"]))
    return net


problem = ds.Problem(space, model=model, budget=ds.Budget(device="a100"))
problem.add_cost("energy", space.vars["w"] * 3)
"""


def test_check_shows_every_cost_with_its_unit_and_piped_tables_are_not_cut(tmp_path: Path) -> None:
    (tmp_path / "units_model.py").write_text(UNITS_MODULE)
    cfg = ["--set=w=16", *(f"--set=a_rather_long_parameter_name_{i}=1" for i in range(8))]
    res = dnnsat(tmp_path, "check", "units_model:problem", *cfg)
    assert res.returncode == 0, res.stderr
    rows = {line.split("│")[1].strip(): line for line in res.stdout.splitlines() if line.count("│") == 4}
    assert " µs " in rows["latency"] or " ms " in rows["latency"], rows["latency"]
    assert rows["latency"].rstrip("│ ").endswith(" s")  # the exact value, in seconds
    assert "(no unit)" in rows["energy"]  # a custom cost: a plain number, said to be one
    assert rows["memory"].rstrip("│ ").endswith(" B")
    data = json.loads(dnnsat(tmp_path, "check", "units_model:problem", *cfg, "--json").stdout)
    assert data["units"]["latency"] == "s" and data["units"]["energy"] is None
    assert data["units"]["params"] == "count" and data["units"]["memory"] == "B"

    sampled = dnnsat(tmp_path, "sample", "units_model:problem", "-n", "2", "--seed", "0")
    assert sampled.returncode == 0, sampled.stderr
    header = next(line for line in sampled.stdout.splitlines() if "a_rather_long_parameter_name_0" in line)
    assert len(header) > 200 and "…" not in sampled.stdout  # 9 columns, none cut to fit 80
    assert all(f"a_rather_long_parameter_name_{i}" in header for i in range(8))


def test_a_terminal_table_fits_the_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    from rich.table import Table

    monkeypatch.setenv("COLUMNS", "60")
    table = Table(*(f"a_rather_long_parameter_name_{i}" for i in range(8)))
    table.add_row(*map(str, range(8)))
    out = io.StringIO()
    cli_module._Console(file=out, force_terminal=True, color_system=None).print(table)
    assert max(map(len, out.getvalue().splitlines())) <= 60
    piped = io.StringIO()
    cli_module._Console(file=piped).print(table)  # not a terminal: one line per row, nothing cut
    assert "a_rather_long_parameter_name_7" in piped.getvalue() and "…" not in piped.getvalue()


def test_the_key_changes_with_the_space_and_the_builder(tmp_path: Path) -> None:
    torch_nn = pytest.importorskip("torch.nn")

    def build(cfg: dict[str, int]) -> object:
        return torch_nn.Linear(cfg["w"], 2)

    def inputs(cfg: dict[str, int]) -> tuple[int, int]:
        return (4, cfg["w"])

    cache = cli_module.TraceCache(tmp_path)
    model = ds.from_torch(build, inputs)
    small, large = ds.Space({"w": ds.Int(1, 8)}), ds.Space({"w": ds.Int(1, 16)})
    assert cache.key(model, small) == cache.key(ds.from_torch(build, inputs), ds.Space({"w": ds.Int(1, 8)}))
    assert cache.key(model, small) != cache.key(model, large)
    assert cache.key(model, small) != cache.key(ds.from_torch(build, inputs, max_regions=8), small)
    assert cache.key(ds.from_torch(lambda cfg: object(), inputs), small) is not None
    unstable = object()
    assert cache.key(ds.from_torch(lambda cfg: unstable, inputs), small) is None  # keyed by address only
