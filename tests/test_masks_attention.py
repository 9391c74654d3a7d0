"""Attention masks (issue 15): ``attn_mask`` of ``F.scaled_dot_product_attention`` (float or bool, a model
input or built in ``forward``), ``attn_mask`` / ``key_padding_mask`` / ``is_causal`` of
``nn.MultiheadAttention`` and the masks of ``nn.TransformerEncoder``/``TransformerEncoderLayer``/
``TransformerDecoderLayer``: params, FLOPs and validity equal PyTorch's; the mask's float copy in memory
(training) against :func:`dnnsat.torch.peak_memory`; masked attention's memory logs a warning."""

from __future__ import annotations

import logging
from typing import Any

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

import dnnsat as ds  # noqa: E402
from dnnsat.cost import Budget, memory_expressions  # noqa: E402
from dnnsat.expr import compile_scalar  # noqa: E402
from dnnsat.torch import GraphModule, TraceError, concretize, from_torch, peak_memory  # noqa: E402
from tests.test_from_torch import assert_exact  # noqa: E402

Config = dict[str, Any]
SMALL = {
    "b": ds.Categorical([1, 2]), "s": ds.Categorical([3, 4]), "d": ds.Categorical([8, 12]),
    "h": ds.Categorical([2, 4]),
}  # fmt: skip


