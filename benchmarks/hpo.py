"""Real-training HPO on this CPU: Optuna TPE with and without dnnsat under memory and latency budgets.

    python -m benchmarks.hpo [--quick] [--seeds 6] [--time-budget 40] [--trials N] [--json PATH]

A small CNN is trained on scikit-learn's digits (8x8 grey images, 10 classes; a fixed split of 1,297
training and 500 validation images). Its architecture is described once with dnnsat's ``Network``
builder over a ``Space`` (first-stage width ``w1`` and depth, kernel, second-stage width ``w2``, dense
width ``fc``, batch size, learning rate) and the module that trains is ``dnnsat.torch.to_torch`` of that
same network. Every trial trains ``EPOCHS`` epochs with Adam, one thread (``torch.set_num_threads(1)``).

Budgets (constants below; about 40 % of the space is infeasible):

* **memory**, enforced for real as a GPU would: the real peak tensor memory of the trial's first two
  training steps (the second is the first with Adam's state allocated before the forward, i.e. the
  steady-state peak) is measured with ``dnnsat.torch.track_memory`` (PyTorch's allocator events). A
  trial over ``MEMORY_BUDGET`` then fails with a simulated out-of-memory error: the memory is real and
  measured, only the OOM is raised by this harness (this CPU has far more memory). The trial's time
  until then (loading the data, building the model, the two tracked steps) is wasted.
* **latency** on this CPU: after training, the eval-mode forward of one batch of ``DEPLOY_BATCH``
  images (the deployment batch, independent of the training batch size) is timed: warm-up, median of
  repeats, in thread CPU time (with one torch thread the forward runs in the calling thread; wall-clock
  on this shared machine is inflated 1.3-2x by other processes). A model slower than ``LATENCY_BUDGET``
  is discarded: its whole training time is wasted.

Arms, time-multiplexed (one trial at a time, always of the arm that has used the least wall-clock so far,
so load from other processes hits every arm alike), each with its own clock that counts everything the
arm does: sampler and dnnsat time included (the dnnsat arm's clock also includes fitting its CPU profile,
building its Problem and the one-off pruning):

* ``tpe``: plain ``TPESampler``; an infeasible trial is marked FAIL (TPE ignores it).
* ``tpe+constraints``: Optuna's native handling: the measured memory and latency excess are recorded with
  ``trial.set_constraint`` (TPE in Optuna 5 reads them); the trial completes with its accuracy (0 after an
  OOM).
* ``tpe+early``: ``tpe+constraints`` with the objective checking what it can before training, as a
  practitioner would with the device at hand: the untrained model's latency is timed first (warm-up, median
  of repeats) and a too-slow model is stopped there; an OOM at the first steps and such a rejection are
  reported as ``set_constraint`` + ``TrialState.PRUNED``.
* ``tpe+dnnsat``: the ``tpe+constraints`` set-up with ``DnnSATSampler(problem, TPESampler(...))``, so the
  two differ only by dnnsat's pruning before launch; ``problem = make_problem(...)``: ``ds.Problem(space,
  model=build, budget=ds.Budget(memory=..., device=profile, mode="train", optimizer="adam"))`` plus the
  ``latency`` of the same network built at the deployment batch (``Budget(latency=..., device=profile,
  mode="inference")``). ``profile`` is this CPU: ``dnnsat.torch.calibrate`` refined by ``fit_device`` on the
  latencies of the fixed ``CALIBRATION`` configurations (measured at the start of every run and charged to
  this arm's clock); each limit is divided by a safety margin, the largest measured / estimated ratio over
  those of the same configurations that measure at least a quarter of the limit. A trial dnnsat wrongly
  accepts fails (wasted time) and its measured excess is recorded as in ``tpe+constraints``.

Metrics per arm over seeds: wall-clock time to reach ``TARGET_ACCURACY`` (validation accuracy of a
feasible trial; runs that never reach it are censored at the time budget and counted), speed-up =
time-to-target of the other arm / dnnsat's (paired by seed; mean and 95 % t-interval; censored runs make
it a bound), the same in CPU seconds, best feasible accuracy at the time budget, wasted share (time spent
in infeasible trials / total); against the best baseline (least mean time to target), the ratio of mean
times with a paired-bootstrap CI. Second budget kind: launched trials to the target among each run's first
``TRIAL_BUDGET`` (a rejected trial counts as launched). A separate validation sample of random
configurations measures real memory and latency (untrained models: the two tracked training steps and the
timed forward) against dnnsat's decisions: feasible fraction, false accepts and false rejects; the same is
counted over every trial run."""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import dnnsat as ds
from benchmarks._report import add_write_options, markdown_table, update_readme, writes_readme

