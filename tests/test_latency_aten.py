"""Latency of operators traced through ``from_torch``'s ATen fallback: a kernel FlopCounterMode counts
(a convolution or batched matmul written with the functional API and the model's own weights) is timed
as a matmul-like kernel, as its mapped twin is; views cost nothing. (They were timed as elementwise
kernels: 3-5x under their twins' latency.)"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import dnnsat as ds

SPACE = ds.Space({"w": ds.Categorical([64, 256]), "b": ds.Categorical([8, 64])})


class Mapped(nn.Module):
    def __init__(self, c: dict[str, Any]) -> None:
        super().__init__()
        self.conv = nn.Conv2d(16, c["w"], 3, padding=1)
        self.fc = nn.Linear(c["w"], c["w"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.conv(x).mean((2, 3)))


class Functional(Mapped):
    """The same computation through functions with the modules' weights (the ATen fallback)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.conv2d(x, self.conv.weight, self.conv.bias, padding=1).mean((2, 3))
        bias = self.fc.bias.expand(1, 1, -1)
        return torch.baddbmm(bias, y[None], self.fc.weight.t()[None])[0].reshape_as(y)


def _inputs(c: dict[str, Any]) -> torch.Tensor:
    return torch.randn(c["b"], 16, 56, 56)


@pytest.mark.parametrize("device", ["cpu", "a100", "rtx4090"])
def test_fallback_kernels_timed_like_their_mapped_twins(device: str) -> None:
    budget = ds.Budget(latency="1s", device=device)
    mapped = ds.Problem(SPACE, model=ds.from_torch(Mapped, _inputs), budget=budget)
    functional = ds.Problem(SPACE, model=ds.from_torch(Functional, _inputs), budget=budget)
    for cfg in ({"w": 64, "b": 8}, {"w": 256, "b": 64}):
        ratio = functional.costs(cfg)["latency"] / mapped.costs(cfg)["latency"]
        assert 0.9 <= ratio <= 1.4, (cfg, ratio)
