"""Time dnnsat spends deciding memory and latency budgets during a search, per trial.

    python -m benchmarks.budget_perf [--quick] [--trials 60]

Memory and latency constraints are large expressions (a training step's peak memory is a maximum
over every moment of the step: thousands of nodes), and a sampler asks about a handful of boxes or
points at a time, where numpy's per-call cost dominates. The engine therefore (1) never evaluates
constraints that hold on the whole domain (e.g. a memory budget of an 11 GiB card that no
NAS-Bench-201 cell reaches), (2) evaluates up to ``FEW`` boxes/points one by one in generated
Python code and (3) enumerates a box point by point only up to ``ENUM_WORK`` points x nodes. (2) is
measured here as a ratio within one run: the same seeded searches with the default and with
``FEW = 0`` (numpy for every batch); their trial sequences must be identical. (1) and (3) are fixed
when a problem compiles and show in the absolute times.

Problems: ``nb201-latency``, the NAS-Bench-201 problem of ``benchmarks.nasbench201``'s latency-5
scenario (1080 Ti, batch 256, dnnsat's latency model calibrated on 20 architectures, memory limited
to the card); ``gpt-memory`` and ``resnet-memory``, zoo models with a training-memory budget on an
A100 40 GB at the 25th percentile of 200 random configurations. Searches: NNI TPE wrapped by
``DnnSATTuner`` and Optuna TPE wrapped by ``DnnSATSampler`` (seconds per launched trial, whole run
included), and ``Problem.repair`` per infeasible configuration. Both wrappers decide through the
problem's ``Guard``; their *wrapper* time per trial is measured the same way for both: seconds in
the wrapper's entry points minus seconds in the base sampler's or tuner's own calls (p50 over the
trials of the default run). Also ``p.sample(5)`` (first and later call), the decomposition of the
feasible set (built when draws from the whole space run short) and ``p.costs(config)`` (mean of 200
calls). Writes
the "budget_perf" section of benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import logging
import math
import pickle
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

from benchmarks._report import (
    add_write_options,
    machine,
    markdown_table,
    single_core,
    update_readme,
    writes_readme,
)

single_core()

import optuna  # noqa: E402

from dnnsat import Problem, zoo  # noqa: E402
from dnnsat.cost import Budget  # noqa: E402
from dnnsat.integrations.nni import DnnSATTuner, config_from_nni  # noqa: E402
from dnnsat.integrations.optuna import DnnSATSampler, suggest  # noqa: E402
from dnnsat.solver import _engine  # noqa: E402
from dnnsat.torch import random_configs  # noqa: E402


def nb201_latency() -> tuple[Problem, Callable[[dict[str, Any]], float]]:
    from benchmarks._nb201_data import SCENARIOS, decide, load

    bench = load(None, "cifar10")
    return decide(bench, SCENARIOS["latency-5"]).problem, lambda cfg: float(bench.acc[bench.index(cfg)])


def zoo_memory(name: str) -> tuple[Problem, Callable[[dict[str, Any]], float]]:
    free = zoo.get(name)(budget=Budget(device="a100_40gb"))
    mem = sorted(free.costs(c)["memory"] for c in random_configs(free.space, 200, seed=0))
    p = zoo.get(name)(budget=Budget(device="a100_40gb", memory=mem[len(mem) // 4]))
    return p, lambda cfg: math.log(p.costs(cfg)["params"])  # a deterministic stand-in objective


PROBLEMS: dict[str, Callable[[], tuple[Problem, Callable[[dict[str, Any]], float]]]] = {
    "nb201-latency": nb201_latency,
    "gpt-memory": lambda: zoo_memory("gpt"),
    "resnet-memory": lambda: zoo_memory("resnet"),
}


class _Clock:
    """Seconds spent in the wrapped methods of one object (the base sampler or tuner)."""

    def __init__(self, obj: Any, names: tuple[str, ...]) -> None:
        self.seconds = 0.0
        for name in names:
            setattr(obj, name, self._timed(getattr(obj, name)))

    def _timed(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - t

        return timed


Run = tuple[list[Any], list[float]]  # (configurations, wrapper seconds per trial)


def nni_run(p: Problem, value: Callable[[dict[str, Any]], float], trials: int) -> Run:
    tuner = DnnSATTuner(p, "TPE", {"optimize_mode": "maximize", "seed": 1}, seed=1)
    base = _Clock(tuner.base, ("generate_multiple_parameters", "receive_trial_result", "trial_end"))
    tuner.update_search_space(p.space.to_nni())
    seq, wrapper = [], []
    for i in range(trials):
        t, b = time.perf_counter(), base.seconds
        params = tuner.generate_parameters(i)
        spent = time.perf_counter() - t
        cfg = config_from_nni(p.space, params)
        result = value(cfg)
        t = time.perf_counter()
        tuner.receive_trial_result(i, params, result)
        tuner.trial_end(i, True)
        wrapper.append(spent + time.perf_counter() - t - (base.seconds - b))
        seq.append(cfg)
    return seq, wrapper


def optuna_run(p: Problem, value: Callable[[dict[str, Any]], float], trials: int) -> Run:
    sampler = DnnSATSampler(p, optuna.samplers.TPESampler(seed=1), seed=1)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    seq = []
    for _ in range(trials):
        trial = study.ask()
        cfg = suggest(trial, p)
        study.tell(trial, value(cfg))
        seq.append(cfg)
    # the sampler's own accounting: seconds in its methods minus the base sampler's calls
    return seq, [w for _, w, _ in sampler.stats.overhead]


def repairs(p: Problem, n: int) -> Run:
    bad = [c for c in random_configs(p.space, 50 * n, seed=2) if not p.check(c).feasible][:n]
    return [p.repair(c) for c in bad], []


def measure(fn: Callable[[], Run]) -> tuple[float, Run]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def calls(p: Problem) -> tuple[float, float, float, float]:
    """Seconds of the first ``sample(5)`` of a fresh copy of ``p`` (compilation excluded), of a later
    ``p.sample(5)``, of the decomposition a fresh copy builds when the draws from the whole space run
    short (``count`` builds it too; ``Problem._sample_decomposed``) and of one ``p.costs`` call (mean
    of 200)."""

    def fresh() -> Problem:
        copy = pickle.loads(pickle.dumps(p))
        copy._c().engine.warm()
        return copy

    first_copy, decomposed_copy = fresh(), fresh()
    t = time.perf_counter()
    first_copy.sample(5, seed=0)
    first = time.perf_counter() - t
    t = time.perf_counter()
    decomposed_copy._sample_decomposed(5, seed=0)
    decomposition = time.perf_counter() - t
    p.sample(5, seed=0)
    t = time.perf_counter()
    configs = p.sample(5, seed=1)
    sample = time.perf_counter() - t
    t = time.perf_counter()
    for i in range(200):
        p.costs(configs[i % 5])
    return first, sample, decomposition, (time.perf_counter() - t) / 200


def run(names: list[str], trials: int, n_repair: int) -> list[dict[str, Any]]:
    rows = []
    few = _engine.FEW
    for name in names:
        p, value = PROBLEMS[name]()
        engine = p._c().engine
        engine.warm()  # compile outside the timings
        row: dict[str, Any] = {"problem": name, "open": len(engine._open), "constraints": len(p.constraints)}
        jobs: list[tuple[str, Callable[[], Run], int]] = [
            ("nni", lambda p=p, value=value: nni_run(p, value, trials), trials),
            ("optuna", lambda p=p, value=value: optuna_run(p, value, trials), trials),
            ("repair", lambda p=p: repairs(p, n_repair), n_repair),
        ]
        for label, fn, count in jobs:
            results = {}
            for setting in (few, 0):
                _engine.FEW = setting
                results[setting] = measure(fn)
            _engine.FEW = few
            same = results[few][1][0] == results[0][1][0]
            wrapper = results[few][1][1]
            p50 = statistics.median(wrapper) if wrapper else math.nan
            row[label] = (results[few][0] / count, results[0][0] / count, same, p50)
            print(
                f"{name} {label}: {results[few][0] / count * 1e3:.0f} ms vs numpy only "
                f"{results[0][0] / count * 1e3:.0f} ms per item, wrapper p50 {p50 * 1e3:.1f} ms, "
                f"same answers: {same}",
                flush=True,
            )
        row["first_sample"], row["sample"], row["decomposition"], row["costs"] = calls(p)
        print(
            f"{name}: sample(5) first {row['first_sample'] * 1e3:.0f} ms, "
            f"later {row['sample'] * 1e3:.0f} ms, decomposition {row['decomposition'] * 1e3:.0f} ms, "
            f"costs {row['costs'] * 1e6:.0f} us",
            flush=True,
        )
        rows.append(row)
    return rows


def report(rows: list[dict[str, Any]], trials: int, n_repair: int) -> str:
    def cell(x: tuple[float, float, bool, float]) -> str:
        out = f"{x[0] * 1e3:.0f} / {x[1] * 1e3:.0f} ms ({x[1] / x[0]:.1f}x){'' if x[2] else ' DIFFERENT'}"
        return out if math.isnan(x[3]) else f"{out}; wrapper p50 {x[3] * 1e3:.1f} ms"

    table = markdown_table(
        [
            "problem",
            "constraints evaluated",
            f"DnnSATTuner (NNI TPE), per trial of {trials}",
            f"DnnSATSampler (Optuna TPE), per trial of {trials}",
            f"repair, per config ({n_repair})",
            "sample(5): first / later",
            "decomposition",
            "costs",
        ],
        [
            [
                r["problem"],
                f"{r['open']} of {r['constraints']}",
                cell(r["nni"]),
                cell(r["optuna"]),
                cell(r["repair"]),
                f"{r['first_sample'] * 1e3:.0f} / {r['sample'] * 1e3:.0f} ms",
                f"{r['decomposition'] * 1e3:.0f} ms",
                f"{r['costs'] * 1e6:.0f} µs",
            ]
            for r in rows
        ],
    )
    return (
        "## Deciding memory and latency budgets per trial\n\n"
        f"Command: `python -m benchmarks.budget_perf` ({machine()}; shared machine).\n\n"
        f"Each cell: default (up to {_engine.FEW} boxes/points in generated Python code) / numpy for "
        "every batch (`FEW = 0`), and the ratio, measured in the same run; the trial sequences and "
        "repairs of both settings are identical (else the cell says DIFFERENT). *wrapper p50*: seconds "
        "per trial in the wrapper minus the base sampler's or tuner's own calls (median, default "
        "setting; both wrappers decide through the problem's Guard). *constraints evaluated*: "
        "the others hold on the whole domain and are never evaluated. *sample(5)*: draws from the whole "
        "space kept when feasible (a fresh copy of the problem, then a later call). *decomposition*: the "
        "bounds-and-points partition of the feasible set a fresh copy builds when those draws run short "
        "(a small feasible share, `count`, the guards' witness pools).\n\n" + table
    )


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=60)
    ap.add_argument("--repairs", type=int, default=10)
    ap.add_argument("--problems", default=",".join(PROBLEMS))
    ap.add_argument("--quick", action="store_true", help="nb201-latency only, 15 trials, 3 repairs")
    add_write_options(ap)
    return ap


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    ap = build_parser()
    args = ap.parse_args(argv)
    write = writes_readme(ap, args)
    if args.quick:
        args.trials, args.repairs, args.problems = 15, 3, "nb201-latency"
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    logging.getLogger("nni").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    rows = run(args.problems.split(","), args.trials, args.repairs)
    text = report(rows, args.trials, args.repairs)
    print(text)
    if write:
        update_readme("budget_perf", text)
    return rows


if __name__ == "__main__":
    main()
