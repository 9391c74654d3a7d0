"""Overhead and proposal acceptance of DnnSATSampler on the reference problem (synthetic ResNet).

    python -m benchmarks.optuna_overhead [--trials 200] [--seeds 3]

For each budget (default limits, tight limits) and base sampler (TPE, random), runs the wrapped sampler
and the bare sampler with the same seeds, in the same process, and reports per trial:
- wrapper overhead: time spent in DnnSATSampler excluding the base sampler's own calls (p50, p90);
- base sampler time inside the wrapped run, and the bare sampler's time per trial (its calls only);
- acceptance: share of proposed parameter values kept unchanged, mean repair distance (positions in
  the parameter's value list), share of relative samples repaired;
- infeasible trials (must be 0 wrapped; the bare sampler's count shows what the wrapper saved).
The one-off pruning of the first trial is reported apart (it is computed once per study).
Writes the table to the "optuna" section of benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import optuna
from optuna.samplers import BaseSampler, RandomSampler, TPESampler

from benchmarks._report import add_write_options, markdown_table, update_readme, writes_readme
from dnnsat.integrations.optuna import DnnSATSampler, suggest
from dnnsat.zoo import synthetic_resnet_problem


class _Timed(BaseSampler):
    """Pass-through that times every call of a sampler, per trial (for the bare baseline)."""

    def __init__(self, base: BaseSampler) -> None:
        self._base = base
        self.per_trial: dict[int, float] = {}

    def _t(self, trial: Any, fn: Callable[..., Any], *args: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.per_trial[trial.number] = self.per_trial.get(trial.number, 0.0) + time.perf_counter() - t0

    def reseed_rng(self) -> None:
        self._base.reseed_rng()

    def before_trial(self, study: Any, trial: Any) -> None:
        self._t(trial, self._base.before_trial, study, trial)

    def infer_relative_search_space(self, study: Any, trial: Any) -> Any:
        return self._t(trial, self._base.infer_relative_search_space, study, trial)

    def sample_relative(self, study: Any, trial: Any, search_space: Any) -> Any:
        return self._t(trial, self._base.sample_relative, study, trial, search_space)

    def sample_independent(self, study: Any, trial: Any, name: str, dist: Any) -> Any:
        return self._t(trial, self._base.sample_independent, study, trial, name, dist)

    def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
        self._t(trial, self._base.after_trial, study, trial, state, values)


def _objective(problem: Any, infeasible: list[int]) -> Callable[[optuna.Trial], float]:
    def objective(trial: optuna.Trial) -> float:
        cfg = suggest(trial, problem)
        verdict = problem.check(cfg)
        infeasible[0] += not verdict.feasible
        return -float(verdict.costs["flops"]) if verdict.feasible else 0.0  # big feasible networks

    return objective


def run_one(problem: Any, make_base: Callable[[int], BaseSampler], seed: int, trials: int) -> dict[str, Any]:
    wrapped = DnnSATSampler(problem, make_base(seed))
    bad = [0]
    optuna.create_study(sampler=wrapped).optimize(_objective(problem, bad), n_trials=trials)
    over = sorted(wrapped.stats.overhead, key=lambda r: r[0])
    first, rest = over[0], over[1:]
    bare = _Timed(make_base(seed))
    bare_bad = [0]
    optuna.create_study(sampler=bare).optimize(_objective(problem, bare_bad), n_trials=trials)
    s = wrapped.stats
    return {
        "wrapper": np.array([r[1] for r in rest]),
        "base": np.array([r[2] for r in rest]),
        "bare": np.array([bare.per_trial[k] for k in sorted(bare.per_trial)][1:]),
        "first": first[1],
        "acceptance": s.acceptance,
        "steps": s.mean_repair_steps,
        "relative": (s.relative_repaired / s.relative_samples) if s.relative_samples else float("nan"),
        "infeasible": bad[0],
        "bare_infeasible": bare_bad[0],
    }


def _ms(x: float) -> str:
    return f"{x * 1e3:.2f}"


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="30 trials x 1 seed (CI smoke run)")
    add_write_options(ap)
    return ap


def main(argv: Sequence[str] | None = None) -> None:
    ap = build_parser()
    args = ap.parse_args(argv)
    write = writes_readme(ap, args)
    if args.quick:
        args.trials, args.seeds = 30, 1
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore")
    budgets = {
        "default (2e12 FLOPs, 20M params)": lambda: synthetic_resnet_problem(),
        "tight (1e11 FLOPs, 2M params)": lambda: synthetic_resnet_problem(flops_limit=1e11, params_limit=2e6),
    }
    bases: dict[str, Callable[[int], BaseSampler]] = {
        "TPE": lambda seed: TPESampler(seed=seed),
        "Random": lambda seed: RandomSampler(seed=seed),
    }
    header = [
        "budget",
        "base",
        "wrapper p50 ms",
        "wrapper p90 ms",
        "base in wrapped p50 ms",
        "bare p50 ms",
        "first trial (prune) ms",
        "values kept",
        "mean repair dist",
        "relative repaired",
        "infeasible wrapped / bare",
    ]
    rows = []
    load = os.getloadavg()
    t_start = time.perf_counter()
    for bname, make_problem in budgets.items():
        for sname, make_base in bases.items():
            runs = [run_one(make_problem(), make_base, seed, args.trials) for seed in range(args.seeds)]
            cat = {k: np.concatenate([r[k] for r in runs]) for k in ("wrapper", "base", "bare")}
            rel = [r["relative"] for r in runs if not np.isnan(r["relative"])]
            row = [
                bname,
                sname,
                _ms(float(np.percentile(cat["wrapper"], 50))),
                _ms(float(np.percentile(cat["wrapper"], 90))),
                _ms(float(np.percentile(cat["base"], 50))),
                _ms(float(np.percentile(cat["bare"], 50))),
                _ms(float(np.median([r["first"] for r in runs]))),
                f"{np.mean([r['acceptance'] for r in runs]):.1%}",
                f"{np.mean([r['steps'] for r in runs]):.2f}",
                f"{np.mean(rel):.1%}" if rel else "-",
                f"{sum(r['infeasible'] for r in runs)} / {sum(r['bare_infeasible'] for r in runs)}",
            ]
            rows.append(row)
            print("  ".join(f"{h}={c}" for h, c in zip(header, row)), flush=True)
    table = markdown_table(header, rows)
    print()
    print(table)
    if write:
        cmd = "python -m benchmarks.optuna_overhead" + (
            f" --trials {args.trials} --seeds {args.seeds}" if (args.trials, args.seeds) != (200, 3) else ""
        )
        update_readme(
            "optuna",
            "## Optuna: DnnSATSampler overhead on the reference problem\n\n"
            f"Command: `{cmd}` ({args.trials} trials x {args.seeds} seeds per row; "
            f"{time.perf_counter() - t_start:.0f} s; {platform.machine()}, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}, Optuna {optuna.__version__}; load average "
            f"{load[0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end — the machine is shared, "
            "compare columns of one row rather than absolute times).\n\n"
            "Per-trial times exclude the first trial (its one-off pruning is shown apart). *wrapper* is the "
            "time spent in DnnSATSampler minus the base sampler's own calls; *bare* is the same base sampler "
            "unwrapped, same seed, same run. *values kept*: share of the base sampler's proposed values "
            "(independent and relative) returned unchanged; *mean repair dist*: positions moved in the "
            "parameter's value list per repaired value; *relative repaired*: share of relative samples "
            "(multivariate TPE) that needed a repair. The objective prefers large networks (max FLOPs).\n\n"
            + table,
        )
        print("\nupdated benchmarks/README.md")


if __name__ == "__main__":
    main()
