"""Accuracy of the latency model: zoo networks measured on this CPU, and NAS-Bench-201 on real devices.

``python -m benchmarks.latency_accuracy [--quick] [--data DIR] [--skip-cpu] [--skip-nb201]``

1. **This CPU**: zoo configurations (6 families, sampled under FLOPs/params caps so one thread runs each
   in milliseconds) materialized with ``dnnsat.torch.to_torch`` and timed with ``measure_latency``
   (eval mode, 1 thread, warm-up round, median over interleaved rounds). Predictions: the catalog's
   generic ``cpu-1core`` profile and the ``calibrate()`` micro-benchmark profile zero-shot, then
   ``fit_device`` on a fixed 20-config subset (seed 0); metrics on the other configs.
2. **NAS-Bench-201** (``nb201_latency.csv``, 15,625 architectures): per GPU column (1080 Ti, Titan X,
   Titan Xp at batch 1/32/256) and CPU column (Xeon Gold 6226, Silver 4114): zero-shot from the
   catalog's spec-sheet profile, and fitted on 20 architectures (seed 0); metrics on the other 15,605,
   next to a FLOPs baseline ``latency = a * FLOPs + b`` least-squares fitted on the same 20.

Metrics: Kendall tau-b, MAPE, share of predictions within +-10 % of the measurement.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ._report import add_write_options, machine, markdown_table, update_readme, writes_readme

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "nasbench201"
SEED = 0
N_CAL = 20
GPUS = ("1080ti", "titanx", "titanxp")
CPUS = {"gold_6226": "xeon-gold-6226", "silver_4114": "xeon-silver-4114"}
# family -> (FLOPs cap, params cap): small enough for one thread in milliseconds, weights in RAM
FAMILIES = {
    "mlp": ("1G", "5M"),
    "cnn": ("1G", "5M"),
    "resnet": ("2G", "5M"),
    "mobilenetv2": ("1G", "5M"),
    "transformer": ("1G", "8M"),
    "gpt": ("2G", "12M"),
}


def metrics(pred: np.ndarray, true: np.ndarray) -> tuple[float, float, float]:
    """(Kendall tau-b, MAPE %, share within +-10 % in %)."""
    from scipy.stats import kendalltau

    rel = np.abs(pred - true) / true
    return float(kendalltau(pred, true)[0]), float(100 * rel.mean()), float(100 * (rel <= 0.10).mean())


def fmt(m: tuple[float, float, float]) -> list[str]:
    return [f"{m[0]:.3f}", f"{m[1]:.1f} %", f"{m[2]:.0f} %"]


def flops_baseline(flops: np.ndarray, y: np.ndarray, cal: np.ndarray) -> np.ndarray:
    """``a * FLOPs + b`` least-squares fitted on the calibration indices only."""
    a = np.c_[flops[cal], np.ones(len(cal))]
    coef = np.linalg.lstsq(a, y[cal], rcond=None)[0]
    return np.asarray(coef[0] * flops + coef[1])


# ------------------------------------------------------------------------------------------------
# 1. this CPU


def cpu_configs(quick: bool) -> list[tuple[str, Any, dict[str, Any]]]:
    """``(family, problem, config)``: distinct samples per family under its FLOPs/params caps (seed 0)."""
    from dnnsat import zoo
    from dnnsat.cost import Budget

    per_family = 6 if quick else 20
    items: list[tuple[str, Any, dict[str, Any]]] = []
    for fam, (flops, params) in FAMILIES.items():
        problem = zoo.get(fam)(budget=Budget(flops=flops, params=params))
        seen: set[str] = set()
        for cfg in problem.sample(3 * per_family, seed=SEED):
            key = repr(sorted(cfg.items()))
            if key not in seen and len(seen) < per_family:
                seen.add(key)
                items.append((fam, problem, cfg))
    return items


def cpu_measure(items: list[tuple[str, Any, dict[str, Any]]], rounds: int) -> np.ndarray:
    """Median seconds per configuration: 1 thread, eval mode, a warm-up round, then ``rounds`` interleaved
    rounds; each visit times 3 back-to-back calls after one untimed call (caches warm) and keeps their
    median, and the result is the median over rounds."""
    import torch

    from dnnsat.torch import example_inputs, measure_latency, to_torch

    torch.manual_seed(SEED)
    modules = [to_torch(p, cfg) for _, p, cfg in items]
    inputs = [example_inputs(m, "cpu") for m in modules]
    for m, x in zip(modules, inputs):
        measure_latency(m, x, repeats=1, warmup=1, threads=1)
    times = np.empty((rounds, len(items)))
    rng = np.random.default_rng(SEED)
    for r in range(rounds):
        for i in rng.permutation(len(items)):  # interleaved: noise hits every configuration alike
            times[r, i] = measure_latency(modules[i], inputs[i], repeats=3, warmup=1, threads=1)
    return np.asarray(np.median(times, axis=0))


def cpu_part(quick: bool) -> str:
    import os

    import torch

    from dnnsat.cost import Budget
    from dnnsat.cost._devices import fit_device, get_device
    from dnnsat.cost._latency import latency_expressions
    from dnnsat.expr import compile_scalar
    from dnnsat.graph import encode_config
    from dnnsat.torch import calibrate

    rounds = 3 if quick else 5
    items = cpu_configs(quick)
    print(f"CPU: {len(items)} configurations over {len(FAMILIES)} families")
    load_start = os.getloadavg()
    t0 = time.perf_counter()
    local = calibrate("cpu", threads=1, quick=quick)
    measured = cpu_measure(items, rounds)
    load_end = os.getloadavg()
    print(f"CPU: calibrated and measured {rounds} rounds in {time.perf_counter() - t0:.1f} s")

    def predict(profile: Any) -> np.ndarray:
        out = []
        cache: dict[int, Any] = {}
        for _, p, cfg in items:
            if id(p) not in cache:
                e = latency_expressions(p.network, Budget(), profile)["latency"]
                cache[id(p)] = compile_scalar([e, p.network.costs()["flops"]])
            out.append(cache[id(p)](encode_config(p.space, cfg)))
        return np.asarray(out, dtype=float)

    cal = np.sort(np.random.default_rng(SEED).choice(len(items), N_CAL, replace=False))
    hold = np.setdiff1d(np.arange(len(items)), cal)
    fitted = fit_device(local, [((items[i][1], items[i][2]), float(measured[i])) for i in cal])
    fitted_name = f"`calibrate()` + `fit_device` on {N_CAL}"
    preds = {
        "catalog `cpu-1core`, zero-shot": predict(get_device("cpu-1core"))[:, 0],
        "`calibrate()` micro-benchmarks, zero-shot": predict(local)[:, 0],
        fitted_name: predict(fitted)[:, 0],
    }
    flops = predict(local)[:, 1]
    preds[f"FLOPs baseline (a·FLOPs + b on the same {N_CAL})"] = flops_baseline(flops, measured, cal)
    rows = [[name, *fmt(metrics(p[hold], measured[hold]))] for name, p in preds.items()]
    per_fam = []
    for fam in FAMILIES:
        idx = np.array([i for i in hold if items[i][0] == fam])
        if len(idx) >= 3:
            per_fam.append([fam, len(idx), *fmt(metrics(preds[fitted_name][idx], measured[idx]))])
    eff = ", ".join(f"{k} {v:.3g}" for k, v in sorted(fitted.efficiency.items()))
    return "\n".join(
        [
            f"### This CPU: {len(items)} zoo configurations, fit on {N_CAL}, metrics on {len(hold)}",
            "",
            f"{machine()}; torch {torch.__version__}, 1 thread, eval mode, median over {rounds} interleaved "
            f"rounds (each: 1 untimed + median of 3 back-to-back calls) after a warm-up round; measured "
            f"latencies {measured.min() * 1e3:.2f}-{measured.max() * 1e3:.1f} ms. Load average (1/5/15 min) "
            f"before {[round(x, 2) for x in load_start]}, after {[round(x, 2) for x in load_end]} "
            "(shared machine).",
            "",
            markdown_table(["prediction", "Kendall τ", "MAPE", "within ±10 %"], rows),
            "",
            "Per family (fitted profile, held-out configurations):",
            "",
            markdown_table(["family", "n", "Kendall τ", "MAPE", "within ±10 %"], per_fam),
            "",
            f"Micro-benchmarks: {local.peak_flops['fp32'] / 1e9:.1f} GFLOP/s matmul, "
            f"{local.memory_bandwidth / 1e9:.1f} GB/s copy, {local.launch_overhead_s * 1e6:.2f} µs per op. "
            f"Fitted: launch overhead {fitted.launch_overhead_s * 1e6:.2f} µs; efficiencies {eff}.",
        ]
    )


# ------------------------------------------------------------------------------------------------
# 2. NAS-Bench-201


def nb201_part(data: Path) -> str:
    import csv

    from dnnsat import zoo
    from dnnsat.cost._devices import fit_device, get_device
    from dnnsat.cost._latency import latency_expressions
    from dnnsat.expr import compile_vectorized
    from dnnsat.zoo import config_from_arch_str

    path = data / "nb201_latency.csv"
    if not path.is_file():
        raise SystemExit(f"{path} not found: pass --data DIR (the folder with nb201_latency.csv)")
    with path.open() as f:
        table = list(csv.DictReader(f))
    model: Any = zoo.get("nasbench201")
    space = model.space()
    cols = {e: np.empty(len(table), dtype=np.int64) for e in model.EDGES}
    for r, row in enumerate(table):
        cfg = config_from_arch_str(row["arch_str"])
        for e in model.EDGES:
            cols[e][r] = space[e].encode(cfg[e])
    cal = np.sort(np.random.default_rng(SEED).choice(len(table), N_CAL, replace=False))
    hold = np.setdiff1d(np.arange(len(table)), cal)
    envs = [{e: int(cols[e][i]) for e in model.EDGES} for i in cal]
    jobs = [(g, b, f"help_{g}_{b}_latency_ms", g) for g in GPUS for b in (1, 32, 256)]
    jobs += [(c, 1, f"help_{c}_latency_ms", dev) for c, dev in CPUS.items()]
    nets: dict[int, Any] = {}
    rows = []
    fits = []
    t_eval = 0.0
    for label, batch, column, device in jobs:
        y = np.array([float(row[column]) for row in table]) / 1e3
        if batch not in nets:
            net = model.build(batch_size=batch)(space.vars)
            nets[batch] = (net, compile_vectorized([net.costs()["flops"]])(cols)[0].astype(float))
        net, flops = nets[batch]
        profile = get_device(device)
        start = time.perf_counter()
        zero = compile_vectorized([latency_expressions(net, None, profile)["latency"]])(cols)[0]
        t_eval = max(t_eval, time.perf_counter() - start)
        fitted = fit_device(profile, [((net, env), float(y[i])) for env, i in zip(envs, cal)])
        pred = compile_vectorized([latency_expressions(net, None, fitted)["latency"]])(cols)[0]
        base = flops_baseline(flops, y, cal)
        mz, mf, mb = (metrics(p[hold], y[hold]) for p in (zero, pred, base))
        beat = "yes" if mf[0] > mb[0] else "no"
        rows.append([label, batch, *fmt(mz), *fmt(mf), *fmt(mb), beat])
        eff = ", ".join(f"{k} {v:.2g}" for k, v in sorted(fitted.efficiency.items()) if k != "compute")
        fits.append([label, batch, f"{fitted.launch_overhead_s * 1e6:.1f} µs", eff])
        print(f"NB201 {column}: zero-shot τ {mz[0]:.3f}, fitted τ {mf[0]:.3f}, FLOPs τ {mb[0]:.3f}")
    header = ["device", "batch", "zero-shot τ", "MAPE", "±10 %", "fitted τ", "MAPE", "±10 %"]
    header += ["FLOPs τ", "MAPE", "±10 %", "fitted τ > FLOPs τ"]
    return "\n".join(
        [
            f"### NAS-Bench-201: {len(table)} architectures, fit on {N_CAL} (seed {SEED}), "
            f"metrics on {len(hold)}",
            "",
            "Zero-shot = the catalog's spec-sheet profile with its default efficiencies; "
            "fitted = `fit_device` "
            f"on the same {N_CAL} architectures as the FLOPs baseline (a·FLOPs + b). Measured data: "
            "HELP (`nb201_latency.csv`, inference, CIFAR-10 input). CPU columns use batch 1.",
            "",
            markdown_table(header, rows),
            "",
            f"One compiled latency expression evaluates all {len(table)} architectures in {t_eval:.2f} s "
            "(compile included). Fitted parameters:",
            "",
            markdown_table(["device", "batch", "launch overhead", "efficiencies"], fits),
        ]
    )


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer CPU configurations and rounds")
    ap.add_argument("--data", type=Path, default=DATA, help="folder with nb201_latency.csv")
    ap.add_argument("--skip-cpu", action="store_true")
    ap.add_argument("--skip-nb201", action="store_true")
    add_write_options(ap)
    return ap


def main(argv: Sequence[str] | None = None) -> None:
    ap = build_parser()
    args = ap.parse_args(argv)
    write = writes_readme(ap, args) and not (args.skip_cpu or args.skip_nb201)  # a section needs both parts
    parts = [
        "## Latency model accuracy",
        "",
        "`python -m benchmarks.latency_accuracy" + (" --quick`" if args.quick else "`"),
    ]
    if not args.skip_nb201:
        parts += ["", nb201_part(args.data)]
    if not args.skip_cpu:
        parts += ["", cpu_part(args.quick)]
    body = "\n".join(parts)
    print(body)
    if write:
        update_readme("latency_accuracy", body)


if __name__ == "__main__":
    main()
