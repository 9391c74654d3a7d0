"""``from_torch`` speed (``python -m benchmarks.from_torch_perf``).

Two ResNet-style builders in plain PyTorch with 4 structural parameters each, next to the same
networks in the DSL: (1) ``depth`` via ``range``, ``act`` looked up in a dict, ``se`` and ``pool`` as
``if`` (4 x 3 x 2 x 2 = 48 control-flow regions; ``width``, ``kernel``, ``batch``, ``res`` symbolic);
(2) the reference problem's shape, a depth per stage ``d0..d3`` in 1..4 (256 regions; widths, batch,
resolution, kernel symbolic), the DSL twin written with ``repeat``. Reports the time to trace the builder
and build the Problem, and ``p.costs(config)`` (median over random configurations, after the first
call compiles) for both; checks params and FLOPs agree on every configuration timed and reports how
far the other costs (memory, latency, ...) are from the twin's. Goals: tracing <= 10 s, ``p.costs``
within 2x of the DSL.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

import dnnsat as ds
from dnnsat.torch import from_torch

SPACE = ds.Space(
    {
        "batch": ds.Categorical([8, 32, 128]),
        "res": ds.Categorical([32, 64, 96]),
        "width": ds.Int(16, 256, step=16),
        "kernel": ds.Categorical([3, 5, 7]),
        "depth": ds.Int(1, 4),
        "act": ds.Categorical(["relu", "gelu", "silu"]),
        "se": ds.Categorical([False, True]),
        "pool": ds.Categorical(["max", "avg"]),
    }
)
ACTS = {"relu": nn.ReLU, "gelu": nn.GELU, "silu": nn.SiLU}


class SE(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(c, c // 4), nn.Linear(c // 4, c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = F.adaptive_avg_pool2d(x, 1).flatten(1)
        s = torch.sigmoid(self.fc2(F.relu(self.fc1(s))))
        return x * s.view(x.shape[0], x.shape[1], 1, 1)


class Block(nn.Module):
    def __init__(self, w: int, k: int, act: str, se: bool) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(w, w, k, padding=k // 2, bias=False)
        self.bn1 = nn.BatchNorm2d(w)
        self.conv2 = nn.Conv2d(w, w, k, padding=k // 2, bias=False)
        self.bn2 = nn.BatchNorm2d(w)
        self.act = ACTS[act]()
        self.se = SE(w) if se else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn2(self.conv2(self.act(self.bn1(self.conv1(x)))))
        if self.se is not None:
            y = self.se(y)
        return self.act(x + y)


def build(cfg: dict[str, Any]) -> nn.Module:
    """The user's builder: plain PyTorch."""
    w = cfg["width"]
    layers: list[nn.Module] = [nn.Conv2d(3, w, 3, padding=1, bias=False), nn.BatchNorm2d(w)]
    layers.append(ACTS[cfg["act"]]())
    layers += [Block(w, cfg["kernel"], cfg["act"], cfg["se"]) for _ in range(cfg["depth"])]
    layers.append(nn.MaxPool2d(2) if cfg["pool"] == "max" else nn.AvgPool2d(2))
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(w, 10)]
    return nn.Sequential(*layers)


def inputs(cfg: dict[str, Any]) -> tuple[torch.Tensor]:
    return (torch.empty(cfg["batch"], 3, cfg["res"], cfg["res"]),)


