"""Constrained NAS on the 15,625 NAS-Bench-201 architectures: how much sooner AutoML reaches a good
feasible model when dnnsat prunes infeasible trials before launch.

    python -m benchmarks.nasbench201 [--quick] [--dataset cifar10] [--seeds 30] [--budget 200]
        [--methods optuna-random,optuna-tpe,optuna-nsga2,nni-tpe,nni-evolution]
        [--scenarios params-50,flops-20,params-5,latency-5,latency-1]
        [--max-params MB] [--max-flops M] [--max-latency COLUMN=MS] [--data DIR] [--json PATH] [--jobs N]

Data: ``../shared/data/nasbench201`` (``--data DIR`` for another copy of the CSV tables, or a directory of
official NATS-Bench tss files in their fast-mode layout, read with the ``nats_bench`` package; the full
files cannot be downloaded here, so a test writes the fixture's three architectures in that layout with
``nats_bench``'s own classes and reads them back). Each run simulates a sequential search: a trial
"trains" an architecture for 200 epochs, costing
``200 x (a + b * FLOPs)`` seconds with ``a``, ``b`` fitted on the official per-epoch training times of the
three tss architectures in ``nats_fixture_3archs.csv`` (cifar10: a = 10.3 s, b = 0.129 s per MFLOP;
residuals -15 %, +0.3 %, +21 %), and returns the 200-epoch test accuracy. ``--budget`` is in hours of
that simulated training time (one trial: 0.63-2.15 h on cifar10). A run stops launching when the budget
is spent, or once it has trained the feasible optimum (nothing can improve after it).

Feasibility ground truth: params and FLOPs (NATS-Bench convention) of each architecture, the measured
latency column. dnnsat decides before launch with its own model: params/FLOPs exactly; latency with its
device model (``dnnsat/cost/devices.yaml``) fitted on 20 architectures drawn with seed 0 — its false
reject / false accept rates are reported on the other 15,605. Arms per method (see
``benchmarks/_nb201_search.py``): ``plain`` (infeasible trials train, then are discarded), ``native``
(Optuna ``trial.set_constraint``, NNI a 0 % penalty result; the constraint is known only after
training, so these trials cost their training too), ``dnnsat`` (``DnnSATSampler``/``DnnSATTuner``).

Metrics over seeds (mean, 95 % bootstrap CI): time-to-target speed-up of dnnsat over plain and native =
per-seed ratio of simulated hours, (1) to a feasible accuracy within 0.5 points of the feasible optimum,
(2) to the baseline's own final best; runs that never reach a target are censored at the budget (so a
censored baseline makes its ratio a lower bound; both censored = 1x). Also best feasible accuracy at the
budget, wasted share (training hours of infeasible trials / hours spent) and trials launched.
Writes the "nasbench201" section of benchmarks/README.md and ``benchmarks/plots/nb201_<scenario>.png``.
With ``--json PATH`` each finished run is also appended to ``PATH.partial.jsonl``: the same command,
rerun after an interruption, resumes where it stopped (a change of dataset, budget or limits restarts).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._nb201_data import SCENARIOS, Bench, Scenario, decide, load
from benchmarks._nb201_search import ARMS, METHODS, quiet, run
from benchmarks._report import add_write_options, machine, markdown_table, update_readme, writes_readme

TARGET_GAP = 0.5  # accuracy points below the feasible optimum that count as reaching it
PLOTS = Path(__file__).with_name("plots")
QUICK = {"scenarios": "params-50,params-5", "seeds": 4, "budget": 100.0}

_STATE: dict[str, Any] = {}  # per process: bench and per-scenario arrays (inherited by forked workers)


def _task(job: tuple[str, str, int]) -> tuple[str, str, int, dict[str, list[int]]]:
    scen, method, seed = job
    bench: Bench = _STATE["bench"]
    st = _STATE["scenarios"][scen]
    out = {
        arm: run(
            method, arm, seed, bench, st["ok"], st["values"], st["problem"], _STATE["budget_s"], st["opt"]
        )
        for arm in ARMS
    }
    return scen, method, seed, out


def _worker_init() -> None:
    quiet()


# ------------------------------------------------------------------------------------------------
# metrics


def trajectory(bench: Bench, ok: np.ndarray, archs: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """(completion time of each trial in hours, best feasible accuracy after it; -inf before any)."""
    a = np.asarray(archs, dtype=np.int64)
    t = np.cumsum(bench.trial_seconds[a]) / 3600
    best = np.maximum.accumulate(np.where(ok[a], bench.acc[a], -np.inf)) if len(a) else np.empty(0)
    return t, best


def time_to(t: np.ndarray, best: np.ndarray, target: float, budget_h: float) -> tuple[float, bool]:
    """Hours until ``best >= target`` (and within the budget), else ``(budget_h, True)`` (censored)."""
    hit = np.flatnonzero((best >= target - 1e-9) & (t <= budget_h + 1e-9))
    return (float(t[hit[0]]), False) if len(hit) else (budget_h, True)


def mean_ci(x: Sequence[float], n_boot: int = 10_000, seed: int = 0) -> tuple[float, float, float]:
    """Mean and 95 % percentile-bootstrap CI (NaNs dropped)."""
    v = np.asarray([e for e in x if np.isfinite(e)], dtype=float)
    if len(v) == 0:
        return (float("nan"),) * 3
    boot = np.random.default_rng(seed).choice(v, (n_boot, len(v))).mean(axis=1)
    lo, hi = np.percentile(boot, [2.5, 97.5])
    return float(v.mean()), float(lo), float(hi)


def ratio_of_means_ci(
    x: Sequence[float], y: Sequence[float], n_boot: int = 10_000, seed: int = 0
) -> list[float]:
    """``mean(x) / mean(y)`` over paired seeds and its 95 % percentile-bootstrap CI."""
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    idx = np.random.default_rng(seed).integers(0, len(xa), (n_boot, len(xa)))
    boot = xa[idx].mean(axis=1) / ya[idx].mean(axis=1)
    return [float(xa.mean() / ya.mean()), *(float(v) for v in np.percentile(boot, [2.5, 97.5]))]


def summarize_run(
    bench: Bench, ok: np.ndarray, archs: list[int], opt: float, budget_h: float
) -> dict[str, Any]:
    t, best = trajectory(bench, ok, archs)
    within = t <= budget_h + 1e-9
    spent = float(t[-1]) if len(t) else 0.0
    a = np.asarray(archs, dtype=np.int64)
    wasted = float(bench.trial_seconds[a][~ok[a]].sum() / 3600)
    t1, c1 = time_to(t, best, opt - TARGET_GAP, budget_h)
    final = float(best[within][-1]) if within.any() and np.isfinite(best[within][-1]) else float("nan")
    return {
        "trials": len(a),
        "infeasible_trials": int((~ok[a]).sum()),
        "hours": spent,
        "wasted_share": wasted / spent if spent else 0.0,
        "best_at_budget": final,
        "hours_to_target": t1,
        "censored": c1,
        "trials_to_target": int(np.searchsorted(t, t1) + 1) if not c1 else None,
        "archs": [int(i) for i in a],
    }


def speedups(
    bench: Bench, ok: np.ndarray, runs: dict[str, list[dict[str, Any]]], base: str, budget_h: float
) -> dict[str, Any]:
    """Per-seed ratios (base hours / dnnsat hours) for target 1 (optimum - 0.5) and 2 (base's final best)."""
    r1, r2, cens = [], [], [0, 0]
    for b, d in zip(runs[base], runs["dnnsat"]):
        r1.append(b["hours_to_target"] / d["hours_to_target"])
        cens[0] += b["censored"]
        cens[1] += d["censored"]
        if not np.isfinite(b["best_at_budget"]):
            r2.append(float("nan"))  # the baseline found nothing feasible: no target 2
            continue
        tb, _ = time_to(*trajectory(bench, ok, b["archs"]), b["best_at_budget"], budget_h)
        td, _ = time_to(*trajectory(bench, ok, d["archs"]), b["best_at_budget"], budget_h)
        r2.append(tb / td)
    m1, m2 = mean_ci(r1), mean_ci(r2)
    rom = ratio_of_means_ci(
        [b["hours_to_target"] for b in runs[base]], [d["hours_to_target"] for d in runs["dnnsat"]]
    )
    return {
        "target_optimum": {
            "ratios": r1,
            "mean": m1[0],
            "ci": m1[1:],
            "censored_base": cens[0],
            "censored_dnnsat": cens[1],
            "ratio_of_means": rom[0],
            "ratio_of_means_ci": rom[1:],
        },
        "target_base_best": {"ratios": r2, "mean": m2[0], "ci": m2[1:]},
    }


def collect(
    results: dict[str, Any], raw: dict[tuple[str, str, int], dict[str, list[int]]], bench: Bench
) -> None:
    """Summaries and speed-ups of the runs in ``raw`` (``(scenario, method, seed) -> {arm: archs}``).

    Seeds missing from ``raw`` (an interrupted run) are left out; ``seeds_done`` records the rest.
    """
    budget_h = results["budget_hours"]
    for name, sc in results["scenarios"].items():
        ok = np.zeros(len(bench.acc), dtype=bool)
        ok[sc["feasible_archs"]] = True
        for method in results["methods"]:
            seeds = [s for s in range(results["seeds"]) if (name, method, s) in raw]
            if not seeds:
                continue
            runs = {
                arm: [
                    summarize_run(bench, ok, raw[(name, method, s)][arm], sc["optimum"], budget_h)
                    for s in seeds
                ]
                for arm in ARMS
            }
            sc["methods"][method] = {
                "seeds_done": len(seeds),
                "runs": runs,
                "speedup": _speedups(bench, ok, runs, budget_h),
            }


def _speedups(
    bench: Bench, ok: np.ndarray, runs: dict[str, list[dict[str, Any]]], budget_h: float
) -> dict[str, Any]:
    return {base: speedups(bench, ok, runs, base, budget_h) for base in ("plain", "native")}


# ------------------------------------------------------------------------------------------------
# reporting


def _label(method: str, res: dict[str, Any], seeds: int) -> str:
    done = res.get("seeds_done", seeds)
    return method if done == seeds else f"{method} ({done} of {seeds} seeds)"


def _fmt(m: float, ci: Sequence[float]) -> str:
    return "–" if not np.isfinite(m) else f"{m:.2f}× [{ci[0]:.2f}, {ci[1]:.2f}]"


def _arms(runs: dict[str, list[dict[str, Any]]], key: str, fmt: str) -> str:
    vals = []
    for arm in ARMS:
        v = [r[key] for r in runs[arm] if r[key] is not None and np.isfinite(r[key])]
        vals.append(format(float(np.mean(v)), fmt) if v else "–")
    return " / ".join(vals)


def tables(results: dict[str, Any]) -> str:
    head1 = [
        "scenario",
        "feasible",
        "method",
        "vs plain (opt−0.5)",
        "vs native (opt−0.5)",
        "vs plain (its best)",
        "vs native (its best)",
        "ratio of mean hours p / n (opt−0.5)",
        "censored p/n/d",
    ]
    head2 = [
        "scenario",
        "method",
        "best acc at budget p/n/d",
        "wasted % p/n/d",
        "trials p/n/d",
        "trials to target p/n/d",
    ]
    rows1, rows2 = [], []
    for name, sc in results["scenarios"].items():
        for method, res in sc["methods"].items():
            sp, sn = res["speedup"]["plain"], res["speedup"]["native"]
            method = _label(method, res, results["seeds"])
            cens = "/".join(str(sum(r["censored"] for r in res["runs"][a])) for a in ARMS)
            rows1.append(
                [
                    name,
                    f"{100 * sc['feasible_fraction']:.1f} %",
                    method,
                    _fmt(sp["target_optimum"]["mean"], sp["target_optimum"]["ci"]),
                    _fmt(sn["target_optimum"]["mean"], sn["target_optimum"]["ci"]),
                    _fmt(sp["target_base_best"]["mean"], sp["target_base_best"]["ci"]),
                    _fmt(sn["target_base_best"]["mean"], sn["target_base_best"]["ci"]),
                    " / ".join(
                        _fmt(x["ratio_of_means"], x["ratio_of_means_ci"])
                        for x in (sp["target_optimum"], sn["target_optimum"])
                    ),
                    cens,
                ]
            )
            runs = res["runs"]
            wasted = " / ".join(f"{100 * np.mean([r['wasted_share'] for r in runs[a]]):.0f}" for a in ARMS)
            rows2.append(
                [
                    name,
                    method,
                    _arms(runs, "best_at_budget", ".2f"),
                    wasted,
                    _arms(runs, "trials", ".0f"),
                    _arms(runs, "trials_to_target", ".1f"),
                ]
            )
    rows3 = []
    for name, sc in results["scenarios"].items():
        d = sc["dnnsat"]
        rows3.append(
            [
                name,
                sc["limits"],
                f"{100 * sc['feasible_fraction']:.2f} %",
                f"{sc['optimum']:.2f}",
                sc["n_near_optimum"],
                f"{100 * d['feasible_fraction']:.2f} %",
                f"{100 * d['false_reject_rate']:.2f} %",
                f"{100 * d['false_accept_rate']:.2f} %",
                d["evaluated_on"],
            ]
        )
    head3 = [
        "scenario",
        "limits",
        "feasible (truth)",
        "feasible optimum",
        "archs within 0.5",
        "dnnsat feasible",
        "false reject",
        "false accept",
        "rates over",
    ]
    return (
        "Scenarios and dnnsat's verdicts (false reject = share of truly feasible architectures dnnsat "
        "rejects; false accept = share of the architectures dnnsat accepts that are infeasible):\n\n"
        + markdown_table(head3, rows3)
        + "\n\nTime-to-target speed-up of dnnsat (mean of per-seed ratios, 95 % bootstrap CI); *opt−0.5*: "
        "a feasible accuracy within 0.5 points of the feasible optimum; *its best*: the baseline's final "
        "best; *ratio of mean hours*: mean baseline hours / mean dnnsat hours to opt−0.5 over the same seeds "
        "(less sensitive to single lucky dnnsat runs than the mean of ratios). *censored*: runs of plain / "
        "native / dnnsat that did not reach opt−0.5 within the budget (their time counts as the budget).\n\n"
        + markdown_table(head1, rows1)
        + "\n\nMeans over seeds per arm (p = plain, n = native, d = dnnsat). *trials to target*: over the "
        "runs that reached opt−0.5.\n\n" + markdown_table(head2, rows2)
    )


def plot(results: dict[str, Any], bench: Bench, budget_h: float, out: Path = PLOTS) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    grid = np.linspace(0, budget_h, 300)
    paths = []
    colors = {"plain": "tab:red", "native": "tab:orange", "dnnsat": "tab:blue"}
    for name, sc in results["scenarios"].items():
        ok = np.zeros(len(bench.acc), dtype=bool)
        ok[sc["feasible_archs"]] = True
        methods = list(sc["methods"])
        if not methods:
            continue
        fig, axes = plt.subplots(1, len(methods), figsize=(3.6 * len(methods), 3.4), squeeze=False)
        for ax, method in zip(axes[0], methods):
            for arm in ARMS:
                curves = []
                for r in sc["methods"][method]["runs"][arm]:
                    t, best = trajectory(bench, ok, r["archs"])
                    k = np.searchsorted(t, grid, side="right") - 1
                    curves.append(np.where(k >= 0, best[np.maximum(k, 0)], -np.inf))
                c = np.array(curves)
                med = np.median(c, axis=0)
                lo, hi = np.percentile(c, 25, axis=0), np.percentile(c, 75, axis=0)
                ax.plot(grid, np.where(np.isfinite(med), med, np.nan), color=colors[arm], label=arm)
                ax.fill_between(
                    grid,
                    np.where(np.isfinite(lo), lo, np.nan),
                    np.where(np.isfinite(hi), hi, np.nan),
                    color=colors[arm],
                    alpha=0.15,
                    lw=0,
                )
            ax.axhline(sc["optimum"], color="k", lw=0.8, ls="--")
            ax.axhline(sc["optimum"] - TARGET_GAP, color="gray", lw=0.8, ls=":")
            ax.set_title(method, fontsize=9)
            ax.set_xlabel("simulated training hours")
            ax.set_ylim(sc["optimum"] - 8, sc["optimum"] + 0.5)
        axes[0][0].set_ylabel(f"best feasible {bench.dataset} test acc (%)")
        axes[0][0].legend(fontsize=8, loc="lower right")
        fig.suptitle(
            f"NAS-Bench-201 {name}: {sc['limits']} ({100 * sc['feasible_fraction']:.1f} % feasible); "
            "median and IQR over seeds",
            fontsize=9,
        )
        fig.tight_layout()
        path = out / f"nb201_{name}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


# ------------------------------------------------------------------------------------------------
# main


def _scenarios(args: argparse.Namespace) -> list[Scenario]:
    if args.max_params is not None or args.max_flops is not None or args.max_latency is not None:
        lat = None
        if args.max_latency is not None:
            col, sep, ms = args.max_latency.partition("=")
            if not sep:
                raise SystemExit("--max-latency: write COLUMN=MS, e.g. help_1080ti_256_latency_ms=15.4")
            lat = (col, float(ms))
        return [Scenario("custom", args.max_params, args.max_flops, lat)]
    names = [s for s in args.scenarios.split(",") if s]
    unknown = [s for s in names if s not in SCENARIOS]
    if unknown:
        raise SystemExit(f"--scenarios: unknown {unknown}; known: {list(SCENARIOS)}")
    return [SCENARIOS[s] for s in names]


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--data", type=Path, default=None, help="data directory (default ../shared/data/nasbench201)"
    )
    ap.add_argument("--dataset", default="cifar10", choices=["cifar10", "cifar100", "imagenet16"])
    ap.add_argument("--max-params", type=float, help="custom scenario: parameters limit in MB (1e6)")
    ap.add_argument("--max-flops", type=float, help="custom scenario: FLOPs limit in M (NATS convention)")
    ap.add_argument("--max-latency", help="custom scenario: COLUMN=MS, a column of nb201_latency.csv")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"of {list(SCENARIOS)}")
    ap.add_argument("--methods", default=",".join(METHODS), help=f"of {list(METHODS)}")
    ap.add_argument("--seeds", type=int, default=30)
    ap.add_argument("--budget", type=float, default=200.0, help="simulated training hours per run")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (fork)")
    ap.add_argument("--json", type=Path, help="write every number here")
    ap.add_argument("--quick", action="store_true", help=f"{QUICK} (unless given explicitly)")
    ap.add_argument(
        "--plots", type=Path, default=None, help="directory for the PNG plots (default: benchmarks/plots)"
    )
    ap.add_argument(
        "--from-json",
        type=Path,
        help="only report (tables, plots; README with --write-readme) a saved --json",
    )
    add_write_options(ap)
    return ap


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = build_parser()
    args = ap.parse_args(argv)
    args.write = writes_readme(ap, args, neutral=("json", "jobs"))
    if args.quick:
        given = set(sys.argv[1:] if argv is None else argv)
        for key, value in QUICK.items():
            if f"--{key}" not in given:
                setattr(args, key, value)
    methods = [m for m in args.methods.split(",") if m]
    if bad := [m for m in methods if m not in METHODS]:
        raise SystemExit(f"--methods: unknown {bad}; known: {list(METHODS)}")
    quiet()
    t_start = time.time()
    cmd = " ".join(["python -m benchmarks.nasbench201", *(sys.argv[1:] if argv is None else argv)])
    if args.from_json:  # recompute the metrics from the saved trial sequences, then report
        saved: dict[str, Any] = json.loads(args.from_json.read_text())
        bench = load(args.data, saved["dataset"])
        for sc in saved["scenarios"].values():
            ok = np.zeros(len(bench.acc), dtype=bool)
            ok[sc["feasible_archs"]] = True
            for m in sc["methods"].values():
                m["speedup"] = _speedups(bench, ok, m["runs"], saved["budget_hours"])
        return report(saved, bench, args)
    bench = load(args.data, args.dataset)
    budget_h = float(args.budget)
    _STATE.update(bench=bench, budget_s=budget_h * 3600, scenarios={})
    results: dict[str, Any] = {
        "dataset": args.dataset,
        "budget_hours": budget_h,
        "seeds": args.seeds,
        "methods": methods,
        "target_gap": TARGET_GAP,
        "time_fit": {
            "a_s_per_epoch": bench.time_fit[0],
            "b_s_per_epoch_per_mflop": bench.time_fit[1],
            "points": bench.time_fit_rows,
        },
        "scenarios": {},
    }
    print(
        f"time/epoch = {bench.time_fit[0]:.3f} s + {bench.time_fit[1]:.5f} s x MFLOPs "
        f"(fit on {len(bench.time_fit_rows)} tss archs); budget {budget_h:g} h per run"
    )
    for sc in _scenarios(args):
        ok, values = bench.truth(sc)
        if not ok.any():
            raise SystemExit(f"scenario {sc.name}: no architecture satisfies {sc.describe()}")
        d = decide(bench, sc)
        rest = np.ones(len(ok), dtype=bool)
        rest[d.calibration] = False
        f = d.feasible
        opt = float(bench.acc[ok].max())
        _STATE["scenarios"][sc.name] = {"ok": ok, "values": values, "problem": d.problem, "opt": opt}
        results["scenarios"][sc.name] = {
            "limits": sc.describe(),
            "feasible_fraction": float(ok.mean()),
            "n_feasible": int(ok.sum()),
            "optimum": opt,
            "n_near_optimum": int((bench.acc[ok] >= opt - TARGET_GAP).sum()),
            "feasible_archs": [int(i) for i in np.flatnonzero(ok)],
            "dnnsat": {
                "feasible_fraction": float(f.mean()),
                "false_reject_rate": float((ok & ~f)[rest].sum() / max(1, ok[rest].sum())),
                "false_accept_rate": float((f & ~ok)[rest].sum() / max(1, f[rest].sum())),
                "false_rejects": int((ok & ~f)[rest].sum()),
                "false_accepts": int((f & ~ok)[rest].sum()),
                "evaluated_on": int(rest.sum()),
                "calibration_archs": d.calibration,
                "device": d.device,
                "best_true_feasible_accepted": float(bench.acc[ok & f].max()) if (ok & f).any() else None,
            },
            "methods": {},
        }
        print(
            f"{sc.name}: {sc.describe()}: {100 * ok.mean():.2f} % feasible ({ok.sum()}), optimum {opt:.2f}; "
            f"dnnsat accepts {100 * f.mean():.2f} %, false reject "
            f"{100 * results['scenarios'][sc.name]['dnnsat']['false_reject_rate']:.2f} %, false accept "
            f"{100 * results['scenarios'][sc.name]['dnnsat']['false_accept_rate']:.2f} %",
            flush=True,
        )
    jobs = [(s, m, seed) for s in _STATE["scenarios"] for m in methods for seed in range(args.seeds)]
    settings = {k: results[k] for k in ("dataset", "budget_hours")} | {
        "limits": {name: sc["limits"] for name, sc in results["scenarios"].items()}
    }
    raw, save = _checkpoint(args.json, settings)
    todo = [job for job in jobs if job not in raw]
    if len(todo) < len(jobs):
        print(f"resuming: {len(jobs) - len(todo)} of {len(jobs)} runs read from {args.json}.partial.jsonl")
    from tqdm import tqdm

    bar = tqdm(total=len(todo), desc="runs (x3 arms)", file=sys.stderr, disable=not sys.stderr.isatty())
    if args.jobs > 1:
        with mp.get_context("fork").Pool(args.jobs, initializer=_worker_init) as pool:
            for scen, method, seed, out in pool.imap_unordered(_task, todo):
                raw[(scen, method, seed)] = out
                save((scen, method, seed), out)
                bar.update()
    else:
        for job in todo:
            scen, method, seed, out = _task(job)
            raw[(scen, method, seed)] = out
            save((scen, method, seed), out)
            bar.update()
    bar.close()
    raw = {job: raw[job] for job in jobs}
    collect(results, raw, bench)
    results["runtime_s"] = time.time() - t_start
    results["command"] = cmd
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=float))
    return report(results, bench, args)


