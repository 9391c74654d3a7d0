"""NAS-Bench-201 (NATS-Bench topology space, "tss") and the NATS-Bench size space ("sss").

The macro skeleton follows the benchmark's ``TinyNetwork`` / ``DynamicShapeTinyNet``: a 3x3 stem conv +
BN, three stages of cells separated by residual reduction blocks (3x3/2 ReLU-conv-BN twice, shortcut
``AvgPool2d(2) + conv1x1``), then BN + ReLU, global average pooling and a linear classifier.

Reference numbers (:func:`reference_costs`) use NATS-Bench's own counting (its ``get_model_infos``
hooks, batch 1): ``params_mb`` = trainable parameters / 1e6 and ``flops_m`` = (multiply-adds of every
Conv2d and Linear, plus one per output element for those with a bias) / 1e6; pooling, BN,
activations and additions are not counted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..expr import Const, Expr, as_expr, compile_scalar, where
from ..graph import GraphError, Network, Tensor, encode_config
from ..graph._catalog import eq
from ..space import Categorical, Space
from ._entry import ZooModel, register

__all__ = [
    "OPS",
    "EDGES",
    "DATASETS",
    "nasbench201",
    "nats_sss",
    "config_from_arch_str",
    "arch_str_from_config",
]

OPS = ("none", "skip_connect", "nor_conv_1x1", "nor_conv_3x3", "avg_pool_3x3")
EDGES = ("edge_0_1", "edge_0_2", "edge_1_2", "edge_0_3", "edge_1_3", "edge_2_3")
DATASETS = {
    "cifar10-valid": (32, 10),
    "cifar10": (32, 10),
    "cifar100": (32, 100),
    "ImageNet16-120": (16, 120),
}
SSS_CHANNELS = tuple(range(8, 65, 8))
SSS_ARCH = "|nor_conv_3x3~0|+|nor_conv_3x3~0|nor_conv_3x3~1|+|skip_connect~0|nor_conv_3x3~1|nor_conv_3x3~2|"


def config_from_arch_str(arch_str: str) -> dict[str, str]:
    """``"|nor_conv_3x3~0|+|none~0|skip_connect~1|+|..."`` -> ``{"edge_0_1": "nor_conv_3x3", ...}``."""
    nodes = arch_str.strip().strip("|").split("|+|") if arch_str else []
    if len(nodes) != 3:
        raise ValueError(
            f"not a NAS-Bench-201 architecture string (3 nodes separated by '|+|'): {arch_str!r}"
        )
    cfg: dict[str, str] = {}
    for j, node in enumerate(nodes, start=1):
        items = node.strip("|").split("|")
        if len(items) != j:
            raise ValueError(f"node {j} of {arch_str!r} must have {j} inputs, got {len(items)}")
        for item in items:
            op_name, _, src = item.partition("~")
            if op_name not in OPS:
                raise ValueError(f"unknown operation {op_name!r} in {arch_str!r}; known: {list(OPS)}")
            if not src.isdigit() or int(src) >= j:
                raise ValueError(f"bad input node {src!r} for node {j} in {arch_str!r}")
            cfg[f"edge_{int(src)}_{j}"] = op_name
    if len(cfg) != 6:
        raise ValueError(f"{arch_str!r} does not name every edge exactly once")
    return {e: cfg[e] for e in EDGES}


def arch_str_from_config(config: Mapping[str, Any]) -> str:
    """Inverse of :func:`config_from_arch_str`."""
    parts = []
    for j in (1, 2, 3):
        parts.append("|" + "|".join(f"{config[f'edge_{i}_{j}']}~{i}" for i in range(j)) + "|")
    return "+".join(parts)


# ------------------------------------------------------------------------------------------------
# building blocks (NATS-Bench's cell_operations with affine BN, so convs have no bias)


def _relu_conv_bn(net: Network, x: Tensor, c_out: Any, k: int, stride: int, pad: int) -> Tensor:
    return net.batchnorm(net.conv2d(net.relu(x), c_out, k, stride=stride, padding=pad, bias=False))


def _if_same_width(
    net: Network, x: Tensor, c_out: Any, same: Callable[[Tensor], Tensor], other: Callable[[Tensor], Tensor]
) -> Tensor:
    """``same(x)`` when ``x`` already has ``c_out`` channels, else ``other(x)`` (symbolic when unknown)."""
    cond = eq(x.shape[1], as_expr(c_out))
    if cond.is_const:
        return same(x) if cond.value else other(x)
    return net.branch([(cond, same), (Const(True), other)], x)


def _edge_op(net: Network, name: str, x: Tensor, c_out: Any) -> Tensor:
    """One cell edge (stride 1) from ``x`` to ``c_out`` channels, as NATS-Bench's ``OPS[name]``."""
    if name == "none":

        def mismatch(y: Tensor) -> Tensor:
            raise GraphError("nasbench: a 'none' edge between different widths is not modelled")

        return _if_same_width(net, x, c_out, net.zero, mismatch)
    if name == "skip_connect":  # Identity, or FactorizedReduce(stride 1) = ReLU + 1x1 conv + BN
        return _if_same_width(net, x, c_out, lambda y: y, lambda y: _relu_conv_bn(net, y, c_out, 1, 1, 0))
    if name == "nor_conv_1x1":
        return _relu_conv_bn(net, x, c_out, 1, 1, 0)
    if name == "nor_conv_3x3":
        return _relu_conv_bn(net, x, c_out, 3, 1, 1)
    if name == "avg_pool_3x3":  # optional ReLU-conv1x1-BN preprocess, then AvgPool(3, 1, 1)
        y = _if_same_width(net, x, c_out, lambda z: z, lambda z: _relu_conv_bn(net, z, c_out, 1, 1, 0))
        return net.avgpool2d(y, 3, 1, padding=1, count_include_pad=False)
    raise ValueError(f"unknown operation {name!r}")


