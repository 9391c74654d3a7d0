"""Trial sequences of both adapters and the Problem's queries on fixed problems, as JSON.

`tests/data/trial_sequences.json` holds them as recorded before the package restructuring (issue 31);
`tests/test_trial_sequences.py` recomputes and compares them, so a change of layout that changes any
decision fails. Rewrite the file on purpose only: ``python -m tests._trial_sequences --write``.
Every problem here decides on host-independent costs (params, FLOPs, a catalog GPU's memory, a catalog
GPU's latency), so the sequences do not depend on this machine's CPU.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dnnsat as ds
from dnnsat.torch import random_configs

DATA = Path(__file__).with_name("data") / "trial_sequences.json"
TRIALS = 25


def _memory_problem(name: str) -> ds.Problem:
    free = ds.zoo.get(name)(budget=ds.Budget(device="a100_40gb"))
    mem = sorted(free.costs(c)["memory"] for c in free.sample(60, seed=0))
    return ds.zoo.get(name)(budget=ds.Budget(device="a100_40gb", memory=mem[len(mem) // 4]))


def _latency_problem() -> ds.Problem:
    free = ds.zoo.get("nasbench201")(budget=ds.Budget(device="titanx"))
    lat = sorted(free.costs(c)["latency"] for c in free.sample(60, seed=0))
    return ds.zoo.get("nasbench201")(budget=ds.Budget(device="titanx", latency=lat[len(lat) // 3]))


PROBLEMS: dict[str, Callable[[], ds.Problem]] = {
    "gpt-memory": lambda: _memory_problem("gpt"),
    "resnet-memory": lambda: _memory_problem("resnet"),
    "nb201-latency": _latency_problem,
    "synthetic-resnet": lambda: ds.zoo.synthetic_resnet_problem(),
}


def _plain(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in sorted(x.items())}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if hasattr(x, "item"):
        x = x.item()
    if isinstance(x, float):
        return float(f"{x:.12g}")
    return x


def _objective(p: ds.Problem) -> Callable[[dict[str, Any]], float]:
    name = "params" if "params" in p.costs(p.sample(1, seed=0)[0]) else None
    if name is None:
        return lambda cfg: float(sum(hash(str(v)) % 97 for v in cfg.values()))
    return lambda cfg: math.log(p.costs(cfg)[name])


def optuna_sequence(p: ds.Problem, sampler: str) -> list[Any]:
    import optuna

    from dnnsat.integrations.optuna import DnnSATSampler, suggest

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    base = {
        "tpe": lambda: optuna.samplers.TPESampler(seed=1),
        "tpe-multivariate": lambda: optuna.samplers.TPESampler(seed=1, multivariate=True),
        "random": lambda: optuna.samplers.RandomSampler(seed=1),
    }[sampler]()
    study = optuna.create_study(direction="maximize", sampler=DnnSATSampler(p, base, seed=1))
    value, seq = _objective(p), []
    for _ in range(TRIALS):
        trial = study.ask()
        cfg = suggest(trial, p)
        study.tell(trial, value(cfg))
        seq.append(cfg)
    return seq


def nni_sequence(p: ds.Problem, tuner: str) -> list[Any]:
    from dnnsat.integrations.nni import DnnSATTuner, config_from_nni

    args = (
        {"optimize_mode": "maximize"} if tuner == "GridSearch" else {"optimize_mode": "maximize", "seed": 1}
    )
    t = DnnSATTuner(p, tuner, args, seed=1)
    t.update_search_space(p.space.to_nni())
    value, seq = _objective(p), []
    for i in range(TRIALS):
        params = t.generate_parameters(i)
        cfg = config_from_nni(p.space, params)
        t.receive_trial_result(i, params, value(cfg))
        t.trial_end(i, True)
        seq.append(cfg)
    return seq


def queries(p: ds.Problem) -> dict[str, Any]:
    first = p.space.names[0] if hasattr(p.space, "names") else next(iter(p.space.params))
    draws = p.sample(8, seed=3)
    out: dict[str, Any] = {"sample": draws, "feasible_values": p.feasible_values(first)}
    if p.space.size() <= 10**7:
        out["count"] = p.count()
    bad = [c for c in random_configs(p.space, 400, seed=2) if not p.check(c).feasible][:4]
    out["repair"] = [p.repair(c) for c in bad]
    g = p.guard(seed=1)
    out["guard"] = [str(g.propose(first, v, {})) for v in list(p.space[first].values())[:6]]
    return out


def record() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, make in PROBLEMS.items():
        p = make()
        entry: dict[str, Any] = {"queries": queries(p)}
        if name != "synthetic-resnet":
            for s in ("tpe", "tpe-multivariate", "random"):
                entry[f"optuna/{s}"] = optuna_sequence(make(), s)
            for s in ("TPE", "Random", "GridSearch"):
                entry[f"nni/{s}"] = nni_sequence(make(), s)
        out[name] = _plain(entry)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"rewrite {DATA.name}")
    parser.add_argument("--out", type=Path, help="write the sequences to this file instead")
    args = parser.parse_args(argv)
    data = record()
    target = DATA if args.write else args.out
    if target:
        target.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    else:
        print(json.dumps(data, sort_keys=True)[:2000])


if __name__ == "__main__":
    main()
