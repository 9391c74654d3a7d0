"""Attention breadth, each checked against PyTorch: a head width of its own (``head_dim``) and
cross-attention in the DSL (params, FLOPs, validity against a plain q/k/v/out + SDPA module; memory
against :func:`dnnsat.torch.peak_memory` on this CPU, Adam training and inference), cross-attention and
``nn.TransformerDecoderLayer`` in ``from_torch``."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import dnnsat as ds  # noqa: E402
from dnnsat.cost import Budget, memory_expressions  # noqa: E402
from dnnsat.expr import compile_scalar  # noqa: E402
from dnnsat.torch import GraphModule, concretize, peak_memory  # noqa: E402
from tests.test_from_torch import assert_exact, configs, reference  # noqa: E402

Config = dict[str, Any]


class Attn(nn.Module):
    """Attention written by hand: heads of width ``hd``, ``kvh`` key/value heads, keys and values
    projected from a ``(B, L, e)`` source (cross) or from ``x`` (self)."""

    def __init__(self, d: int, e: int, h: int, kvh: int, hd: int, bias: bool, causal: bool) -> None:
        super().__init__()
        self.h, self.kvh, self.hd, self.causal = h, kvh, hd, causal
        self.q = nn.Linear(d, h * hd, bias=bias)
        self.k = nn.Linear(e, kvh * hd, bias=bias)
        self.v = nn.Linear(e, kvh * hd, bias=bias)
        self.o = nn.Linear(h * hd, d, bias=bias)

    def forward(self, x: torch.Tensor, kv: torch.Tensor | None = None) -> torch.Tensor:
        kv = x if kv is None else kv
        b, s, _ = x.shape
        n = kv.shape[1]
        q = self.q(x).view(b, s, self.h, self.hd).transpose(1, 2)
        k = self.k(kv).view(b, n, self.kvh, self.hd).transpose(1, 2)
        v = self.v(kv).view(b, n, self.kvh, self.hd).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal, enable_gqa=self.kvh != self.h)
        return self.o(y.transpose(1, 2).reshape(b, s, self.h * self.hd))


class Net(nn.Module):
    def __init__(self, c: Config, cross: bool) -> None:
        super().__init__()
        e = c["e"] if cross else c["d"]
        self.attn = Attn(c["d"], e, c["h"], c["kvh"], c["hd"], c["bias"], c["causal"])
        self.head = nn.Linear(c["d"], 5)

    def forward(self, x: torch.Tensor, m: torch.Tensor | None = None) -> torch.Tensor:
        return self.head(self.attn(x, m))


SPACE = ds.Space(
    {
        "d": ds.Categorical([8, 12]),
        "h": ds.Categorical([1, 2, 3, 4]),
        "kvh": ds.Categorical([1, 2]),
        "hd": ds.Categorical([4, 6, 16]),
        "s": ds.Categorical([3, 7]),
        "n": ds.Categorical([5, 9]),
        "e": ds.Categorical([6, 10]),
        "mb": ds.Categorical([2, 3]),  # the key/value source's batch size: 3 is invalid
        "bias": ds.Categorical([False, True]),
        "causal": ds.Categorical([False, True]),
    }
)


def _inputs(cross: bool) -> Any:
    def inputs(c: Config) -> tuple[Any, ...]:
        x = torch.empty(2, c["s"], c["d"])
        return (x, torch.empty(c["mb"], c["n"], c["e"])) if cross else (x,)

    return inputs


def _dsl(cross: bool) -> Any:
    def build(v: Any) -> ds.Network:
        net = ds.Network()
        x = net.input((2, v.s, v.d))
        kv = net.input((v.mb, v.n, v.e)) if cross else None
        y = net.attention(x, v.h, v.kvh, causal=v.causal, bias=v.bias, head_dim=v.hd, kv=kv)
        net.output(net.linear(y, 5))
        return net

    return build


@pytest.mark.parametrize("cross", [False, True])
def test_dsl_head_dim_and_cross_attention_exact(cross: bool) -> None:
    """``net.attention(..., head_dim=, kv=)``: params, FLOPs and validity equal PyTorch's (a plain
    q/k/v/out + SDPA module) on every configuration, valid and invalid."""
    problem = ds.Problem(SPACE, model=_dsl(cross))
    valid = 0
    for cfg in configs(SPACE, 60, seed=1):
        ref = reference(lambda c: Net(c, cross), _inputs(cross), cfg)
        verdict = problem.check(cfg)
        assert verdict.feasible == (ref is not None), (cfg, ref, verdict.violations)
        if ref is not None:
            valid += 1
            costs = problem.costs(cfg)
            assert (costs["params"], costs["flops"]) == ref, (cfg, costs["params"], costs["flops"], ref)
    assert valid > 10


def test_default_head_dim_is_unchanged() -> None:
    """``head_dim=D/heads`` given explicitly costs what the default does (params, FLOPs, memory)."""
    nets = []
    for hd in (None, 4):
        net = ds.Network()
        x = net.input((2, 16, 32))
        net.output(net.linear(net.attention(x, 8, 2, head_dim=hd), 3))
        nets.append(net)
    for mode in ("train", "inference"):
        ex = [memory_expressions(n, Budget(mode=mode, optimizer="adam" if mode == "train" else None), None)
              for n in nets]  # fmt: skip
        vals = [int(compile_scalar([e["memory"]])({})[0]) for e in ex]
        assert vals[0] == vals[1], (mode, vals)


@pytest.mark.parametrize(
    "cfg,bounds",
    [
        ((4, 64, 64, 2, 2, 8, False, 0, 0), (-0.03, 0.10)),  # own head width, narrower than D
        ((4, 64, 64, 8, 2, 24, False, 0, 0), (-0.03, 0.10)),  # wider, GQA
        ((2, 200, 48, 6, 3, 16, True, 30, 128), (-0.03, 0.10)),  # cross, wider
        ((4, 64, 64, 4, 4, None, True, 96, 64), (-0.03, 0.08)),  # cross, default head width
        ((4, 100, 96, 1, 1, 24, False, 20, 80), (-0.03, 0.10)),  # single head
    ],
)
def test_memory_against_pytorch(cfg: tuple[Any, ...], bounds: tuple[float, float]) -> None:
    """Adam training and inference of a pre-norm residual attention block (self or cross, a head
    width of its own or not) within the stated share of PyTorch's measured peak."""
    torch.set_num_threads(1)
    b, s, d, h, kvh, hd, cross, n, e = cfg
    net = ds.Network()
    x = net.input((b, s, d))
    kv = net.input((b, n, e)) if cross else None
    net.output(net.linear(net.add(x, net.attention(net.layernorm(x), h, kvh, head_dim=hd, kv=kv)), 10))
    ins = [torch.randn(b, s, d)] + ([torch.randn(b, n, e)] if cross else [])
    for train in (True, False):
        budget = Budget(mode="train" if train else "inference", optimizer="adam" if train else None)
        estimate = int(compile_scalar([memory_expressions(net, budget, None)["memory"]])({})[0])
        torch.manual_seed(0)
        module = GraphModule(concretize(net, {}))
        real = peak_memory(module, ins, train=train, optimizer="adam").peak
        low, high = bounds if train else (-0.03, 0.08)
        assert low <= (estimate - real) / real <= high, (train, estimate, real)


