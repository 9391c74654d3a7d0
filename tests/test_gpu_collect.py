"""The GPU collection command (benchmarks.gpu_collect) end to end on the CPU: a dry run writes a file of
schema 1 with every section; the footprint child, the snapshot trimming and the batch ladder on their own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from benchmarks import gpu_collect  # noqa: E402
from benchmarks._gpu_cases import ladder_batches  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def dry_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gpu_collect")
    return gpu_collect.main(["--dry-run", "--out", str(out), "--budget-s", "300"])


def test_a_dry_run_writes_every_section_in_schema_1(dry_file: Path) -> None:
    doc = json.loads(dry_file.read_text())
    assert gpu_collect.validate(doc) == []
    assert doc["schema"] == 1 and doc["header"]["dry_run"] is True
    assert dry_file.name.startswith("cpu_dryrun_torch") and not list(dry_file.parent.glob("*.tmp"))
    sections = doc["sections"]
    assert list(sections) == list(gpu_collect.SECTIONS)
    assert all(s["status"] == "done" and s["rows"] for s in sections.values()), {
        k: s["status"] for k, s in sections.items()
    }
    # every stack measured (in this process) and one fresh child process answered
    stacks = [r["stack"] for r in sections["footprint"]["rows"]]
    assert set(gpu_collect.STACKS) <= set(stacks) and stacks.count("context") == 2
    # every source and family built and measured; all five recipes ran once
    memory = sections["memory"]["rows"]
    assert {r["source"] for r in memory} >= {"zoo", "family"}
    assert {r["name"] for r in memory} >= {"gpt", "resnet", "nasbench201", "unet", "gru", "gqa_lm"}
    assert {r["mode"] for r in memory} == set(gpu_collect.MODES)
    assert all(r["outcome"] == "ok" and r["peak_allocated"] > 0 for r in memory)
    # out-of-memory verdicts are planned near every cap; they need CUDA to run
    caps = {r["cap_bytes"] for r in sections["oom"]["rows"] if r["cap_bytes"]}
    assert len(caps) == len(gpu_collect.CAPS_GIB)
    latency = sections["latency"]["rows"]
    assert all(r["outcome"] == "ok" and r["median_ms"] > 0 for r in latency)
    assert {r["op"] for r in sections["ops"]["rows"]} == set(gpu_collect.OPS)


def test_validate_names_what_is_missing(dry_file: Path) -> None:
    doc = json.loads(dry_file.read_text())
    doc["schema"] = 2
    del doc["header"]["driver"]
    del doc["sections"]["memory"]["rows"][0]["mode"]
    problems = gpu_collect.validate(doc)
    assert any("schema is 2" in p for p in problems)
    assert "header lacks 'driver'" in problems
    assert any("'memory' row 0 lacks ['mode']" in p for p in problems)


def test_a_section_out_of_time_is_recorded_as_skipped_and_the_file_stays_valid(tmp_path: Path) -> None:
    path = gpu_collect.main(["--dry-run", "--out", str(tmp_path), "--budget-s", "0.001", "--sections", "ops"])
    doc = json.loads(path.read_text())
    assert doc["sections"]["ops"]["status"] == "skipped: budget"
    assert doc["sections"]["ops"]["skipped_items"] == len(gpu_collect.OPS)
    assert doc["sections"]["memory"]["status"] == "skipped: not asked"
    assert gpu_collect.validate(doc) == []


def test_unknown_sections_and_budgets_are_refused_by_name() -> None:
    with pytest.raises(SystemExit, match="--sections: unknown \\['memroy'\\]"):
        gpu_collect.main(["--dry-run", "--sections", "memroy"])
    with pytest.raises(SystemExit, match="--budget-s must be positive"):
        gpu_collect.main(["--dry-run", "--budget-s", "0"])


def test_the_collector_imports_without_z3_and_pydantic() -> None:
    """The GPU image has torch and numpy but neither z3-solver nor pydantic."""
    block = (
        "import sys, importlib.abc\n"
        "class B(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name.split('.')[0] in ('z3', 'pydantic'): raise ImportError('blocked ' + name)\n"
        "sys.meta_path.insert(0, B())\n"
        "import benchmarks.gpu_collect, benchmarks.gpu_memory\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", block], cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_top_at_peak_keeps_the_allocations_live_at_the_peak() -> None:
    def ev(action: str, addr: int, size: int, name: str = "f") -> dict[str, object]:
        return {"action": action, "addr": addr, "size": size, "stream": 0,
                "frames": [{"filename": "/x/torch/nn/mod.py", "line": 1, "name": "inner"},
                           {"filename": "/me/train.py", "line": 7, "name": name}]}  # fmt: skip

    traces = [ev("alloc", 1, 100, "a"), ev("alloc", 2, 300, "b"), ev("free_requested", 1, 100),
              ev("alloc", 3, 50, "c"), ev("free_requested", 2, 300), ev("alloc", 4, 10)]  # fmt: skip
    out = gpu_collect.top_at_peak({"device_traces": [traces], "segments": [{"total_size": 2 << 20}]}, top=1)
    assert out["traced_peak_bytes"] == 400 and out["live_at_peak"] == 2
    assert out["top"] == [{"size": 300, "stream": 0, "frames": ["train.py:7:b"]}]
    assert out["segments_bytes"] == 2 << 20


def test_ladder_batches_bracket_the_cap() -> None:
    # 1 GiB at batch 8, 3 GiB at batch 24: 1/8 GiB per sample
    batches = ladder_batches([(8, 1 << 30), (24, 3 << 30)], 4 << 30, (0.9, 1.0, 1.1))
    assert batches == [29, 32, 35]
    assert ladder_batches([(8, 1 << 30), (8, 1 << 30)], 4 << 30, (1.0,)) == []


def test_peak_memory_with_a_grad_scaler_counts_its_state() -> None:
    import torch

    from dnnsat.torch import peak_memory

    def peak(scaler: bool) -> int:
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
        return peak_memory(m, (torch.randn(4, 8),), autocast=torch.bfloat16, grad_scaler=scaler).peak

    assert peak(True) > peak(False)  # the scale lives through the step
