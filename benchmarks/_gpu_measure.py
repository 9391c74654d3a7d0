"""One allocator-peak measurement on a GPU (tiny ones on the CPU), shared by gpu_memory and gpu_collect.

:func:`fresh_allocator` empties PyTorch's caching allocator (and the cuBLAS workspaces it holds) so that a
measurement starts from an empty cache, as dnnsat's allocator simulation does; :func:`zoo_module`
materializes a zoo configuration with :mod:`dnnsat.torch`; :func:`measure_mode` runs
:func:`dnnsat.torch.peak_memory` in one of :data:`MODES` and returns a JSON-ready row.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass
from typing import Any

import torch

from dnnsat.graph import Network
from dnnsat.space import Space
from dnnsat.torch import GraphModule, concretize, example_inputs, peak_memory

__all__ = ["MODES", "Mode", "fresh_allocator", "measure_mode", "used_bytes", "zoo_module"]


@dataclass(frozen=True)
class Mode:
    """A training (or inference) recipe: ``optimizer`` of :func:`dnnsat.torch.peak_memory`, ``autocast``
    dtype name (``None``: fp32), ``grad_scaler`` (fp16's ``torch.amp.GradScaler``)."""

    name: str
    train: bool
    optimizer: str
    autocast: str | None = None
    grad_scaler: bool = False

    def autocast_dtype(self, device: torch.device) -> torch.dtype | None:
        """The autocast dtype on ``device`` (fp16 needs CUDA: bfloat16 stands in on the CPU)."""
        if self.autocast is None:
            return None
        if device.type == "cpu":
            return torch.bfloat16
        return getattr(torch, self.autocast)  # type: ignore[no-any-return]


#: the recipes of the GPU collection (issue 28): fp32 Adam, SGD with momentum, fp16 autocast with a
#: GradScaler (Adam), bf16 autocast (Adam), no-grad inference
MODES: dict[str, Mode] = {
    m.name: m
    for m in (
        Mode("fp32_adam", True, "adam"),
        Mode("fp32_sgd_momentum", True, "momentum"),
        Mode("fp16_amp_adam", True, "adam", "float16", grad_scaler=True),
        Mode("bf16_amp_adam", True, "adam", "bfloat16"),
        Mode("inference", False, "sgd"),
    )
}


def fresh_allocator(device: torch.device) -> None:
    """Free what the caching allocator caches (and the cuBLAS workspaces it holds) and reset its peaks.

    Collects the young garbage generations first (a dropped model's reference cycles; the full
    collection costs ~0.15 s with dnnsat's expression graphs alive and frees no tensors)."""
    if device.type != "cuda":
        return
    gc.collect(1)
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        clear()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)


def used_bytes(device: torch.device) -> int | None:
    """Device memory in use by everything (``mem_get_info``: total - free); None off CUDA."""
    if device.type != "cuda":
        return None
    free, total = torch.cuda.mem_get_info(device)
    return int(total - free)


def zoo_module(
    net: Network, cfg: dict[str, Any], space: Space, device: torch.device, seed: int = 0
) -> tuple[torch.nn.Module, tuple[Any, ...]]:
    """``net`` at ``cfg`` as a module on ``device`` (weights allocated there) and its example inputs."""
    torch.manual_seed(seed)
    with torch.device(device):
        module = GraphModule(concretize(net, cfg, space))
    return module, example_inputs(module, device)


def measure_mode(module: torch.nn.Module, inputs: tuple[Any, ...], mode: Mode) -> dict[str, Any]:
    """One :func:`dnnsat.torch.peak_memory` run of ``module`` in ``mode``, as a row (bytes): allocated and
    reserved peaks (the latter None on the CPU), its baseline and parts, the process's device memory at
    the end (``used``) and the seconds it took."""
    params = list(module.parameters())
    device = params[0].device if params else inputs[0].device
    t0 = time.perf_counter()
    m = peak_memory(
        module,
        inputs,
        train=mode.train,
        optimizer=mode.optimizer,
        autocast=mode.autocast_dtype(device),
        grad_scaler=mode.grad_scaler,
    )
    return {
        "peak_allocated": m.peak,
        "peak_reserved": m.peak_reserved,
        "baseline": m.baseline,
        "params": m.params,
        "buffers": m.buffers,
        "optimizer_state": m.optimizer,
        "inputs": m.inputs,
        "used_after": used_bytes(device),
        "reserved_after": torch.cuda.memory_reserved(device) if device.type == "cuda" else None,
        "seconds": round(time.perf_counter() - t0, 4),
    }
