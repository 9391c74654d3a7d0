"""Measure a real module: parameters, FlopCounterMode FLOPs, bytes saved for backward, wall time."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

__all__ = ["Measurement", "measure"]


@dataclass
class Measurement:
    """What PyTorch reports for one module and input batch.

    ``flops``: forward FLOPs as counted by ``FlopCounterMode`` (2 per multiply-add, matmul-like kernels
    only); ``train_flops``: forward + backward (``None`` unless ``train``); ``saved_bytes``: activation
    bytes saved for backward (saved-tensor hooks; parameters and their views excluded);
    ``time_s``: wall time of the forward (and backward when training) pass.
    """

    params: int
    flops: int
    train_flops: int | None
    saved_bytes: int
    saved_tensors: int
    time_s: float


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
    start = time.perf_counter()
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
    elapsed = time.perf_counter() - start
    return Measurement(n_params, flops, train_flops, saved[0], saved[1], elapsed)
