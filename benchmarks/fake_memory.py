"""A second opinion on CUDA tensor memory without a GPU: PyTorch's fake-tensor memory tracker.

``python -m benchmarks.fake_memory [--quick]``. Each zoo configuration is materialized with fake
CUDA tensors (``FakeTensorMode``: shapes, dtypes and devices, no storage) and run under
``torch.distributed._tools.mem_tracker.MemTracker``, which counts every live tensor storage rounded
to the CUDA caching allocator's 512-byte blocks; its peak is compared with dnnsat's GPU-device
estimate (``a100-80gb``) less its fixed parts (``memory - memory_overhead``: CUDA context, cuDNN
workspace, 2 MiB segment rounding), i.e. the tensor memory both count.

On a CPU-only build of torch (as here) only inference runs: any autograd-recorded op on a fake CUDA
tensor that requires grad aborts the process (``c10::Error: PyTorch is not linked with support for
cuda devices`` from the CUDA device guard, thrown where it cannot be caught); the benchmark checks
that in a subprocess and reports it. Fake tensors run no kernels, so kernel workspaces are outside
both figures.
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import time
from typing import Any

import torch

from benchmarks._report import markdown_table, sampling_parser, update_readme, writes_readme
from benchmarks.memory_accuracy import _family_configs, _spaces
from dnnsat.cost import Budget, get_device, memory_expressions
from dnnsat.expr import compile_scalar
from dnnsat.graph import Network, encode_config
from dnnsat.space import Space
from dnnsat.torch import to_torch

DEVICE = "a100-80gb"
_TRAIN_PROBE = """
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
with FakeTensorMode():
    w = torch.nn.Parameter(torch.empty(16, 8, device="cuda"))
    torch.nn.functional.linear(torch.empty(4, 8, device="cuda"), w).sum().backward()
print("trained")
"""


def fake_training_runs() -> tuple[bool, str]:
    """(whether a fake-CUDA training step runs in this torch build, what it printed last)."""
    res = subprocess.run([sys.executable, "-c", _TRAIN_PROBE], capture_output=True, text=True)
    lines = [ln.strip() for ln in (res.stdout + res.stderr).splitlines() if ln.strip()]
    why = next((ln for ln in lines if ln.startswith("what():")), lines[-1] if lines else "")
    return res.returncode == 0, why


def fake_inference_peak(net: Network, space: Space, cfg: dict[str, Any]) -> int:
    """MemTracker's peak bytes on fake ``cuda:0`` of a no-grad forward of ``net`` at ``cfg`` (weights,
    buffers and inputs included). MemTracker hooks the gradient of every module output that requires
    one, an autograd op that aborts on fake CUDA: the modules of ``parameter`` ops return theirs
    detached."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker

    module = to_torch(net, cfg, space, device="meta").eval()
    with FakeTensorMode():
        for mod in module.modules():  # fake CUDA storage for every weight and buffer (no init kernels)
            for name, p in list(mod.named_parameters(recurse=False)):
                setattr(mod, name, torch.nn.Parameter(torch.empty(p.shape, device="cuda")))
            for name, b in list(mod.named_buffers(recurse=False)):
                setattr(mod, name, torch.empty(b.shape, dtype=b.dtype, device="cuda"))
            if type(mod).__name__ == "Param":
                mod.forward = lambda mod=mod: mod.weight.detach()  # type: ignore[method-assign]
        inputs = [
            torch.zeros(s, dtype=torch.long, device="cuda") if d == "int64" else torch.empty(s, device="cuda")
            for s, d in zip(module.input_shapes, module.input_dtypes)
        ]
        tracker = MemTracker()
        tracker.track_external(module, *inputs)
        with tracker, torch.no_grad():
            module(*inputs)
        peak = tracker.get_tracker_snapshot("peak")
    return int(next(s["Total"] for d, s in peak.items() if str(d).startswith("cuda")))


def dnnsat_tensor_memory(net: Network, space: Space, cfg: dict[str, Any]) -> int:
    """dnnsat's inference peak on the GPU profile less its fixed parts (bytes)."""
    ex = memory_expressions(net, Budget(mode="inference"), get_device(DEVICE))
    memory, overhead = compile_scalar([ex["memory"], ex["memory_overhead"]])(encode_config(space, cfg))
    return int(memory - overhead)


def build_parser() -> argparse.ArgumentParser:
    return sampling_parser(__doc__, 8, 1, 2)


def main(argv: list[str] | None = None) -> None:
    ap = build_parser()
    args = ap.parse_args(argv)
    write = writes_readme(ap, args)
    n = 2 if args.quick else args.per_family
    rng = random.Random(args.seed)
    t0 = time.perf_counter()
    trains, why = fake_training_runs()
    table, errors = [], []
    for fam in _spaces():
        net, space, configs = _family_configs(fam, n, rng)
        errs = []
        for cfg in configs:
            fake, est = fake_inference_peak(net, space, cfg), dnnsat_tensor_memory(net, space, cfg)
            errs.append((est - fake) / fake)
            if abs(errs[-1]) > 0.03:
                print(f"  {fam} {cfg}: dnnsat {est / 2**20:.2f} MiB, MemTracker {fake / 2**20:.2f} MiB "
                      f"({errs[-1]:+.1%})")  # fmt: skip
        abs_errs = [abs(e) for e in errs]
        errors += abs_errs
        table.append([fam, len(errs), f"{statistics.median(abs_errs):.2%}", f"{max(abs_errs):.2%}",
                      f"{min(errs):+.2%}"])  # fmt: skip
    table.append(["all", len(errors), f"{statistics.median(errors):.2%}", f"{max(errors):.2%}", ""])
    status = "runs" if trains else f"does not run on this build of torch {torch.__version__} (`{why}`)"
    body = (
        f"CUDA tensor memory without a GPU: dnnsat's inference estimate on `{DEVICE}` less its fixed parts "
        f"(context, cuDNN workspace, segment rounding) vs PyTorch's `MemTracker` on fake CUDA tensors "
        f"(512-byte blocks), zoo configurations (seed {args.seed}), {time.perf_counter() - t0:.0f} s. "
        f"A fake-CUDA training step {status}, so training is not compared.\n\n"
        + markdown_table(["family", "n", "median abs. diff.", "max abs. diff.", "min signed diff."], table)
    )
    print(body)
    if write:
        update_readme("fake_memory", body)


if __name__ == "__main__":
    main()
