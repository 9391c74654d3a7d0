"""The training step differentiates only what its loss (on the first output) is computed from: an
auxiliary head returned beside the output (GoogLeNet, Inception v3), a branch whose result is dropped,
a parameter ``forward`` never uses get no gradient and their parameters no optimizer state, while what
they saved lives until the step ends. Adam steps of plain ``torch.nn`` models against ``peak_memory``
on this CPU (the model counted them all: up to 62 % over)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn as nn

import dnnsat as ds
from dnnsat.torch import peak_memory

SPACE = ds.Space({"w": ds.Categorical([8, 24]), "b": ds.Categorical([2, 6])})


class AuxHead(nn.Module):
    """A trunk with a classifier and an auxiliary convolutional head on an intermediate feature."""

    def __init__(self, c: dict[str, Any], mode: str) -> None:
        super().__init__()
        w, self.mode = c["w"], mode
        self.stem = nn.Conv2d(3, w, 3, padding=1)
        self.body = nn.Conv2d(w, w, 3, padding=1)
        self.head = nn.Linear(w, 10)
        self.aux = nn.Sequential(
            nn.Conv2d(w, 3 * w, 3, padding=1), nn.ReLU(), nn.Conv2d(3 * w, w, 3, padding=1)
        )
        self.aux_head = nn.Linear(w, 10)

    def forward(self, x: torch.Tensor) -> Any:
        x = torch.relu(self.stem(x))
        y = self.head(torch.relu(self.body(x)).mean((2, 3)))
        if self.mode == "unused":  # the auxiliary modules' parameters are never used
            return y
        aux = self.aux_head(self.aux(x).mean((2, 3)))
        if self.mode == "returned":
            return y, aux
        if self.mode == "summed":  # the loss reaches the auxiliary head: it is differentiated
            return y + aux
        return y  # "dropped": computed, then thrown away


def _image(c: dict[str, Any]) -> torch.Tensor:
    return torch.randn(c["b"], 3, 20, 20)


@pytest.mark.parametrize("mode", ["returned", "dropped", "unused", "summed"])
def test_only_what_the_loss_reaches_is_differentiated(mode: str) -> None:
    def build(c: dict[str, Any]) -> nn.Module:
        return AuxHead(c, mode)

    budget = ds.Budget(mode="train", optimizer="adam")
    problem = ds.Problem(SPACE, model=ds.from_torch(build, _image), budget=budget)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for cfg in ({"w": 24, "b": 6}, {"w": 8, "b": 2}):
            torch.manual_seed(0)
            real = peak_memory(build(cfg), [_image(cfg)]).peak
            estimate = problem.costs(cfg)["memory"]
            assert real - max(256, real // 1000) <= estimate <= 1.01 * real, (cfg, estimate / real - 1)
    finally:
        torch.set_num_threads(threads)
