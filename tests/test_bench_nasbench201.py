"""benchmarks.nasbench201: data, dnnsat's verdicts against the ground truth, and a reduced --quick run."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import numpy as np
import pytest

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "nasbench201"

pytestmark = [
    pytest.mark.skipif(
        not DATA.exists() and not os.environ.get("CI"), reason="shared NAS-Bench-201 data not available"
    ),
    pytest.mark.filterwarnings("ignore"),
]

pytest.importorskip("optuna")
pytest.importorskip("nni")


@pytest.fixture(scope="module")
def bench():
    from benchmarks._nb201_data import load

    return load(DATA, "cifar10")


def test_data_and_training_time_model(bench):
    assert len(bench.acc) == 15625 and bench.acc.max() == pytest.approx(94.3733, abs=1e-4)
    # architecture lookup inverts the table
    for i in (0, 11, 284, 6111, 15624):
        from dnnsat.zoo._nasbench import config_from_arch_str

        assert bench.index(config_from_arch_str(bench.arch_str[i])) == i
    # the fit passes near the official per-epoch times it was fitted on, and costs are positive
    a, b = bench.time_fit
    assert a > 0 and b > 0
    rows = [
        r
        for r in csv.DictReader((DATA / "nats_fixture_3archs.csv").open())
        if r["space"] == "tss" and r["hp_epochs"] == "200" and r["dataset"] == "cifar10"
    ]
    for r in rows:
        i = int(r["arch_index"])
        assert bench.flops_m[i] == pytest.approx(float(r["flops_m"]), abs=1e-5)
        assert a + b * bench.flops_m[i] == pytest.approx(float(r["train_time_per_epoch_s"]), rel=0.25)
    assert bench.trial_seconds.min() > 200 * a


@pytest.mark.parametrize("name", ["params-50", "flops-20", "params-5", "memory-2"])
def test_exact_scenarios_have_no_false_verdicts(bench, name):
    from benchmarks._nb201_data import SCENARIOS, decide

    sc = SCENARIOS[name]
    ok, values = bench.truth(sc)
    d = decide(bench, sc)
    assert np.array_equal(d.feasible, ok)
    assert 0 < ok.mean() < 0.6
    assert np.array_equal(ok, np.all([v <= 0 for v in values.values()], axis=0))


def test_latency_scenario_is_calibrated_on_20_archs(bench):
    from benchmarks._nb201_data import SCENARIOS, decide, latency_device

    assert latency_device("help_1080ti_256_latency_ms") == ("1080ti", 256)
    assert latency_device("help_gold_6226_latency_ms") == ("xeon-gold-6226", 1)
    with pytest.raises(ValueError, match="no dnnsat device profile"):
        latency_device("help_pixel2_latency_ms")
    sc = SCENARIOS["latency-5"]
    ok, _ = bench.truth(sc)
    d = decide(bench, sc)
    assert len(d.calibration) == 20 and d.device == "1080ti"
    rest = np.ones(len(ok), dtype=bool)
    rest[d.calibration] = False
    false_reject = (ok & ~d.feasible)[rest].sum() / ok[rest].sum()
    false_accept = (d.feasible & ~ok)[rest].sum() / d.feasible[rest].sum()
    assert false_reject < 0.5 and false_accept < 0.5  # a usable model, not a perfect one


def test_quick_run(tmp_path):
    from benchmarks.nasbench201 import main

    out = tmp_path / "r.json"
    res = main(
        [
            "--quick",
            "--scenarios",
            "params-50,params-5",
            "--seeds",
            "2",
            "--budget",
            "60",
            "--trials",
            "40",
            "--no-readme",
            "--plots",
            str(tmp_path),
            "--methods",
            "optuna-random,optuna-tpe,nni-tpe,nni-evolution",
            "--json",
            str(out),
        ]
    )
    saved = json.loads(out.read_text())
    assert saved["seeds"] == 2 and saved["max_trials"] == 40
    assert set(saved["check_costs"]) == {"meta_s", "build_s", "process_s", "data_s"}
    assert all(v > 0 for v in saved["check_costs"].values())
    assert sorted(p.name for p in tmp_path.glob("*.png")) == ["nb201_params-5.png", "nb201_params-50.png"]
    for sc in res["scenarios"].values():
        assert sc["dnnsat"]["false_reject_rate"] == sc["dnnsat"]["false_accept_rate"] == 0
        assert sc["early_checks"] == ["params"] and 0 < sc["early_check_s"] < 60
        feasible = set(sc["feasible_archs"])
        for method, m in sc["methods"].items():
            runs = m["runs"]
            for r in runs["dnnsat"]:  # exact constraints: dnnsat never launches an infeasible trial
                assert r["infeasible_trials"] == 0 and r["wasted_share"] == 0
                assert set(r["record"]["archs"]) <= feasible
                assert r["setup_s"] > 0 and r["tool_ms"] > 0  # dnnsat's compile and calls are charged
            for r in runs["early"]:  # the early check trains only feasible architectures
                rec = r["record"]
                assert all(t == (a in feasible) for a, t in zip(rec["archs"], rec["trained"]))
                rejected = [s for s, t in zip(rec["seconds"], rec["trained"]) if not t]
                assert all(s < 60 for s in rejected)  # a rejection costs seconds, not hours
            for arm in runs.values():
                for r in arm:
                    assert r["best_at_budget"] <= sc["optimum"] or np.isnan(r["best_at_budget"])
                    assert r["hours"] <= 60 and r["trials_to_target"] <= 40
                    assert r["trials"] >= min(40, len(r["record"]["archs"]))  # both budgets are run
            if method == "optuna-random":  # Random ignores constraints: the same draws in every bare arm
                for arm in ("native", "early"):
                    for p, o in zip(runs["plain"], runs[arm]):
                        n = min(len(p["record"]["archs"]), len(o["record"]["archs"]))
                        assert p["record"]["archs"][:n] == o["record"]["archs"][:n]
            for kind in ("hours", "trials"):
                sp = m["speedup"][kind]
                assert sp["best"] in ("plain", "native", "early")
                for base in ("plain", "native", "early"):
                    assert len(sp[base]["ratios"]) == 2 and all(x > 0 for x in sp[base]["ratios"])
    few = res["scenarios"]["params-5"]["methods"]["optuna-random"]["runs"]
    assert np.mean([r["wasted_share"] for r in few["plain"]]) > 0.8  # 95 % infeasible: most time wasted
    assert np.mean([r["wasted_share"] for r in few["early"]]) < 0.05  # rejected early: little wasted


def test_early_check_costs_per_constraint(bench):
    from benchmarks._early import CheckCosts
    from benchmarks._nb201_data import SCENARIOS, early_check_seconds

    costs = CheckCosts(meta_s=0.3, build_s=0.02, process_s=2.0, data_s=4.0)
    here, remote = SCENARIOS["latency-5"], SCENARIOS["latency-remote-5"]
    assert here.early_checks() == ["latency"] and remote.early_checks() == []
    assert not early_check_seconds(bench, remote, costs).any()
    lat = bench.latency[here.max_latency[0]]
    np.testing.assert_allclose(early_check_seconds(bench, here, costs), 0.02 + 110 * lat / 1e3)
    mem = early_check_seconds(bench, SCENARIOS["memory-2"], costs)
    assert np.all(mem > 6) and np.all(mem < 8)  # process + data + build + one step (< 1 s)


def test_interrupted_run_resumes_from_its_partial_file(tmp_path, capsys):
    from benchmarks.nasbench201 import main

    out = tmp_path / "r.json"
    common = ["--quick", "--seeds", "2", "--no-readme", "--plots", str(tmp_path), "--json", str(out)]
    argv = [*common, "--budget", "30", "--scenarios", "params-5", "--methods", "optuna-random"]
    first = main(argv)
    partial = tmp_path / "r.json.partial.jsonl"
    lines = partial.read_text().splitlines()
    assert len(lines) == 2 + 2  # settings, check costs, then one line per (scenario, method, seed)
    partial.write_text("\n".join(lines[:3]) + "\n")  # as if killed after the first run
    capsys.readouterr()
    second = main(argv)
    assert "resuming: 1 of 2 runs" in capsys.readouterr().out
    a, b = (r["scenarios"]["params-5"]["methods"]["optuna-random"]["runs"] for r in (first, second))
    assert first["check_costs"] == second["check_costs"]  # the resumed runs keep the costs charged
    for arm in a:  # the resumed run launches exactly the same trials (seeded; measured times differ)
        assert [r["record"]["archs"] for r in a[arm]] == [r["record"]["archs"] for r in b[arm]]
        assert [r["record"]["trained"] for r in a[arm]] == [r["record"]["trained"] for r in b[arm]]
    main([*common, "--budget", "40", "--scenarios", "params-5", "--methods", "optuna-random"])
    assert "resuming" not in capsys.readouterr().out  # other settings: started afresh
    assert len(partial.read_text().splitlines()) == 2 + 2


def _nats_archive(root: Path) -> list[dict[str, str]]:
    """The fixture's three tss architectures written in the official NATS-Bench fast-mode layout
    (``meta.pickle.pbz2`` + ``{index:06d}.pickle.pbz2``) with nats_bench's own classes and writer."""
    api_utils = pytest.importorskip("nats_bench.api_utils")
    rows = [
        r
        for r in csv.DictReader((DATA / "nats_fixture_3archs.csv").open())
        if r["space"] == "tss" and r["hp_epochs"] == "200" and r["dataset"] == "cifar10"
    ]
    api_utils.pickle_save({"meta_archs": [r["arch_str"] for r in rows]}, str(root / "meta.pickle"))
    for i, r in enumerate(rows):
        arch = api_utils.ArchResults(i, r["arch_str"])
        epochs = 200
        res = api_utils.ResultsCount(
            "cifar10", None, None, None, float(r["params_mb"]),
            float(r["flops_m"]), {"arch_str": r["arch_str"]}, 777, epochs, [float(r["latency_s"])],
        )  # fmt: skip
        zeros = [0.0] * epochs
        res.update_train_info(zeros, None, zeros, [float(r["train_time_per_epoch_s"])] * epochs)
        keys = [f"ori-test@{e}" for e in range(epochs)]
        res.update_eval(
            {k: float(r["acc_ori_test"]) for k in keys}, dict.fromkeys(keys, 0.0), dict.fromkeys(keys, 1.0)
        )
        arch.update("cifar10", 777, res)
        api_utils.pickle_save({"200": arch.state_dict()}, str(root / f"{i:06d}.pickle"))
    return rows


def test_official_nats_bench_files_are_read_through_nats_bench(tmp_path):
    from benchmarks._nb201_data import load

    rows = _nats_archive(tmp_path)
    b = load(tmp_path, "cifar10")  # no nb201.csv there: the nats_bench API path
    assert b.arch_str == [r["arch_str"] for r in rows]
    np.testing.assert_allclose(b.acc, [float(r["acc_ori_test"]) for r in rows])
    np.testing.assert_allclose(b.latency["nats_latency_ms"], [1e3 * float(r["latency_s"]) for r in rows])
    np.testing.assert_allclose(b.flops_m, [float(r["flops_m"]) for r in rows], rtol=1e-6)
    # the training-time model is fitted on the API's per-epoch times, as from the fixture's CSV rows
    from benchmarks._nb201_data import fit_train_time

    np.testing.assert_allclose(b.time_fit, fit_train_time(DATA / "nats_fixture_3archs.csv", "cifar10")[0])
