"""Zoo models: mlp, cnn (VGG-style), resnet, mobilenetv2, transformer (encoder), gpt (decoder-only).

Each is a :class:`~dnnsat.zoo.ZooModel`: ``dnnsat.zoo.gpt(budget=ds.Budget(params="125M"))``
returns a Problem; ``.space()`` and ``.build()`` give the default space and the build function.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..expr import Expr, where
from ..graph import Network, Tensor
from ..space import Categorical, Int, Space
from ._entry import ZooModel, register

__all__ = ["mlp", "cnn", "resnet", "mobilenetv2", "transformer", "gpt"]

Build = Callable[[Any], Network]


# ------------------------------------------------------------------------------------------------
# MLP


def _mlp_space() -> Space:
    return Space(
        {
            "batch_size": Categorical([16, 32, 64, 128, 256]),
            "depth": Int(1, 4),
            "width": Int(32, 1024, step=32),
            "activation": Categorical(["relu", "gelu", "silu", "tanh"]),
        }
    )


def _mlp_build(in_features: int = 784, num_classes: int = 10) -> Build:
    def build(v: Any) -> Network:
        net = Network("mlp")
        x = net.input((v.batch_size, in_features))
        x = net.activation(v.activation, net.linear(x, v.width))
        x = net.repeat(v.depth - 1, 3, lambda i, x: net.activation(v.activation, net.linear(x, v.width)), x)
        return net.output(net.linear(x, num_classes))

    return build


mlp = register(
    ZooModel("mlp", _mlp_space, _mlp_build, "Multi-layer perceptron: depth 1-4, width, activation.")
)


# ------------------------------------------------------------------------------------------------
# VGG-style CNN


def _cnn_space() -> Space:
    return Space(
        {
            "batch_size": Categorical([8, 32, 64, 128]),
            "resolution": Categorical([16, 24, 32, 48, 64]),
            "kernel": Categorical([3, 5, 7]),
            "padding": Int(0, 3),
            "convs": Int(1, 3),
            "w0": Int(16, 128, step=16),
            "w1": Int(32, 256, step=32),
            "w2": Int(32, 512, step=32),
            "w3": Int(64, 512, step=64),
            "fc": Categorical([256, 512, 1024]),
        }
    )


def _cnn_build(num_classes: int = 10) -> Build:
    """4 stages of [conv(kernel, padding) + BN + ReLU, then convs-1 x conv3x3 'same'] + maxpool 2."""

    def build(v: Any) -> Network:
        net = Network("cnn")
        x = net.input((v.batch_size, 3, v.resolution, v.resolution))
        for w in (v.w0, v.w1, v.w2, v.w3):
            x = net.relu(net.batchnorm(net.conv2d(x, w, v.kernel, padding=v.padding, bias=False)))

            def more(i: int, y: Tensor, w: Expr = w) -> Tensor:
                return net.relu(net.batchnorm(net.conv2d(y, w, 3, padding=1, bias=False)))

            x = net.repeat(v.convs - 1, 2, more, x)
            x = net.maxpool2d(x, 2)
        x = net.dropout(net.relu(net.linear(net.flatten(x), v.fc)), 0.5)
        return net.output(net.linear(x, num_classes))

    return build


cnn = register(
    ZooModel(
        "cnn",
        _cnn_space,
        _cnn_build,
        "VGG-style CNN: 4 stages of convolutions and max-pooling, then two dense layers.",
    )
)


# ------------------------------------------------------------------------------------------------
# ResNet


def _resnet_space() -> Space:
    params: dict[str, Any] = {
        "batch_size": Categorical([8, 16, 32, 64]),
        "resolution": Categorical([32, 64, 96, 128, 160, 192, 224]),
        "block": Categorical(["basic", "bottleneck"]),
        "groups": Categorical([1, 2, 4, 8, 16, 32]),
    }
    for i in range(4):
        params[f"w{i}"] = Int(16, 512, step=16)
        params[f"d{i}"] = Int(1, 6)
    return Space(params)


def _conv_bn(
    net: Network, x: Tensor, c: Any, k: int, stride: int = 1, groups: Any = 1, relu: bool = True
) -> Tensor:
    x = net.batchnorm(net.conv2d(x, c, k, stride=stride, padding=k // 2, groups=groups, bias=False))
    return net.relu(x) if relu else x


def _shortcut(net: Network, x: Tensor, out: Any, stride: int) -> Tensor:
    """Identity when shapes already match, else a 1x1 projection with BatchNorm (torchvision)."""
    cin = x.shape[1]
    proj = lambda y: _conv_bn(net, y, out, 1, stride, relu=False)  # noqa: E731
    if stride != 1:
        return proj(x)
    return net.branch([(cin == out, lambda y: y), (True, proj)], x)


def _basic(net: Network, x: Tensor, w: Any, stride: int, groups: Any) -> Tensor:
    y = _conv_bn(net, x, w, 3, stride, groups)
    y = _conv_bn(net, y, w, 3, 1, groups, relu=False)
    return net.relu(net.add(y, _shortcut(net, x, w, stride)))


def _bottleneck(net: Network, x: Tensor, w: Any, stride: int, groups: Any) -> Tensor:
    y = _conv_bn(net, x, w, 1)
    y = _conv_bn(net, y, w, 3, stride, groups)
    y = _conv_bn(net, y, 4 * w, 1, relu=False)
    return net.relu(net.add(y, _shortcut(net, x, 4 * w, stride)))


def _resnet_build(num_classes: int = 1000, stem: int = 64) -> Build:
    """torchvision-style ResNet: 7x7/2 stem + maxpool, 4 stages (per-stage width and depth), grouped 3x3."""

    def build(v: Any) -> Network:
        net = Network("resnet")
        x = net.input((v.batch_size, 3, v.resolution, v.resolution))
        x = _conv_bn(net, x, stem, 7, 2)
        x = net.maxpool2d(x, 3, 2, padding=1)

        def trunk(block: Callable[..., Tensor]) -> Callable[[Tensor], Tensor]:
            def run(x: Tensor) -> Tensor:
                for i in range(4):
                    w, d = getattr(v, f"w{i}"), getattr(v, f"d{i}")
                    x = block(net, x, w, 1 if i == 0 else 2, v.groups)

                    def more(j: int, y: Tensor, w: Any = w) -> Tensor:
                        return block(net, y, w, 1, v.groups)

                    x = net.repeat(d - 1, 5, more, x)
                return x

            return run

        x = net.choose(v.block, {"basic": trunk(_basic), "bottleneck": trunk(_bottleneck)}, x)
        x = net.flatten(net.adaptive_avgpool2d(x, 1))
        return net.output(net.linear(x, num_classes))

    return build


resnet = register(
    ZooModel(
        "resnet",
        _resnet_space,
        _resnet_build,
        "ResNet with basic or bottleneck blocks, per-stage widths and depths, grouped 3x3.",
    )
)


# ------------------------------------------------------------------------------------------------
# MobileNetV2

_MBV2_SETTINGS = [
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
]
_MBV2_WIDTHS = (0.5, 0.75, 1.0, 1.4)


def _make_divisible(v: float, divisor: int = 8) -> int:
    """torchvision's channel rounding."""
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    if new < 0.9 * v:
        new += divisor
    return new