def _cell(net: Network, x: Tensor, c_out: Any, edge: Callable[[int, int], Any]) -> Tensor:
    """NAS-Bench-201 cell: node j = sum over i < j of op(i -> j)(node i)."""
    nodes = [x]
    for j in (1, 2, 3):
        total: Tensor | None = None
        for i in range(j):
            choice = edge(i, j)
            src = nodes[i]
            if isinstance(choice, str):
                y = _edge_op(net, choice, src, c_out)
            else:
                y = net.choose(
                    choice, {name: (lambda s, name=name: _edge_op(net, name, s, c_out)) for name in OPS}, src
                )
            total = y if total is None else net.add(total, y)
        assert total is not None
        nodes.append(total)
    return nodes[3]


def _reduction(net: Network, x: Tensor, c_out: Any) -> Tensor:
    """NATS ``ResNetBasicblock(C_in, C_out, stride=2)``."""
    y = _relu_conv_bn(net, x, c_out, 3, 2, 1)
    y = _relu_conv_bn(net, y, c_out, 3, 1, 1)
    short = net.conv2d(net.avgpool2d(x, 2, 2), c_out, 1, bias=False)
    return net.add(short, y)


def _skeleton(
    net: Network,
    x: Tensor,
    channels: list[Any],
    cells_per_stage: int,
    edge: Callable[[int, int], Any],
    num_classes: int,
) -> Network:
    """Stem, ``cells_per_stage`` cells per stage, 2 reductions; ``channels`` lists every layer's C."""
    x = net.batchnorm(net.conv2d(x, channels[0], 3, padding=1, bias=False))
    layer = 0
    for stage in range(3):
        if stage > 0:
            x = _reduction(net, x, channels[layer])
            layer += 1
        for _ in range(cells_per_stage):
            x = _cell(net, x, channels[layer], edge)
            layer += 1
    x = net.relu(net.batchnorm(x))
    x = net.flatten(net.adaptive_avgpool2d(x, 1))
    return net.output(net.linear(x, num_classes))


# ------------------------------------------------------------------------------------------------
# NAS-Bench-201 (tss)


def _nb201_space() -> Space:
    return Space({e: Categorical(list(OPS)) for e in EDGES})


def _nb201_build(
    dataset: str = "cifar10", C: int = 16, N: int = 5, batch_size: int = 1
) -> Callable[[Any], Network]:
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; known: {list(DATASETS)}")
    res, classes = DATASETS[dataset]

    def build(v: Any) -> Network:
        net = Network("nasbench201")
        x = net.input((batch_size, 3, res, res))
        channels = [C] * N + [2 * C] * (N + 1) + [4 * C] * (N + 1)
        return _skeleton(net, x, channels, N, lambda i, j: v[f"edge_{i}_{j}"], classes)

    return build