EPOCHS = 4
N_TRAIN = 1297  # the rest of the 1,797 digits (500) is the validation set
MEMORY_BUDGET = 12 * 2**20  # bytes: peak tensor memory of a training step
LATENCY_BUDGET = 0.006  # seconds: eval forward of one DEPLOY_BATCH batch on one thread (CPU time)
DEPLOY_BATCH = 64  # images per inference batch in deployment (independent of the training batch)
TARGET_ACCURACY = 0.99  # validation accuracy (495 of 500 images)
TIME_BUDGET = 40.0  # wall-clock seconds per study (arm x seed)
LATENCY_WARMUP, LATENCY_REPEATS = 2, 9
PLOTS = Path(__file__).with_name("plots")
ARMS = ("tpe", "tpe+constraints", "tpe+early", "tpe+dnnsat")
BASELINES = ARMS[:3]
TRIAL_BUDGET = 20  # launched trials: the second budget kind (read from the first trials of each run)
# fixed configurations the CPU profile is fitted on (never drawn for the validation sample below)
CALIBRATION = [
    {"batch_size": 16, "w1": 8, "w2": 16, "depth": 1, "kernel": 3, "fc": 32},
    {"batch_size": 64, "w1": 32, "w2": 64, "depth": 2, "kernel": 5, "fc": 128},
    {"batch_size": 256, "w1": 16, "w2": 128, "depth": 1, "kernel": 7, "fc": 64},
    {"batch_size": 128, "w1": 64, "w2": 32, "depth": 3, "kernel": 3, "fc": 256},
    {"batch_size": 32, "w1": 56, "w2": 112, "depth": 3, "kernel": 7, "fc": 256},
    {"batch_size": 256, "w1": 40, "w2": 48, "depth": 2, "kernel": 5, "fc": 32},
]


def space(batch_sizes: Sequence[int] = (16, 32, 64, 128, 256)) -> ds.Space:
    """The searched hyperparameters (lr is continuous and unconstrained: it passes through dnnsat)."""
    return ds.Space(
        {
            "batch_size": ds.Categorical(list(batch_sizes)),
            "w1": ds.Int(8, 64, step=8),
            "depth": ds.Int(1, 3),
            "kernel": ds.Categorical([3, 5, 7]),
            "w2": ds.Int(16, 128, step=16),
            "fc": ds.Categorical([32, 64, 128, 256]),
            "lr": ds.Float(5e-4, 2e-2, log=True),
        }
    )


def build(v: Any, batch: Any = None, head_norm: bool = False) -> ds.Network:
    """``depth`` x [conv(w1, kernel, same) + BN + ReLU], maxpool, conv3x3(w2) + BN + ReLU, maxpool, 2 dense
    (with ``head_norm``, a BatchNorm after the first); input ``(batch, 1, 8, 8)`` with ``batch`` = the
    training ``batch_size`` unless given."""
    net = ds.Network("digits_cnn")
    x = net.input((v.batch_size if batch is None else batch, 1, 8, 8))

    def conv(y: Any, width: Any, kernel: Any) -> Any:
        return net.relu(net.batchnorm(net.conv2d(y, width, kernel, padding="same", bias=False)))

    x = conv(x, v.w1, v.kernel)
    x = net.maxpool2d(net.repeat(v.depth - 1, 2, lambda i, y: conv(y, v.w1, v.kernel), x), 2)
    x = net.maxpool2d(conv(x, v.w2, 3), 2)
    x = net.linear(net.flatten(x), v.fc)
    x = net.relu(net.batchnorm(x) if head_norm else x)
    return net.output(net.linear(x, 10))


def deployed(v: Any) -> ds.Network:
    """The same network at the deployment batch (what the latency budget is about)."""
    return build(v, batch=DEPLOY_BATCH)


# ------------------------------------------------------------------------------------------------
# real training and measurements


def load_data() -> tuple[Any, Any, Any, Any]:
    """``(x_train, y_train, x_val, y_val)``: digits scaled to [0, 1], fixed permutation (seed 0)."""
    import torch
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    xt = torch.tensor(x / 16.0, dtype=torch.float32).reshape(-1, 1, 8, 8)
    yt = torch.tensor(y, dtype=torch.long)
    perm = torch.randperm(len(xt), generator=torch.Generator().manual_seed(0))
    tr, va = perm[:N_TRAIN], perm[N_TRAIN:]
    return xt[tr], yt[tr], xt[va], yt[va]


def tracked_peak(model: Any, opt: Any, xs: Sequence[Any], ys: Sequence[Any]) -> int:
    """Real peak tensor bytes over training steps on the batches ``xs``/``ys`` (weights included)."""
    import torch

    from dnnsat.torch import track_memory

    with track_memory(model, opt, *xs, *ys) as mt:
        for x, y in zip(xs, ys):
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    return int(mt.peak)


def cpu_latency(model: Any, x: Any) -> float:
    """Median thread CPU seconds of an eval-mode forward of the batch ``x`` (after warm-up).

    Thread CPU time rather than wall-clock: with one torch thread the forward runs in this thread, and
    its CPU time is what the wall-clock latency is on an idle core; on this shared machine the
    wall-clock reading is inflated by 1.3-2x by other processes.
    """
    from dnnsat.torch import measure_latency

    return measure_latency(model, (x,), repeats=LATENCY_REPEATS, warmup=LATENCY_WARMUP, clock="thread")


@dataclass
class TrialResult:
    """One real trial. ``status``: ``ok``, ``oom`` (over the memory budget), ``slow`` (over latency after
    training) or ``rejected`` (over latency measured on the untrained model, before training)."""

    config: dict[str, Any]
    status: str
    accuracy: float | None  # validation accuracy (None after an OOM)
    memory: int  # measured peak bytes of the first two training steps
    latency: float | None  # measured seconds (None after an OOM)
    seconds: float  # wall-clock of the whole trial


