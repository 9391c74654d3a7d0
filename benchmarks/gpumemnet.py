"""Real-GPU evidence: dnnsat's GPU memory vs the GPUMemNet MLP measurements (A100-SXM4-40GB, nvidia-smi).

    python -m benchmarks.gpumemnet --mlp PATH/mlp_data_step2.csv [--limit N] [--device a100-40gb]

GPUMemNet (github.com/itu-rad/GPUMemNet, ``Datasets/MLP/mlp_data_step2.csv``; also on Hugging Face as
``ehyo/GPU-Resources-Estimation-for-Deep-Learning-Training-Tasks``, CC BY 4.0; not shipped with dnnsat)
trained ~3,000 random MLPs for 75 s each, alone on an A100-SXM4-40GB, fp32, Adam, cross-entropy on a
softmax output, and recorded the peak of ``nvidia-smi`` memory.used (``Max GPU Memory (MiB)``). Each
row lists its layers (``Activations-Params``: linear widths, batch norm, activation, dropout) and the
batch size, so the network is rebuilt in the DSL layer by layer (input width from ``Filename``). Their
activations without a catalog op are mapped to one that keeps the same tensors for backward: SELU ->
ELU (torch runs SELU as a scaled ELU), Softplus -> GELU (both keep the input), PReLU -> leaky ReLU (the
input; its one-element weight is left out), Identity -> none.

Reported: the signed error of ``footprint + simulated reserved peak`` (:class:`~dnnsat.cost.ReservedMemory`
on ``--device``) and of the symbolic ``memory`` (the lower bound) against the measured peak, and the
fixed part the data implies (``measured - simulated reserved``: what the footprint should be). Then a
fits / does-not-fit check at capacities the data spans (the dataset has no crash in it at 40 GiB):
a configuration "crashes" at capacity C when its measured peak exceeds C, and dnnsat says "fits" when
its estimate is at most C. Not modelled here: the data loader's next batch arriving while the previous
one is alive, torchsummary's probe forward.
"""

from __future__ import annotations

import argparse
import ast
import csv
import re
import statistics
import sys
import time
from typing import Any

from dnnsat.cost import Budget, ReservedMemory, get_device, memory_expressions
from dnnsat.expr import compile_scalar
from dnnsat.graph import Network, Tensor

MiB = 2**20
_ACTIVATIONS = {
    "ReLU": "relu", "GELU": "gelu", "SiLU": "silu", "Sigmoid": "sigmoid", "Tanh": "tanh",
    "LeakyReLU": "leaky_relu", "ELU": "elu", "Mish": "mish", "SELU": "elu", "Softplus": "gelu",
    "PReLU": "leaky_relu", "Identity": None,
}  # fmt: skip


def build_mlp(row: dict[str, str]) -> Network:
    """The network of one GPUMemNet MLP row (batch from ``Batch Size``, input width from ``Filename``)."""
    found = re.search(r"input:(\d+)_", row["Filename"])
    if found is None:
        raise ValueError(f"gpumemnet: no input width in Filename {row['Filename']!r}")
    net = Network("gpumemnet-mlp")
    x: Tensor = net.input((int(row["Batch Size"]), int(found.group(1))))
    for kind, width, _ in ast.literal_eval(row["Activations-Params"]):
        if kind == "linear":
            x = net.linear(x, int(width))
        elif kind == "batch_normalization":
            x = net.batchnorm(x)
        elif kind == "dropout":
            x = net.dropout(x, 0.5)
        elif kind == "Softmax":
            x = net.softmax(x)
        elif kind in _ACTIVATIONS:
            op = _ACTIVATIONS[kind]
            if op is not None:
                x = getattr(net, op)(x)
        else:
            raise ValueError(f"gpumemnet: layer kind {kind!r} has no DSL counterpart")
    return net.output(x)


def _percent(values: list[float]) -> str:
    """Median, 5th/95th percentiles, min and max of signed errors."""
    values = sorted(values)
    p5, p95 = (values[min(len(values) - 1, int(q * (len(values) - 1)))] for q in (0.05, 0.95))
    return (
        f"median {statistics.median(values):+.1%}, p5 {p5:+.1%}, p95 {p95:+.1%}, "
        f"min {values[0]:+.1%}, max {values[-1]:+.1%}"
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mlp", required=True, help="path of GPUMemNet's mlp_data_step2.csv (or step1)")
    ap.add_argument("--device", default="a100-40gb", help="device profile of the estimate")
    ap.add_argument("--limit", type=int, default=0, help="use the first N rows only (0: all)")
    args = ap.parse_args(argv)
    profile = get_device(args.device)
    budget = Budget(device=profile, optimizer="adam")
    with open(args.mlp, newline="") as fh:
        rows = list(csv.DictReader(fh))
    if args.limit:
        rows = rows[: args.limit]
    if not rows:
        sys.exit(f"gpumemnet: no rows in {args.mlp}")
    t0 = time.perf_counter()
    out: list[tuple[float, Any, float]] = []  # (measured bytes, simulation, symbolic bytes)
    skipped = 0
    for row in rows:
        try:
            net = build_mlp(row)
        except (ValueError, SyntaxError):
            skipped += 1
            continue
        sim = ReservedMemory(net, budget).simulate({})
        (symbolic,) = compile_scalar([memory_expressions(net, budget, profile)["memory"]])({})
        out.append((float(row["Max GPU Memory (MiB)"]) * MiB, sim, float(symbolic)))
    elapsed = time.perf_counter() - t0
    sim_err = [(s.total - m) / m for m, s, _ in out]
    sym_err = [(y - m) / m for m, _, y in out]
    implied = [(m - s.peak_reserved) / MiB for m, s, _ in out]
    print(f"GPUMemNet MLPs: {len(out)} rows ({skipped} skipped), profile {profile.name!r}, {elapsed:.0f} s")
    print(f"  footprint + simulated reserved vs nvidia-smi peak: {_percent(sim_err)}")
    print(f"  symbolic memory (lower bound) vs nvidia-smi peak:  {_percent(sym_err)}")
    fp = statistics.median(s.footprint / MiB for _, s, _ in out)
    print(
        f"  fixed part implied by the data (measured - simulated reserved), MiB: min {min(implied):.0f}, "
        f"median {statistics.median(implied):.0f}; profile footprint (median over rows) {fp:.0f}"
    )
    measured = sorted(m for m, _, _ in out)
    for q in (0.5, 0.8, 0.95):
        cap = measured[int(q * (len(measured) - 1))]
        crash = [m > cap for m, _, _ in out]
        says_fit = [s.total <= cap for _, s, _ in out]
        missed = sum(c and f for c, f in zip(crash, says_fit))
        alarms = sum((not c) and (not f) for c, f in zip(crash, says_fit))
        share = alarms / max(1, len(out) - sum(crash))
        print(
            f"  capacity {cap / MiB:.0f} MiB ({sum(crash)} of {len(out)} above it): said 'fits' but above: "
            f"{missed}; false alarms: {alarms} ({share:.1%} of those that fit)"
        )


if __name__ == "__main__":
    main()
