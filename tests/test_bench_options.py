"""Benchmarks rewrite the committed benchmarks/README.md and plots only on a default run or --write-readme."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from benchmarks._report import README, writes_readme

BENCHMARKS = [
    "budget_perf",
    "fake_memory",
    "gpu_memory",
    "graph_perf",
    "hpo",
    "late_crash",
    "latency_accuracy",
    "memory_accuracy",
    "memory_conv_mixed",
    "memory_families",
    "memory_mixed",
    "model_zoo",
    "nasbench201",
    "nni_overhead",
    "optuna_overhead",
    "optuna_threads",
    "solver_perf",
]
#: benchmarks that only print (their figures are copied into benchmarks/README.md by hand)
PRINT_ONLY = ["allocator_perf", "from_torch_perf", "gpu_collect", "gpumemnet"]
PLOTS = README.with_name("plots")
CUSTOM = {
    "graph_perf": ["--seed", "7"],
    "gpu_memory": ["--seed", "7"],
    "model_zoo": ["--configs", "2"],
    "nni_overhead": ["--configs", "10"],
    "optuna_threads": ["--trials", "20"],
}


def test_every_benchmark_program_is_listed() -> None:
    programs = {p.stem for p in README.parent.glob("*.py") if not p.stem.startswith("_")}
    assert programs == set(BENCHMARKS) | set(PRINT_ONLY)


@pytest.mark.parametrize("name", PRINT_ONLY)
def test_print_only_benchmarks_never_write_the_readme(name: str) -> None:
    pytest.importorskip("torch")
    source = (README.parent / f"{name}.py").read_text()
    assert "update_readme" not in source and "plots" not in source


@pytest.mark.parametrize("name", BENCHMARKS)
def test_only_the_default_run_or_write_readme_rewrites_the_results(name: str) -> None:
    pytest.importorskip("torch")
    ap = importlib.import_module(f"benchmarks.{name}").build_parser()

    def writes(*argv: str) -> bool:
        return writes_readme(ap, ap.parse_args(list(argv)))

    assert writes() and writes("--write-readme")
    assert not writes("--no-readme") and not writes("--no-write")
    custom = CUSTOM.get(name, ["--quick"])
    assert not writes(*custom) and writes(*custom, "--write-readme")


def test_a_quick_run_leaves_the_committed_readme_and_plots_alone(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("optuna")
    from benchmarks import optuna_overhead

    text, stamp = README.read_text(), README.stat().st_mtime_ns
    plots = {p: p.stat().st_mtime_ns for p in PLOTS.glob("*")}
    try:
        optuna_overhead.main(["--quick"])
        assert "left unchanged (custom options: --quick)" in capsys.readouterr().out
        assert README.stat().st_mtime_ns == stamp and README.read_text() == text
        assert {p: p.stat().st_mtime_ns for p in PLOTS.glob("*")} == plots
    finally:
        if README.read_text() != text:  # never leave a rewritten README behind, even when failing
            Path(README).write_text(text)