Job = tuple[str, str, int]


def _checkpoint(
    path: Path | None, settings: dict[str, Any]
) -> tuple[dict[Job, dict[str, list[int]]], Callable[[Job, dict[str, list[int]]], None]]:
    """Runs finished earlier with the same settings, and a function appending each new one.

    With ``--json PATH`` every finished run is appended to ``PATH.partial.jsonl`` (first line: the
    settings), so an interrupted command rerun with the same options resumes where it stopped.
    """
    if path is None:
        return {}, lambda job, out: None
    partial = path.with_name(path.name + ".partial.jsonl")
    done: dict[Job, dict[str, list[int]]] = {}
    header = json.dumps(settings, sort_keys=True, default=float)
    lines = partial.read_text().splitlines() if partial.exists() else []
    if lines and lines[0] == header:
        for line in lines[1:]:
            rec = json.loads(line)
            done[(rec["scenario"], rec["method"], rec["seed"])] = rec["runs"]
    else:
        partial.write_text(header + "\n")

    def save(job: Job, out: dict[str, list[int]]) -> None:
        record = {"scenario": job[0], "method": job[1], "seed": job[2], "runs": out}
        with partial.open("a") as f:
            f.write(json.dumps(record, default=int) + "\n")

    return done, save


def report(results: dict[str, Any], bench: Bench, args: argparse.Namespace) -> dict[str, Any]:
    """Print the tables; draw the plots (into ``--plots``, or the committed ones when the README is written);
    rewrite the README section when :func:`~benchmarks._report.writes_readme` allows it."""
    text = tables(results) + "\n\n" + goals(results)
    print(text)
    paths: list[Path] = []
    if args.plots is not None or args.write:
        paths = plot(results, bench, results["budget_hours"], args.plots or PLOTS)
        print("plots:", ", ".join(str(p) for p in paths))
    if args.write:
        update_readme("nasbench201", _readme(results, text, paths))
    print(f"runs took {results['runtime_s']:.0f} s")
    return results


