"""Model families beyond the zoo: plain ``torch.nn`` modules next to their dnnsat DSL twins.

Each :class:`Family` draws a config dict (:meth:`Family.sample`), builds a plain ``torch.nn.Module``
from it, written the way a user would write it (not through ``dnnsat.torch.to_torch``), and the
:class:`~dnnsat.graph.Network` of the same model with constant shapes; :func:`build` asserts that
both have exactly the same parameter count. The families stress what the zoo does not: odd channel
counts, grouped/depthwise/dilated/transposed convolutions, ``padding="same"`` with even kernels, 1-D
convolutions, LSTM/GRU, dropout, squeeze-and-excitation, a UNet with concatenated skips, a ViT with
a learned positional embedding, grouped-query attention and post-norm encoder layers. Stacks of
shape-preserving blocks are ``net.repeat`` blocks in the twins: as the argument of a block's
``forward`` in Python, a repeat block's input lives until the block's output exists.

Not expressible in the DSL yet (left out): a ViT's CLS token (a parameter expanded over the batch,
then selected by index: no ``expand``/``select`` op) and ``nn.TransformerEncoderLayer`` /
``nn.MultiheadAttention`` (packed in-projection and their own layout copies; the DSL's ``attention``
op is separate q/k/v/out projections around ``scaled_dot_product_attention``, written by hand here).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from dnnsat.expr import compile_scalar
from dnnsat.graph import Network, Tensor

__all__ = ["Family", "FAMILIES", "build", "example_inputs"]

Config = dict[str, Any]


@dataclass(frozen=True)
class Family:
    """One family: ``space`` (name -> choices; a config draws one value each, ``valid`` filters),
    ``torch_model(cfg)`` (plain ``nn.Module``) and ``network(cfg)`` (its DSL twin)."""

    name: str
    space: dict[str, list[Any]]
    torch_model: Callable[[Config], nn.Module]
    network: Callable[[Config], Network]
    valid: Callable[[Config], bool] = lambda cfg: True

    def sample(self, n: int, rng: random.Random) -> list[Config]:
        """``n`` distinct valid configs (fewer if the space has fewer)."""
        out: list[Config] = []
        for _ in range(200 * n):
            cfg = {k: rng.choice(v) for k, v in self.space.items()}
            if cfg not in out and self.valid(cfg):
                out.append(cfg)
                if len(out) == n:
                    break
        return out


def _params(net: Network) -> int:
    return int(compile_scalar([net.total("params")])({})[0])


def build(family: Family, cfg: Config, seed: int = 0) -> tuple[nn.Module, Network]:
    """The torch module and the DSL network of ``cfg``; their parameter counts are asserted equal."""
    torch.manual_seed(seed)
    module = family.torch_model(cfg)
    net = family.network(cfg)
    mine, theirs = _params(net), sum(p.numel() for p in module.parameters())
    assert mine == theirs, f"{family.name} {cfg}: DSL params {mine} != torch params {theirs}"
    return module, net


def example_inputs(net: Network, cfg: Config, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Random inputs of the network's input shapes (int64 ids below ``cfg['vocab']``)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for t in net.inputs:
        shape = tuple(int(d.value) for d in t.shape)
        if t.dtype == "int64":
            out.append(torch.randint(0, cfg["vocab"], shape, generator=g))
        else:
            out.append(torch.randn(shape, generator=g))
    return tuple(out)


# -- odd channel counts ----------------------------------------------------------------------------


def _odd_cnn_torch(c: Config) -> nn.Module:
    layers: list[nn.Module] = []
    cin = c["in_ch"]
    for i, w in enumerate(c["widths"]):
        stride = 2 if i > 0 and c["down"] == "stride" else 1
        layers += [nn.Conv2d(cin, w, c["kernel"], stride=stride, padding=c["kernel"] // 2), nn.BatchNorm2d(w)]
        layers.append(nn.ReLU())
        if i > 0 and c["down"] == "max":
            layers.append(nn.MaxPool2d(2))
        cin = w
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, c["classes"])]
    return nn.Sequential(*layers)


def _odd_cnn_net(c: Config) -> Network:
    net = Network("odd_cnn")
    x = net.input((c["batch"], c["in_ch"], c["res"], c["res"]))
    for i, w in enumerate(c["widths"]):
        stride = 2 if i > 0 and c["down"] == "stride" else 1
        x = net.relu(net.batchnorm(net.conv2d(x, w, c["kernel"], stride=stride, padding=c["kernel"] // 2)))
        if i > 0 and c["down"] == "max":
            x = net.maxpool2d(x, 2)
    x = net.flatten(net.adaptive_avgpool2d(x, 1))
    return net.output(net.linear(x, c["classes"]))


# -- grouped convolutions with squeeze-and-excitation (ResNeXt-like) --------------------------------


class _SE(nn.Module):
    def __init__(self, c: int, r: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(c, r), nn.Linear(r, c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = F.adaptive_avg_pool2d(x, 1).flatten(1)
        s = torch.sigmoid(self.fc2(F.relu(self.fc1(s))))
        return x * s.view(x.shape[0], x.shape[1], 1, 1)


def _se_net(net: Network, x: Tensor, c: int, r: int) -> Tensor:
    s = net.flatten(net.adaptive_avgpool2d(x, 1))
    s = net.sigmoid(net.linear(net.relu(net.linear(s, r)), c))
    return net.mul(x, net.reshape(s, (x.shape[0], c, 1, 1)))


class _ResNeXtBlock(nn.Module):
    def __init__(self, c: int, groups: int, se: int) -> None:
        super().__init__()
        self.a = nn.Sequential(nn.Conv2d(c, c, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU())
        self.b = nn.Sequential(nn.Conv2d(c, c, 3, padding=1, groups=groups, bias=False), nn.BatchNorm2d(c))
        self.se = _SE(c, se) if se else None
        self.c = nn.Sequential(nn.Conv2d(c, c, 1, bias=False), nn.BatchNorm2d(c))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.b(self.a(x)))
        if self.se is not None:
            y = self.se(y)
        return F.relu(x + self.c(y))


def _grouped_torch(c: Config) -> nn.Module:
    w = c["groups"] * c["per_group"]
    stem = nn.Sequential(nn.Conv2d(3, w, 3, stride=c["stem_stride"], padding=1), nn.BatchNorm2d(w), nn.ReLU())
    blocks = [_ResNeXtBlock(w, c["groups"], c["se"]) for _ in range(c["blocks"])]
    head = [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(w, c["classes"])]
    return nn.Sequential(stem, *blocks, *head)


def _grouped_net(c: Config) -> Network:
    w = c["groups"] * c["per_group"]
    net = Network("grouped_se")
    x = net.input((c["batch"], 3, c["res"], c["res"]))
    x = net.relu(net.batchnorm(net.conv2d(x, w, 3, stride=c["stem_stride"], padding=1)))

    def block(i: int, x: Tensor) -> Tensor:
        y = net.relu(net.batchnorm(net.conv2d(x, w, 1, bias=False)))
        y = net.relu(net.batchnorm(net.conv2d(y, w, 3, padding=1, groups=c["groups"], bias=False)))
        if c["se"]:
            y = _se_net(net, y, w, c["se"])
        return net.relu(net.add(x, net.batchnorm(net.conv2d(y, w, 1, bias=False))))

    x = net.repeat(c["blocks"], c["blocks"], block, x)  # a block's input lives through it, as in Python
    x = net.flatten(net.adaptive_avgpool2d(x, 1))
    return net.output(net.linear(x, c["classes"]))


# -- dilated convolutions, padding="same" with even kernels -----------------------------------------


def _dilated_torch(c: Config) -> nn.Module:
    layers: list[nn.Module] = []
    cin = 3
    for w, d in zip(c["widths"], c["dilations"]):
        layers += [nn.Conv2d(cin, w, 3, padding=d, dilation=d), nn.BatchNorm2d(w), nn.ReLU()]
        cin = w
    if c["even_kernel"]:
        layers += [nn.Conv2d(cin, cin, c["even_kernel"], padding="same"), nn.ReLU()]
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, c["classes"])]
    return nn.Sequential(*layers)


def _dilated_net(c: Config) -> Network:
    net = Network("dilated")
    x = net.input((c["batch"], 3, c["res"], c["res"]))
    for w, d in zip(c["widths"], c["dilations"]):
        x = net.relu(net.batchnorm(net.conv2d(x, w, 3, padding=d, dilation=d)))
    if c["even_kernel"]:
        x = net.relu(net.conv2d(x, x.shape[1], c["even_kernel"], padding="same"))
    x = net.flatten(net.adaptive_avgpool2d(x, 1))
    return net.output(net.linear(x, c["classes"]))


# -- inverted residuals: depthwise convolutions, hardswish/relu6, optional SE -----------------------


class _InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, expand: int, k: int, stride: int, act: str, se: bool) -> None:
        super().__init__()
        mid = cin * expand
        act_cls: Any = nn.Hardswish if act == "hardswish" else nn.ReLU6
        self.expand = nn.Sequential(nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), act_cls())
        self.dw = nn.Sequential(
            nn.Conv2d(mid, mid, k, stride=stride, padding=k // 2, groups=mid, bias=False),
            nn.BatchNorm2d(mid),
            act_cls(),
        )
        self.se = _SE(mid, max(1, mid // 4)) if se else None
        self.project = nn.Sequential(nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dw(self.expand(x))
        if self.se is not None:
            y = self.se(y)
        y = self.project(y)
        return x + y if self.residual else y


def _mobile_torch(c: Config) -> nn.Module:
    w = c["widths"]
    layers: list[nn.Module] = [nn.Conv2d(3, w[0], 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(w[0])]
    layers.append(nn.Hardswish() if c["act"] == "hardswish" else nn.ReLU6())
    for i in range(1, len(w)):
        stride = 2 if i == 1 else 1
        layers.append(_InvertedResidual(w[i - 1], w[i], c["expand"], c["kernel"], stride, c["act"], c["se"]))
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2), nn.Linear(w[-1], c["classes"])]
    return nn.Sequential(*layers)


def _mobile_net(c: Config) -> Network:
    w = c["widths"]
    net = Network("mobile")
    act = net.hardswish if c["act"] == "hardswish" else net.relu6
    x = net.input((c["batch"], 3, c["res"], c["res"]))
    x = act(net.batchnorm(net.conv2d(x, w[0], 3, stride=2, padding=1, bias=False)))
    for i in range(1, len(w)):
        stride, mid, k = 2 if i == 1 else 1, w[i - 1] * c["expand"], c["kernel"]
        y = act(net.batchnorm(net.conv2d(x, mid, 1, bias=False)))
        y = act(net.batchnorm(net.depthwise(y, k, stride=stride, padding=k // 2, bias=False)))
        if c["se"]:
            y = _se_net(net, y, mid, max(1, mid // 4))
        y = net.batchnorm(net.conv2d(y, w[i], 1, bias=False))
        x = net.add(x, y) if stride == 1 and w[i - 1] == w[i] else y
    x = net.dropout(net.flatten(net.adaptive_avgpool2d(x, 1)), 0.2)
    return net.output(net.linear(x, c["classes"]))


# -- UNet: transposed convolutions, concatenated skips -----------------------------------------------


def _double(cin: int, cout: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU(), nn.Conv2d(cout, cout, 3, padding=1), nn.ReLU()
    )


class _UNet(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        w = c["width"]
        k, p, op = (2, 0, 0) if c["up_kernel"] == 2 else (3, 1, 1)
        self.e1, self.e2, self.mid = _double(c["in_ch"], w), _double(w, 2 * w), _double(2 * w, 4 * w)
        self.u2 = nn.ConvTranspose2d(4 * w, 2 * w, k, stride=2, padding=p, output_padding=op)
        self.d2 = _double(4 * w, 2 * w)
        self.u1 = nn.ConvTranspose2d(2 * w, w, k, stride=2, padding=p, output_padding=op)
        self.d1 = _double(2 * w, w)
        self.out = nn.Conv2d(w, c["classes"], 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e1 = self.e1(x)
        e2 = self.e2(F.max_pool2d(e1, 2))
        m = self.mid(F.max_pool2d(e2, 2))
        d2 = self.d2(torch.cat([self.u2(m), e2], dim=1))
        d1 = self.d1(torch.cat([self.u1(d2), e1], dim=1))
        return self.out(d1)


def _unet_net(c: Config) -> Network:
    w = c["width"]
    k, p, op = (2, 0, 0) if c["up_kernel"] == 2 else (3, 1, 1)
    net = Network("unet")

    def double(x: Tensor, cout: int) -> Tensor:
        return net.relu(net.conv2d(net.relu(net.conv2d(x, cout, 3, padding=1)), cout, 3, padding=1))

    x = net.input((c["batch"], c["in_ch"], c["res"], c["res"]))
    e1 = double(x, w)
    e2 = double(net.maxpool2d(e1, 2), 2 * w)
    m = double(net.maxpool2d(e2, 2), 4 * w)
    u2 = net.conv_transpose2d(m, 2 * w, k, stride=2, padding=p, output_padding=op)
    d2 = double(net.concat([u2, e2], dim=1), 2 * w)
    u1 = net.conv_transpose2d(d2, w, k, stride=2, padding=p, output_padding=op)
    d1 = double(net.concat([u1, e1], dim=1), w)
    return net.output(net.conv2d(d1, c["classes"], 1))


# -- 1-D temporal convolutions with dropout ----------------------------------------------------------


class _TemporalBlock(nn.Module):
    def __init__(self, cin: int, cout: int, k: int, d: int, p: float) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(cin, cout, k, padding=d * (k - 1) // 2, dilation=d)
        self.conv2 = nn.Conv1d(cout, cout, k, padding=d * (k - 1) // 2, dilation=d)
        self.drop = nn.Dropout(p)
        self.down = nn.Conv1d(cin, cout, 1) if cin != cout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.drop(F.relu(self.conv1(x)))
        y = self.drop(F.relu(self.conv2(y)))
        return F.relu(y + (x if self.down is None else self.down(x)))


class _TCN(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        chans = [c["in_ch"], *c["widths"]]
        self.blocks = nn.Sequential(
            *(
                _TemporalBlock(chans[i], chans[i + 1], c["kernel"], 2**i, c["dropout"])
                for i in range(len(chans) - 1)
            )
        )
        self.head = nn.Linear(chans[-1], c["classes"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(x).mean(dim=2))


def _tcn_net(c: Config) -> Network:
    net = Network("tcn1d")
    x = net.input((c["batch"], c["in_ch"], c["length"]))
    k = c["kernel"]
    for i, w in enumerate(c["widths"]):
        d = 2**i
        cin = x.shape[1]
        y = net.dropout(net.relu(net.conv1d(x, w, k, padding=d * (k - 1) // 2, dilation=d)), c["dropout"])
        y = net.dropout(net.relu(net.conv1d(y, w, k, padding=d * (k - 1) // 2, dilation=d)), c["dropout"])
        skip = x if cin.value == w else net.conv1d(x, w, 1)
        x = net.relu(net.add(y, skip))
    return net.output(net.linear(net.mean(x, 2), c["classes"]))


# -- recurrent networks ----------------------------------------------------------------------------


class _Recurrent(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        cls: Any = nn.LSTM if c["cell"] == "lstm" else nn.GRU
        self.rnn = cls(
            c["features"], c["hidden"], num_layers=c["layers"], batch_first=True, bidirectional=c["bidir"]
        )
        self.drop = nn.Dropout(c["dropout"])
        self.head = nn.Linear(c["hidden"] * (2 if c["bidir"] else 1), c["classes"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(x)
        return self.head(self.drop(out))


def _rnn_net(c: Config) -> Network:
    net = Network(c["cell"])
    x = net.input((c["batch"], c["seq"], c["features"]))
    rnn = net.lstm if c["cell"] == "lstm" else net.gru
    x = rnn(x, c["hidden"], num_layers=c["layers"], bidirectional=c["bidir"])
    return net.output(net.linear(net.dropout(x, c["dropout"]), c["classes"]))


# -- transformers: attention written by hand (q/k/v/out projections, SDPA) -----------------------------


class _Attention(nn.Module):
    def __init__(self, d: int, heads: int, kv_heads: int, causal: bool) -> None:
        super().__init__()
        self.h, self.kvh, self.hd, self.causal = heads, kv_heads, d // heads, causal
        self.q, self.o = nn.Linear(d, d), nn.Linear(d, d)
        self.k, self.v = nn.Linear(d, kv_heads * self.hd), nn.Linear(d, kv_heads * self.hd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q = self.q(x).view(b, s, self.h, self.hd).transpose(1, 2)
        k = self.k(x).view(b, s, self.kvh, self.hd).transpose(1, 2)
        v = self.v(x).view(b, s, self.kvh, self.hd).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal, enable_gqa=self.kvh != self.h)
        return self.o(y.transpose(1, 2).reshape(b, s, d))


class _Block(nn.Module):
    """Pre-norm (``x + f(norm(x))``) or post-norm (``norm(x + f(x))``) encoder layer."""

    def __init__(self, c: Config, post_norm: bool) -> None:
        super().__init__()
        d, f = c["d_model"], c["d_model"] * c["ffn_mult"]
        self.post = post_norm
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = _Attention(d, c["heads"], c.get("kv_heads", c["heads"]), c.get("causal", False))
        self.mlp = nn.Sequential(nn.Linear(d, f), nn.GELU(), nn.Linear(f, d))
        self.drop = nn.Dropout(c["dropout"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.post:
            x = self.n1(x + self.drop(self.attn(x)))
            return self.n2(x + self.drop(self.mlp(x)))
        x = x + self.drop(self.attn(self.n1(x)))
        return x + self.drop(self.mlp(self.n2(x)))


def _block_net(net: Network, x: Tensor, c: Config, post_norm: bool) -> Tensor:
    d = c["d_model"]

    def attn(y: Tensor) -> Tensor:
        return net.attention(y, c["heads"], c.get("kv_heads", c["heads"]), causal=c.get("causal", False))

    def mlp(y: Tensor) -> Tensor:
        return net.linear(net.gelu(net.linear(y, d * c["ffn_mult"])), d)

    p = c["dropout"]
    if post_norm:
        x = net.layernorm(net.add(x, net.dropout(attn(x), p)))
        return net.layernorm(net.add(x, net.dropout(mlp(x), p)))
    x = net.add(x, net.dropout(attn(net.layernorm(x)), p))
    return net.add(x, net.dropout(mlp(net.layernorm(x)), p))


class _ViT(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        d, n = c["d_model"], (c["res"] // c["patch"]) ** 2
        self.patch = nn.Conv2d(3, d, c["patch"], stride=c["patch"])
        self.pos = nn.Parameter(torch.randn(1, n, d) * 0.02)
        self.blocks = nn.Sequential(*(_Block(c, post_norm=False) for _ in range(c["layers"])))
        self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, c["classes"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch(x).flatten(2).transpose(1, 2) + self.pos
        return self.head(self.norm(self.blocks(x)).mean(dim=1))


def _vit_net(c: Config) -> Network:
    d, n = c["d_model"], (c["res"] // c["patch"]) ** 2
    net = Network("vit")
    x = net.input((c["batch"], 3, c["res"], c["res"]))
    x = net.transpose(net.flatten(net.conv2d(x, d, c["patch"], stride=c["patch"]), 2), 1, 2)
    x = net.add(x, net.parameter((1, n, d)))
    x = net.repeat(c["layers"], c["layers"], lambda i, y: _block_net(net, y, c, post_norm=False), x)
    return net.output(net.linear(net.mean(net.layernorm(x), 1), c["classes"]))


class _LM(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        self.emb = nn.Embedding(c["vocab"], c["d_model"])
        self.blocks = nn.Sequential(*(_Block(c, post_norm=False) for _ in range(c["layers"])))
        self.norm, self.head = nn.LayerNorm(c["d_model"]), nn.Linear(c["d_model"], c["vocab"], bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.blocks(self.emb(ids))))


def _lm_net(c: Config) -> Network:
    net = Network("gqa_lm")
    x = net.embedding(net.input((c["batch"], c["seq"]), dtype="int64"), c["vocab"], c["d_model"])
    x = net.repeat(c["layers"], c["layers"], lambda i, y: _block_net(net, y, c, post_norm=False), x)
    return net.output(net.linear(net.layernorm(x), c["vocab"], bias=False))


class _Encoder(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*(_Block(c, post_norm=True) for _ in range(c["layers"])))
        self.head = nn.Linear(c["d_model"], c["classes"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(x).mean(dim=1))


def _encoder_net(c: Config) -> Network:
    net = Network("encoder")
    x = net.input((c["batch"], c["seq"], c["d_model"]))
    x = net.repeat(c["layers"], c["layers"], lambda i, y: _block_net(net, y, c, post_norm=True), x)
    return net.output(net.linear(net.mean(x, 1), c["classes"]))


# -- the families ------------------------------------------------------------------------------------

_ODD = [5, 7, 12, 13, 20, 24, 27, 33]

FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family(
            "odd_cnn",
            {"batch": [1, 2, 4, 8], "res": [16, 24, 28, 32], "in_ch": [1, 3, 4], "kernel": [3, 5],
             "down": ["max", "stride"], "classes": [10, 17],
             "widths": [(a, b, c) for a in _ODD[:5] for b in _ODD[2:] for c in _ODD[3:]]},
            _odd_cnn_torch,
            _odd_cnn_net,
        ),
        Family(
            "grouped_se",
            {"batch": [1, 2, 4], "res": [16, 24, 32], "groups": [2, 4, 8], "per_group": [3, 4, 6],
             "stem_stride": [1, 2], "blocks": [1, 2], "se": [0, 4, 8], "classes": [10]},
            _grouped_torch,
            _grouped_net,
        ),
        Family(
            "dilated",
            {"batch": [1, 2, 4], "res": [16, 24, 32], "even_kernel": [0, 2, 4], "classes": [10],
             "widths": [(a, b) for a in (6, 12, 13, 16) for b in (8, 13, 20, 24)],
             "dilations": [(1, 2), (2, 2), (2, 3), (3, 1)]},
            _dilated_torch,
            _dilated_net,
        ),
        Family(
            "mobile",
            {"batch": [1, 2, 4], "res": [32, 48], "expand": [2, 3, 6], "kernel": [3, 5],
             "act": ["relu6", "hardswish"], "se": [False, True], "classes": [10],
             "widths": [(8, 12, 12), (12, 13, 13), (13, 20, 20), (16, 24, 32), (10, 14, 14)]},
            _mobile_torch,
            _mobile_net,
        ),
        Family(
            "unet",
            {"batch": [1, 2, 4], "res": [16, 24, 32], "in_ch": [1, 3], "width": [5, 6, 8, 12, 13],
             "up_kernel": [2, 3], "classes": [2, 3]},
            _UNet,
            _unet_net,
        ),
        Family(
            "tcn1d",
            {"batch": [1, 4, 8], "length": [64, 100, 128], "in_ch": [1, 3, 12], "kernel": [3, 5],
             "dropout": [0.1, 0.2], "classes": [5],
             "widths": [(12, 12), (13, 13, 13), (20, 24), (16, 16, 32), (7, 9)]},
            _TCN,
            _tcn_net,
        ),
        Family(
            "lstm",
            {"cell": ["lstm"], "batch": [1, 2, 4, 8], "seq": [8, 16, 32], "features": [5, 13, 32],
             "hidden": [12, 20, 33, 64], "layers": [1, 2], "bidir": [False, True], "dropout": [0.1],
             "classes": [7]},
            _Recurrent,
            _rnn_net,
        ),
        Family(
            "gru",
            {"cell": ["gru"], "batch": [1, 2, 4, 8], "seq": [8, 16, 32], "features": [5, 13, 32],
             "hidden": [12, 20, 33, 64], "layers": [1, 2], "bidir": [False, True], "dropout": [0.1],
             "classes": [7]},
            _Recurrent,
            _rnn_net,
        ),
        Family(
            "vit",
            {"batch": [1, 2, 4], "res": [16, 32], "patch": [4, 8], "d_model": [48, 64, 96],
             "heads": [2, 3, 4], "layers": [1, 2], "ffn_mult": [2, 4], "dropout": [0.1], "classes": [10]},
            _ViT,
            _vit_net,
            lambda c: c["d_model"] % c["heads"] == 0,
        ),
        Family(
            "gqa_lm",
            {"batch": [1, 2, 4], "seq": [16, 32, 64], "d_model": [64, 96, 128], "heads": [4, 8],
             "kv_heads": [1, 2], "causal": [True], "layers": [1, 2], "ffn_mult": [2, 4],
             "dropout": [0.0, 0.1], "vocab": [500, 1000]},
            _LM,
            _lm_net,
            lambda c: c["d_model"] % c["heads"] == 0,
        ),
        Family(
            "encoder",
            {"batch": [1, 2, 4], "seq": [16, 32, 64], "d_model": [48, 64, 96], "heads": [2, 3, 4],
             "layers": [1, 2], "ffn_mult": [2, 4], "dropout": [0.1], "classes": [10]},
            _Encoder,
            _encoder_net,
            lambda c: c["d_model"] % c["heads"] == 0,
        ),
    )
}  # fmt: skip