def dsl(v: Any) -> ds.Network:
    """The same network in the DSL."""
    net = ds.Network()
    x = net.input((v.batch, 3, v.res, v.res))
    x = net.activation(v.act, net.batchnorm(net.conv2d(x, v.width, 3, padding=1, bias=False)))

    def se(y: Any) -> Any:
        s = net.flatten(net.adaptive_avgpool2d(y, 1))
        s = net.sigmoid(net.linear(net.relu(net.linear(s, v.width // 4)), v.width))
        return net.mul(y, net.reshape(s, (y.shape[0], y.shape[1], 1, 1)))

    def block(i: int, x: Any) -> Any:
        pad = v.kernel // 2
        y = net.activation(v.act, net.batchnorm(net.conv2d(x, v.width, v.kernel, padding=pad, bias=False)))
        y = net.batchnorm(net.conv2d(y, v.width, v.kernel, padding=pad, bias=False))
        y = net.branch([(v.se == True, se), (True, lambda y: y)], y)  # noqa: E712 - a categorical's label
        return net.activation(v.act, net.add(x, y))

    x = net.repeat(v.depth, 4, block, x)
    x = net.choose(v.pool, {"max": lambda y: net.maxpool2d(y, 2), "avg": lambda y: net.avgpool2d(y, 2)}, x)
    return net.output(net.linear(net.flatten(net.adaptive_avgpool2d(x, 1)), 10))


# -- the reference ResNet shape: a depth per stage (4 structural parameters, 4^4 = 256 regions) -------

STAGES = ds.Space(
    {
        **{f"w{i}": ds.Int(16, 512, step=16) for i in range(4)},
        **{f"d{i}": ds.Int(1, 4) for i in range(4)},
        "batch": ds.Categorical([16, 32, 64]),
        "res": ds.Int(32, 224, step=32),
        "kernel": ds.Categorical([3, 5, 7]),
    }
)


class Basic(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, k: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, k, stride, padding=k // 2, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, k, padding=k // 2, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(y + (x if self.down is None else self.down(x)))


def stages(cfg: dict[str, Any]) -> nn.Module:
    k = cfg["kernel"]
    layers: list[nn.Module] = [
        nn.Conv2d(3, cfg["w0"], k, padding=k // 2),
        nn.BatchNorm2d(cfg["w0"]),
        nn.ReLU(),
    ]
    cin = cfg["w0"]
    for i in range(4):
        for j in range(cfg[f"d{i}"]):
            layers.append(Basic(cin, cfg[f"w{i}"], 2 if i and j == 0 else 1, k))
            cin = cfg[f"w{i}"]
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 1000)]
    return nn.Sequential(*layers)


def stages_inputs(cfg: dict[str, Any]) -> tuple[torch.Tensor]:
    return (torch.empty(cfg["batch"], 3, cfg["res"], cfg["res"]),)


def stages_dsl(v: Any) -> ds.Network:
    net = ds.Network()
    k, pad = v.kernel, v.kernel // 2
    x = net.input((v.batch, 3, v.res, v.res))
    x = net.relu(net.batchnorm(net.conv2d(x, v.w0, k, padding=pad)))

    def block(x: Any, w: Any, stride: int, down: bool) -> Any:
        y = net.relu(net.batchnorm(net.conv2d(x, w, k, stride, padding=pad, bias=False)))
        y = net.batchnorm(net.conv2d(y, w, k, padding=pad, bias=False))
        skip = net.batchnorm(net.conv2d(x, w, 1, stride, bias=False)) if down else x
        return net.relu(net.add(y, skip))

    for i in range(4):
        w = getattr(v, f"w{i}")
        if i == 0:  # the first block downsamples only where w0 differs from itself: never
            x = block(x, w, 1, False)
        else:
            x = block(x, w, 2, True)
        x = net.repeat(getattr(v, f"d{i}") - 1, 3, lambda j, t, w=w: block(t, w, 1, False), x)
    return net.output(net.linear(net.flatten(net.adaptive_avgpool2d(x, 1)), 1000))


def _costs_time(p: ds.Problem, configs: list[dict[str, Any]]) -> float:
    p.costs(configs[0])  # compiles
    times = []
    for cfg in configs:
        start = time.perf_counter()
        p.costs(cfg)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _compare(
    label: str, space: ds.Space, build: Any, inputs: Any, twin: Any, n: int, rng: random.Random
) -> None:
    configs = [{k: rng.choice(space[k].values()) for k in space} for _ in range(n)]
    start, cpu = time.perf_counter(), time.process_time()
    model = from_torch(build, inputs)
    traced = ds.Problem(space, model=model)
    trace_s, trace_cpu = time.perf_counter() - start, time.process_time() - cpu
    start = time.perf_counter()
    dsl_twin = ds.Problem(space, model=twin)
    dsl_s = time.perf_counter() - start
    worst = 0.0  # largest relative difference of any cost (memory, latency, ...) from the DSL twin's
    for cfg in configs:
        a, b = traced.costs(cfg), dsl_twin.costs(cfg)
        assert (a["params"], a["flops"]) == (b["params"], b["flops"]), cfg
        worst = max([worst, *(abs(a[k] - b[k]) / abs(b[k]) for k in b if b[k])])
    t_traced, t_dsl = _costs_time(traced, configs), _costs_time(dsl_twin, configs)
    print(f"{label}:")
    print(
        f"  from_torch: {model.regions} regions traced, Problem built in {trace_s:.2f} s "
        f"(tracing {model.trace_seconds:.2f} s; {trace_cpu:.2f} s of CPU time, the figure to compare on a "
        f"loaded machine); DSL Problem built in {dsl_s:.2f} s"
    )
    print(
        f"  p.costs median: from_torch {t_traced * 1e3:.3f} ms, DSL {t_dsl * 1e3:.3f} ms "
        f"(ratio {t_traced / t_dsl:.2f})"
    )
    print(
        f"  {len(configs)} configurations: params and FLOPs equal, every other cost within "
        f"{worst:.1e} (relative) of the DSL twin's"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=200, help="configurations timed")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    rng = random.Random(args.seed)
    _compare("ResNet-style, depth/act/se/pool (48 regions)", SPACE, build, inputs, dsl, args.n, rng)
    _compare("ResNet, a depth per stage d0..d3 in 1..4 (256 regions)", STAGES, stages, stages_inputs,
             stages_dsl, args.n, rng)  # fmt: skip


if __name__ == "__main__":
    main()
