"""Mixed-precision convolutions: the memory model vs PyTorch's peak under bfloat16 CPU autocast.

``python -m benchmarks.memory_conv_mixed [--quick] [--native-only]``. One Adam training step per
single-convolution network (``input [-> BatchNorm] -> conv -> BatchNorm -> ReLU -> mean``; the
BatchNorm in front makes the conv's input need a gradient) under ``torch.autocast("cpu",
dtype=torch.bfloat16)``, measured with :func:`dnnsat.torch.peak_memory` (one intra-op thread), against
``memory_expressions(net, Budget(mode="train", optimizer="adam", dtype="mixed"))["memory"]``. Four grids:
first layers (the input needs no gradient; odd channel counts, 1x1, kxk and depthwise, strides 1-2),
inner convolutions (channels 16-64, groups 1/2/4, kernels 1/3, strides 1-2), depthwise and pointwise
convolutions with odd channel counts (MobileNet's), expansions and projections. Natively and, in a
subprocess, with AVX2 emulated (where oneDNN has no bfloat16 kernels and PyTorch's own run). The rules
were read off allocator traces of other shapes (``dnnsat/cost/memory/_cpu.py``); nothing is fitted here.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from typing import Any

import torch

from benchmarks._emulate import AVX2_ENV, cell, outliers, run_worker
from benchmarks._report import add_write_options, machine, markdown_table, update_readme, writes_readme
from dnnsat.cost import Budget, detect_cpu_backend, memory_expressions
from dnnsat.expr import compile_scalar
from dnnsat.graph import Network
from dnnsat.torch import GraphModule, concretize, example_inputs, peak_memory

MIXED = Budget(mode="train", optimizer="adam", dtype="mixed")
Conv = tuple[int, int, int, int, int, int, int, bool]  # batch, cin, res, kernel, stride, groups, cout, pre


def grids() -> dict[str, list[Conv]]:
    """The convolutions of each grid."""
    product = itertools.product
    first: list[Conv] = []
    for c, r, s in product([12, 18, 24, 36], [16, 32], [1, 2]):
        first += [(4, c, r, k, s, c, c, False) for k in (3, 7)]  # depthwise
        first += [(4, c, r, k, s, 1, 2 * c, False) for k in (1, 3, 7)]
    inner = [
        (b, c, r, k, s, g, c * s, True)
        for b, c, r, k, s, g in product([1, 4], [16, 32, 48, 64], [16, 32], [1, 3], [1, 2], [1, 2, 4])
    ]
    odd: list[Conv] = []
    for b, c, r in product([1, 4], [12, 18, 24, 36, 72], [16, 32]):
        odd += [(b, c, r, k, s, c, c, True) for k, s in product([3, 5, 7], [1, 2])]  # depthwise
        odd += [(b, c, r, 1, s, 1, c, True) for s in (1, 2)] + [(b, c, r, 1, 1, 1, 6 * c, True)]
    expansion: list[Conv] = []
    for b, c, r, e in product([1, 4], [8, 12, 16, 24], [16, 32], [3, 6]):
        expansion += [(b, c, r, 1, 1, 1, e * c, True), (b, e * c, r, 1, 1, 1, c, True)]
    return {"first layers": first, "inner (groups 1/2/4)": inner, "depthwise/pointwise, odd channels": odd,
            "expansion/projection": expansion}  # fmt: skip


def network(conv: Conv) -> Network:
    b, cin, res, k, s, g, cout, pre = conv
    net = Network()
    x = net.input((b, cin, res, res))
    if pre:
        x = net.batchnorm(x)
    y = net.conv2d(x, cout, k, stride=s, padding=k // 2, groups=g, bias=False)
    net.output(net.mean(net.flatten(net.relu(net.batchnorm(y)), 2), 2))
    return net


def measure(conv: Conv) -> tuple[int, int]:
    """(estimate, PyTorch's peak) of one Adam step of ``conv``'s network, bytes."""
    net = network(conv)
    est = int(compile_scalar([memory_expressions(net, MIXED, None)["memory"]])({})[0])
    torch.manual_seed(0)
    module = GraphModule(concretize(net, {}))
    real = peak_memory(module, example_inputs(module, "cpu"), optimizer="adam", autocast=torch.bfloat16).peak
    return est, real


def run(quick: bool) -> list[dict[str, Any]]:
    torch.set_num_threads(1)
    rows = []
    for name, convs in grids().items():
        for conv in convs[:: 8 if quick else 1]:
            est, real = measure(conv)
            rows.append({"grid": name, "conv": list(conv), "estimate": est, "real": real})
    return rows


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="every 8th convolution")
    ap.add_argument("--native-only", action="store_true", help="skip the AVX2-emulated subprocess")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    add_write_options(ap)
    return ap


def main(argv: list[str] | None = None) -> None:
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(run(args.quick)))
        return
    write = writes_readme(ap, args)
    t0 = time.perf_counter()
    results = {f"native ({detect_cpu_backend().isa})": run(args.quick)}
    if not args.native_only:
        results["AVX2 (emulated)"] = run_worker(
            "benchmarks.memory_conv_mixed", ["--quick"] if args.quick else [], AVX2_ENV
        )
    elapsed = time.perf_counter() - t0
    for backend, rows in results.items():
        for line in outliers(backend, rows, ("grid", "conv")):
            print(line)
    table = []
    for name in [*grids(), "all"]:
        cells: list[Any] = [name, 0]
        for rows in results.values():
            sel = [r for r in rows if name in ("all", r["grid"])]
            cells[1] = len(sel)
            cells.append(cell(sel))
        table.append(cells)
    body = (
        f"Mixed-precision convolutions (`dtype='mixed'`) vs PyTorch's peak under bfloat16 CPU autocast "
        f"({machine()}, torch {torch.__version__}): one Adam step per single-convolution network "
        f"(`input [-> BatchNorm] -> conv -> BatchNorm -> ReLU -> mean`, batch, channels in, resolution, "
        f"kernel, stride, groups, channels out in the grids of `benchmarks/memory_conv_mixed.py`), one "
        f"intra-op thread, natively and with AVX2 emulated. Cells: median |error| / max |error| / worst "
        f"underestimate of `memory`; ✗: misses the goal (median ≤ 2 %, max ≤ 8 %, underestimate ≤ 3 %). "
        f"`python -m benchmarks.memory_conv_mixed`, {elapsed:.0f} s.\n\n"
        + markdown_table(["grid", "n", *(f"{b}: median / max / worst under" for b in results)], table)
    )
    print(body)
    if write:
        update_readme("memory_conv_mixed", body)


if __name__ == "__main__":
    main()
