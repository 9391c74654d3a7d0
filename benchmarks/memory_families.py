"""Memory model vs PyTorch on model families beyond the zoo, natively and with AVX2 emulated.

``python -m benchmarks.memory_families [--quick]``. Each family of :mod:`benchmarks._families` is a
plain ``torch.nn`` module next to its DSL twin (parameter counts asserted equal); configurations are
drawn with a fixed seed. Per configuration and mode (training step with Adam, with SGD; no-grad
inference) the estimate ``memory_expressions(net, Budget(...))["memory"]`` is compared with
:func:`dnnsat.torch.peak_memory` of the torch module (one intra-op thread). ``inference/twin``
measures the DSL twin materialized by ``dnnsat.torch`` instead (the same kernels; each intermediate
freed after its last consumer), which separates the backend rules from the Python liveness of a
hand-written ``forward`` (block arguments and named locals live until it returns). ``.../from_torch``
estimates the hand-written module's own network, traced by :func:`dnnsat.torch.from_torch` (which sees
those Python lifetimes), against the same real peak. The same configurations
are then measured in a subprocess whose PyTorch runs oneDNN's AVX2 kernels and ATen's AVX2 code
(``ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2``); the model follows through
:func:`dnnsat.cost.detect_cpu_backend`. Nothing is fitted.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from typing import Any

import torch

from benchmarks._emulate import AVX2_ENV, family_table, outliers, run_worker
from benchmarks._families import FAMILIES, build, example_inputs
from benchmarks._report import machine, sampling_parser, update_readme, writes_readme
from dnnsat.cost import Budget, detect_cpu_backend, memory_expressions
from dnnsat.expr import compile_scalar
from dnnsat.space import Int, Space
from dnnsat.torch import GraphModule, concretize, from_torch, peak_memory

MODES = {
    "train/adam": ("train", "adam"),
    "train/sgd": ("train", "sgd"),
    "inference": ("inference", None),
    "inference/twin": ("inference", None),
    "train/adam/from_torch": ("train", "adam"),
    "inference/from_torch": ("inference", None),
}


def estimate(net: Any, mode: str) -> int:
    """Bytes the memory model predicts for ``net`` in a :data:`MODES` mode on this CPU's backend."""
    kind, opt = MODES[mode]
    ex = memory_expressions(net, Budget(mode=kind, optimizer=opt), None)
    return int(compile_scalar([ex["memory"]])({})[0])


def measure(family: str, cfg: dict[str, Any], modes: tuple[str, ...] = tuple(MODES)) -> list[dict[str, Any]]:
    """``[{family, cfg, mode, estimate, real}]`` for one configuration (bytes)."""
    out = []
    reals: dict[tuple[str, str | None], int] = {}  # the hand-written module's peaks, by (kind, optimizer)
    for mode in modes:
        kind, opt = MODES[mode]
        module, net = build(FAMILIES[family], cfg)
        xs = example_inputs(net, cfg)
        if mode == "inference/twin":
            torch.manual_seed(0)
            module = GraphModule(concretize(net, {}))
        if mode.endswith("/from_torch"):
            net = from_torch(lambda _: build(FAMILIES[family], cfg)[0], lambda _, xs=xs: xs).network(_ONE)
        key = (kind, opt) if mode != "inference/twin" else ("twin", None)
        if key not in reals:
            reals[key] = peak_memory(module, xs, train=kind == "train", optimizer=opt or "sgd").peak
        out.append(
            {"family": family, "cfg": cfg, "mode": mode, "estimate": estimate(net, mode), "real": reals[key]}
        )
    return out


_ONE = Space({"_": Int(1, 1)})  # from_torch traces one configuration (cfg is fixed in the builder)


def configs(per_family: int, seed: int, families: list[str]) -> list[tuple[str, dict[str, Any]]]:
    rng = random.Random(seed)
    return [(name, cfg) for name in families for cfg in FAMILIES[name].sample(per_family, rng)]


def run(per_family: int, seed: int, families: list[str]) -> list[dict[str, Any]]:
    """Measure every configuration in this process (one intra-op thread)."""
    torch.set_num_threads(1)
    rows = []
    for name, cfg in configs(per_family, seed, families):
        rows += measure(name, cfg)
    return rows


def build_parser() -> argparse.ArgumentParser:
    ap = sampling_parser(__doc__, 30, 0, 3)
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--native-only", action="store_true", help="skip the AVX2-emulated subprocess")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return ap


def main(argv: list[str] | None = None) -> None:
    ap = build_parser()
    args = ap.parse_args(argv)
    families = args.families.split(",")
    n = 3 if args.quick else args.per_family
    if args.worker:
        print(json.dumps(run(n, args.seed, families)))
        return
    write = writes_readme(ap, args)
    t0 = time.perf_counter()
    native = detect_cpu_backend().isa
    results = {f"native ({native})": run(n, args.seed, families)}
    if not args.native_only:
        worker_args = ["--per-family", str(n), "--seed", str(args.seed), "--families", ",".join(families)]
        results["AVX2 (emulated)"] = run_worker("benchmarks.memory_families", worker_args, AVX2_ENV)
    elapsed = time.perf_counter() - t0
    for backend, rows in results.items():
        for line in outliers(backend, rows, ("family", "mode", "cfg")):
            print(line)
    n_cfg = len(configs(n, args.seed, families))
    body = (
        f"Memory model vs PyTorch's peak (`dnnsat.torch.peak_memory`) on {len(families)} model families "
        f"written as plain `torch.nn` modules (`benchmarks/_families.py`, DSL twins with equal parameter "
        f"counts), {n_cfg} configurations (seed {args.seed}), each as a training step with Adam and with "
        f"SGD and as a no-grad inference forward (`inference/twin`: the DSL twin materialized by "
        f"`dnnsat.torch`, whose intermediates are freed after their last consumer, instead of the "
        f"hand-written module, whose `forward` keeps block arguments and named locals until it "
        f"returns; `.../from_torch`: the hand-written module traced by `dnnsat.torch.from_torch`, which "
        f"sees those Python lifetimes), one intra-op thread, on {machine()}, torch "
        f"{torch.__version__}: natively and with `ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2` (the "
        f"model follows the detected backend). Cells: median |error| / max |error| / worst underestimate "
        f"of `memory`; ✗: misses the goal (median ≤ 2 %, max ≤ 8 %, underestimate ≤ 3 %). "
        f"`python -m benchmarks.memory_families`, {elapsed:.0f} s.\n\n"
        + family_table(results, MODES, families)
    )
    print(body)
    if write:
        update_readme("memory_families", body)


if __name__ == "__main__":
    main()
