"""DnnSATSampler under Optuna's thread parallelism: ``study.optimize(n_jobs=4)`` against ``n_jobs=1``.

    python -m benchmarks.optuna_threads [--family resnet] [--memory 8GiB] [--trials 200] [--seeds 3]
                                        [--train-ms 20] [--jobs 4]

A zoo model with a GPU-memory budget (``ds.zoo.<family>(budget=ds.Budget(memory=...))``), a RandomSampler
(every value is an independent proposal, so the wrapper checks each one and repairs the infeasible
ones), and an objective that "trains" for ``--train-ms`` (a sleep: threads overlap their training as
real trials do). For each seed, one study with ``n_jobs=1`` and one with ``n_jobs=N`` (same seed), in
the same process; the pruned space is prepared before the clock starts. Reported per mode:
- wrapper overhead per trial (time in DnnSATSampler minus the base sampler's own calls; p50, p90):
  with threads it includes waiting for the Problem's lock and for the interpreter (GIL);
- ratio of the ``n_jobs=N`` to the ``n_jobs=1`` median (goal <= 1.5x) with a bootstrap 90% interval;
- wall time of the study, infeasible trials (must be 0), dead ends and failed trials (must be 0).
Writes the "optuna_threads" section of benchmarks/README.md on the default run (or --write-readme).
"""

from __future__ import annotations

import argparse
import os
import platform
import time
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import optuna
from optuna.samplers import RandomSampler
from optuna.trial import TrialState

import dnnsat as ds
from benchmarks._report import add_write_options, fmt_time, markdown_table, update_readme, writes_readme
from dnnsat.integrations.optuna import DnnSATSampler, suggest


def run_one(problem: ds.Problem, seed: int, trials: int, jobs: int, train_s: float) -> dict[str, Any]:
    """One study: per-trial wrapper seconds, wall seconds and the feasibility counts."""
    sampler = DnnSATSampler(problem, RandomSampler(seed=seed))
    study = optuna.create_study(sampler=sampler)
    sampler.prepare(study)  # one-off pruning: not part of any trial

    def objective(trial: optuna.Trial) -> float:
        cfg = suggest(trial, problem)
        time.sleep(train_s)
        return float(problem.costs(cfg)["memory"])

    t0 = time.perf_counter()
    study.optimize(objective, n_trials=trials, n_jobs=jobs, catch=(Exception,))
    wall = time.perf_counter() - t0
    names = set(problem.space.names)
    done = [t for t in study.trials if t.state == TrialState.COMPLETE]
    infeasible = sum(
        not problem.check({k: v for k, v in t.params.items() if k in names}).feasible for t in done
    )
    return {
        "wrapper": np.array([w for _, w, _ in sampler.stats.overhead]),
        "wall": wall,
        "infeasible": infeasible,
        "failed": len(study.trials) - len(done),
        "dead_ends": sampler.stats.dead_ends,
        "repaired": sampler.stats.repaired,
        "proposals": sampler.stats.proposals,
    }


def _ratio_ci(a: np.ndarray, b: np.ndarray, seed: int = 0, n: int = 2000) -> tuple[float, float]:
    """Bootstrap 90% interval of median(a) / median(b)."""
    rng = np.random.default_rng(seed)
    r = [np.median(rng.choice(a, a.size)) / np.median(rng.choice(b, b.size)) for _ in range(n)]
    return float(np.percentile(r, 5)), float(np.percentile(r, 95))


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", default="resnet", help="dnnsat.zoo model family")
    ap.add_argument("--memory", default="8GiB", help="training-memory budget")
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=4, help="threads of the parallel run")
    ap.add_argument("--train-ms", type=float, default=20.0, help="simulated training time per trial")
    add_write_options(ap)
    return ap


def main(argv: Sequence[str] | None = None) -> None:
    ap = build_parser()
    args = ap.parse_args(argv)
    write = writes_readme(ap, args)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore")
    problem = getattr(ds.zoo, args.family)(budget=ds.Budget(memory=args.memory))
    load = os.getloadavg()
    t_start = time.perf_counter()
    runs: dict[int, list[dict[str, Any]]] = {1: [], args.jobs: []}
    for seed in range(args.seeds):
        for jobs in runs:
            runs[jobs].append(run_one(problem, seed, args.trials, jobs, args.train_ms / 1e3))
            r = runs[jobs][-1]
            print(
                f"seed {seed} n_jobs={jobs}: {r['wall']:.1f} s, infeasible {r['infeasible']}, "
                f"failed {r['failed']}, dead ends {r['dead_ends']}, repaired {r['repaired']}",
                flush=True,
            )
    per_trial = {jobs: np.concatenate([r["wrapper"] for r in rs]) for jobs, rs in runs.items()}
    base = float(np.median(per_trial[1]))
    header = [
        "n_jobs",
        "wrapper p50",
        "wrapper p90",
        "ratio to n_jobs=1 (90% CI)",
        "study wall (mean)",
        "repaired / proposals",
        "infeasible",
        "dead ends",
        "failed",
    ]
    rows = []
    for jobs, rs in runs.items():
        w = per_trial[jobs]
        lo, hi = _ratio_ci(w, per_trial[1])
        rows.append(
            [
                jobs,
                fmt_time(float(np.percentile(w, 50))),
                fmt_time(float(np.percentile(w, 90))),
                f"{np.median(w) / base:.2f}x ({lo:.2f}-{hi:.2f})",
                fmt_time(float(np.mean([r["wall"] for r in rs]))),
                f"{sum(r['repaired'] for r in rs)} / {sum(r['proposals'] for r in rs)}",
                sum(r["infeasible"] for r in rs),
                sum(r["dead_ends"] for r in rs),
                sum(r["failed"] for r in rs),
            ]
        )
    table = markdown_table(header, rows)
    print()
    print(table)
    if write:
        update_readme(
            "optuna_threads",
            "## Optuna: DnnSATSampler with `study.optimize(n_jobs=4)`\n\n"
            f"Command: `python -m benchmarks.optuna_threads` ({args.family} with a {args.memory} "
            f"training-memory budget, RandomSampler, {args.trials} trials x {args.seeds} seeds per row, "
            f"{args.train_ms:g} ms of simulated training per trial; {time.perf_counter() - t_start:.0f} s; "
            f"{platform.machine()}, "
            f"{os.cpu_count()} cores, Python {platform.python_version()}, Optuna {optuna.__version__}; load "
            f"average {load[0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end).\n\n"
            "*wrapper*: seconds per trial spent in DnnSATSampler minus the base sampler's own calls (with "
            "threads it includes waiting for the Problem's lock and the GIL); the ratio compares medians "
            "with the `n_jobs=1` run of the same seeds (goal <= 1.5x). Every trial must be feasible, with "
            "no dead end and no failed trial.\n\n" + table,
        )
        print("\nupdated benchmarks/README.md")


if __name__ == "__main__":
    main()
