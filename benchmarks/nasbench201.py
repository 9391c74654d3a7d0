"""Constrained NAS on the 15,625 NAS-Bench-201 architectures: how much sooner AutoML reaches a good
feasible model when dnnsat prunes infeasible trials before launch, against the strongest baseline.

    python -m benchmarks.nasbench201 [--quick] [--dataset cifar10] [--seeds 30] [--budget 200] [--trials 100]
        [--methods optuna-random,optuna-tpe,optuna-nsga2,nni-tpe,nni-evolution]
        [--scenarios params-50,flops-20,params-5,memory-2,latency-5,latency-remote-5,latency-remote-1]
        [--max-params MB] [--max-flops M] [--max-latency COLUMN=MS] [--data DIR] [--json PATH] [--jobs N]

Data: ``../shared/data/nasbench201`` (``--data DIR`` for another copy of the CSV tables, or a directory of
official NATS-Bench tss files in their fast-mode layout, read with the ``nats_bench`` package; the full
files cannot be downloaded here, so a test writes the fixture's three architectures in that layout with
``nats_bench``'s own classes and reads them back). Each run simulates a sequential search: a trial
"trains" an architecture for 200 epochs, costing
``200 x (a + b * FLOPs)`` seconds with ``a``, ``b`` fitted on the official per-epoch training times of the
three tss architectures in ``nats_fixture_3archs.csv`` (cifar10: a = 10.3 s, b = 0.129 s per MFLOP;
residuals -15 %, +0.3 %, +21 %), and returns the 200-epoch test accuracy. Every run's clock also counts
the measured wall time of the tool's calls (every arm), dnnsat's compile (the ``dnnsat`` arm) and the
measured cost of the early checks (the ``early`` arm; :mod:`benchmarks._early`).

Two budgets, as experiments are capped: ``--budget`` hours of that clock (one trained trial: 0.63-2.15 h
on cifar10), and ``--trials`` launched trials (NNI's ``maxTrialNumber``; a trial rejected by an early
check counts as launched). A run goes on until both are spent, or until it has trained the feasible
optimum (nothing can improve after it); the trial-budget figures read its first ``--trials`` trials.

Feasibility ground truth: params and FLOPs (NATS-Bench convention) of each architecture, the measured
latency column, dnnsat's memory model (no published memory table: see ``benchmarks/_nb201_data.py``).
dnnsat decides before launch with its own model: params/FLOPs/memory exactly; latency with its device
model (``dnnsat/cost/devices.yaml``) fitted on 20 architectures drawn with seed 0 — its false reject /
false accept rates are reported on the other 15,605. Arms per method (``benchmarks/_nb201_search.py``):
``plain``, ``native`` (the tool's constraint handling after training), ``early`` (the constraint checked
before training where it can be), ``dnnsat``.

Metrics over seeds: time-to-target speed-up of dnnsat over each baseline and over the *best* baseline
(the one with the least mean time to target in that scenario and method): (hours budget) ratio of mean
hours to a feasible accuracy within 0.5 points of the feasible optimum, with its paired-bootstrap 95 % CI,
and the mean of per-seed ratios with its bootstrap CI; (trial budget) the same in launched trials. Runs
that never reach the target are censored at the budget (a censored baseline makes its ratio a lower
bound; both censored = 1x). Also best feasible accuracy at each budget, wasted share (clock time of
trials that gave no feasible result / time spent), trials launched and trained, and dnnsat's own time.
Writes the "nasbench201" section of benchmarks/README.md and ``benchmarks/plots/nb201_<scenario>.png``.
With ``--json PATH`` each finished run is also appended to ``PATH.partial.jsonl``: the same command,
rerun after an interruption, resumes where it stopped (a change of dataset, budgets or limits restarts).
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

from benchmarks._early import LATENCY_REPEATS, LATENCY_WARMUP, CheckCosts, measure_nb201
from benchmarks._nb201_data import (
    DEFAULT_SCENARIOS,
    SCENARIOS,
    Bench,
    Scenario,
    dnnsat_problem,
    early_check_seconds,
    latency_device,
    load,
    memory_problem,
)
from benchmarks._nb201_search import ARMS, METHODS, Sim, quiet, run
from benchmarks._report import add_write_options, machine, markdown_table, update_readme, writes_readme

TARGET_GAP = 0.5  # accuracy points below the feasible optimum that count as reaching it
PLOTS = Path(__file__).with_name("plots")
# --quick: a smoke test (< 3 min): an exact and a memory scenario, two methods, few seeds
QUICK = {
    "scenarios": "params-5,memory-2",
    "methods": "optuna-tpe,nni-evolution",
    "seeds": 3,
    "budget": 100.0,
    "trials": 50,
}
BASES = ("plain", "native", "early")
PAPER = "DnnSAT (ICSE'21) reports 1.19×–3.95× average speed-ups"

_STATE: dict[str, Any] = {}  # per process: bench and per-scenario Sims (inherited by forked workers)


def _task(job: tuple[str, str, int]) -> tuple[str, str, int, dict[str, dict[str, Any]]]:
    scen, method, seed = job
    sim: Sim = _STATE["sims"][scen]
    opt, budget_s, max_trials = _STATE["opt"][scen], _STATE["budget_s"], _STATE["max_trials"]
    out: dict[str, dict[str, Any]] = {}
    for arm in ARMS:
        if arm == "early" and sim.pre_ok is None:  # nothing checkable before training: early is native
            out[arm] = out["native"]
        else:
            out[arm] = run(method, arm, seed, sim, budget_s, max_trials, opt)
    return scen, method, seed, out


def _worker_init() -> None:
    quiet()


# ------------------------------------------------------------------------------------------------
# metrics


def trajectory(bench: Bench, ok: np.ndarray, rec: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(clock hours at the end of each trial, best feasible accuracy after it; -inf before any)."""
    a = np.asarray(rec["archs"], dtype=np.int64)
    t = (rec["setup_s"] + np.cumsum(rec["seconds"])) / 3600
    good = ok[a] & np.asarray(rec["trained"], dtype=bool)
    best = np.maximum.accumulate(np.where(good, bench.acc[a], -np.inf)) if len(a) else np.empty(0)
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
    bench: Bench, ok: np.ndarray, rec: dict[str, Any], opt: float, budget_h: float, max_trials: int
) -> dict[str, Any]:
    """One run's figures under the hours budget and under the ``max_trials`` launched-trials budget."""
    t, best = trajectory(bench, ok, rec)
    within = t <= budget_h + 1e-9
    a = np.asarray(rec["archs"], dtype=np.int64)
    trained = np.asarray(rec["trained"], dtype=bool)
    seconds = np.asarray(rec["seconds"])
    spent = float(t[within][-1]) if within.any() else 0.0
    wasted = float(seconds[within & ~(ok[a] & trained)].sum() / 3600)
    t1, c1 = time_to(t, best, opt - TARGET_GAP, budget_h)
    hit = np.flatnonzero(best[:max_trials] >= opt - TARGET_GAP - 1e-9)
    first = best[: min(max_trials, len(best))]
    final = float(best[within][-1]) if within.any() and np.isfinite(best[within][-1]) else float("nan")
    return {
        "trials": int(within.sum()),
        "trained": int((within & trained).sum()),
        "infeasible_trials": int((within & ~ok[a]).sum()),
        "hours": spent,
        "wasted_share": wasted / spent if spent else 0.0,
        "best_at_budget": final,
        "hours_to_target": t1,
        "censored": c1,
        "trials_to_target": int(hit[0] + 1) if len(hit) else max_trials,
        "censored_trials": not len(hit),
        "best_at_trials": float(first[-1]) if len(first) and np.isfinite(first[-1]) else float("nan"),
        "setup_s": float(rec["setup_s"]),
        "tool_ms": 1e3 * float(np.mean(rec["tool_s"])) if len(rec["tool_s"]) else 0.0,
        "record": rec,
    }


