"""Measure a real module: parameters, FlopCounterMode FLOPs, bytes saved for backward, wall time.

Peak memory of a training step or inference: :func:`dnnsat.torch.peak_memory` (``_memory.py``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from ._memory import MemoryTracker

__all__ = ["Measurement", "measure"]


@dataclass
class Measurement:
    """What PyTorch reports for one module and input batch.

    ``flops``: forward FLOPs as counted by ``FlopCounterMode`` (2 per multiply-add, matmul-like kernels
    only); ``train_flops``: forward + backward (``None`` unless ``train``); ``saved_bytes``: activation
    bytes saved for backward (saved-tensor hooks; parameters and their views excluded);
    ``time_s``: wall time of the forward (and backward when training) pass, with the counters on;
    ``peak_bytes``: most tensor bytes live at once during that pass, parameters and inputs included
    (:class:`~dnnsat.torch.MemoryTracker`; ``None`` on the meta device). For a whole training step with
    an optimizer use :func:`~dnnsat.torch.peak_memory`.
    """

    params: int
    flops: int
    train_flops: int | None
    saved_bytes: int
    saved_tensors: int
    time_s: float
    peak_bytes: int | None = None


def _leaves(out: Any) -> list[Any]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, tuple | list):
        return [t for o in out for t in _leaves(o)]
    return []


def measure(
    module: torch.nn.Module, example_inputs: Sequence[Any], train: bool = True, backward: bool | None = None
) -> Measurement:
    """Run ``module(*example_inputs)`` once in train (or eval) mode and measure it.

    ``backward`` (default: ``train``) also runs a backward pass and reports ``train_flops``.
    """
    backward = train if backward is None else backward
    params = list(module.parameters())
    n_params = sum(p.numel() for p in params)
    pids = {id(p) for p in params}
    saved = [0, 0]

    def pack(t: torch.Tensor) -> torch.Tensor:
        base = t._base if t._base is not None else t
        if id(t) not in pids and id(base) not in pids:
            saved[0] += t.numel() * t.element_size()
            saved[1] += 1
        return t

    module.train(train)
    counter = FlopCounterMode(display=False)
    tensors = [*params, *(x for x in example_inputs if isinstance(x, torch.Tensor))]
    device = tensors[0].device if tensors else torch.device("cpu")
    tracker = (
        MemoryTracker(module, *example_inputs, device=device) if device.type in ("cpu", "cuda") else None
    )
    start = time.perf_counter()
    with contextlib.ExitStack() as stack:
        if tracker is not None:
            stack.enter_context(tracker)
        flops, train_flops = _run(module, example_inputs, backward, counter, pack)
    elapsed = time.perf_counter() - start
    peak = tracker.peak if tracker is not None else None
    return Measurement(n_params, flops, train_flops, saved[0], saved[1], elapsed, peak)


def _run(
    module: torch.nn.Module,
    example_inputs: Sequence[Any],
    backward: bool,
    counter: FlopCounterMode,
    pack: Any,
) -> tuple[int, int | None]:
    """Forward (and backward) under the FLOP counter and the saved-tensor hook: (flops, train_flops)."""
    with counter, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = module(*example_inputs)
    flops = int(counter.get_total_flops())
    train_flops = None
    if backward:
        leaves = [t for t in _leaves(out) if t.requires_grad]
        if leaves:
            back = FlopCounterMode(display=False)
            with back:
                sum(t.float().sum() for t in leaves).backward()  # type: ignore[union-attr]
            train_flops = flops + int(back.get_total_flops())
        else:
            train_flops = flops
    return flops, train_flops
