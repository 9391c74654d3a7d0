"""Smoke test of ``benchmarks.budget_perf``: both evaluation paths give the same searches and repairs."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "nasbench201"

pytest.importorskip("optuna")
pytest.importorskip("nni")
pytestmark = [
    pytest.mark.skipif(not DATA.exists(), reason="shared NAS-Bench-201 data not available"),
    pytest.mark.filterwarnings("ignore"),
]


def test_reduced_run_on_the_nasbench201_latency_problem() -> None:
    from benchmarks import budget_perf

    (row,) = budget_perf.main(
        ["--problems", "nb201-latency", "--trials", "6", "--repairs", "2", "--no-readme"]
    )
    # the 11 GiB memory budget holds for every cell: only the latency constraint is evaluated
    assert (row["open"], row["constraints"]) == (1, 2)
    for key in ("nni", "optuna", "repair"):
        default, numpy_only, same, wrapper_p50 = row[key]
        assert same and default > 0 and numpy_only > 0
        assert (wrapper_p50 > 0) if key != "repair" else math.isnan(wrapper_p50)
    assert row["sample"] > 0 and row["costs"] > 0
