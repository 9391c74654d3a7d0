"""Memory model vs PyTorch on a CUDA GPU: allocated and reserved peaks of training steps and inference.

``python -m benchmarks.gpu_memory [--device h200] [--per-family 4]`` (about 3 minutes on one GPU).
For configurations of the zoo families (fixed seed, the CPU benchmark's spaces), materializes the
model on ``cuda``, runs two steady-state steps with :func:`dnnsat.torch.peak_memory` (Adam and SGD,
torch's default foreach optimizers; and Adam under float16 autocast for ``dtype="mixed"``) and a
no-grad forward, and compares with the model's estimate
for the device profile ``--device``: ``memory - memory_overhead`` (tensors, 512-byte blocks) against
``torch.cuda.max_memory_allocated``, and ``memory - context_bytes`` (2 MiB segments, conv workspace)
against ``torch.cuda.max_memory_reserved``. The CUDA context itself is not visible to torch's
statistics; the process's used device memory (``cudaMemGetInfo``) is printed next to ``memory``.
Exits with a message when CUDA is absent.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time

import torch

from benchmarks._report import add_write_options, markdown_table, update_readme, writes_readme
from benchmarks.memory_accuracy import MODES, _family_configs, _spaces, estimator, mode_setup
from dnnsat.cost import get_device
from dnnsat.graph import encode_config
from dnnsat.torch import GraphModule, concretize, example_inputs, peak_memory


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="h200", help="device profile of the estimate (dnnsat devices)")
    ap.add_argument("--per-family", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    add_write_options(ap)
    return ap


def main(argv: list[str] | None = None) -> None:
    ap = build_parser()
    args = ap.parse_args(argv)
    write = writes_readme(ap, args)
    if not torch.cuda.is_available():
        sys.exit("gpu_memory: CUDA is not available on this machine; run it on a GPU (nothing measured)")
    profile = get_device(args.device)
    torch.backends.cudnn.benchmark = False
    rng = random.Random(args.seed)
    rows = []
    t0 = time.perf_counter()
    for fam in _spaces():
        net, space, configs = _family_configs(fam, args.per_family, rng)
        for cfg in configs:
            env = encode_config(space, cfg)
            for mode, opt in MODES:
                _, train, amp = mode_setup(mode, opt, "cuda")
                mem, over = estimator(net, mode, opt, profile.name)(env)
                torch.cuda.empty_cache()
                torch.manual_seed(0)
                with torch.device("cuda"):
                    module = GraphModule(concretize(net, cfg, space))
                inputs = example_inputs(module, "cuda")
                m = peak_memory(module, inputs, train=train, optimizer=opt or "sgd", autocast=amp)
                free, total = torch.cuda.mem_get_info()
                label = f"{mode}/{opt}" if opt else mode
                alloc_est, reserved_est = mem - over, mem - profile.context_bytes
                rows.append((fam, label, alloc_est, m.peak, reserved_est, m.peak_reserved, mem, total - free))
                del module
    elapsed = time.perf_counter() - t0

    def err(a: float, b: float) -> float:
        return abs(a - b) / b

    table = []
    for label in sorted({r[1] for r in rows}):
        sel = [r for r in rows if r[1] == label]
        ea = [err(r[2], r[3]) for r in sel]
        er = [err(r[4], r[5]) for r in sel]
        table.append([label, len(sel), f"{statistics.median(ea):.2%}", f"{max(ea):.2%}",
                      f"{statistics.median(er):.2%}", f"{max(er):.2%}"])  # fmt: skip
    used = statistics.median(r[7] - r[5] for r in rows)
    body = (
        f"Memory model vs CUDA on {torch.cuda.get_device_name()} (torch {torch.__version__}), device "
        f"profile `{profile.name}`: {len(rows) // len(MODES)} configurations x {len(MODES)} modes, "
        f"{elapsed:.0f} s. |error| of the estimate without framework overhead against "
        f"`max_memory_allocated`, and with allocator segments and conv workspace against "
        f"`max_memory_reserved`. Process memory beyond the reserved peak (context, cuBLAS/cuDNN "
        f"handles; median): {used / 2**20:.0f} MiB, profile's context_bytes "
        f"{profile.context_bytes / 2**20:.0f} MiB.\n\n"
        + markdown_table(
            [
                "mode",
                "n",
                "median err. allocated",
                "max err. allocated",
                "median err. reserved",
                "max err. reserved",
            ],
            table,
        )  # fmt: skip
    )
    print(body)
    if write:
        update_readme("gpu_memory", body)


if __name__ == "__main__":
    main()
