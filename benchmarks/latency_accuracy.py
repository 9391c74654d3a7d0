"""Accuracy of the latency model: zoo networks measured on this CPU, and NAS-Bench-201 on real devices.

``python -m benchmarks.latency_accuracy [--quick] [--data DIR] [--skip-cpu] [--skip-nb201] [--draws N]
[--columns A,B]``

1. **This CPU**: zoo configurations (6 families, sampled under FLOPs/params caps so one thread runs each
   in milliseconds) materialized with ``dnnsat.torch.to_torch`` and timed with ``measure_latency``
   (eval mode, 1 thread, thread CPU time, warm-up round, median over interleaved rounds). Predictions: the
   catalog's generic ``cpu-1core`` profile and the ``calibrate()`` micro-benchmark profile zero-shot, then
   ``fit_device`` on a fixed 20-config subset (seed 0); metrics on the other configs.
2. **NAS-Bench-201 on HELP's protocol** (``nb201_latency.csv``, 15,625 architectures): per device column
   (GPUs 1080 Ti, Titan X, Titan Xp at batch 1/32/256, Xeons, and phones and the Raspberry Pi 4 as
   catalog devices of kind ``mobile_cpu``, :func:`nb201_devices`), ``--draws`` (10) draws of 20
   calibration architectures outside HELP's test set, ``fit_device`` on each; Spearman rho and Kendall
   tau on HELP's test set (indices 900-1899, middle 80 % of the device's latencies) and on the rest of
   the space, next to a FLOPs baseline ``latency = a * FLOPs + b`` least-squares fitted on the same 20
   and to HELP's published numbers (Table 3 of Lee et al., NeurIPS 2021).

Metrics: Spearman rho, Kendall tau-b, MAPE, share of predictions within +-10 % of the measurement.
"""

from __future__ import annotations

import argparse
import os
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from dnnsat.cost import DeviceProfile

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


def no_worse(fitted: np.ndarray, zero: np.ndarray, true: np.ndarray) -> bool:
    """The fitted predictions rank (Spearman) and err (median absolute percentage error) no worse than the
    zero-shot ones, on the same held-out configurations (1e-3 slack on ρ for near-tie rounding)."""
    from scipy.stats import spearmanr

    def median_error(pred: np.ndarray) -> float:
        return float(np.median(np.abs(pred - true) / true))

    rank_ok = spearmanr(fitted, true)[0] >= spearmanr(zero, true)[0] - 1e-3
    return bool(rank_ok and median_error(fitted) <= median_error(zero))


def utilization_error(flops: np.ndarray, pred: np.ndarray, true: np.ndarray, profile: Any) -> np.ndarray:
    """Absolute error in percentage points of the predicted utilization (``gpu_utilization``: FLOPs over
    latency over the fp32 peak) against the measured one (the same FLOPs over the measured latency)."""
    from dnnsat.cost import get_device

    peak = get_device(profile).peak("float32")
    return np.asarray(100 * np.abs(flops / pred - flops / true) / peak)


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
    median, and the result is the median over rounds. Thread CPU time (``clock="thread"``): on a shared
    machine, other processes' time slices do not count."""
    import torch

    from dnnsat.torch import example_inputs, measure_latency, to_torch

    torch.manual_seed(SEED)
    modules = [to_torch(p, cfg) for _, p, cfg in items]
    inputs = [example_inputs(m, "cpu") for m in modules]
    for m, x in zip(modules, inputs):
        measure_latency(m, x, repeats=1, warmup=1, threads=1, clock="thread")
    times = np.empty((rounds, len(items)))
    rng = np.random.default_rng(SEED)
    for r in range(rounds):
        for i in rng.permutation(len(items)):  # interleaved: noise hits every configuration alike
            times[r, i] = measure_latency(
                modules[i], inputs[i], repeats=3, warmup=1, threads=1, clock="thread"
            )
    return np.asarray(np.median(times, axis=0))