# -- from_torch: cross-attention, nn.TransformerDecoderLayer ---------------------------------------------


class CrossMHA(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        kdim = c["e"] if c["kdim"] else None
        self.attn = nn.MultiheadAttention(
            c["d"], c["h"], bias=c["bias"], kdim=kdim, vdim=kdim, batch_first=True
        )
        self.head = nn.Linear(c["d"], 3)
        self.need = c["need"]  # need_weights=True: PyTorch's explicit path, the same FLOPs

    def forward(self, x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        return self.head(self.attn(x, m, m, need_weights=self.need)[0])


CROSS = ds.Space(
    {
        "d": ds.Categorical([8, 12]),
        "h": ds.Categorical([2, 3, 4]),
        "e": ds.Categorical([6, 8, 12]),
        "s": ds.Categorical([3, 5]),
        "n": ds.Categorical([4, 7]),
        "mb": ds.Categorical([2, 3]),
        "kdim": ds.Categorical([False, True]),
        "bias": ds.Categorical([False, True]),
        "need": ds.Categorical([False, True]),
    }
)


def test_mha_cross_attention_exact() -> None:
    """``MultiheadAttention(x, m, m)`` with its own key/value length, ``kdim == vdim`` or the query's
    width, batch sizes matching or not: params, FLOPs, validity equal PyTorch's."""
    inputs = lambda c: (torch.empty(2, c["s"], c["d"]), torch.empty(c["mb"], c["n"], c["e"]))  # noqa: E731
    _, valid, n = assert_exact(CROSS, CrossMHA, inputs, n=40)
    assert 0 < valid < n


class CrossSDPA(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        self.q = nn.Linear(c["d"], 2 * 4)
        self.kv = nn.Linear(c["e"], 2 * c["kvh"] * 4)
        self.c = c

    def forward(self, x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.q(x).view(b, s, 2, 4).transpose(1, 2)
        k, v = self.kv(m).view(m.shape[0], m.shape[1], 2 * self.c["kvh"], 4).transpose(1, 2).chunk(2, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.c["causal"], enable_gqa=True)
        return y.transpose(1, 2).reshape(b, s, 8)


def test_sdpa_cross_lengths_exact() -> None:
    """``F.scaled_dot_product_attention`` with query and key/value lengths of their own (causal or
    not, GQA): params, FLOPs, validity equal PyTorch's."""
    space = ds.Space(
        {
            "d": ds.Categorical([8, 12]),
            "e": ds.Categorical([6, 10]),
            "s": ds.Categorical([3, 5]),
            "n": ds.Categorical([4, 9]),
            "kvh": ds.Categorical([1, 2, 3]),
            "causal": ds.Categorical([False, True]),
        }
    )
    inputs = lambda c: (torch.empty(2, c["s"], c["d"]), torch.empty(2, c["n"], c["e"]))  # noqa: E731
    _, valid, n = assert_exact(space, CrossSDPA, inputs, n=30)
    assert 0 < valid < n


class Decoder(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        self.embed = nn.Linear(5, c["d"])
        self.layers = nn.ModuleList(
            nn.TransformerDecoderLayer(
                c["d"], c["h"], c["ff"], activation=c["act"], norm_first=c["pre"], bias=c["bias"],
                batch_first=True,
            )
            for _ in range(c["depth"])
        )  # fmt: skip
        self.head = nn.Linear(c["d"], 3)

    def forward(self, x: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        y = self.embed(x)
        for layer in self.layers:
            y = layer(y, memory)
        return self.head(y)


DECODER = ds.Space(
    {
        "d": ds.Categorical([8, 12]),
        "h": ds.Categorical([2, 3, 4]),
        "ff": ds.Categorical([16, 24]),
        "act": ds.Categorical(["relu", "gelu"]),
        "pre": ds.Categorical([False, True]),
        "bias": ds.Categorical([False, True]),
        "depth": ds.Categorical([1, 2]),
        "md": ds.Categorical([8, 12]),  # the memory's width: must equal d
        "n": ds.Categorical([4, 7]),
    }
)


def test_transformer_decoder_layer_exact() -> None:
    """``nn.TransformerDecoderLayer`` (self-attention, cross-attention on ``memory``, FFN; post- and
    pre-norm; ReLU/GELU; biases or not; stacked): params, FLOPs, validity equal PyTorch's."""
    inputs = lambda c: (torch.empty(2, 6, 5), torch.empty(2, c["n"], c["md"]))  # noqa: E731
    _, valid, n = assert_exact(DECODER, Decoder, inputs, n=40)
    assert 0 < valid < n
