"""The late-crash benchmark: the crash is real PyTorch behaviour, dnnsat predicts it, a short run works."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("sklearn")
pytest.importorskip("optuna")

import dnnsat as ds  # noqa: E402
from benchmarks import hpo, late_crash  # noqa: E402

BASE = {"w1": 8, "depth": 1, "kernel": 3, "w2": 16, "fc": 32, "lr": 1e-2}


@pytest.mark.parametrize("batch", [16, 32])
def test_one_image_batch_crashes_after_the_first_epoch_and_dnnsat_knows(batch: int) -> None:
    plain = ds.Problem(late_crash.space(), model=late_crash.build)
    r = late_crash.run_trial(plain, {**BASE, "batch_size": batch}, seed=0)
    guarded = ds.Problem(
        late_crash.space(), model=late_crash.build, budget=ds.Budget(dataset_size=hpo.N_TRAIN)
    )
    if batch == 16:  # 1297 = 81 * 16 + 1: the 82nd batch of the first epoch holds one image
        assert r["status"] == "crash" and r["steps"] == 81 and r["accuracy"] is None
        assert not guarded.check({**BASE, "batch_size": batch}).feasible
    else:
        assert r["status"] == "ok" and r["steps"] == hpo.EPOCHS * 41 and r["accuracy"] > 0.8
        assert guarded.check({**BASE, "batch_size": batch}).feasible
    assert late_crash.crashes(batch) == (batch == 16)


def test_quick_run(tmp_path: Path) -> None:
    out = tmp_path / "late.json"
    res = late_crash.main(
        ["--quick", "--seeds", "1", "--time-budget", "4", "--trials", "3", "--no-write", "--json", str(out)]
    )
    data = json.loads(out.read_text())
    assert set(data["results"]) == set(late_crash.ARMS)
    assert res["decisions"]["false_accept"] == 0 and res["decisions"]["false_reject"] == 0
    dnnsat_runs = res["results"]["tpe+dnnsat"]
    assert all(r["status"] == "ok" for run in dnnsat_runs for r in run["history"])
    assert all(
        not late_crash.crashes(r["config"]["batch_size"]) for run in dnnsat_runs for r in run["history"]
    )
    for runs in res["results"].values():
        (run,) = runs
        assert 1 <= len(run["history"]) <= 3 and run["clock"] >= run["history"][-1]["end"] - 1e-9
