"""``from_torch`` on modules whose call is more than their ``forward``: forward pre-hooks and hooks
(run as ``nn.Module.__call__`` runs them), parametrized weights (``weight_norm``, ``orthogonal``-style
``torch.nn.utils.parametrize``), and kernels with placeholder outputs (``EmbeddingBag``). Params,
FLOPs and validity against PyTorch on every configuration; an Adam step's memory never under."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn as nn
from torch.nn.utils import parametrizations, parametrize

import dnnsat as ds
from dnnsat.torch import TraceError, peak_memory

SPACE = ds.Space({"w": ds.Categorical([3, 8, 13]), "b": ds.Categorical([1, 4])})
CONFIGS = [{"w": w, "b": b} for w in (3, 8, 13) for b in (1, 4)]


class Symmetric(nn.Module):
    """A parametrization: the weight is ``A + A^T`` of the stored parameter."""

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        return a.triu() + a.triu(1).transpose(-1, -2)


def _weight_norm(c: dict[str, Any]) -> nn.Module:
    return nn.Sequential(parametrizations.weight_norm(nn.Linear(6, c["w"])), nn.ReLU(), nn.Linear(c["w"], 2))


def _symmetric(c: dict[str, Any]) -> nn.Module:
    inner = nn.Linear(c["w"], c["w"])
    parametrize.register_parametrization(inner, "weight", Symmetric())
    return nn.Sequential(nn.Linear(6, c["w"]), inner, nn.Linear(c["w"], 2))


def _hooks(c: dict[str, Any]) -> nn.Module:
    first, second = nn.Linear(6, c["w"]), nn.Linear(c["w"], 2)
    first.register_forward_pre_hook(lambda m, args: (args[0] * 2,))  # replaces the input
    first.register_forward_hook(lambda m, args, out: torch.cat([out, out], -1))  # doubles the width
    second.register_forward_pre_hook(
        lambda m, args, kwargs: ((args[0][..., : m.in_features],), kwargs), with_kwargs=True
    )
    return nn.Sequential(first, nn.GELU(), second)


def _embedding_bag(c: dict[str, Any]) -> nn.Module:
    return nn.Sequential(nn.EmbeddingBag(40, c["w"], mode="mean"), nn.Linear(c["w"], 2))


def _vectors(c: dict[str, Any]) -> torch.Tensor:
    return torch.randn(c["b"], 5, 6)


def _bags(c: dict[str, Any]) -> torch.Tensor:
    return torch.randint(0, 40, (c["b"], 7))


CASES = [(_weight_norm, _vectors), (_symmetric, _vectors), (_hooks, _vectors), (_embedding_bag, _bags)]


@pytest.mark.parametrize("build,inputs", CASES, ids=[b.__name__.strip("_") for b, _ in CASES])
def test_call_beyond_forward_exact(build: Any, inputs: Any) -> None:
    model = ds.from_torch(build, inputs)
    problem = ds.Problem(SPACE, model=model)
    for cfg in CONFIGS:
        assert model.disagreements(problem, cfg) == [], cfg
        assert problem.costs(cfg)["params"] == sum(p.numel() for p in build(cfg).parameters())


@pytest.mark.parametrize("build,inputs", CASES, ids=[b.__name__.strip("_") for b, _ in CASES])
def test_call_beyond_forward_memory_never_under(build: Any, inputs: Any) -> None:
    budget = ds.Budget(mode="train", optimizer="adam")
    problem = ds.Problem(SPACE, model=ds.from_torch(build, inputs), budget=budget)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for cfg in ({"w": 13, "b": 4}, {"w": 3, "b": 1}):
            torch.manual_seed(0)
            real = peak_memory(build(cfg), [inputs(cfg)]).peak
            # never under by more than 0.1 % or 64 bytes (the step's scalars, on these tiny models)
            assert problem.costs(cfg)["memory"] >= real - max(64, real // 1000), cfg
    finally:
        torch.set_num_threads(threads)


class AttentionWeights(nn.Module):
    """Uses ``MultiheadAttention``'s averaged attention weights: its ``forward`` is traced instead."""

    def __init__(self, c: dict[str, Any]) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(c["w"] + 1, 1, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, weights = self.attn(x, x, x)
        return y * weights.mean()


def test_secondary_output_used_traces_the_forward() -> None:
    inputs = lambda c: torch.randn(c["b"], 5, c["w"] + 1)  # noqa: E731
    model = ds.from_torch(AttentionWeights, inputs)
    problem = ds.Problem(SPACE, model=model, budget=ds.Budget(mode="train", optimizer="adam"))
    for cfg in CONFIGS:
        assert model.disagreements(problem, cfg) == [], cfg
    cfg = {"w": 13, "b": 4}
    assert problem.costs(cfg)["memory"] >= peak_memory(AttentionWeights(cfg), [inputs(cfg)]).peak


class FinalState(nn.Module):
    def __init__(self, c: dict[str, Any]) -> None:
        super().__init__()
        self.rnn = nn.GRU(6, c["w"], batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, h = self.rnn(x)
        return h[-1]  # indexing the final states: refused, never a silently invalid configuration


def test_rnn_final_states_refused_with_what_to_do() -> None:
    with pytest.raises(TraceError, match=r"final states of rnn .*out\[:, -1\].*test_from_torch_hooks.py"):
        ds.Problem(SPACE, model=ds.from_torch(FinalState, _vectors))