def _nats_counting(net: Network) -> tuple[Expr, Expr]:
    """(params, NATS FLOPs) expressions: conv/linear multiply-adds plus bias additions."""
    flops: Expr = Const(0)
    for node in net.ops():
        if node.op in ("conv2d", "linear"):
            assert node.info is not None
            bias = net.tensors[node.output].numel if node.attrs.get("bias") else 0
            flops = flops + where(node.gate, node.info.macs + bias, 0)
    return net.total("params"), flops


class _NasBenchModel(ZooModel):
    _cache: dict[Any, tuple[Network, Space, Callable[..., Any]]]

    def _reference(self, key: Any, make: Callable[[], tuple[Network, Space]]) -> tuple[Network, Space, Any]:
        if key not in self._cache:
            net, space = make()
            params, flops = _nats_counting(net)
            self._cache[key] = (net, space, compile_scalar([params, flops]))
        return self._cache[key]


class NasBench201(_NasBenchModel):
    """NAS-Bench-201 / NATS-Bench tss: 6 categorical edges over 5 operations, C=16, N=5."""

    OPS = OPS
    EDGES = EDGES
    DATASETS = DATASETS

    def __init__(self) -> None:
        super().__init__("nasbench201", _nb201_space, _nb201_build, self.__doc__ or "")
        self._cache = {}

    @staticmethod
    def config_from_arch_str(arch_str: str) -> dict[str, str]:
        return config_from_arch_str(arch_str)

    @staticmethod
    def arch_str_from_config(config: Mapping[str, Any]) -> str:
        return arch_str_from_config(config)

    def reference_costs(self, arch_str: str, dataset: str = "cifar10") -> dict[str, float]:
        """``{"params_mb", "flops_m"}`` in NATS-Bench's convention (batch 1), from the symbolic model."""
        net, space, fn = self._reference(
            ("tss", dataset), lambda: (_nb201_build(dataset)(_nb201_space().vars), _nb201_space())
        )
        params, flops = fn(encode_config(space, config_from_arch_str(arch_str)))
        return {"params_mb": params / 1e6, "flops_m": flops / 1e6}


# ------------------------------------------------------------------------------------------------
# NATS-Bench size space (sss)


def _sss_space() -> Space:
    return Space({f"c{i}": Categorical(list(SSS_CHANNELS)) for i in range(1, 6)})


def _sss_build(dataset: str = "cifar10", batch_size: int = 1) -> Callable[[Any], Network]:
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; known: {list(DATASETS)}")
    res, classes = DATASETS[dataset]
    arch = config_from_arch_str(SSS_ARCH)

    def build(v: Any) -> Network:
        net = Network("nats_sss")
        x = net.input((batch_size, 3, res, res))
        channels = [v.c1, v.c2, v.c3, v.c4, v.c5]
        return _skeleton(net, x, channels, 1, lambda i, j: arch[f"edge_{i}_{j}"], classes)

    return build


class NatsSSS(_NasBenchModel):
    """NATS-Bench size space: 5 channel choices in {8, 16, ..., 64}, fixed best tss topology."""

    CHANNELS = SSS_CHANNELS
    ARCH = SSS_ARCH

    def __init__(self) -> None:
        super().__init__("nats_sss", _sss_space, _sss_build, self.__doc__ or "")
        self._cache = {}

    @staticmethod
    def config_from_channels(channels: str | Any) -> dict[str, int]:
        """``"8:16:32:64:64"`` or a sequence of 5 ints -> ``{"c1": 8, ...}``."""
        vals = (
            [int(c) for c in channels.split(":")] if isinstance(channels, str) else [int(c) for c in channels]
        )
        if len(vals) != 5 or any(c not in SSS_CHANNELS for c in vals):
            raise ValueError(f"NATS-sss channels are 5 values in {list(SSS_CHANNELS)}, got {channels!r}")
        return {f"c{i}": c for i, c in enumerate(vals, start=1)}

    def reference_costs(self, channels: str | Any, dataset: str = "cifar10") -> dict[str, float]:
        """``{"params_mb", "flops_m"}`` in NATS-Bench's convention (batch 1), from the symbolic model."""
        net, space, fn = self._reference(
            ("sss", dataset), lambda: (_sss_build(dataset)(_sss_space().vars), _sss_space())
        )
        params, flops = fn(encode_config(space, self.config_from_channels(channels)))
        return {"params_mb": params / 1e6, "flops_m": flops / 1e6}


nasbench201 = register(NasBench201())
nats_sss = register(NatsSSS())
