"""GPU memory as the GPU sees it: dnnsat's caching-allocator simulation and footprint vs a CUDA GPU.

``python -m benchmarks.gpu_memory [--device h200] [--per-family 4]`` (a few minutes on one GPU; exits
with a message when CUDA is absent). Run it in a fresh process: the footprint is read around the
first use of each library.

1. **Footprint** (outside PyTorch's caching allocator): :func:`dnnsat.torch._calibrate._gpu_footprint`
   measures the CUDA context, cuBLAS, cuDNN and attention kernels and the cuBLAS workspace with
   ``torch.cuda.mem_get_info``, printed next to the device profile's numbers (``--device``).
2. **Reserved and allocated peaks**: for configurations of the zoo families (fixed seed, the CPU
   benchmark's spaces), materializes the model on ``cuda`` and runs :func:`dnnsat.torch.peak_memory`
   (two steady-state steps; Adam and SGD with torch's default foreach optimizers, Adam under float16
   autocast for ``dtype="mixed"``; a no-grad forward), after ``torch.cuda.empty_cache()`` and clearing
   the cuBLAS workspaces so that each configuration starts from an empty cache as the simulation does.
   The simulation (:class:`dnnsat.cost.memory.ReservedMemory`, the profile ``--device``) is compared
   with ``torch.cuda.max_memory_reserved`` and ``max_memory_allocated``; the symbolic ``memory`` (footprint
   + allocation peak in 2 MiB segments, a lower bound) with the process's memory at the end
   (``mem_get_info``: used, which includes the footprint of this process).

Signed errors are (estimate - measured) / measured: negative = underestimate (an OOM the user was not
warned about). The issue's goal: reserved within 5 % (median), no underestimate worse than 5 %.
Differences to expect: the simulation starts from an empty allocator, while ``peak_memory`` also runs a
no-grad probe forward before the steps (its cached segments can be reused or not).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from typing import Any

import torch

from benchmarks._gpu_measure import fresh_allocator, zoo_module
from benchmarks._report import add_write_options, markdown_table, update_readme, writes_readme
from benchmarks.memory_accuracy import MODES, _family_configs, _spaces, estimator, mode_setup
from dnnsat.cost import Budget, get_device
from dnnsat.cost.memory import ReservedMemory
from dnnsat.graph import Network, encode_config
from dnnsat.space import Space
from dnnsat.torch import peak_memory

MiB = 2**20


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="h200", help="device profile of the estimate (dnnsat devices)")
    ap.add_argument("--per-family", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    add_write_options(ap)
    return ap


def _checker(net: Network, space: Space, mode: str, opt: str | None, device: str) -> ReservedMemory:
    budget, _, _ = mode_setup(mode, opt, "cuda")
    gpu = Budget(mode=budget.mode, optimizer=budget.optimizer, dtype=budget.dtype, device=device)
    return ReservedMemory(net, gpu, space)


def _footprint_rows(profile: Any) -> tuple[list[list[Any]], str]:
    from dnnsat.torch._calibrate import _gpu_footprint

    context, libraries, workspace = _gpu_footprint(torch.device("cuda"))
    rows = [["context", f"{context / MiB:.0f}", f"{profile.context_bytes / MiB:.0f}"]]
    for name, nbytes in libraries.items():
        rows.append([name, f"{nbytes / MiB:.0f}", f"{profile.libraries.get(name, 0) / MiB:.0f}"])
    rows.append(
        [
            "cuBLAS workspace (in the allocator)",
            f"{workspace / MiB:.2f}",
            f"{profile.cublas_workspace_bytes / MiB:.2f}",
        ]
    )
    note = (
        "Footprint outside PyTorch's caching allocator (MiB), measured with mem_get_info around the first "
        f"use of each stack (dnnsat calibrate's method) vs the profile `{profile.name}`."
    )
    return rows, note


def _err(a: float, b: float) -> float:
    return (a - b) / b


def main(argv: list[str] | None = None) -> None:
    ap = build_parser()
    args = ap.parse_args(argv)
    write = writes_readme(ap, args)
    if not torch.cuda.is_available():
        sys.exit("gpu_memory: CUDA is not available on this machine; run it on a GPU (nothing measured)")
    profile = get_device(args.device)
    torch.backends.cudnn.benchmark = False
    foot_rows, foot_note = _footprint_rows(profile)  # first: before anything else loads a library
    rng = random.Random(args.seed)
    cuda = torch.device("cuda")
    rows = []
    t0 = time.perf_counter()
    for fam in _spaces():
        net, space, configs = _family_configs(fam, args.per_family, rng)
        checkers = {(m, o): _checker(net, space, m, o, profile.name) for m, o in MODES}
        for cfg in configs:
            env = encode_config(space, cfg)
            for mode, opt in MODES:
                _, train, amp = mode_setup(mode, opt, "cuda")
                sim = checkers[mode, opt].simulate(env)
                mem, _ = estimator(net, mode, opt, profile.name)(env)
                fresh_allocator(cuda)
                module, inputs = zoo_module(net, cfg, space, cuda)
                m = peak_memory(module, inputs, train=train, optimizer=opt or "sgd", autocast=amp)
                assert m.peak_reserved is not None  # measured on CUDA
                free, total = torch.cuda.mem_get_info()
                label = f"{mode}/{opt}" if opt else mode
                used = total - free - torch.cuda.memory_reserved() + m.peak_reserved
                rows.append((fam, label, sim, m.peak, m.peak_reserved, mem, used))
                del module, inputs
    elapsed = time.perf_counter() - t0

    table = []
    for label in sorted({r[1] for r in rows}):
        sel = [r for r in rows if r[1] == label]
        res = [_err(r[2].peak_reserved, r[4]) for r in sel]
        alloc = [_err(r[2].peak_allocated, r[3]) for r in sel]
        lower = sum(r[5] <= r[6] for r in sel)
        table.append([
            label, len(sel),
            f"{statistics.median(abs(e) for e in res):.1%}", f"{min(res):+.1%}", f"{max(res):+.1%}",
            f"{statistics.median(abs(e) for e in alloc):.1%}", f"{min(alloc):+.1%}",
            f"{lower}/{len(sel)}",
        ])  # fmt: skip
    per_family = []
    for fam in sorted({r[0] for r in rows}):
        res = [_err(r[2].peak_reserved, r[4]) for r in rows if r[0] == fam]
        per_family.append(
            [fam, len(res), f"{statistics.median(abs(e) for e in res):.1%}", f"{min(res):+.1%}"]
        )
    body = (
        f"GPU memory as the GPU sees it, on {torch.cuda.get_device_name()} (torch {torch.__version__}), "
        f"device profile `{profile.name}`: {len(rows) // len(MODES)} configurations x {len(MODES)} modes, "
        f"{elapsed:.0f} s.\n\n{foot_note}\n\n"
        + markdown_table(["stack", "measured", "profile"], foot_rows)
        + "\n\nSimulated caching allocator (dnnsat.cost.memory._allocator over the step's allocation "
        "sequence) vs "
        "`torch.cuda.max_memory_reserved` / `max_memory_allocated`; signed error (estimate - measured) / "
        "measured; last column: configurations where the symbolic `memory` (footprint + allocation peak) "
        "is at most the process's memory at the peak (a lower bound, as it should be).\n\n"
        + markdown_table(
            [
                "mode",
                "n",
                "median |err| reserved",
                "worst under",
                "worst over",
                "median |err| allocated",
                "worst under allocated",
                "symbolic <= measured",
            ],
            table,
        )  # fmt: skip
        + "\n\n"
        + markdown_table(["family", "n", "median |err| reserved", "worst under"], per_family)
    )
    print(body)
    if write:
        update_readme("gpu_memory", body)


if __name__ == "__main__":
    main()