def _mbv2_space() -> Space:
    return Space(
        {
            "batch_size": Categorical([1, 8, 32, 64]),
            "resolution": Int(96, 224, step=32),
            "width_mult": Categorical(list(_MBV2_WIDTHS)),
            "expansion": Categorical([3, 4, 6]),
            "kernel": Categorical([3, 5, 7]),
        }
    )


def _channels(
    wm: Expr, base: float, widths: Sequence[float] = _MBV2_WIDTHS, floor: bool = False
) -> Expr | int:
    vals = [max(int(base), _make_divisible(base * m)) if floor else _make_divisible(base * m) for m in widths]
    if len(set(vals)) == 1:
        return vals[0]
    out: Expr | int = vals[-1]
    for m, c in reversed(list(zip(widths[:-1], vals[:-1]))):
        out = where(wm == m, c, out)
    return out


def _mbv2_build(num_classes: int = 1000) -> Build:
    """torchvision MobileNetV2 with a searchable expansion ratio (t=6 blocks) and depthwise kernel."""

    def build(v: Any) -> Network:
        net = Network("mobilenetv2")
        x = net.input((v.batch_size, 3, v.resolution, v.resolution))
        c_in = _channels(v.width_mult, 32)
        x = net.relu6(net.batchnorm(net.conv2d(x, c_in, 3, stride=2, padding=1, bias=False)))
        base_in = 32
        for t, c, n, s in _MBV2_SETTINGS:
            c_out = _channels(v.width_mult, c)
            for i in range(n):
                stride = s if i == 0 else 1
                expand = 1 if t == 1 else v.expansion
                y = x
                if t != 1:
                    y = net.relu6(net.batchnorm(net.conv2d(y, c_in * expand, 1, bias=False)))
                y = net.relu6(
                    net.batchnorm(net.depthwise(y, v.kernel, stride, padding=v.kernel // 2, bias=False))
                )
                y = net.batchnorm(net.conv2d(y, c_out, 1, bias=False))
                x = net.add(x, y) if stride == 1 and base_in == c else y
                c_in, base_in = c_out, c
        last = _channels(v.width_mult, 1280, floor=True)
        x = net.relu6(net.batchnorm(net.conv2d(x, last, 1, bias=False)))
        x = net.flatten(net.adaptive_avgpool2d(x, 1))
        return net.output(net.linear(net.dropout(x, 0.2), num_classes))

    return build


mobilenetv2 = register(
    ZooModel(
        "mobilenetv2",
        _mbv2_space,
        _mbv2_build,
        "MobileNetV2: expansion ratio, depthwise kernel, width multiplier, resolution.",
    )
)


# ------------------------------------------------------------------------------------------------
# Transformers


def _block(net: Network, x: Tensor, v: Any, causal: bool, kv_heads: Any = None) -> Tensor:
    """Pre-LayerNorm transformer block: x + attn(ln(x)); x + mlp(ln(x)) with a GELU MLP."""
    d = x.shape[-1]
    x = net.add(x, net.attention(net.layernorm(x), v.heads, kv_heads, causal=causal))
    h = net.gelu(net.linear(net.layernorm(x), v.ffn_mult * d))
    return net.add(x, net.linear(h, d))


def _transformer_space() -> Space:
    return Space(
        {
            "batch_size": Categorical([1, 8, 16, 32]),
            "seq_len": Categorical([64, 128, 256, 512]),
            "layers": Int(1, 12),
            "d_model": Int(128, 1024, step=64),
            "heads": Categorical([1, 2, 4, 6, 8, 12, 16]),
            "ffn_mult": Categorical([2, 3, 4]),
        }
    )


def _transformer_build(vocab: int = 30522, num_classes: int = 2) -> Build:
    """BERT-like encoder classifier: token + learned position embeddings, pre-LN blocks, mean pooling."""

    def build(v: Any) -> Network:
        net = Network("transformer")
        ids = net.input((v.batch_size, v.seq_len), dtype="int64")
        x = net.add(net.embedding(ids, vocab, v.d_model), net.parameter((v.seq_len, v.d_model)))
        x = net.repeat(v.layers, 12, lambda i, y: _block(net, y, v, causal=False), x)
        x = net.mean(net.layernorm(x), dim=1)
        return net.output(net.linear(x, num_classes))

    return build


transformer = register(
    ZooModel(
        "transformer",
        _transformer_space,
        _transformer_build,
        "Transformer encoder classifier: layers, width, heads, FFN ratio, sequence, batch.",
    )
)


def _gpt_space() -> Space:
    return Space(
        {
            "batch_size": Categorical([1, 2, 4, 8, 16, 32]),
            "seq_len": Categorical([128, 256, 512, 1024, 2048]),
            "layers": Int(1, 48),
            "d_model": Int(128, 2048, step=64),
            "heads": Categorical([1, 2, 4, 6, 8, 12, 16, 32]),
            "kv_heads": Categorical([1, 2, 4, 6, 8, 12, 16, 32]),
            "ffn_mult": Categorical([2, 3, 4]),
            "vocab": Categorical([32000, 50304, 65536]),
        }
    )


def _gpt_build(max_layers: int = 48) -> Build:
    """Decoder-only LM: token + learned position embeddings, pre-LN causal GQA blocks, untied LM head."""

    def build(v: Any) -> Network:
        net = Network("gpt")
        ids = net.input((v.batch_size, v.seq_len), dtype="int64")
        x = net.add(net.embedding(ids, v.vocab, v.d_model), net.parameter((v.seq_len, v.d_model)))
        x = net.repeat(
            v.layers, max_layers, lambda i, y: _block(net, y, v, causal=True, kv_heads=v.kv_heads), x
        )
        return net.output(net.linear(net.layernorm(x), v.vocab, bias=False))

    return build


gpt = register(
    ZooModel(
        "gpt",
        _gpt_space,
        _gpt_build,
        "GPT-style decoder: layers, d_model, heads, kv heads, FFN ratio, sequence, vocabulary, batch.",
    )
)
