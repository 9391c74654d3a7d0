"""Smoke test of the real-training HPO benchmark (a reduced ``--quick`` run) and its budget enforcement."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("sklearn")
pytest.importorskip("optuna")

from benchmarks import hpo  # noqa: E402

BIG = {"batch_size": 256, "w1": 64, "depth": 3, "kernel": 3, "w2": 128, "fc": 256, "lr": 3e-3}
SMALL = {"batch_size": 64, "w1": 8, "depth": 1, "kernel": 3, "w2": 16, "fc": 32, "lr": 1e-2}
SLOW = {"batch_size": 16, "w1": 64, "depth": 3, "kernel": 7, "w2": 128, "fc": 256, "lr": 3e-3}


def test_trial_enforces_memory_and_trains_the_dnnsat_network() -> None:
    import dnnsat as ds
    from dnnsat.torch import to_torch

    problem = ds.Problem(hpo.space(), model=hpo.build)
    big = hpo.run_trial(problem, BIG, seed=0)
    assert big.status == "oom" and big.memory > hpo.MEMORY_BUDGET
    assert big.accuracy is None and big.latency is None
    small = hpo.run_trial(problem, SMALL, seed=0)
    assert small.memory <= hpo.MEMORY_BUDGET and small.latency is not None
    assert small.status == ("ok" if small.latency <= hpo.LATENCY_BUDGET else "slow")
    assert small.accuracy is not None and small.accuracy > 0.8  # it really learned the digits
    model = to_torch(problem, SMALL)  # the trained module is dnnsat's network
    assert sum(p.numel() for p in model.parameters()) == problem.costs(SMALL)["params"]


def test_early_check_stops_a_slow_model_before_training() -> None:
    import dnnsat as ds

    problem = ds.Problem(hpo.space(), model=hpo.build)
    r = hpo.run_trial(problem, SLOW, seed=0, early=True)
    assert r.status == "rejected" and r.latency is not None and r.latency > hpo.LATENCY_BUDGET
    assert r.accuracy is None and r.memory == 0  # stopped before the first training step


def test_quick_run(tmp_path: Path) -> None:
    out = tmp_path / "hpo.json"
    res = hpo.main(
        [
            "--quick",
            "--seeds",
            "1",
            "--time-budget",
            "30",
            "--trials",
            "2",
            "--validate",
            "2",
            "--no-write",
            "--json",
            str(out),
        ]
    )
    data = json.loads(out.read_text())
    assert set(data["summary"]) == set(hpo.ARMS)
    v, ctx = res["validation"], res["context"]
    assert v["n"] == 2 and ctx["memory_factor"] >= 1 and ctx["latency_factor"] >= 1
    assert 0 < ctx["feasible_count"] < ctx["space_size"]
    for row in v["rows"]:  # dnnsat's verdict is its estimates against the budgets over the margins
        within = (
            row["memory_est"] <= hpo.MEMORY_BUDGET / ctx["memory_factor"]
            and row["latency_est"] <= hpo.LATENCY_BUDGET / ctx["latency_factor"]
        )
        assert row["feasible_est"] == within
        assert row["memory"] > 0 and row["latency"] > 0
    for arm, runs in res["results"].items():
        (run,) = runs
        assert run["history"], arm
        assert run["clock"] >= run["history"][-1]["end"] - 1e-9
        for r in run["history"]:
            assert (r["status"] == "rejected") <= (arm == "tpe+early")  # only the early arm checks first
            if r["status"] == "rejected":
                assert r["latency"] > hpo.LATENCY_BUDGET and r["accuracy"] is None
                continue
            assert (r["status"] == "oom") == (r["memory"] > hpo.MEMORY_BUDGET)
            if r["status"] != "oom":
                assert (r["status"] == "slow") == (r["latency"] > hpo.LATENCY_BUDGET)
            if arm == "tpe+dnnsat":
                assert r["feasible_est"]  # dnnsat never launches a configuration it deems infeasible
    s = res["summary"]["tpe"]
    assert len(s["speedup"]) == 1 and s["speedup"][0] > 0
    assert 0 <= s["wasted_share"] <= 1
    d = res["summary"]["tpe+dnnsat"]
    for key in ("time_to_target", "trials_to_target"):  # against the strongest baseline
        assert d[f"vs_best_{key}"]["baseline"] in ("tpe", "tpe+constraints", "tpe+early")
        assert d[f"vs_best_{key}"]["ratio_of_means"][0] > 0
    assert all(1 <= n <= hpo.TRIAL_BUDGET for a in res["summary"].values() for n in a["trials_to_target"])
    # the dnnsat arm's clock starts with its CPU profile (charged, not free)
    assert res["results"]["tpe+dnnsat"][0]["history"][0]["end"] > ctx["profile_s"]