def run_trial(problem: ds.Problem, config: Mapping[str, Any], seed: int, early: bool = False) -> TrialResult:
    """Load data, build ``to_torch(problem, config)``, train ``EPOCHS`` epochs, measure; enforce budgets.

    With ``early``, the objective first times the untrained model (the device is at hand) and stops
    there when it is over the latency budget (the memory check at the first steps comes next, as always).
    """
    import torch

    from dnnsat.torch import to_torch

    t0 = time.perf_counter()
    xtr, ytr, xva, yva = load_data()  # set-up, as a real trial pays it
    torch.manual_seed(seed)
    model = to_torch(problem, config)
    if early:
        model.eval()
        latency = cpu_latency(model, xva[:DEPLOY_BATCH])
        if latency > LATENCY_BUDGET:
            return TrialResult(dict(config), "rejected", None, 0, latency, time.perf_counter() - t0)
    opt = torch.optim.Adam(model.parameters(), lr=float(config["lr"]))
    bs = int(config["batch_size"])
    model.train()
    epochs = []  # one permutation per epoch, cut into full batches
    for _ in range(EPOCHS):
        order = torch.randperm(len(xtr))
        epochs.append([order[s : s + bs] for s in range(0, len(xtr) - bs + 1, bs)])
    first = epochs[0][:2]
    peak = tracked_peak(model, opt, [xtr[b] for b in first], [ytr[b] for b in first])
    if peak > MEMORY_BUDGET:  # a GPU would raise "CUDA out of memory" here
        return TrialResult(dict(config), "oom", None, peak, None, time.perf_counter() - t0)
    for epoch, batches in enumerate(epochs):
        for b in batches[2:] if epoch == 0 else batches:
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(model(xtr[b]), ytr[b]).backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        correct = sum(
            int((model(xva[s : s + bs]).argmax(1) == yva[s : s + bs]).sum()) for s in range(0, len(xva), bs)
        )
    latency = cpu_latency(model, xva[:DEPLOY_BATCH])
    status = "ok" if latency <= LATENCY_BUDGET else "slow"
    return TrialResult(dict(config), status, correct / len(xva), peak, latency, time.perf_counter() - t0)


def measure_untrained(problem: ds.Problem, config: Mapping[str, Any]) -> tuple[int, float]:
    """``(peak bytes of two training steps, inference latency s)`` of an untrained model (validation)."""
    import torch

    from dnnsat.torch import to_torch

    xtr, ytr, _, _ = load_data()
    torch.manual_seed(0)
    model = to_torch(problem, config)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    bs = int(config["batch_size"])
    model.train()
    peak = tracked_peak(model, opt, [xtr[:bs], xtr[bs : 2 * bs]], [ytr[:bs], ytr[bs : 2 * bs]])
    return peak, cpu_latency(model, xtr[:DEPLOY_BATCH])


# ------------------------------------------------------------------------------------------------
# dnnsat's side


@dataclass
class Calibration:
    """dnnsat's view of this CPU, from the fixed CALIBRATION configurations only.

    ``profile``: ``dnnsat.torch.calibrate`` (micro-benchmarks, one thread) refined by ``fit_device`` on
    the measured latencies; ``memory_factor`` / ``latency_factor``: the safety margins dnnsat's limits
    are divided by (:func:`_margin`).
    """

    profile: Any
    memory_factor: float = 1.0
    latency_factor: float = 1.0
    seconds: float = 0.0


def calibrate_cpu() -> Calibration:
    """Measure the CALIBRATION configurations, fit the CPU profile and the safety margins."""
    from dnnsat.cost import fit_device
    from dnnsat.torch import calibrate

    t0 = time.perf_counter()
    micro = calibrate("cpu", threads=1, quick=True, name="this-cpu-1thread")
    sp = space()
    train_net = ds.Problem(sp, model=build)
    configs = [{**cfg, "lr": 1e-3} for cfg in CALIBRATION]
    measured = [measure_untrained(train_net, cfg) for cfg in configs]
    samples = [((deployed(sp.vars), cfg), latency) for cfg, (_, latency) in zip(configs, measured)]
    profile = fit_device(micro, samples, space=sp, name="this-cpu-1thread-fitted")
    raw = make_problem(Calibration(profile))
    est = [raw.costs(cfg) for cfg in configs]
    mem = _margin([m for m, _ in measured], [e["memory"] for e in est], MEMORY_BUDGET)
    lat = _margin([t for _, t in measured], [e["latency"] for e in est], LATENCY_BUDGET)
    return Calibration(profile, mem, lat, time.perf_counter() - t0)


def _margin(measured: Sequence[float], estimated: Sequence[float], limit: float) -> float:
    """Largest measured / estimated ratio (at least 1) over the calibration configurations whose
    measurement is at least a quarter of ``limit``: near the limit the relative error decides; far
    below it a constant offset (e.g. 0.3 MiB on a 0.5 MiB network) inflates the ratio but not the risk."""
    ratios = [m / e for m, e in zip(measured, estimated) if m >= limit / 4]
    return max([1.0, *ratios])


def make_problem(cal: Calibration) -> ds.Problem:
    """The problem dnnsat decides with, on ``cal.profile``: the memory of a training step (Adam, the
    training batch) and the inference latency of the same network at the deployment batch (cost
    ``latency``), each limit divided by its calibrated safety factor."""
    train = ds.Budget(
        memory=MEMORY_BUDGET / cal.memory_factor, device=cal.profile, mode="train", optimizer="adam"
    )
    problem = ds.Problem(space(), model=build, budget=train)
    limit = LATENCY_BUDGET / cal.latency_factor
    serve = ds.Budget(latency=limit, device=cal.profile, mode="inference")
    latency = ds.Problem(problem.space, model=deployed, budget=serve).cost_exprs["latency"]
    problem.add_cost("latency", latency)  # replaces the latency at the training batch
    return problem.require(latency <= limit, name="latency")