def goals(results: dict[str, Any]) -> str:
    """The issue's goals, checked on these numbers (mean speed-up to opt−0.5, 95 % CI)."""
    lines = []
    for name, sc in results["scenarios"].items():
        frac = sc["feasible_fraction"]
        for method, m in sc["methods"].items():
            p, n = (m["speedup"][b]["target_optimum"] for b in ("plain", "native"))
            method = _label(method, m, results["seeds"])
            if frac <= 0.05:
                ok = p["mean"] >= 4 and n["mean"] >= 1.5
                lines.append(
                    f"{name} {method}: {p['mean']:.2f}× vs plain (goal ≥ 4×), {n['mean']:.2f}× vs "
                    f"native (goal ≥ 1.5×): {'met' if ok else 'NOT met'}"
                )
            elif frac >= 0.4:
                ok = p["ci"][1] >= 1 and n["ci"][1] >= 1
                lines.append(
                    f"{name} {method}: CI upper bounds {p['ci'][1]:.2f}× / {n['ci'][1]:.2f}× vs "
                    f"plain / native (goal: not below 1×): {'met' if ok else 'NOT met'}"
                )
    for name, sc in results["scenarios"].items():
        rom = [
            m["speedup"][b]["target_optimum"]["ratio_of_means"]
            for m in sc["methods"].values()
            for b in ("plain", "native")
        ]
        if rom:
            lines.append(
                f"{name}: ratio of mean hours to opt−0.5 over plain/native, across methods: "
                f"{min(rom):.2f}×–{max(rom):.2f}× (DnnSAT, ICSE'21, reports 1.19×–3.95× average speed-ups)"
            )
    return (
        "Goals of the issue (≤ 5 % feasible: mean ≥ 4× over plain and ≥ 1.5× over native; 50 %: never "
        "below 1× within the CI):\n\n" + "\n".join(f"- {line}" for line in lines)
    )


