"""Late crashes: real training where some configurations fail only at the end of the first epoch.

    python -m benchmarks.late_crash [--quick] [--seeds 8] [--time-budget 60] [--json PATH]

The digits CNN of :mod:`benchmarks.hpo` with a BatchNorm in its dense head (``build(v, head_norm=True)``),
trained for ``EPOCHS`` epochs the way PyTorch's ``DataLoader`` batches by default (``drop_last=False``):
each epoch ends with a batch of ``N_TRAIN % batch_size`` images. With 1,297 training images the batch
sizes that divide 1,296 (16, 24 and 48 of the searched ``BATCH_SIZES``) end the epoch with a single
image, and BatchNorm raises "Expected more than 1 value per channel when training" after a whole epoch
of training. Nothing a practitioner checks before training sees it (building the model, its params and
FLOPs, a training step or two all pass), so the *early* arm of the other benchmarks is the plain one here.

Arms, time-multiplexed trial by trial as in :mod:`benchmarks.hpo` (each with its own wall-clock that
counts everything it does):

* ``tpe``: ``TPESampler``; a crashed trial is told as FAIL, which is what Optuna records when the
  objective raises (its native handling of a crash; TPE then ignores the trial).
* ``tpe+dnnsat``: ``DnnSATSampler(problem, TPESampler())`` with ``problem = ds.Problem(space,
  model=build, budget=ds.Budget(dataset_size=N_TRAIN))``: the epoch's last batch is checked against the
  network's training validity rules before launch. Its clock includes building the Problem.

Metrics: wall-clock to a feasible trial with validation accuracy >= ``TARGET_ACCURACY`` (censored at the
budget), speed-up = tpe's / dnnsat's, as the ratio of mean times with a paired-bootstrap CI and the
geometric mean of per-seed ratios with a t-interval; launched trials to the target among the first
``TRIAL_BUDGET``; crashed trials and the time they wasted; dnnsat's verdict on every trial run against
whether it really crashed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import dnnsat as ds
from benchmarks import hpo
from benchmarks._report import markdown_table, update_readme

BATCH_SIZES = (16, 24, 32, 48, 64, 96, 128)
ARMS = ("tpe", "tpe+dnnsat")
SEEDS = 8
TIME_BUDGET = 60.0  # wall-clock seconds per study (arm x seed)
TARGET_ACCURACY = 0.994  # 497 of 500 validation images (without budgets 0.99 is reached within seconds)


def space() -> ds.Space:
    return hpo.space(BATCH_SIZES)


def build(v: Any) -> ds.Network:
    return hpo.build(v, head_norm=True)


def crashes(batch_size: int) -> bool:
    """Whether an epoch over ``N_TRAIN`` images ends with a single-image batch."""
    return hpo.N_TRAIN % batch_size == 1


def run_trial(problem: ds.Problem, config: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """Load data, build ``to_torch(problem, config)``, train every batch of ``EPOCHS`` epochs (the last
    one partial), evaluate. ``status``: ``ok`` or ``crash`` (BatchNorm on a one-image batch)."""
    import torch

    from dnnsat.torch import to_torch

    t0 = time.perf_counter()
    xtr, ytr, xva, yva = hpo.load_data()
    torch.manual_seed(seed)
    model = to_torch(problem, config).train()
    opt = torch.optim.Adam(model.parameters(), lr=float(config["lr"]))
    bs = int(config["batch_size"])
    steps = 0
    try:
        for _ in range(hpo.EPOCHS):
            order = torch.randperm(len(xtr))
            for s in range(0, len(xtr), bs):  # DataLoader(shuffle=True, drop_last=False)
                b = order[s : s + bs]
                opt.zero_grad(set_to_none=True)
                torch.nn.functional.cross_entropy(model(xtr[b]), ytr[b]).backward()
                opt.step()
                steps += 1
    except ValueError as err:
        if "more than 1 value per channel" not in str(err):
            raise
        return {"status": "crash", "accuracy": None, "steps": steps, "seconds": time.perf_counter() - t0}
    model.eval()
    with torch.no_grad():
        correct = sum(
            int((model(xva[s : s + bs]).argmax(1) == yva[s : s + bs]).sum()) for s in range(0, len(xva), bs)
        )
    return {
        "status": "ok",
        "accuracy": correct / len(xva),
        "steps": steps,
        "seconds": time.perf_counter() - t0,
    }


@dataclass
class Arm:
    """One study (arm x seed) with its own wall-clock and CPU clock; one history entry per trial."""

    name: str
    seed: int
    plain: ds.Problem  # the network every trial trains (no budget)
    clock: float = 0.0
    cpu: float = 0.0
    history: list[dict[str, Any]] = field(default_factory=list)
    study: Any = None
    problem: Any = None

    def start(self) -> None:
        import optuna

        from dnnsat.integrations.optuna import DnnSATSampler

        t0, c0 = time.perf_counter(), time.process_time()
        tpe = optuna.samplers.TPESampler(seed=self.seed, n_startup_trials=5)
        if self.name == "tpe+dnnsat":
            self.problem = ds.Problem(space(), model=build, budget=ds.Budget(dataset_size=hpo.N_TRAIN))
            sampler: Any = DnnSATSampler(self.problem, tpe)
        else:
            sampler = tpe
        self.study = optuna.create_study(direction="maximize", sampler=sampler)
        self.clock += time.perf_counter() - t0
        self.cpu += time.process_time() - c0

    def step(self) -> dict[str, Any]:
        import optuna

        from dnnsat.integrations.optuna import suggest

        t0, c0 = time.perf_counter(), time.process_time()
        trial = self.study.ask()
        cfg = {k: v.item() if hasattr(v, "item") else v for k, v in suggest(trial, self.plain.space).items()}
        r = run_trial(self.plain, cfg, seed=1000 * self.seed + trial.number)
        if r["status"] == "ok":
            self.study.tell(trial, r["accuracy"])
        else:
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
        self.clock += time.perf_counter() - t0
        self.cpu += time.process_time() - c0
        rec = {"config": cfg, **r, "end": self.clock, "cpu_end": self.cpu}
        self.history.append(rec)
        return rec


def run_seed(seed: int, arms: Sequence[str], time_budget: float, trials: int | None) -> list[Arm]:
    """Every arm of one seed, interleaved by clock, until each used ``time_budget`` (or ``trials``)."""

    def line(a: Arm, r: dict[str, Any]) -> str:
        batch = r["config"]["batch_size"]
        return f"seed {seed} batch={batch:<3} steps={r['steps']:<4} trial={r['seconds']:.2f}s"

    plain = ds.Problem(space(), model=build)
    runs = [Arm(name, seed, plain) for name in arms]
    hpo.interleave(runs, time_budget, trials, line)
    return runs


def summarize(results: Mapping[str, Sequence[Mapping[str, Any]]], budget: float) -> dict[str, Any]:
    """Per arm: time and trials to target, crashes, wasted share; ratios against ``tpe+dnnsat``."""
    out: dict[str, Any] = {}
    for arm, runs in results.items():
        ttt = [hpo.time_to_target(h, TARGET_ACCURACY, budget) for h in runs]
        tri = [hpo.trials_to_target(h, TARGET_ACCURACY, hpo.TRIAL_BUDGET) for h in runs]
        total = sum(h["clock"] for h in runs)
        out[arm] = {
            "time_to_target": [t for t, _, _ in ttt],
            "reached": [ok for _, _, ok in ttt],
            "trials_to_target": [n for n, _ in tri],
            "reached_in_trials": [ok for _, ok in tri],
            "trials": sum(len(h["history"]) for h in runs),
            "crashed": sum(r["status"] == "crash" for h in runs for r in h["history"]),
            "wasted_share": sum(r["seconds"] for h in runs for r in h["history"] if r["status"] != "ok")
            / total,
            "best_at_budget": [hpo.best_at(h["history"], budget) for h in runs],
        }
    if "tpe+dnnsat" in out and "tpe" in out:
        ref, base = out["tpe+dnnsat"], out["tpe"]
        out["speedup"] = {
            "time_ratio_of_means": hpo.ratio_of_means_ci(base["time_to_target"], ref["time_to_target"]),
            "time_geomean": hpo.geomean_ci(
                [a / b for a, b in zip(base["time_to_target"], ref["time_to_target"])]
            ),
            "trials_ratio_of_means": hpo.ratio_of_means_ci(base["trials_to_target"], ref["trials_to_target"]),
        }
    return out


def verdicts(problem: ds.Problem, results: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, int]:
    """dnnsat's verdict on every trial's configuration against whether the trial really crashed."""
    trials = [r for runs in results.values() for run in runs for r in run["history"]]
    feasible = [problem.check({**r["config"]}).feasible for r in trials]
    crashed = [r["status"] == "crash" for r in trials]
    return {
        "trials": len(trials),
        "false_accept": sum(f and c for f, c in zip(feasible, crashed)),
        "false_reject": sum(not f and not c for f, c in zip(feasible, crashed)),
    }


def report(summary: Mapping[str, Any], decisions: Mapping[str, int], context: Mapping[str, Any]) -> str:
    import optuna
    import torch

    c = context
    rows = []
    for arm in (a for a in ARMS if a in summary):
        s = summary[arm]
        rows.append(
            [
                arm,
                f"{sum(s['reached'])}/{len(s['reached'])}",
                f"{np.mean(s['time_to_target']):.1f}",
                f"{np.mean(s['trials_to_target']):.1f} ({sum(s['reached_in_trials'])} reached)",
                f"{np.mean(s['best_at_budget']):.4f}",
                f"{s['trials']} / {s['crashed']}",
                f"{s['wasted_share']:.1%}",
            ]
        )
    crash_batches = ", ".join(str(b) for b in BATCH_SIZES if crashes(b))
    text = (
        "## Late crashes: real training, a BatchNorm and the epoch's last batch\n\n"
        f"Command: `{c['command']}` ({c['elapsed']:.0f} s; {platform.machine()}, {os.cpu_count()} cores "
        f"shared with other processes, one torch thread; Python {platform.python_version()}, torch "
        f"{torch.__version__}, Optuna {optuna.__version__}; load average {c['load0']:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end).\n\n"
        f"The digits CNN of the HPO benchmark with a BatchNorm in its dense head, trained {hpo.EPOCHS} "
        f"epochs over every batch as a `DataLoader` gives them (`drop_last=False`): with {hpo.N_TRAIN} "
        f"training images, batch sizes {crash_batches} (of {', '.join(map(str, BATCH_SIZES))}) end each "
        "epoch with one image and BatchNorm raises after a whole epoch of training. No check before "
        "training sees it (model build, params, FLOPs, a first training step), so the best baseline is "
        "plain TPE, where the crashed trial is FAIL (Optuna's handling of an objective that raises). "
        "dnnsat: `DnnSATSampler` over `Problem(space, model=build, budget=Budget(dataset_size="
        f"{hpo.N_TRAIN}))`. {c['seeds']} seeds × {c['time_budget']:g} s of wall-clock per arm, "
        f"time-multiplexed; target: validation accuracy ≥ {TARGET_ACCURACY}; launched-trial budget: "
        f"the first {hpo.TRIAL_BUDGET} trials of each run.\n\n"
    )
    sp = summary.get("speedup")
    if sp:
        (m, lo, hi), (g, glo, ghi), (tm, tlo, thi) = (
            sp["time_ratio_of_means"],
            sp["time_geomean"],
            sp["trials_ratio_of_means"],
        )
        text += (
            f"**dnnsat vs tpe**: {m:.2f}× [{lo:.2f}, {hi:.2f}] in wall-clock to the target (ratio of mean "
            f"times, paired-bootstrap 95 % CI; geometric mean of per-seed ratios {g:.2f}× [{glo:.2f}, "
            f"{ghi:.2f}]); {tm:.2f}× [{tlo:.2f}, {thi:.2f}] in launched trials.\n\n"
        )
    header = [
        "arm",
        "reached target",
        "time to target, mean (s)",
        f"trials to target, mean (≤ {hpo.TRIAL_BUDGET})",
        "best acc @ budget (mean)",
        "trials / crashed",
        "wasted time share",
    ]
    d = decisions
    return (
        text
        + markdown_table(header, rows)
        + f"\n\ndnnsat's verdict on all {d['trials']} trials run (both arms) against their real outcome: "
        f"{d['false_accept']} false accepts (accepted, crashed), {d['false_reject']} false rejects.\n"
    )


def build_parser() -> argparse.ArgumentParser:
    return hpo.study_parser(__doc__ or "", SEEDS, TIME_BUDGET, "2 seeds x 15 s (< 3 min)")


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:

    args, write, command = hpo.parse_study_args(build_parser(), argv, "late_crash", seeds=2, time_budget=15.0)
    hpo.one_quiet_thread()
    load0, t0 = os.getloadavg()[0], time.perf_counter()
    results: dict[str, list[dict[str, Any]]] = {a: [] for a in ARMS}
    for seed in range(args.seeds):
        print(f"seed {seed}: {', '.join(ARMS)} for {args.time_budget:g} s each ...", flush=True)
        for a in run_seed(seed, ARMS, args.time_budget, args.trials):
            results[a.name].append({"seed": seed, "clock": a.clock, "cpu": a.cpu, "history": a.history})
    summary = summarize(results, args.time_budget)
    decisions = verdicts(
        ds.Problem(space(), model=build, budget=ds.Budget(dataset_size=hpo.N_TRAIN)), results
    )
    context = {
        "command": command,
        "elapsed": time.perf_counter() - t0,
        "load0": load0,
        "seeds": args.seeds,
        "time_budget": args.time_budget,
    }
    text = report(summary, decisions, context)
    print()
    print(text)
    if write:
        update_readme("late_crash", text)
    out = {"context": context, "summary": summary, "decisions": decisions, "results": results}
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=str))
    return out


if __name__ == "__main__":
    main()
