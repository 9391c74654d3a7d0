"""Cost of the caching-allocator simulation per configuration (the GPU memory budget's point check).

    python -m benchmarks.allocator_perf [--configs 50] [--trials 0]

For a 100-layer MLP (100 linear + ReLU, width a space variable), a 100-convolution CNN (conv + BN +
ReLU blocks, width and batch variables) and the zoo's GPT, training with Adam on ``a100-40gb``:
the allocation sequence's size (instructions per step), the one-off build and compile time, and the
median / p90 time of :meth:`ReservedMemory.simulate` per configuration (two steps replayed through
the allocator). ``--trials N`` also times ``DnnSATSampler`` (Optuna TPE) per trial on the zoo MLP with
a GPU memory budget. Prints a table; no GPU needed.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from typing import Any

from dnnsat import zoo
from dnnsat.cost import Budget
from dnnsat.cost.memory import ReservedMemory
from dnnsat.graph import Network, encode_config
from dnnsat.space import Categorical, Int, Space

LAYERS = 100


def _mlp() -> tuple[Network, Space]:
    space = Space({"batch": Categorical([32, 64, 128, 256]), "width": Int(128, 2048, step=128)})
    v = space.vars
    net = Network("mlp100")
    x = net.input((v.batch, 784))
    for _ in range(LAYERS):
        x = net.relu(net.linear(x, v.width))
    return net.output(net.linear(x, 10)), space


def _cnn() -> tuple[Network, Space]:
    space = Space({"batch": Categorical([8, 16, 32, 64]), "width": Int(16, 128, step=16)})
    v = space.vars
    net = Network("cnn100")
    x = net.input((v.batch, 3, 32, 32))
    for i in range(LAYERS):
        x = net.relu(net.batchnorm(net.conv2d(x, v.width * (1 + i // 50), 3, padding=1, bias=False)))
    x = net.flatten(net.adaptive_avgpool(x, 1))
    return net.output(net.linear(x, 10)), space


def _gpt() -> tuple[Network, Space]:
    p = zoo.gpt()
    return p.network, p.space


def _time_simulation(name: str, net: Network, space: Space, configs: int) -> list[Any]:
    budget = Budget(device="a100-40gb", optimizer="adam")
    t0 = time.thread_time()
    check = ReservedMemory(net, budget, space)
    build = time.thread_time() - t0
    rng = random.Random(0)
    cfgs = [{n: rng.choice(list(space[n].values())) for n in space} for _ in range(configs)]
    envs = [encode_config(space, c) for c in cfgs]
    t0 = time.thread_time()
    check.simulate(envs[0])
    first = time.thread_time() - t0
    times = []
    for env in envs:
        t0 = time.thread_time()
        check.simulate(env)
        times.append(time.thread_time() - t0)
    times.sort()
    p90 = times[int(0.9 * (len(times) - 1))]
    steps = len(check.plan.later)
    return [
        name,
        steps,
        f"{build * 1e3:.0f}",
        f"{first * 1e3:.0f}",
        f"{statistics.median(times) * 1e3:.2f}",
        f"{p90 * 1e3:.2f}",
    ]


def _time_sampler(trials: int) -> str:
    import optuna

    from dnnsat.integrations.optuna import DnnSATSampler, suggest

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    p = zoo.mlp(budget=Budget(device="a100-40gb", optimizer="adam", memory="1500MiB"))
    sampler = DnnSATSampler(p, optuna.samplers.TPESampler(seed=0), seed=0)
    study = optuna.create_study(sampler=sampler)
    per: list[float] = []

    def objective(trial: Any) -> float:
        return float(p.costs(suggest(trial, p))["params"])

    for _ in range(trials):
        t0 = time.thread_time()
        study.optimize(objective, n_trials=1)
        per.append(time.thread_time() - t0)
    rest = sorted(per[1:]) or per
    return (
        f"DnnSATSampler (TPE) on zoo.mlp, memory=1500MiB on a100-40gb: first trial {per[0] * 1e3:.0f} ms "
        f"(pruning), then p50 {statistics.median(rest) * 1e3:.1f} ms per trial ({trials} trials)"
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", type=int, default=50, help="configurations timed per network")
    ap.add_argument("--trials", type=int, default=0, help="also time DnnSATSampler for this many trials")
    args = ap.parse_args(argv)
    rows = [
        _time_simulation(n, *f(), args.configs)
        for n, f in (("mlp100", _mlp), ("cnn100", _cnn), ("gpt", _gpt))
    ]
    head = [
        "network",
        "instructions/step",
        "build ms",
        "first (compile) ms",
        "p50 ms/config",
        "p90 ms/config",
    ]
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    for r in [head, *rows]:
        print("  ".join(str(c).rjust(w) for c, w in zip(r, widths)))
    if args.trials:
        print(_time_sampler(args.trials))


if __name__ == "__main__":
    main()