def _readme(results: dict[str, Any], text: str, paths: list[Path]) -> str:
    tf, cmd, runtime = results["time_fit"], results["command"], results["runtime_s"]
    return (
        f"## Constrained NAS on NAS-Bench-201 ({results['dataset']})\n\n"
        + (f"**Note:** {results['note']}\n\n" if results.get("note") else "")
        + f"Command: `{cmd}` ({runtime / 60:.1f} min; {machine()}, shared). "
        f"{results['seeds']} seeds per method and arm, budget {results['budget_hours']:g} simulated training "
        f"hours per run; a trial costs 200 epochs x ({tf['a_s_per_epoch']:.2f} s + "
        f"{tf['b_s_per_epoch_per_mflop']:.4f} s x MFLOPs) per epoch (least squares on the official per-epoch "
        "training times of the 3 tss architectures in `nats_fixture_3archs.csv`). Arms: *plain* (infeasible "
        "trials are trained, then discarded), *native* (Optuna `trial.set_constraint` / NNI 0 % penalty, "
        "known after training), *dnnsat* (`DnnSATSampler` / `DnnSATTuner` in its default repair mode with "
        "deduplication). Method details and caveats: module docstrings of `benchmarks/nasbench201.py` and "
        "`benchmarks/_nb201_search.py`.\n\n"
        + text
        + "\n\nPlots: "
        + ", ".join(f"`benchmarks/plots/{p.name}`" for p in paths)
        + "\n"
    )


if __name__ == "__main__":
    main()
