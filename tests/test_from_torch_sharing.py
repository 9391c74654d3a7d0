"""``from_torch`` on shared parameters and keyword inputs: a module called again, weights tied across
modules or used directly, a layer applied several times (ALBERT), keyword and ``None`` inputs
(Hugging Face style). Params/FLOPs/validity against PyTorch on every configuration of small spaces;
training-step memory (Adam) against the real peak on this CPU, never under."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
import torch.nn as nn

import dnnsat as ds
from dnnsat.torch import TraceError, peak_memory, to_torch

SPACE = ds.Space({"d": ds.Categorical([8, 24]), "b": ds.Categorical([1, 3]), "layers": ds.Int(1, 3)})
VOCAB = 300


class CalledTwice(nn.Module):
    def __init__(self, c: dict[str, Any]) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, c["d"])
        self.proj = nn.Linear(c["d"], c["d"])

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.proj(self.emb(x)) + self.proj(self.emb(y))


class TiedEmbeddings(nn.Module):
    def __init__(self, c: dict[str, Any]) -> None:
        super().__init__()
        self.enc = nn.Embedding(VOCAB, c["d"])
        self.dec = nn.Embedding(VOCAB, c["d"])
        self.dec.weight = self.enc.weight  # T5's shared embedding

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.enc(x) + self.dec(y)


class TiedHead(nn.Module):
    def __init__(self, c: dict[str, Any]) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, c["d"])
        self.norm = nn.LayerNorm(c["d"])
        self.head = nn.Linear(c["d"], VOCAB, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.emb(x)))


class DirectWeight(nn.Module):
    def __init__(self, c: dict[str, Any]) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, c["d"])

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.emb(x) @ self.emb.weight.t()  # the logits of a tied head, written by hand


class SharedLayer(nn.Module):
    """ALBERT: one encoder layer applied ``layers`` times."""

    def __init__(self, c: dict[str, Any]) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, c["d"])
        self.layer = nn.TransformerEncoderLayer(c["d"], 2, 2 * c["d"], dropout=0.0, batch_first=True)
        self.n = c["layers"]

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = self.emb(x)
        for _ in range(self.n):
            h = self.layer(h)
        return h


class ConvTwice(nn.Module):
    def __init__(self, c: dict[str, Any]) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)
        self.head = nn.Linear(4, c["d"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.conv(torch.relu(self.conv(x))).mean((2, 3)))


def _ids(c: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randint(0, VOCAB, (c["b"], 7)), torch.randint(0, VOCAB, (c["b"], 7))


def _image(c: dict[str, Any]) -> torch.Tensor:
    return torch.randn(c["b"], 4, 9, 11)


CASES = [
    (CalledTwice, _ids),
    (TiedEmbeddings, _ids),
    (TiedHead, _ids),
    (DirectWeight, _ids),
    (SharedLayer, _ids),
    (ConvTwice, _image),
]


def _configs() -> list[dict[str, Any]]:
    return [{"d": d, "b": b, "layers": n} for d in (8, 24) for b in (1, 3) for n in (1, 2, 3)]


@pytest.mark.parametrize("cls,inputs", CASES, ids=[c.__name__ for c, _ in CASES])
def test_shared_parameters_exact(cls: Any, inputs: Any) -> None:
    """Params (each shared tensor once, as ``module.parameters()``), FLOPs and validity equal PyTorch's."""
    model = ds.from_torch(cls, inputs)
    problem = ds.Problem(SPACE, model=model)
    for cfg in _configs():
        assert model.disagreements(problem, cfg) == [], cfg
        assert problem.costs(cfg)["params"] == sum(p.numel() for p in cls(cfg).parameters())


@pytest.mark.parametrize("cls,inputs", CASES, ids=[c.__name__ for c, _ in CASES])
def test_shared_parameters_memory_never_under(cls: Any, inputs: Any) -> None:
    """A training step's peak (Adam): the shared weights' gradients, optimizer state and weights once;
    the later use's gradient held until autograd adds it to the owner's. Never under, within 30 %
    (tiny convolutions' working sets dominate ``ConvTwice``)."""
    budget = ds.Budget(mode="train", optimizer="adam")
    problem = ds.Problem(SPACE, model=ds.from_torch(cls, inputs), budget=budget)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for cfg in ({"d": 24, "b": 3, "layers": 2}, {"d": 8, "b": 1, "layers": 3}):
            torch.manual_seed(0)
            xs = inputs(cfg)
            real = peak_memory(cls(cfg), list(xs) if isinstance(xs, tuple) else [xs]).peak
            estimate = problem.costs(cfg)["memory"]
            # never under by more than 0.1 % or 256 bytes (AVX2's small convolutions)
            assert real - max(256, real // 1000) <= estimate <= 1.3 * real, (cfg, estimate / real - 1)
    finally:
        torch.set_num_threads(threads)


def test_to_torch_shares_the_weights() -> None:
    """The materialized network ties what the model ties: same parameter count as the model."""
    problem = ds.Problem(SPACE, model=ds.from_torch(SharedLayer, _ids))
    cfg = {"d": 24, "b": 1, "layers": 3}
    module = to_torch(problem, cfg, device="meta")
    expected = sum(p.numel() for p in SharedLayer(cfg).parameters())
    assert sum(p.numel() for p in module.parameters()) == expected


class KeywordModel(nn.Module):
    def __init__(self, c: dict[str, Any]) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, c["d"])
        self.proj = nn.Linear(c["d"], c["d"])

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, extra: Any = None
    ) -> dict[str, torch.Tensor]:
        h = self.proj(self.emb(input_ids))
        if attention_mask is not None:
            h = h * attention_mask[..., None]
        return {"last_hidden_state": h}


@pytest.mark.parametrize(
    "inputs",
    [
        lambda c: {"input_ids": torch.randint(0, VOCAB, (c["b"], 6))},
        lambda c: (torch.randint(0, VOCAB, (c["b"], 6)), None),
        lambda c: {
            "input_ids": torch.randint(0, VOCAB, (c["b"], 6)),
            "attention_mask": torch.ones(c["b"], 6),
        },  # noqa: E501
    ],
    ids=["keywords", "none-positional", "keywords-with-mask"],
)
def test_keyword_and_none_inputs(inputs: Any) -> None:
    """``inputs(cfg)`` may give a dict of keyword arguments, and ``None`` for an optional argument."""
    model = ds.from_torch(KeywordModel, inputs)
    problem = ds.Problem(SPACE, model=model, budget=ds.Budget(mode="train", optimizer="adam"))
    cfg = {"d": 24, "b": 3, "layers": 1}
    assert model.disagreements(problem, cfg) == []
    xs = inputs(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        real = peak_memory(KeywordModel(cfg), xs if isinstance(xs, dict) else list(xs)).peak
    assert problem.costs(cfg)["memory"] >= real - max(64, real // 1000)  # 0.1 % or the step's scalars


def test_value_in_control_flow_says_what_to_do() -> None:
    """A branch on an input's values (Hugging Face's ``padding_mask.all()``) is refused with the fix."""

    class Masked(KeywordModel):
        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> Any:
            h = self.proj(self.emb(input_ids))
            return h if attention_mask is None or attention_mask.all() else h * attention_mask[..., None]

    model = ds.from_torch(Masked, lambda c: (torch.randint(0, VOCAB, (c["b"], 6)), torch.ones(c["b"], 6)))
    with pytest.raises(TraceError, match="attention_mask.all.*leave it out.*None.*dict"):
        ds.Problem(SPACE, model=model)