class SdpaMasked(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        self.c, self.q = c, nn.Linear(c["d"], c["d"])

    def forward(self, x: torch.Tensor, *mask: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        h = self.c["h"]
        q = self.q(x).view(b, s, h, d // h).transpose(1, 2)
        kind = self.c["kind"]
        if kind == "input":
            m = mask[0]
        elif kind == "tril":
            m = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
        else:
            m = torch.full((s, s), float("-inf"), device=x.device).triu(1)
        return F.scaled_dot_product_attention(q, q, q, attn_mask=m)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bool])
@pytest.mark.parametrize("shape", ["ss", "b11s", "b2ss"])
def test_sdpa_mask_exact(dtype: torch.dtype, shape: str) -> None:
    """A mask given as an input (float or bool; (S, S), (B, 1, 1, S), (B, 2, S, S): invalid where
    2 != heads) or built in forward: params, FLOPs, validity equal PyTorch's."""
    sizes = {"ss": lambda c: (c["s"], c["s"]), "b11s": lambda c: (c["b"], 1, 1, c["s"]),
             "b2ss": lambda c: (c["b"], 2, c["s"], c["s"])}[shape]  # fmt: skip
    space = ds.Space({**SMALL, "kind": ds.Categorical(["input", "tril", "full"])})
    _, valid, n = assert_exact(
        space, SdpaMasked, lambda c: (torch.empty(c["b"], c["s"], c["d"]), torch.ones(sizes(c), dtype=dtype))
    )
    assert (valid < n) == (shape == "b2ss")


def test_sdpa_mask_validity_on_cpu() -> None:
    """The broadcast rule is the real CPU kernel's: a (S+1, S) mask raises there, (1, S) does not."""
    space = ds.Space({"s": ds.Categorical([3, 4])})

    def build(c: Config) -> nn.Module:
        class M(nn.Module):
            def forward(self, x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
                return F.scaled_dot_product_attention(x, x, x, attn_mask=m)

        return M()

    for shape in (lambda s: (s + 1, s), lambda s: (1, s), lambda s: (2, 1, s, s), lambda s: (3, 1, s, s)):
        real = []
        for s in (3, 4):
            try:
                F.scaled_dot_product_attention(
                    *[torch.randn(2, 2, s, 8)] * 3, attn_mask=torch.zeros(shape(s))
                )
                real.append(True)
            except RuntimeError:
                real.append(False)
        model = from_torch(build, lambda c, shape=shape: ((2, 2, c["s"], 8), shape(c["s"])))
        try:
            problem = ds.Problem(space, model=model)
        except ds.GraphError as e:  # a rule that fails for every configuration
            assert not any(real) and "attention mask broadcasts" in str(e), shape(3)
            continue
        assert [problem.check({"s": s}).feasible for s in (3, 4)] == real, shape(3)


class MHA(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        self.c = c
        self.attn = nn.MultiheadAttention(c["d"], c["h"], batch_first=True)
        self.head = nn.Linear(c["d"], 3)

    def forward(self, x: torch.Tensor, kpm: torch.Tensor) -> torch.Tensor:
        c, s = self.c, x.shape[1]
        am = {
            "none": None,
            "2d": torch.full((s, s), float("-inf"), device=x.device).triu(1),
            "2d_bad": torch.zeros(s, s + 1, device=x.device),
            "3d": torch.zeros(x.shape[0] * c["mh"], s, s, device=x.device),
        }[c["am"]]
        y = self.attn(
            x, x, x, attn_mask=am, key_padding_mask=kpm if c["kpm"] else None, need_weights=c["need"],
            is_causal=c["causal"] and am is not None,
        )[0]  # fmt: skip
        return self.head(y)


@pytest.mark.parametrize("kpm_len", [0, 1])
def test_mha_masks_exact(kpm_len: int) -> None:
    """MultiheadAttention: 2-D / 3-D attn_mask (right and wrong shapes), key_padding_mask (right and
    wrong length), need_weights, is_causal (which skips the mask's shape check when it applies)."""
    space = ds.Space({
        **SMALL, "mh": ds.Categorical([2, 4]), "am": ds.Categorical(["none", "2d", "2d_bad", "3d"]),
        "kpm": ds.Categorical([False, True]), "need": ds.Categorical([False, True]),
        "causal": ds.Categorical([False, True]),
    })  # fmt: skip

    def inputs(c: Config) -> tuple[torch.Tensor, ...]:
        return torch.empty(c["b"], c["s"], c["d"]), torch.zeros(c["b"], c["s"] + kpm_len, dtype=torch.bool)

    _, valid, n = assert_exact(space, MHA, inputs, n=60)
    assert 0 < valid < n


class EncDec(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        self.c = c
        layer = nn.TransformerEncoderLayer(c["d"], c["h"], 2 * c["d"], batch_first=True, norm_first=c["nf"])
        self.enc = nn.TransformerEncoder(layer, c["layers"], enable_nested_tensor=False)
        self.dec = nn.TransformerDecoderLayer(c["d"], c["h"], 2 * c["d"], batch_first=True)

    def forward(self, x: torch.Tensor, kpm: torch.Tensor) -> torch.Tensor:
        mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1], device=x.device)
        pad = kpm if self.c["kpm"] else None
        m = self.enc(x, mask=mask, src_key_padding_mask=pad, is_causal=self.c["causal"])
        return self.dec(x, m, tgt_mask=mask, tgt_is_causal=self.c["causal"], memory_key_padding_mask=pad)


def test_transformer_layer_masks_exact() -> None:
    space = ds.Space({
        **SMALL, "layers": ds.Categorical([1, 2]), "nf": ds.Categorical([False, True]),
        "kpm": ds.Categorical([False, True]), "causal": ds.Categorical([False, True]),
        "kb": ds.Categorical([1, 2]),
    })  # fmt: skip
    inputs = lambda c: (torch.empty(c["b"], c["s"], c["d"]), torch.zeros(c["kb"], c["s"], dtype=torch.bool))  # noqa: E731
    _, valid, n = assert_exact(space, EncDec, inputs, n=40)
    assert 0 < valid < n  # a key padding mask of another batch size is invalid


def test_dsl_masks_match_pytorch() -> None:
    """DSL: sdpa with a mask tensor / a mask shape, attention with a mask shape: the rule, params and
    FLOPs (the full score matrix, as FlopCounterMode counts the meta device's math path; on the CPU it
    counts nothing for the flash kernel)."""
    net = ds.Network()
    q = net.input((2, 4, 6, 8))
    y = net.sdpa(q, q, q, mask=(1, 6, 6))
    z = net.sdpa(q, q, q, mask=net.input((2, 1, 1, 6)), bool_mask=True)
    x = net.input((2, 6, 8))
    w = net.attention(x, 2, mask=(6, 6))
    net.output(y, z, w)
    costs = net.costs()
    module = GraphModule(concretize(net, {})).to("meta")  # the meta device: the math path, as measure
    with FlopCounterMode(display=False) as counter:
        module(*(torch.empty(s, device="meta") for s in ((2, 4, 6, 8), (2, 1, 1, 6), (2, 6, 8))))
    assert costs["flops"].value == counter.get_total_flops()
    assert costs["params"].value == sum(p.numel() for p in module.parameters())
    with pytest.raises(ds.GraphError, match="attention mask broadcasts .* can never hold"):
        net.sdpa(q, q, q, mask=(5, 6))

    def build(v: Any) -> ds.Network:  # a mask of a length of its own: invalid where it is not s or 1
        n = ds.Network()
        t = n.input((2, 4, v.s, 8))
        return n.output(n.sdpa(t, t, t, mask=(v.m, v.s)))

    problem = ds.Problem(ds.Space({"s": ds.Categorical([3, 6]), "m": ds.Categorical([1, 3, 6])}), model=build)
    for s, m in [(3, 1), (3, 3), (3, 6), (6, 1), (6, 3), (6, 6)]:
        assert problem.check({"s": s, "m": m}).feasible == (m in (1, s)), (s, m)
    with pytest.raises(ds.GraphError, match="not both"):
        net.sdpa(q, q, q, causal=True, mask=(6, 6))
    with pytest.raises(ds.GraphError, match="1 to 4 dimensions"):
        net.attention(x, 2, mask=(1, 1, 1, 6, 6))


@pytest.mark.parametrize("cfg", [(4, 64, 64, 4), (2, 256, 96, 4), (2, 100, 48, 3)])
def test_mask_memory_delta(cfg: tuple[int, int, int, int], caplog: pytest.LogCaptureFixture) -> None:
    """Training (Adam): what a mask adds to an SDPA block's peak is what dnnsat adds (a float input mask
    nothing more than itself, a boolean one its float copy, a mask built in forward its float self),
    within 1 % of the masked block's peak; these 2-D and 4-D masks are validated: no warning."""
    torch.set_num_threads(1)
    b, s, d, h = cfg

    class Block(nn.Module):
        def __init__(self, c: Config) -> None:
            super().__init__()
            self.c, self.ln, self.q, self.o = c, nn.LayerNorm(d), nn.Linear(d, d), nn.Linear(d, 10)

        def forward(self, x: torch.Tensor, *m: torch.Tensor) -> torch.Tensor:
            q = self.q(self.ln(x)).view(b, s, h, d // h).transpose(1, 2)
            if self.c["kind"] == "causal":
                a = F.scaled_dot_product_attention(q, q, q, is_causal=True)
            else:
                mask = m[0] if m else torch.full((s, s), float("-inf"), device=x.device).triu(1)
                a = F.scaled_dot_product_attention(q, q, q, attn_mask=mask)
            return self.o(x + a.transpose(1, 2).reshape(b, s, d))

    def both(kind: str, extra: list[torch.Tensor]) -> tuple[int, int]:
        ins = [torch.randn(b, s, d), *extra]
        net = from_torch(Block, lambda c: tuple(ins)).network(ds.Space({"kind": ds.Categorical([kind])}))
        bud = Budget(mode="train", optimizer="adam")
        est = int(compile_scalar([memory_expressions(net, bud, None)["memory"]])({"kind": kind})[0])
        torch.manual_seed(0)
        return est, peak_memory(Block({"kind": kind}), ins, train=True, optimizer="adam").peak

    base_est, base_real = both("causal", [])
    with caplog.at_level(logging.WARNING, logger="dnnsat"):
        for extra in ([torch.zeros(s, s)], [torch.ones(b, 1, 1, s, dtype=torch.bool)], []):
            est, real = both("mask", extra)
            bool_input_bytes = 3 * extra[0].numel() if extra and extra[0].dtype == torch.bool else 0
            assert abs((est - base_est) - (real - base_real) - bool_input_bytes) <= 0.01 * real
    assert "attention mask is not validated" not in caplog.text


@pytest.mark.parametrize(
    "forward,message",
    [
        (
            lambda m, x: m.attn(x, x, x, is_causal=True, need_weights=False)[0],
            "is_causal=True needs attn_mask",
        ),
        (lambda m, x: m.attn(x, x, x + 1)[0], r"key is value"),
        (lambda m, x: m.attn(x, x, x, attn_mask=torch.zeros(1, 1, 4, 4))[0], "attn_mask must be 2-D or 3-D"),
    ],
)
def test_refused_masks_name_the_line(forward: Any, message: str) -> None:
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = nn.MultiheadAttention(8, 2, batch_first=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return forward(self, x)  # type: ignore[no-any-return]

    with pytest.raises(TraceError, match=message + r".*test_masks_attention.py:\d+"):
        ds.Problem(
            ds.Space({"z": ds.Categorical([0])}), model=from_torch(lambda c: M(), lambda c: ((2, 4, 8),))
        )


def test_sdpa_mask_and_causal_is_invalid() -> None:
    """SDPA with both a mask and ``is_causal=True``: its handler refuses the call, the ATen fallback runs
    PyTorch's kernel, which rejects it on every configuration (as PyTorch does)."""

    class M(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            q = x.unsqueeze(1)
            return F.scaled_dot_product_attention(q, q, q, attn_mask=torch.zeros(4, 4), is_causal=True)

    with pytest.raises(
        ds.GraphError, match="every configuration.*attn_mask should not be set when is_causal"
    ):
        ds.Problem(
            ds.Space({"z": ds.Categorical([0])}), model=from_torch(lambda c: M(), lambda c: ((2, 4, 8),))
        )