def random_configs(n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` distinct configurations drawn uniformly from the finite part of the space (not CALIBRATION)."""
    sp = space()
    rng = np.random.default_rng(seed)
    skip = {tuple(sorted(c.items())) for c in CALIBRATION}
    out: list[dict[str, Any]] = []
    seen: set[tuple[Any, ...]] = set()
    while len(out) < n:
        cfg = {k: sp[k].values()[rng.integers(len(sp[k].values()))] for k in sp.names if k != "lr"}
        cfg = {k: v.item() if hasattr(v, "item") else v for k, v in cfg.items()}
        key = tuple(sorted(cfg.items()))
        if key in skip or key in seen:
            continue
        seen.add(key)
        out.append(cfg)
    return out


def validate(problem: ds.Problem, cal: Calibration, n: int, seed: int = 1) -> dict[str, Any]:
    """dnnsat's memory/latency decisions against real measurements on ``n`` random configurations."""
    rows = []
    for cfg in random_configs(n, seed):
        full = {**cfg, "lr": 1e-3}
        mem, lat = measure_untrained(problem, full)
        costs = problem.costs(full)
        rows.append(
            {
                "config": cfg,
                "memory": mem,
                "latency": lat,
                "memory_est": float(costs["memory"]),
                "latency_est": float(costs["latency"]),
                "feasible_est": bool(problem.check(full).feasible),
            }
        )
    return {"rows": rows, **decision_stats(rows, cal)}


def decision_stats(rows: Sequence[Mapping[str, Any]], cal: Calibration) -> dict[str, Any]:
    """Per budget: real infeasible share, dnnsat's false accepts / rejects with its calibrated margin
    (as used) and without (``*_raw``: the estimate against the real limit), median / max |error|."""
    out: dict[str, Any] = {"n": len(rows)}
    for key, limit, factor in (
        ("memory", MEMORY_BUDGET, cal.memory_factor),
        ("latency", LATENCY_BUDGET, cal.latency_factor),
    ):
        real = np.array([r[key] > limit for r in rows])
        est = np.array([r[f"{key}_est"] > limit / factor for r in rows])
        raw = np.array([r[f"{key}_est"] > limit for r in rows])
        err = np.array([abs(r[f"{key}_est"] / r[key] - 1) for r in rows])
        out[key] = {
            "real_infeasible": float(real.mean()),
            "est_infeasible": float(est.mean()),
            "false_accept": int((real & ~est).sum()),
            "false_reject": int((~real & est).sum()),
            "false_accept_raw": int((real & ~raw).sum()),
            "false_reject_raw": int((~real & raw).sum()),
            "median_abs_error": float(np.median(err)),
            "max_abs_error": float(err.max()),
        }
    real_ok = np.array([r["memory"] <= MEMORY_BUDGET and r["latency"] <= LATENCY_BUDGET for r in rows])
    est_ok = np.array([r["feasible_est"] for r in rows])
    out["real_feasible"] = float(real_ok.mean())
    out["est_feasible"] = float(est_ok.mean())
    out["false_accept"] = int((~real_ok & est_ok).sum())
    out["false_reject"] = int((real_ok & ~est_ok).sum())
    return out


# ------------------------------------------------------------------------------------------------
# the studies


@dataclass
class Arm:
    """One study (arm x seed) with its own wall-clock; ``history`` holds one dict per finished trial."""

    name: str
    seed: int
    calibration: Calibration
    clock: float = 0.0  # wall-clock seconds
    cpu: float = 0.0  # CPU seconds of this process over the same spans
    history: list[dict[str, Any]] = field(default_factory=list)
    problem: Any = None
    study: Any = None

    def start(self) -> None:
        import optuna

        from dnnsat.integrations.optuna import DnnSATSampler

        t0, c0 = time.perf_counter(), time.process_time()
        self.problem = make_problem(self.calibration)
        tpe = optuna.samplers.TPESampler(seed=self.seed, n_startup_trials=5)
        sampler = DnnSATSampler(self.problem, tpe) if self.name == "tpe+dnnsat" else tpe
        self.study = optuna.create_study(direction="maximize", sampler=sampler)
        if self.name == "tpe+dnnsat":  # its Problem, the one-off pruning and the CPU profile it needs
            self.clock += time.perf_counter() - t0 + self.calibration.seconds
            self.cpu += time.process_time() - c0 + self.calibration.seconds

    def step(self) -> dict[str, Any]:
        """Ask, train for real, tell; advance the clock by the wall time of all of it."""
        import optuna

        from dnnsat.integrations.optuna import suggest

        t0, c0 = time.perf_counter(), time.process_time()
        trial = self.study.ask()
        cfg = suggest(trial, self.problem.space)
        cfg = {k: v.item() if hasattr(v, "item") else v for k, v in cfg.items()}
        early = self.name == "tpe+early"
        r = run_trial(self.problem, cfg, seed=1000 * self.seed + trial.number, early=early)
        if self.name != "tpe":
            # Optuna 5: TPE reads trial constraints (<= 0 feasible) set during the trial; in the dnnsat
            # arm these measured values take precedence over the estimates DnnSATSampler records
            trial.set_constraint("memory", r.memory / MEMORY_BUDGET - 1)
            trial.set_constraint("latency", 0.0 if r.latency is None else r.latency / LATENCY_BUDGET - 1)
            if early and r.status in ("oom", "rejected"):  # stopped before training: pruned
                self.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            else:
                self.study.tell(trial, r.accuracy or 0.0)
        elif r.status == "ok":
            self.study.tell(trial, r.accuracy)
        else:
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
        self.clock += time.perf_counter() - t0
        self.cpu += time.process_time() - c0
        rec = {
            **asdict(r),
            "end": self.clock,
            "cpu_end": self.cpu,
            "feasible_est": bool(self.problem.check(cfg).feasible),
        }
        self.history.append(rec)
        return rec


def interleave(
    runs: Sequence[Any], time_budget: float, trials: int | None, line: Callable[[Any, dict[str, Any]], str]
) -> None:
    """Start every arm, then step the arm with the least clock until each used ``time_budget`` (or ran
    ``trials``), so load from other processes hits the arms alike; print ``line(arm, trial record)``."""
    for a in runs:
        a.start()

    def open_(a: Any) -> bool:
        return a.clock < time_budget and (trials is None or len(a.history) < trials)

    while any(open_(a) for a in runs):
        a = min((a for a in runs if open_(a)), key=lambda a: a.clock)
        r = a.step()
        acc = "-" if r["accuracy"] is None else f"{r['accuracy']:.3f}"
        print(
            f"  {a.name:<16} #{len(a.history):<3} t={a.clock:6.1f}s {r['status']:<5} acc={acc} {line(a, r)}",
            flush=True,
        )


def run_seed(
    seed: int, cal: Calibration, arms: Sequence[str], time_budget: float, trials: int | None
) -> list[Arm]:
    """Run every arm for one seed, interleaved by clock, until each used ``time_budget`` (or ``trials``)."""

    def line(a: Arm, r: dict[str, Any]) -> str:
        lat = "-" if r["latency"] is None else f"{r['latency'] * 1e3:.1f}ms"
        return f"seed {seed} mem={r['memory'] / 2**20:5.1f}MiB lat={lat} trial={r['seconds']:.2f}s"

    runs = [Arm(name, seed, cal) for name in arms]
    interleave(runs, time_budget, trials, line)
    return runs


def time_to_target(run: Mapping[str, Any], target: float, budget: float) -> tuple[float, float, bool]:
    """``(wall s, CPU s, reached)`` when a feasible trial of ``run`` first reached ``target`` within
    ``budget``; a censored run gives the budget and its CPU seconds scaled to the budget."""
    for r in run["history"]:
        if r["end"] > budget:
            break
        if r["status"] == "ok" and r["accuracy"] >= target:
            return r["end"], r["cpu_end"], True
    return budget, run["cpu"] * min(1.0, budget / run["clock"]), False


def trials_to_target(run: Mapping[str, Any], target: float, budget: int) -> tuple[int, bool]:
    """``(launched trials, reached)`` until a feasible trial of ``run`` first reached ``target`` among its
    first ``budget`` trials; a censored run gives ``budget``."""
    for n, r in enumerate(run["history"][:budget], start=1):
        if r["status"] == "ok" and r["accuracy"] >= target:
            return n, True
    return budget, False


def best_at(history: Sequence[Mapping[str, Any]], t: float) -> float:
    """Best feasible validation accuracy among trials finished by clock ``t`` (0 when none)."""
    return max([r["accuracy"] for r in history if r["status"] == "ok" and r["end"] <= t], default=0.0)


def geomean_ci(ratios: Sequence[float]) -> tuple[float, float, float]:
    """Geometric mean of per-seed ratios and its 95 % t-interval (computed on the log ratios)."""
    from scipy import stats

    logs = np.log(np.asarray(ratios, dtype=float))
    m = float(logs.mean())
    h = (
        float(stats.t.ppf(0.975, len(logs) - 1) * logs.std(ddof=1) / math.sqrt(len(logs)))
        if len(logs) > 1
        else 0
    )
    return math.exp(m), math.exp(m - h), math.exp(m + h)


def ratio_of_means_ci(a: Sequence[float], b: Sequence[float], n: int = 10_000) -> tuple[float, float, float]:
    """``mean(a) / mean(b)`` over paired seeds and its 95 % paired-bootstrap interval (fixed seed)."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    idx = np.random.default_rng(0).integers(len(x), size=(n, len(x)))
    boot = x[idx].mean(axis=1) / y[idx].mean(axis=1)
    lo, hi = np.percentile(boot, [2.5, 97.5])
    return float(x.mean() / y.mean()), float(lo), float(hi)


def summarize(results: dict[str, list[dict[str, Any]]], budget: float) -> dict[str, Any]:
    """Per arm: time-to-target, censoring, best at budget, wasted share, trial counts; speed-ups vs dnnsat."""
    summary: dict[str, Any] = {}
    for arm, runs in results.items():
        ttt = [time_to_target(h, TARGET_ACCURACY, budget) for h in runs]
        total = sum(h["clock"] for h in runs)
        wasted = sum(r["seconds"] for h in runs for r in h["history"] if r["status"] != "ok")
        summary[arm] = {
            "time_to_target": [t for t, _, _ in ttt],
            "cpu_time_to_target": [c for _, c, _ in ttt],
            "reached": [ok for _, _, ok in ttt],
            "best_at_budget": [best_at(h["history"], budget) for h in runs],
            "wasted_share": wasted / total if total else 0.0,
            "trials": [len(h["history"]) for h in runs],
            "infeasible_trials": [sum(r["status"] != "ok" for r in h["history"]) for h in runs],
            "oom_trials": [sum(r["status"] == "oom" for r in h["history"]) for h in runs],
            "rejected_trials": [sum(r["status"] == "rejected" for r in h["history"]) for h in runs],
            "trials_to_target": [trials_to_target(h, TARGET_ACCURACY, TRIAL_BUDGET)[0] for h in runs],
            "reached_in_trials": [trials_to_target(h, TARGET_ACCURACY, TRIAL_BUDGET)[1] for h in runs],
        }
    if "tpe+dnnsat" in summary:
        ref = summary["tpe+dnnsat"]
        for arm in summary:
            for key, out in (
                ("time_to_target", "speedup"),
                ("cpu_time_to_target", "cpu_speedup"),
                ("trials_to_target", "trial_speedup"),
            ):
                summary[arm][out] = [a / b for a, b in zip(summary[arm][key], ref[key])]
        for key in ("time_to_target", "trials_to_target"):
            bases = [a for a in BASELINES if a in summary]
            if bases:
                best = min(bases, key=lambda a: float(np.mean(summary[a][key])))
                rom = ratio_of_means_ci(summary[best][key], ref[key])
                summary["tpe+dnnsat"][f"vs_best_{key}"] = {"baseline": best, "ratio_of_means": rom}
    return summary


def report(
    summary: Mapping[str, Any],
    validation: Mapping[str, Any],
    trial_decisions: Mapping[str, int],
    context: Mapping[str, Any],
) -> str:
    """The markdown section: command, machine, set-up, the speed-up table and dnnsat's decision accuracy."""
    import optuna
    import torch

    header = [
        "arm",
        "reached target",
        "time to target, mean (s)",
        "speed-up of dnnsat: geometric mean over seeds [95 % CI]",
        "ratio of mean times [95 % CI]",
        "same in CPU time",
        f"trials to target, mean (≤ {TRIAL_BUDGET})",
        "ratio of mean trials [95 % CI]",
        "best feasible acc @ budget (mean)",
        "trials / infeasible (OOM, slow after training, rejected early)",
        "wasted time share",
    ]
    rows = []
    ref = summary.get("tpe+dnnsat")
    for arm, s in summary.items():
        cells = []
        if arm == "tpe+dnnsat" or ref is None:
            cells = ["—", "—", "—", "—"]
        else:
            stats = [
                geomean_ci(s["speedup"]),
                ratio_of_means_ci(s["time_to_target"], ref["time_to_target"]),
                ratio_of_means_ci(s["cpu_time_to_target"], ref["cpu_time_to_target"]),
                ratio_of_means_ci(s["trials_to_target"], ref["trials_to_target"]),
            ]
            cells = [f"{m:.2f}× [{lo:.2f}, {hi:.2f}]" for m, lo, hi in stats]
        oom, rejected = sum(s["oom_trials"]), sum(s["rejected_trials"])
        slow = sum(s["infeasible_trials"]) - oom - rejected
        rows.append(
            [
                arm,
                f"{sum(s['reached'])}/{len(s['reached'])}",
                f"{np.mean(s['time_to_target']):.1f}",
                *cells[:3],
                f"{np.mean(s['trials_to_target']):.1f} ({sum(s['reached_in_trials'])} reached)",
                cells[3],
                f"{np.mean(s['best_at_budget']):.4f}",
                f"{sum(s['trials'])} / {sum(s['infeasible_trials'])} ({oom}, {slow}, {rejected})",
                f"{s['wasted_share']:.1%}",
            ]
        )
    headline = ""
    if ref is not None and "vs_best_time_to_target" in ref:
        parts = []
        for key, what in (("time_to_target", "wall-clock time"), ("trials_to_target", "launched trials")):
            b = ref[f"vs_best_{key}"]
            m, lo, hi = b["ratio_of_means"]
            parts.append(f"{m:.2f}× [{lo:.2f}, {hi:.2f}] in {what} (best baseline: {b['baseline']})")
        headline = (
            "**Against the strongest baseline** (the arm with the least mean time, or trials, to target): "
            "dnnsat reaches the target " + "; ".join(parts) + " — ratio of means, paired-bootstrap 95 % CI. "
            "DnnSAT (ICSE'21) reports 1.19×–3.95× average speed-ups.\n\n"
        )
    c = context
    v = validation
    vrows = []
    for key, unit, scale in (("memory", "MiB", 2**-20), ("latency", "ms", 1e3)):
        d = v[key]
        limit = (MEMORY_BUDGET if key == "memory" else LATENCY_BUDGET) * scale
        factor = c["memory_factor" if key == "memory" else "latency_factor"]
        vrows.append(
            [
                f"{key} ≤ {limit:g} {unit}",
                f"{1 - d['real_infeasible']:.0%}",
                f"{1 - d['est_infeasible']:.0%}",
                f"{d['false_accept']} / {d['false_reject']}",
                f"{d['false_accept_raw']} / {d['false_reject_raw']}",
                f"{factor:.2f}",
                f"{d['median_abs_error']:.1%} / {d['max_abs_error']:.0%}",
            ]
        )
    both = ["both", f"{v['real_feasible']:.0%}", f"{v['est_feasible']:.0%}"]
    vrows.append([*both, f"{v['false_accept']} / {v['false_reject']}", "", "", ""])
    seeds = len(next(iter(summary.values()))["trials"])
    trials_note = f", at most {c['trials']} trials" if c["trials"] else ""
    td = trial_decisions
    intro = (
        "## Real-training HPO on this CPU: Optuna TPE with and without dnnsat\n\n"
        f"Command: `{c['command']}` ({c['elapsed']:.0f} s; {platform.machine()}, {os.cpu_count()} "
        f"cores shared with other processes, one torch thread; Python {platform.python_version()}, "
        f"torch {torch.__version__}, Optuna {optuna.__version__}; load average {c['load0']:.1f} at the "
        f"start, {os.getloadavg()[0]:.1f} at the end).\n\n"
        "A CNN described with dnnsat's Network builder and trained as `dnnsat.torch.to_torch` of that "
        f"network on sklearn digits ({EPOCHS} epochs, Adam, {N_TRAIN} training / 500 validation images); "
        "searched: batch size, width and depth of the first stage, kernel, second-stage width, dense "
        "width, learning rate.\n\n"
        f"- **Budgets**: peak tensor memory of a training step ≤ {MEMORY_BUDGET / 2**20:g} MiB, measured "
        "for real with `dnnsat.torch.track_memory` over the first two steps (the OOM itself is "
        "simulated: the harness raises it when the measured peak exceeds the budget, after the set-up and "
        f"the two steps); inference latency of one batch of {DEPLOY_BATCH} images ≤ "
        f"{LATENCY_BUDGET * 1e3:g} ms, measured after training (eval mode, median of repeats, thread CPU "
        "time: wall-clock on this shared machine is inflated by other processes); a slower model is "
        f"discarded. dnnsat considers {c['feasible_count']:,} of {c['space_size']:,} configurations "
        f"feasible ({c['feasible_count'] / c['space_size']:.0%}).\n"
        f"- **Runs**: {seeds} seeds × {c['time_budget']:g} s of wall-clock per arm{trials_note}, the arms "
        "time-multiplexed trial by trial; each arm has its own clock, which includes sampler and dnnsat "
        "time (the dnnsat arm's also its CPU profile, building its Problem and pruning). *tpe*: "
        "infeasible trials are marked FAIL; *tpe+constraints*: Optuna's native handling, the measured "
        "excess recorded with `trial.set_constraint`; *tpe+early*: the same, but the objective times the "
        "untrained model first (the device is at hand) and stops a too-slow one before training, and an "
        "OOM at the first steps is reported as PRUNED too (`set_constraint` + `TrialState.PRUNED`); "
        "*tpe+dnnsat*: *tpe+constraints* with `DnnSATSampler(problem, TPESampler())`, so the two differ "
        "only by dnnsat's pruning before launch (a configuration dnnsat wrongly accepts fails as in the "
        "others and its measured excess is recorded).\n"
        f"- **Target**: validation accuracy ≥ {TARGET_ACCURACY} from a feasible trial. Runs that never "
        "reach it are censored at the budget, which bounds that seed's speed-up (towards 1). Speed-up = "
        "the arm's time to target / dnnsat's: per seed, then the geometric mean with a t-interval on the "
        "log ratios; and the ratio of the mean times over seeds with a paired-bootstrap interval (in "
        "wall-clock and in this process's CPU time). Second budget kind, a fixed number of launched "
        f"trials: launched trials to the target among each run's first {TRIAL_BUDGET} (censored at "
        f"{TRIAL_BUDGET}; a trial rejected early counts as launched).\n"
        f"- dnnsat's CPU profile: {c['calibration']} ({c['profile_s']:.1f} s once per run, charged to the "
        "dnnsat arm's clock of every seed). dnnsat decides with each budget divided by a safety margin: "
        "the largest measured / estimated ratio over those calibration configurations that measure at "
        "least a quarter of the budget (memory "
        f"{c['memory_factor']:.2f}, latency {c['latency_factor']:.2f}).\n\n"
    )
    return (
        intro + headline + markdown_table(header, rows) + "\n\n"
        f"dnnsat's decisions against real measurements: {v['n']} random configurations (untrained models, "
        "the trials' own measurements; never the calibration configurations):\n\n"
        + markdown_table(
            [
                "budget",
                "feasible (real)",
                "feasible (dnnsat)",
                "false accepts / rejects",
                "same without the margin",
                "margin",
                "estimate's median / max abs. error",
            ],
            vrows,
        )
        + f"\n\nOver all {td['trials']} trials run (every arm): {td['false_accept']} false accepts (dnnsat "
        f"feasible, really infeasible) and {td['false_reject']} false rejects (dnnsat infeasible, really "
        "feasible; only the baselines run such configurations).\n"
    )


def trial_decisions(results: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, int]:
    """dnnsat's verdict on every trial's configuration against the trial's real outcome."""
    trials = [r for runs in results.values() for run in runs for r in run["history"]]
    return {
        "trials": len(trials),
        "false_accept": sum(r["feasible_est"] and r["status"] != "ok" for r in trials),
        "false_reject": sum(not r["feasible_est"] and r["status"] == "ok" for r in trials),
    }


def plot(results: Mapping[str, Sequence[Mapping[str, Any]]], budget: float, path: Path) -> None:
    """Best feasible accuracy vs wall-clock: median over seeds (line) and min-max band per arm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = np.linspace(0, budget, 200)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for arm, runs in results.items():
        curves = np.array([[best_at(h["history"], t) for t in grid] for h in runs])
        ax.plot(grid, np.median(curves, axis=0), label=arm)
        ax.fill_between(grid, curves.min(axis=0), curves.max(axis=0), alpha=0.15)
    ax.axhline(TARGET_ACCURACY, color="grey", ls=":", lw=1, label=f"target {TARGET_ACCURACY}")
    ax.set_ylim(0.96, 1.0)
    ax.set_xlabel("wall-clock (s)")
    ax.set_ylabel("best feasible validation accuracy")
    ax.set_title("Digits CNN, memory + latency budgets: median and min-max over seeds", fontsize=10)
    ax.legend(loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def study_parser(doc: str, seeds: int, time_budget: float, quick: str) -> argparse.ArgumentParser:
    """The options of a real-training benchmark: ``--seeds``, ``--time-budget``, ``--trials``,
    ``--quick`` (help text ``quick``), ``--json`` and the write options."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=seeds)
    ap.add_argument(
        "--time-budget", type=float, default=time_budget, help="wall-clock seconds per arm and seed"
    )
    ap.add_argument("--trials", type=int, default=None, help="also stop an arm after this many trials")
    ap.add_argument("--quick", action="store_true", help=quick)
    ap.add_argument("--json", type=Path, default=None, help="write every trial and figure to this file")
    add_write_options(ap)
    return ap


def parse_study_args(
    ap: argparse.ArgumentParser, argv: Sequence[str] | None, name: str, **quick: Any
) -> tuple[argparse.Namespace, bool, str]:
    """``(args, whether the run may rewrite the README, the command line)``; with ``--quick`` the
    ``quick`` defaults apply (options given explicitly still win)."""
    args = ap.parse_args(argv)
    write = writes_readme(ap, args, neutral=("json",))
    command = " ".join([f"python -m benchmarks.{name}", *(sys.argv[1:] if argv is None else argv)])
    if args.quick:
        ap.set_defaults(**quick)
        args = ap.parse_args(argv)
    return args, write, command


def one_quiet_thread() -> None:
    """One torch thread (trials are timed), Optuna's info logs and experimental warnings off."""
    import optuna
    import torch

    torch.set_num_threads(1)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


def build_parser() -> argparse.ArgumentParser:
    ap = study_parser(__doc__ or "", 6, TIME_BUDGET, "2 seeds x 15 s, 12 validation configs (< 3 min)")
    ap.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated subset of {','.join(ARMS)}")
    ap.add_argument("--validate", type=int, default=60, help="random configurations to check dnnsat against")
    return ap


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:

    ap = build_parser()
    args, write, command = parse_study_args(ap, argv, "hpo", seeds=2, time_budget=15.0, validate=12)
    arms = [a.strip() for a in args.arms.split(",")]
    unknown = set(arms) - set(ARMS)
    if unknown:
        ap.error(f"--arms: unknown {sorted(unknown)}; choose from {list(ARMS)}")
    one_quiet_thread()
    load0 = os.getloadavg()[0]
    t_start = time.perf_counter()

    print(f"calibrating dnnsat's CPU profile on {len(CALIBRATION)} fixed configurations ...", flush=True)
    cal = calibrate_cpu()
    problem = make_problem(cal)
    feasible_count = problem.count()
    print(f"validating dnnsat's decisions on {args.validate} random configurations ...", flush=True)
    validation = validate(problem, cal, args.validate)
    print(
        f"  feasible: real {validation['real_feasible']:.0%}, dnnsat {validation['est_feasible']:.0%}; "
        f"false accepts {validation['false_accept']}, false rejects {validation['false_reject']}",
        flush=True,
    )

    results: dict[str, list[dict[str, Any]]] = {a: [] for a in arms}
    for seed in range(args.seeds):
        print(f"seed {seed}: {', '.join(arms)} for {args.time_budget:g} s each ...", flush=True)
        for a in run_seed(seed, cal, arms, args.time_budget, args.trials):
            results[a.name].append({"seed": seed, "clock": a.clock, "cpu": a.cpu, "history": a.history})
    summary = summarize(results, args.time_budget)
    decisions = trial_decisions(results)
    context = {
        "command": command,
        "elapsed": time.perf_counter() - t_start,
        "load0": load0,
        "time_budget": args.time_budget,
        "trials": args.trials,
        "feasible_count": feasible_count,
        "space_size": problem.space.size(),
        "profile_s": cal.seconds,
        "memory_factor": cal.memory_factor,
        "latency_factor": cal.latency_factor,
        "calibration": f"`dnnsat.torch.calibrate` (1 thread) refined by `fit_device` on the latencies of "
        f"{len(CALIBRATION)} fixed configurations",
    }
    text = report(summary, validation, decisions, context)
    print()
    print(text)
    if write:
        update_readme("hpo", text + "\n![best feasible accuracy vs wall-clock](plots/hpo_best_vs_time.png)\n")
        plot(results, args.time_budget, PLOTS / "hpo_best_vs_time.png")
    out = {
        "budgets": {"memory": MEMORY_BUDGET, "latency": LATENCY_BUDGET, "deploy_batch": DEPLOY_BATCH},
        "target": TARGET_ACCURACY,
        "context": context,
        "profile": json.loads(cal.profile.to_json()),
        "validation": validation,
        "trial_decisions": decisions,
        "summary": summary,
        "results": results,
    }
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=str))
    return out


if __name__ == "__main__":
    main()