def cpu_part(quick: bool) -> str:
    import torch

    from dnnsat.cost import Budget, fit_device, get_device
    from dnnsat.cost.latency import latency_expressions
    from dnnsat.expr import compile_scalar
    from dnnsat.graph import encode_config
    from dnnsat.torch import calibrate

    rounds = 3 if quick else 5
    items = cpu_configs(quick)
    print(f"CPU: {len(items)} configurations over {len(FAMILIES)} families")
    load_start = os.getloadavg()
    t0 = time.perf_counter()
    local = calibrate("cpu", threads=1, quick=quick, clock="thread")
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
            f"{machine()}; torch {torch.__version__}, 1 thread, eval mode, thread CPU time "
            "(`time.thread_time`: `measure_latency(clock='thread')`, `calibrate(clock='thread')`), "
            f"median over {rounds} interleaved rounds (each: 1 untimed + median of 3 back-to-back calls) "
            f"after a warm-up round; measured latencies {measured.min() * 1e3:.2f}-"
            f"{measured.max() * 1e3:.1f} ms. Load average (1/5/15 min) "
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
            f"{local.memory_bandwidth / 1e9:.1f} GB/s copy, {local.launch_overhead_s * 1e6:.2f} µs per op, "
            f"{local.conv_overhead_s * 1e6:.1f} µs more per oneDNN convolution; probe-op efficiencies "
            + ", ".join(
                f"{k} {v:.3g}" for k, v in sorted(local.efficiency.items()) if k not in ("compute", "memory")
            )
            + ". "
            f"Fitted: launch overhead {fitted.launch_overhead_s * 1e6:.2f} µs; efficiencies {eff}.",
        ]
    )


# ------------------------------------------------------------------------------------------------
# 2. NAS-Bench-201, HELP's protocol

HELP_TEST = (900, 1900)  # HELP's meta-test query set: architecture indices 900-1899 ...
HELP_TRIM = 0.1  # ... trimmed to the middle 80 % of each device's latencies (HELP loader.py, remove_outlier)
# HELP (Lee et al., NeurIPS 2021) Table 3, NAS-Bench-201 meta-test devices: (Spearman rho of HELP with
# 10 + 10 samples, of its FLOPs baseline), and our column for the device ("" where we have none)
HELP_TABLE3 = {
    "Titan RTX b256": (0.987, 0.950, ""),
    "Xeon Gold 6226": (0.989, 0.826, "help_gold_6226_latency_ms"),
    "Pixel2": (0.802, 0.765, "help_pixel2_latency_ms"),
    "Raspberry Pi 4": (0.890, 0.846, "hwnasbench_cifar10_raspi4_latency_ms"),
    "Eyeriss": (0.940, 0.437, ""),
    "FPGA": (0.985, 0.900, ""),
}


# mobile column label -> catalog device (kind mobile_cpu)
MOBILE = {
    "pixel2": "pixel2",
    "essential_ph_1": "essential-ph-1",
    "samsung_a50": "samsung-a50",
    "samsung_s7": "samsung-s7",
    "pixel3": "pixel3",
    "raspi4": "raspi4",
}


def nb201_devices() -> list[tuple[str, int, str, Any]]:
    """``(label, batch, column, profile)`` for every device column of ``nb201_latency.csv``: the catalog's
    GPUs, Xeons and mobile CPUs (phones and the Raspberry Pi 4, kind ``mobile_cpu``)."""
    from dnnsat.cost import get_device

    jobs = [(g, b, f"help_{g}_{b}_latency_ms", get_device(g)) for g in GPUS for b in (1, 32, 256)]
    jobs += [(c, 1, f"help_{c}_latency_ms", get_device(dev)) for c, dev in CPUS.items()]
    for label, device in MOBILE.items():
        hw = label in ("pixel3", "raspi4")
        column = f"hwnasbench_cifar10_{label}_latency_ms" if hw else f"help_{label}_latency_ms"
        jobs.append((label, 1, column, get_device(device)))
    return jobs


def help_test_set(y: np.ndarray) -> np.ndarray:
    """HELP's test architectures for one device: indices 900-1899, the middle 80 % of ``y`` among them."""
    idx = np.arange(*HELP_TEST)
    k = int(len(idx) * HELP_TRIM)
    return np.asarray(idx[np.argsort(y[idx], kind="stable")[k : len(idx) - k]])


def calibration_draws(n_total: int, draws: int) -> list[np.ndarray]:
    """``draws`` sets of ``N_CAL`` architectures (seeds 0, 1, ...), all outside HELP's test indices."""
    outside = np.setdiff1d(np.arange(n_total), np.arange(*HELP_TEST))
    return [np.sort(np.random.default_rng(s).choice(outside, N_CAL, replace=False)) for s in range(draws)]