def speedup(runs: dict[str, list[dict[str, Any]]], base: str, key: str) -> dict[str, Any]:
    """dnnsat against ``base`` on ``key`` (``hours_to_target`` or ``trials_to_target``): per-seed ratios
    (mean, bootstrap CI) and the ratio of the means (paired-bootstrap CI)."""
    x = [b[key] for b in runs[base]]
    y = [d[key] for d in runs["dnnsat"]]
    ratios = [u / v for u, v in zip(x, y)]
    m = mean_ci(ratios)
    rom = ratio_of_means_ci(x, y)
    return {
        "ratios": ratios,
        "mean": m[0],
        "ci": m[1:],
        "ratio_of_means": rom[0],
        "ratio_of_means_ci": rom[1:],
    }


def _speedups(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per budget kind: dnnsat against every baseline, and which baseline is the best (least mean)."""
    out: dict[str, Any] = {}
    for kind, key in (("hours", "hours_to_target"), ("trials", "trials_to_target")):
        per = {base: speedup(runs, base, key) for base in BASES}
        best = min(BASES, key=lambda b: (np.mean([r[key] for r in runs[b]]), BASES.index(b)))
        out[kind] = {**per, "best": best}
    return out


def _ok(bench: Bench, sc: dict[str, Any]) -> np.ndarray:
    ok = np.zeros(len(bench.acc), dtype=bool)
    ok[sc["feasible_archs"]] = True
    return ok


def collect(
    results: dict[str, Any], raw: dict[tuple[str, str, int], dict[str, dict[str, Any]]], bench: Bench
) -> None:
    """Summaries and speed-ups of the runs in ``raw`` (``(scenario, method, seed) -> {arm: record}``).

    Seeds missing from ``raw`` (an interrupted run) are left out; ``seeds_done`` records the rest.
    """
    budget_h, max_trials = results["budget_hours"], results["max_trials"]
    for name, sc in results["scenarios"].items():
        ok = _ok(bench, sc)
        for method in results["methods"]:
            seeds = [s for s in range(results["seeds"]) if (name, method, s) in raw]
            if not seeds:
                continue
            runs = {
                arm: [
                    summarize_run(bench, ok, raw[(name, method, s)][arm], sc["optimum"], budget_h, max_trials)
                    for s in seeds
                ]
                for arm in ARMS
            }
            sc["methods"][method] = {"seeds_done": len(seeds), "runs": runs, "speedup": _speedups(runs)}


# ------------------------------------------------------------------------------------------------
# reporting


def _label(method: str, res: dict[str, Any], seeds: int) -> str:
    done = res.get("seeds_done", seeds)
    return method if done == seeds else f"{method} ({done} of {seeds} seeds)"


def _fmt(m: float, ci: Sequence[float]) -> str:
    return "–" if not np.isfinite(m) else f"{m:.2f}× [{ci[0]:.2f}, {ci[1]:.2f}]"


def _rom(x: dict[str, Any]) -> str:
    return _fmt(x["ratio_of_means"], x["ratio_of_means_ci"])


def _arms(runs: dict[str, list[dict[str, Any]]], key: str, fmt: str, arms: Sequence[str] = ARMS) -> str:
    vals = []
    for arm in arms:
        v = [r[key] for r in runs[arm] if r[key] is not None and np.isfinite(r[key])]
        vals.append(format(float(np.mean(v)), fmt) if v else "–")
    return " / ".join(vals)


def _count(runs: dict[str, list[dict[str, Any]]], key: str) -> str:
    return "/".join(str(sum(bool(r[key]) for r in runs[a])) for a in ARMS)


def tables(results: dict[str, Any]) -> str:
    rows0, rows1, rows2, rows3 = [], [], [], []
    n = results["max_trials"]
    for name, sc in results["scenarios"].items():
        d = sc["dnnsat"]
        rows0.append(
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
                "after training" if sc["early_check_s"] is None else f"{sc['early_check_s']:.2f} s",
            ]
        )
        for method, res in sc["methods"].items():
            sp, runs = res["speedup"], res["runs"]
            label = _label(method, res, results["seeds"])
            h, tr = sp["hours"], sp["trials"]
            rows1.append(
                [
                    name,
                    f"{100 * sc['feasible_fraction']:.1f} %",
                    label,
                    h["best"],
                    _rom(h[h["best"]]),
                    _fmt(h[h["best"]]["mean"], h[h["best"]]["ci"]),
                    " / ".join(f"{h[b]['ratio_of_means']:.2f}×" for b in BASES),
                    _count(runs, "censored"),
                ]
            )
            rows2.append(
                [
                    name,
                    label,
                    tr["best"],
                    _rom(tr[tr["best"]]),
                    _fmt(tr[tr["best"]]["mean"], tr[tr["best"]]["ci"]),
                    " / ".join(f"{tr[b]['ratio_of_means']:.2f}×" for b in BASES),
                    "/".join(str(sum(not r["censored_trials"] for r in runs[a])) for a in ARMS),
                    _arms(runs, "best_at_trials", ".2f"),
                ]
            )
            wasted = " / ".join(f"{100 * np.mean([r['wasted_share'] for r in runs[a]]):.0f}" for a in ARMS)
            d_runs = runs["dnnsat"]
            rows3.append(
                [
                    name,
                    label,
                    _arms(runs, "best_at_budget", ".2f"),
                    wasted,
                    _arms(runs, "trials", ".0f"),
                    _arms(runs, "trained", ".0f"),
                    _arms(runs, "tool_ms", ".1f"),
                    f"{np.mean([r['setup_s'] for r in d_runs]):.1f} s",
                ]
            )
    return (
        "Scenarios and dnnsat's verdicts (false reject = share of truly feasible architectures dnnsat "
        "rejects; false accept = share of the architectures dnnsat accepts that are infeasible; *early "
        "check*: median measured cost of checking one architecture before training):\n\n"
        + markdown_table(
            [
                "scenario",
                "limits",
                "feasible (truth)",
                "feasible optimum",
                "archs within 0.5",
                "dnnsat feasible",
                "false reject",
                "false accept",
                "rates over",
                "early check",
            ],
            rows0,
        )
        + "\n\n**Hours budget** "
        f"({results['budget_hours']:g} h). Speed-up of dnnsat to a feasible accuracy within 0.5 points of "
        "the feasible optimum, against the *best* baseline of plain / native / early (least mean hours in "
        "that row): ratio of mean hours (paired-bootstrap 95 % CI) and mean of per-seed ratios (bootstrap "
        "CI); then the ratio of mean hours against each baseline. *censored*: runs of plain / native / early "
        "/ dnnsat that did not reach the target within the budget (their time counts as the budget).\n\n"
        + markdown_table(
            [
                "scenario",
                "feasible",
                "method",
                "best baseline",
                "vs best: ratio of mean hours",
                "vs best: mean of ratios",
                "vs plain / native / early",
                "censored p/n/e/d",
            ],
            rows1,
        )
        + f"\n\n**Trial budget** ({n} launched trials, rejected-early trials included). The same in "
        f"launched trials to the target (censored at {n}); *reached*: seeds that reached it within {n} "
        "trials, p/n/e/d.\n\n"
        + markdown_table(
            [
                "scenario",
                "method",
                "best baseline",
                "vs best: ratio of mean trials",
                "vs best: mean of ratios",
                "vs plain / native / early",
                "reached p/n/e/d",
                f"best acc after {n} trials p/n/e/d",
            ],
            rows2,
        )
        + "\n\nMeans over seeds per arm (p / n / e / d), hours budget. *wasted*: clock time of trials that "
        "gave no feasible result (trained infeasible ones, rejected checks) / time spent; *tool ms*: the "
        "tool's own calls per trial (dnnsat's wrapper included in d); *dnnsat setup*: compiling its Problem "
        "(and, for latency, measuring its 20 calibration architectures), charged to its clock.\n\n"
        + markdown_table(
            [
                "scenario",
                "method",
                "best acc at budget",
                "wasted %",
                "trials launched",
                "trials trained",
                "tool ms / trial",
                "dnnsat setup",
            ],
            rows3,
        )
    )


def plot(results: dict[str, Any], bench: Bench, budget_h: float, out: Path = PLOTS) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    grid = np.linspace(0, budget_h, 300)
    paths = []
    colors = {"plain": "tab:red", "native": "tab:orange", "early": "tab:green", "dnnsat": "tab:blue"}
    for name, sc in results["scenarios"].items():
        ok = _ok(bench, sc)
        methods = list(sc["methods"])
        if not methods:
            continue
        fig, axes = plt.subplots(1, len(methods), figsize=(3.6 * len(methods), 3.4), squeeze=False)
        for ax, method in zip(axes[0], methods):
            for arm in ARMS:
                curves = []
                for r in sc["methods"][method]["runs"][arm]:
                    t, best = trajectory(bench, ok, r["record"])
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
            ax.set_xlabel("clock hours (simulated training + measured overheads)")
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
    ap.add_argument("--scenarios", default=",".join(DEFAULT_SCENARIOS), help=f"of {list(SCENARIOS)}")
    ap.add_argument("--methods", default=",".join(METHODS), help=f"of {list(METHODS)}")
    ap.add_argument("--seeds", type=int, default=30)
    ap.add_argument("--budget", type=float, default=200.0, help="simulated training hours per run")
    ap.add_argument(
        "--trials", type=int, default=100, help="launched-trials budget per run (second budget kind)"
    )
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
        raw = {
            (name, method, i): {arm: m["runs"][arm][i]["record"] for arm in ARMS}
            for name, sc in saved["scenarios"].items()
            for method, m in sc["methods"].items()
            for i in range(m["seeds_done"])
        }
        for sc in saved["scenarios"].values():
            sc["methods"] = {}
        collect(saved, raw, bench)
        return report(saved, bench, args)
    bench = load(args.data, args.dataset)
    budget_h = float(args.budget)
    _STATE.update(bench=bench, budget_s=budget_h * 3600, max_trials=args.trials, sims={}, opt={})
    results: dict[str, Any] = {
        "dataset": args.dataset,
        "budget_hours": budget_h,
        "max_trials": args.trials,
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
        f"(fit on {len(bench.time_fit_rows)} tss archs); budgets {budget_h:g} h, {args.trials} trials per run"
    )
    chosen = _scenarios(args)
    settings = {k: results[k] for k in ("dataset", "budget_hours", "max_trials")} | {
        "limits": {sc.name: sc.describe() for sc in chosen}
    }
    sample = bench.configs(np.random.default_rng(0).choice(len(bench.acc), 5, replace=False))
    raw, save, costs = _checkpoint(
        args.json, settings, lambda: measure_nb201(memory_problem(bench.dataset), sample)
    )
    results["check_costs"] = costs.as_dict()
    print("early-check pieces (s): " + ", ".join(f"{k} {v:.3f}" for k, v in costs.as_dict().items()))
    # a device-not-at-hand scenario whose at-hand twin (same limits) runs too reuses its runs: only the
    # early arm differs, and there it is native
    at_hand = {_limits_key(sc): sc.name for sc in chosen if sc.latency_at_hand}
    twins = {
        sc.name: at_hand[_limits_key(sc)]
        for sc in chosen
        if not sc.latency_at_hand and _limits_key(sc) in at_hand
    }
    decisions: dict[tuple[Any, ...], Any] = {}
    for sc in chosen:
        results["scenarios"][sc.name] = _prepare(bench, sc, costs, decisions)
    runnable = [s for s in _STATE["sims"] if s not in twins]
    # seed-major, so that an interrupted run has every scenario and method at about the same seeds
    jobs = [(s, m, seed) for seed in range(args.seeds) for s in runnable for m in methods]
    todo = [job for job in jobs if job not in raw]
    if len(todo) < len(jobs):
        print(f"resuming: {len(jobs) - len(todo)} of {len(jobs)} runs read from {args.json}.partial.jsonl")
    from tqdm import tqdm

    bar = tqdm(total=len(todo), desc="runs (x4 arms)", file=sys.stderr, disable=not sys.stderr.isatty())
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
    for remote, twin in twins.items():
        for (scen, method, seed), out in list(raw.items()):
            if scen == twin:
                raw[(remote, method, seed)] = {**out, "early": out["native"]}
    collect(results, raw, bench)
    results["runtime_s"] = time.time() - t_start
    results["command"] = cmd
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=float))
    return report(results, bench, args)


def _limits_key(sc: Scenario) -> tuple[Any, ...]:
    return (sc.max_params, sc.max_flops, sc.max_latency, sc.max_memory)


def _prepare(
    bench: Bench, sc: Scenario, costs: CheckCosts, decisions: dict[tuple[Any, ...], Any]
) -> dict[str, Any]:
    """Ground truth, dnnsat's verdicts and the early check of one scenario; its Sim goes to ``_STATE``.

    dnnsat's Problem is compiled here (timed; forked workers inherit it) and shared through ``decisions``
    with scenarios of the same limits.
    """
    ok, values = bench.truth(sc)
    if not ok.any():
        raise SystemExit(f"scenario {sc.name}: no architecture satisfies {sc.describe()}")
    key = _limits_key(sc)
    if key not in decisions:
        t0 = time.perf_counter()
        problem, calib = dnnsat_problem(bench, sc)
        compile_s = time.perf_counter() - t0
        decisions[key] = problem, calib, compile_s, np.asarray(problem.check_batch(bench.columns()), bool)
    problem, calib, compile_s, f = decisions[key]
    rest = np.ones(len(ok), dtype=bool)
    rest[calib] = False
    opt = float(bench.acc[ok].max())
    checks = sc.early_checks()
    pre_ok = np.all([values[k] <= 0 for k in checks], axis=0) if checks else None
    check_s = early_check_seconds(bench, sc, costs)
    calib_s = 0.0
    if sc.max_latency is not None:  # measuring the calibration architectures on the device, once
        lat = bench.latency[sc.max_latency[0]][calib] / 1e3
        calib_s = float(np.sum(costs.build_s + (LATENCY_WARMUP + LATENCY_REPEATS) * lat))
    _STATE["sims"][sc.name] = Sim(bench, ok, values, pre_ok, check_s, problem, compile_s, calib_s)
    _STATE["opt"][sc.name] = opt
    out = {
        "limits": sc.describe(),
        "feasible_fraction": float(ok.mean()),
        "n_feasible": int(ok.sum()),
        "optimum": opt,
        "n_near_optimum": int((bench.acc[ok] >= opt - TARGET_GAP).sum()),
        "feasible_archs": [int(i) for i in np.flatnonzero(ok)],
        "early_checks": checks,
        "early_check_s": float(np.median(check_s)) if checks else None,
        "latency_at_hand": sc.latency_at_hand if sc.max_latency is not None else None,
        "memory": sc.max_memory is not None,
        "dnnsat": {
            "feasible_fraction": float(f.mean()),
            "false_reject_rate": float((ok & ~f)[rest].sum() / max(1, ok[rest].sum())),
            "false_accept_rate": float((f & ~ok)[rest].sum() / max(1, f[rest].sum())),
            "false_rejects": int((ok & ~f)[rest].sum()),
            "false_accepts": int((f & ~ok)[rest].sum()),
            "evaluated_on": int(rest.sum()),
            "calibration_archs": calib,
            "calibration_measure_s": calib_s,
            "compile_s": compile_s,
            "device": latency_device(sc.max_latency[0])[0] if sc.max_latency is not None else None,
            "best_true_feasible_accepted": float(bench.acc[ok & f].max()) if (ok & f).any() else None,
        },
        "methods": {},
    }
    dn = out["dnnsat"]
    print(
        f"{sc.name}: {sc.describe()}: {100 * ok.mean():.2f} % feasible ({ok.sum()}), optimum {opt:.2f}; "
        f"dnnsat accepts {100 * f.mean():.2f} %, false reject {100 * dn['false_reject_rate']:.2f} %, "
        f"false accept {100 * dn['false_accept_rate']:.2f} %; early check "
        + ("after training" if not checks else f"{np.median(check_s):.2f} s"),
        flush=True,
    )
    return out


Job = tuple[str, str, int]


def _checkpoint(
    path: Path | None, settings: dict[str, Any], measure: Callable[[], CheckCosts]
) -> tuple[dict[Job, dict[str, Any]], Callable[[Job, dict[str, Any]], None], CheckCosts]:
    """Runs finished earlier with the same settings, a function appending each new one, and the early
    checks' costs (``measure()``, or those the resumed runs were charged).

    With ``--json PATH`` every finished run is appended to ``PATH.partial.jsonl`` (first line: the
    settings, second: the measured check costs), so an interrupted command rerun with the same options
    resumes where it stopped, with the same costs.
    """
    if path is None:
        return {}, lambda job, out: None, measure()
    partial = path.with_name(path.name + ".partial.jsonl")
    done: dict[Job, dict[str, Any]] = {}
    header = json.dumps(settings, sort_keys=True, default=float)
    lines = partial.read_text().splitlines() if partial.exists() else []
    if len(lines) > 1 and lines[0] == header:
        costs = CheckCosts(**json.loads(lines[1])["check_costs"])
        for line in lines[2:]:
            rec = json.loads(line)
            done[(rec["scenario"], rec["method"], rec["seed"])] = rec["runs"]
    else:
        costs = measure()
        partial.write_text(header + "\n" + json.dumps({"check_costs": costs.as_dict()}) + "\n")

    def save(job: Job, out: dict[str, Any]) -> None:
        record = {"scenario": job[0], "method": job[1], "seed": job[2], "runs": out}
        with partial.open("a") as f:
            f.write(json.dumps(record, default=float) + "\n")

    return done, save, costs


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
    """The issue's goals and the headline per scenario, checked on these numbers (ratio of mean times to
    opt−0.5 and its 95 % CI)."""
    lines, heads = [], []
    for name, sc in results["scenarios"].items():
        pruned_late = sc["memory"] or sc["latency_at_hand"] is False
        hours, trials = [], []
        no_help: dict[str, list[str]] = {"hours": [], "trials": []}
        for method, m in sc["methods"].items():
            sp = m["speedup"]
            label = _label(method, m, results["seeds"])
            for kind, store in (("hours", hours), ("trials", trials)):
                best = sp[kind][sp[kind]["best"]]
                store.append(best["ratio_of_means"])
                if best["ratio_of_means_ci"][0] <= 1:
                    no_help[kind].append(f"{method} (vs {sp[kind]['best']})")
                ok = best["ratio_of_means_ci"][1] >= 1
                lines.append(
                    f"{name} {label}, {kind} budget: {best['ratio_of_means']:.2f}× over the best baseline "
                    f"({sp[kind]['best']}), CI upper bound {best['ratio_of_means_ci'][1]:.2f}× (goal: not "
                    f"below 1×): {'met' if ok else 'NOT met'}"
                )
            if pruned_late and sc["feasible_fraction"] <= 0.05:
                e = sp["hours"]["early"]["ratio_of_means"]
                lines.append(
                    f"{name} {label}: {e:.2f}× over early, hours budget (goal ≥ 1.5×): "
                    f"{'met' if e >= 1.5 else 'NOT met'}"
                )
        if hours:
            heads.append(
                f"{name} ({100 * sc['feasible_fraction']:.1f} % feasible, {sc['limits']}): over the best "
                f"baseline, {min(hours):.2f}×–{max(hours):.2f}× in hours, "
                f"{min(trials):.2f}×–{max(trials):.2f}× in launched trials (ratio of means across methods)"
                + "".join(
                    f"; no measurable gain in {kind} (CI reaches 1×) for " + ", ".join(v)
                    for kind, v in no_help.items()
                    if v
                )
            )
    return (
        f"Headlines ({PAPER}):\n\n"
        + "\n".join(f"- {h}" for h in heads)
        + "\n\nGoals of the issue (ratio of mean times to opt−0.5 against the best baseline never below 1× "
        "within the 95 % CI, both budgets; ≥ 1.5× over early in hours at ≤ 5 % feasible for memory and "
        "latency on a device not at hand):\n\n" + "\n".join(f"- {line}" for line in lines)
    )


def _readme(results: dict[str, Any], text: str, paths: list[Path]) -> str:
    tf, cmd, runtime = results["time_fit"], results["command"], results["runtime_s"]
    cc = results["check_costs"]
    return (
        f"## Constrained NAS on NAS-Bench-201 ({results['dataset']})\n\n"
        + (f"**Note:** {results['note']}\n\n" if results.get("note") else "")
        + f"Command: `{cmd}` ({runtime / 60:.1f} min; {machine()}, shared). "
        f"{results['seeds']} seeds per method and arm; budgets {results['budget_hours']:g} clock hours or "
        f"{results['max_trials']} launched trials per run; a trained trial costs 200 epochs x "
        f"({tf['a_s_per_epoch']:.2f} s + {tf['b_s_per_epoch_per_mflop']:.4f} s x MFLOPs) per epoch (least "
        "squares on the official per-epoch training times of the 3 tss architectures in "
        "`nats_fixture_3archs.csv`); every arm's clock adds the measured wall time of the tool's calls. "
        "Arms: *plain* (infeasible trials are trained, then discarded), *native* (Optuna "
        "`trial.set_constraint` / NNI 0 % penalty, known after training), *early* (the objective checks "
        "the constraint before training where it can, at its measured cost, and reports a rejection as "
        "`set_constraint` + PRUNED / NNI penalty; latency on a device not at hand is only known after "
        "training, so there early = native), *dnnsat* (`DnnSATSampler` / `DnnSATTuner` in its default "
        "repair mode with deduplication; its clock includes compiling its Problem and every wrapper call). "
        f"Early-check pieces measured on this machine at the start of the run: meta-device build + params "
        f"and FLOPs count {cc['meta_s']:.2f} s; trainable build {cc['build_s']:.3f} s; fresh process with "
        f"`import torch` {cc['process_s']:.2f} s; loading CIFAR-10-sized data {cc['data_s']:.2f} s; the "
        "memory check adds one training step (fitted epoch time / 196 steps, no CUDA start-up: no GPU here), "
        "latency at hand 110 forwards at the measured latency. Details and caveats: module docstrings of "
        "`benchmarks/nasbench201.py`, `benchmarks/_nb201_search.py`, `benchmarks/_nb201_data.py` and "
        "`benchmarks/_early.py`.\n\n"
        + text
        + "\n\nPlots: "
        + ", ".join(f"`benchmarks/plots/{p.name}`" for p in paths)
        + "\n"
    )


if __name__ == "__main__":
    main()
