"""Infeasible trials avoided, proposals needed and overhead of DnnSATTuner on the reference problem.

    python -m benchmarks.nni_overhead [--configs 200] [--tuners TPE,Random,Anneal,Evolution,GridSearch]

For each budget (default limits; tight: flops <= 1e11, params <= 2e6) and NNI tuner, in one process:
- the bare tuner over the full space: how many of its configurations are infeasible (what NNI would
  launch without dnnsat);
- the wrapped tuner in repair and in reject mode (default max_attempts): base proposals per launched
  configuration, share of proposals feasible as proposed, infeasible launched (must be 0), time per
  configuration in total and inside the base tuner (the rest is dnnsat: check, repair, bookkeeping).
Results report a 200-configuration run with a deterministic metric; the machine is shared, so compare
ratios within a run. Writes the table to the "nni" section of benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import logging
import math
import platform
import time
from collections.abc import Callable, Sequence
from typing import Any

import nni
from nni.tools.package_utils.tuner_factory import create_builtin_class_instance

from benchmarks._report import add_write_options, update_readme, writes_readme
from dnnsat.integrations.nni import DnnSATTuner
from dnnsat.space import config_from_nni
from dnnsat.zoo import synthetic_resnet_problem

LIMITS = {"default": {}, "tight": {"flops_limit": 1e11, "params_limit": 2e6}}
ARGS: dict[str, dict[str, Any]] = {
    "TPE": {"optimize_mode": "maximize", "seed": 1},
    "Random": {"seed": 1},
    "Anneal": {"optimize_mode": "maximize"},
    "Evolution": {"optimize_mode": "maximize", "population_size": 16},
    "GridSearch": {},
    "GP": {"optimize_mode": "maximize", "selection_num_warm_up": 200, "cold_start_num": 5},
}


def _metric(cfg: dict[str, Any]) -> float:
    return math.log(cfg["w3"] * cfg["b"]) - 0.1 * cfg["k"]


def _timed(obj: Any, name: str, acc: list[float]) -> None:
    inner: Callable[..., Any] = getattr(obj, name)

    def call(*a: Any, **k: Any) -> Any:
        t = time.perf_counter()
        try:
            return inner(*a, **k)
        finally:
            acc[0] += time.perf_counter() - t

    setattr(obj, name, call)


def _drive(tuner: Any, space: dict[str, Any], n: int) -> list[dict[str, Any]]:
    tuner.update_search_space(space)
    out: list[dict[str, Any]] = []
    running: list[tuple[int, dict[str, Any]]] = []
    for pid in range(n):
        try:
            params = tuner.generate_multiple_parameters([pid], st_callback=lambda *_: None)
        except nni.NoMoreTrialError:
            params = []
        if not params:
            break
        out.append(params[0])
        running.append((pid, params[0]))
        if len(running) >= 2:
            rid, rp = running.pop(0)
            tuner.receive_trial_result(rid, rp, _metric(rp))
            tuner.trial_end(rid, True)
    return out


def run(configs: int, tuners: Sequence[str]) -> list[dict[str, Any]]:
    rows = []
    for limits, kw in LIMITS.items():
        for name in tuners:
            problem = synthetic_resnet_problem(**kw)
            space = problem.space.to_nni()
            bare = create_builtin_class_instance(name, dict(ARGS[name]), "tuners")
            t0 = time.perf_counter()
            try:
                got = _drive(bare, space, configs) if name != "GP" else []
                bad = sum(not problem.check(config_from_nni(problem.space, c)).feasible for c in got)
                bare_cell = f"{bad}/{len(got)}" if name != "GP" else "not run"
            except ValueError as err:  # NNI 3.0 + numpy 2 bugs that DnnSATTuner works around
                got, bare_cell = [], f"NNI crashes ({str(err)[:40]}…)"
            bare_s = time.perf_counter() - t0
            row: dict[str, Any] = {"limits": limits, "tuner": name, "bare_infeasible": bare_cell,
                                   "bare_ms": 1e3 * bare_s / max(1, len(got))}  # fmt: skip
            for mode in ("repair", "reject"):
                tuner = DnnSATTuner(problem, name, dict(ARGS[name]), mode=mode, seed=0)
                base_time = [0.0]
                _timed(tuner.base, "generate_multiple_parameters", base_time)
                _timed(tuner.base, "receive_trial_result", base_time)
                t0 = time.perf_counter()
                out = _drive(tuner, space, configs)
                total = time.perf_counter() - t0
                s = tuner.stats
                infeasible = sum(not problem.check(config_from_nni(problem.space, c)).feasible for c in out)
                row[mode] = {
                    "launched": len(out),
                    "infeasible": infeasible,
                    "proposals_per_config": s.proposals / max(1, len(out)),
                    "feasible_share": s.feasible / max(1, s.proposals),
                    "repaired": s.repaired,
                    "ms_per_config": 1e3 * total / max(1, len(out)),
                    "dnnsat_ms_per_config": 1e3 * (total - base_time[0]) / max(1, len(out)),
                }
            rows.append(row)
            print(_line(row), flush=True)
    return rows


def _line(r: dict[str, Any]) -> str:
    cells = [r["limits"], r["tuner"], r["bare_infeasible"]]
    for mode in ("repair", "reject"):
        m = r[mode]
        cells += [f"{m['infeasible']}/{m['launched']}", f"{m['proposals_per_config']:.1f}",
                  f"{100 * m['feasible_share']:.1f} %", f"{m['ms_per_config']:.1f}",
                  f"{m['dnnsat_ms_per_config']:.1f}"]  # fmt: skip
    return "| " + " | ".join(cells) + " |"


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", type=int, default=200)
    ap.add_argument("--tuners", default="TPE,Random,Anneal,Evolution,GridSearch")
    add_write_options(ap)
    return ap


def main(argv: Sequence[str] | None = None) -> None:
    ap = build_parser()
    args = ap.parse_args(argv)
    write = writes_readme(ap, args)
    logging.getLogger("nni").setLevel(logging.ERROR)
    logging.getLogger("dnnsat").setLevel(logging.ERROR)
    header = (
        "| limits | tuner | bare: infeasible | repair: infeasible | proposals/config | feasible as proposed "
        "| ms/config | dnnsat ms/config | reject: infeasible | proposals/config | feasible as proposed "
        "| ms/config | dnnsat ms/config |\n|" + "---|" * 13
    )
    print(header)
    rows = run(args.configs, args.tuners.split(","))
    text = (
        f"## NNI: DnnSATTuner on the reference problem ({args.configs} configurations per cell)\n\n"
        f"`python -m benchmarks.nni_overhead` ({platform.machine()}, 2 shared cores), "
        f"Python {platform.python_version()}. *bare*: the NNI tuner alone over the full space "
        "(GP: not run bare). *dnnsat ms*: time outside the base tuner's calls.\n\n"
        + header
        + "\n"
        + "\n".join(_line(r) for r in rows)
        + "\n"
    )
    if write:
        update_readme("nni", text)
        print("updated benchmarks/README.md")


if __name__ == "__main__":
    main()