def predictor(net: Any, profile: DeviceProfile, cols: dict[str, np.ndarray]) -> Callable[..., np.ndarray]:
    """Latency (s) of every architecture in ``cols`` under a profile with ``profile``'s peaks: one compiled
    expression with the fitted parameters (launch overhead, efficiencies) as variables."""
    from dnnsat.cost.latency import class_efficiency, latency_model
    from dnnsat.expr import compile_vectorized

    lat = latency_model(net, None, profile)
    fn = compile_vectorized([lat.expr])

    def predict(p: DeviceProfile) -> np.ndarray:
        values = {"launch_overhead_s": p.launch_overhead_s, "memory": p.efficiency["memory"]}
        if lat.parallel:
            values["parallel_overhead_s"] = p.parallel_overhead_s
        values.update({c: class_efficiency(p, c) for c in lat.classes})
        return np.asarray(fn({**cols, **lat.parameter_env(values)})[0], dtype=float)

    return predict


def nb201_part(data: Path, draws: int, columns: Sequence[str] = ()) -> str:
    import csv

    from scipy.stats import spearmanr

    from dnnsat import zoo
    from dnnsat.cost import fit_device
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
    cals = calibration_draws(len(table), draws)
    nets: dict[int, Any] = {}

    def rho(p: np.ndarray, y: np.ndarray) -> float:
        return float(spearmanr(p, y)[0])

    rows, fit_times, weights = [], [], []
    ours: dict[
        str, tuple[float, float]
    ] = {}  # column -> (worst fitted rho, worst FLOPs rho), HELP's test set
    jobs = [j for j in nb201_devices() if not columns or any(c in j[2] for c in columns)]
    if not jobs:
        raise SystemExit(f"--columns {','.join(columns)}: no device column matches")
    for label, batch, column, profile in jobs:
        y = np.array([float(row[column]) for row in table]) / 1e3
        if batch not in nets:
            net = model.build(batch_size=batch)(space.vars)
            nets[batch] = (net, compile_vectorized([net.costs()["flops"]])(cols)[0].astype(float))
        net, flops = nets[batch]
        test = help_test_set(y)
        predict = predictor(net, profile, cols)
        zero = predict(profile)
        per_draw = []
        for cal in cals:
            samples = [((net, {e: int(cols[e][i]) for e in model.EDGES}), float(y[i])) for i in cal]
            start = time.perf_counter()
            fitted = fit_device(profile, samples)
            fit_times.append((time.perf_counter() - start, label, batch))
            chosen = re.search(r"prior weight ([^,)]+)|(no fit did better)", fitted.sources["efficiency"])
            assert chosen, fitted.sources["efficiency"]
            weights.append(chosen[1] or "inf")  # inf: the profile kept (rescaled), see fit_device
            pred = predict(fitted)
            base = flops_baseline(flops, y, cal)
            rest = np.setdiff1d(np.arange(len(table)), cal)
            per_draw.append(
                [rho(pred[test], y[test]), metrics(pred[test], y[test])[0], rho(base[test], y[test])]
                + [
                    rho(pred[rest], y[rest]),
                    *metrics(pred[rest], y[rest])[:2],
                    metrics(base[rest], y[rest])[0],
                ]
                + [no_worse(pred[rest], zero[rest], y[rest])]
                + [utilization_error(flops, pred, y, profile)[rest]]
            )
        util = [np.median(d.pop()) for d in per_draw]
        zero_util = float(np.median(utilization_error(flops, zero, y, profile)))
        m = np.array(per_draw)
        ours[column] = (float(m[:, 0].min()), float(m[:, 2].min()))
        med = np.median(m, axis=0)
        rows.append(
            [label, batch, f"{m[:, 0].min():.3f} / {med[0]:.3f} / {m[:, 0].max():.3f}", f"{med[1]:.3f}"]
            + [f"{m[:, 2].min():.3f}", "yes" if (m[:, 0] > m[:, 2]).all() else "no"]
            + [f"{med[3]:.3f}", f"{med[4]:.3f}", f"{med[5]:.1f} %", f"{med[6]:.3f}", f"{rho(zero, y):.3f}"]
            + [f"{int(m[:, 7].sum())} / {len(m)}"]
            + [f"{zero_util:.2f} / {np.median(util):.2f} pp" if profile.kind == "gpu" else "-"]
        )
        print(
            f"NB201 {column}: HELP-test rho worst/median/best {m[:, 0].min():.3f}/{med[0]:.3f}/"
            f"{m[:, 0].max():.3f}, FLOPs {m[:, 2].min():.3f}"
        )
    header = ["device", "batch", "ρ worst / median / best", "τ (median)", "FLOPs ρ (worst)"]
    header += ["ρ > FLOPs ρ, every draw", "full space ρ", "τ", "MAPE", "FLOPs τ", "zero-shot ρ"]
    header += ["fit no worse than zero-shot", "utilization error zero-shot / fitted"]
    help_rows = []
    for device, (h, hf, column) in HELP_TABLE3.items():
        if column and column not in ours:
            help_rows.append([device, f"{h:.3f}", f"{hf:.3f}", f"`{column}` (not run)", "", "", ""])
        elif column:
            got, flops_got = ours[column]
            help_rows.append(
                [device, f"{h:.3f}", f"{hf:.3f}", f"`{column}`", f"{got:.3f}", f"{flops_got:.3f}"]
            )
            help_rows[-1].append("yes" if got >= h else "no")
        else:
            help_rows.append([device, f"{h:.3f}", f"{hf:.3f}", "no column", "", "", ""])
    t = np.array([f[0] for f in fit_times])
    slowest = fit_times[int(np.argmax(t))]
    counts = ", ".join(f"{w} ×{weights.count(w)}" for w in sorted(set(weights), key=float))
    return "\n".join(
        [
            f"### NAS-Bench-201 on HELP's protocol: {len(table)} architectures, {draws} draws of {N_CAL}",
            "",
            f"Per device column, {draws} calibration draws (seeds 0-{draws - 1}) of {N_CAL} architectures "
            f"outside HELP's test set; HELP's test set = indices {HELP_TEST[0]}-{HELP_TEST[1] - 1} trimmed "
            "to the middle 80 % of that device's latencies (800 architectures). `fit_device` with its "
            'default `prior_weight="cv"`; FLOPs baseline = a·FLOPs + b least-squares fitted on the same '
            f"{N_CAL} (its ρ is FLOPs' own unless the slope is negative). Spearman ρ and Kendall τ on HELP's "
            f"test set; full space = the {len(table) - N_CAL} architectures outside the draw (medians over "
            "draws). Zero-shot = the spec-sheet profile unfitted. Measured data: HELP / HW-NAS-Bench "
            "(`nb201_latency.csv`, CIFAR-10 input); phones and the Raspberry Pi are catalog devices of kind "
            "`mobile_cpu`. HW-NAS-Bench's pixel3/raspi4 columns list ~0.01 ms "
            "for the architectures whose cell has no path from input to output (the exported graphs drop "
            "the dead ops, the model charges them): they dominate those columns' full-space MAPE; HELP's "
            "trimmed test set excludes them.",
            "",
            markdown_table(header, rows),
            "",
            f"HELP (NeurIPS 2021) Table 3, Spearman ρ on the same protocol after meta-training on other "
            f"devices, vs our worst of {draws} draws:",
            "",
            markdown_table(
                ["HELP device", "HELP ρ", "HELP's FLOPs ρ", "our column", "ours (worst)", "our FLOPs ρ"]
                + ["ours ≥ HELP"],
                help_rows,
            ),
            "",
            f"`fit_device` time per fit: median {np.median(t):.2f} s, max {t.max():.2f} s "
            f"({slowest[1]} batch {slowest[2]}; {len(t)} fits, load average {os.getloadavg()[0]:.1f} on "
            f"{os.cpu_count()} CPUs). Prior weights chosen by cross-validation: {counts}.",
        ]
    )


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer CPU configurations and rounds")
    ap.add_argument("--data", type=Path, default=DATA, help="folder with nb201_latency.csv")
    ap.add_argument("--skip-cpu", action="store_true")
    ap.add_argument("--skip-nb201", action="store_true")
    ap.add_argument("--draws", type=int, default=10, help="calibration draws per NAS-Bench-201 device")
    ap.add_argument(
        "--columns",
        default="",
        help="comma-separated substrings: only the NAS-Bench-201 columns containing one (e.g. pixel2,raspi4)",
    )
    add_write_options(ap)
    return ap


def main(argv: Sequence[str] | None = None) -> None:
    ap = build_parser()
    args = ap.parse_args(argv)
    columns = tuple(c for c in args.columns.split(",") if c)
    # a README section needs both parts and every column
    write = writes_readme(ap, args) and not (args.skip_cpu or args.skip_nb201 or columns)
    parts = [
        "## Latency model accuracy",
        "",
        "`python -m benchmarks.latency_accuracy" + (" --quick`" if args.quick else "`"),
    ]
    if not args.skip_nb201:
        parts += ["", nb201_part(args.data, args.draws, columns)]
    if not args.skip_cpu:
        parts += ["", cpu_part(args.quick)]
    body = "\n".join(parts)
    print(body)
    if write:
        update_readme("latency_accuracy", body)


if __name__ == "__main__":
    main()
