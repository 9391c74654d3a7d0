"""Catalog breadth shared by the DSL and ``from_torch``, each checked against PyTorch: ConvNd
``padding_mode`` (reflect / replicate / circular) and ``F.pad`` (params, FLOPs, validity; memory
against :func:`dnnsat.torch.peak_memory` on this CPU; the DSL twin's costs equal the trace's)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import dnnsat as ds  # noqa: E402
from dnnsat.cost import Budget, memory_expressions  # noqa: E402
from dnnsat.expr import compile_scalar  # noqa: E402
from dnnsat.torch import GraphModule, concretize, from_torch, peak_memory  # noqa: E402
from tests.test_from_torch import assert_exact  # noqa: E402

Config = dict[str, Any]


class Padded(nn.Module):
    """A ConvNd with a padding mode, then an ``F.pad`` in the forward."""

    def __init__(self, nd: int, w: int, k: int, pad: Any, mode: str, fpad: int, fmode: str) -> None:
        super().__init__()
        conv = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}[nd]
        self.conv = conv(3, w, k, padding=pad, padding_mode=mode)
        self.fpad, self.fmode = fpad, fmode
        self.head = nn.Linear(w, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.pad(F.relu(self.conv(x)), (self.fpad, self.fpad + 1), mode=self.fmode)
        return self.head(y.flatten(2).mean(-1))


def _space(nd: int) -> ds.Space:
    return ds.Space(
        {
            "nd": ds.Categorical([nd]),
            "res": ds.Categorical([2, 3, 5, 8]),
            "w": ds.Categorical([4, 6]),
            "k": ds.Categorical([1, 3, 4]),
            "pad": ds.Categorical([0, 1, 2, 3]),
            "mode": ds.Categorical(["zeros", "reflect", "replicate", "circular"]),
            "fpad": ds.Categorical([0, 1, 4]),
            "fmode": ds.Categorical(["constant", "reflect", "replicate", "circular"]),
        }
    )


def _build(c: Config) -> nn.Module:
    return Padded(c["nd"], c["w"], c["k"], c["pad"], c["mode"], c["fpad"], c["fmode"])


def _inputs(c: Config) -> tuple[Any, ...]:
    return (torch.empty(2, 3, *[c["res"]] * c["nd"]),)


@pytest.mark.parametrize("nd", [1, 2])
def test_padding_modes_exact(nd: int) -> None:
    """Reflect padding must stay below the padded size, circular at most it: invalid ones included."""
    _, valid, n = assert_exact(_space(nd), _build, _inputs, n=60)
    assert 0 < valid < n


def test_same_padding_with_mode_exact() -> None:
    space = ds.Space(
        {"res": ds.Categorical([3, 6]), "k": ds.Categorical([2, 3, 4]), "d": ds.Categorical([1, 2]),
         "mode": ds.Categorical(["reflect", "circular", "replicate"])}
    )  # fmt: skip

    def build(c: Config) -> nn.Module:
        return nn.Conv2d(3, 5, c["k"], padding="same", dilation=c["d"], padding_mode=c["mode"])

    _, valid, n = assert_exact(space, build, lambda c: (torch.empty(1, 3, c["res"], c["res"]),), n=40)
    assert 0 < valid < n  # reflect by 3 (kernel 4, dilation 2) on a 3-wide input raises


def _dsl(v: Any) -> ds.Network:
    net = ds.Network()
    x = net.input((2, 3, v.res, v.res))
    y = net.choose(
        v.mode,
        {
            m: (lambda x, m=m: net.conv2d(x, 6, 3, padding=v.pad, padding_mode=m))
            for m in ("reflect", "circular")
        },
        x,
    )
    return net.output(net.pad(net.relu(y), (1, 2, 0, 1), "replicate"))


class Twin(nn.Module):
    def __init__(self, pad: int, mode: str) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=pad, padding_mode=mode)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.pad(F.relu(self.conv(x)), (1, 2, 0, 1), mode="replicate")


def test_dsl_twin_equals_the_trace() -> None:
    space = ds.Space(
        {
            "res": ds.Categorical([3, 6]),
            "pad": ds.Categorical([1, 2, 3]),
            "mode": ds.Categorical(["reflect", "circular"]),
        }
    )
    traced = ds.Problem(
        space, model=from_torch(lambda c: Twin(c["pad"], c["mode"]), lambda c: ((2, 3, c["res"], c["res"]),))
    )
    twin = ds.Problem(space, model=_dsl)
    for res in (3, 6):
        for pad in (1, 2, 3):
            for mode in ("reflect", "circular"):
                cfg = {"res": res, "pad": pad, "mode": mode}
                assert traced.check(cfg).feasible == twin.check(cfg).feasible, cfg
                if twin.check(cfg).feasible:
                    assert traced.costs(cfg) == pytest.approx(twin.costs(cfg), rel=1e-12), cfg
    assert not twin.check({"res": 3, "pad": 3, "mode": "reflect"}).feasible
    assert twin.check({"res": 3, "pad": 3, "mode": "circular"}).feasible


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("train", [True, False])
def test_pad_memory_against_pytorch(mode: str, train: bool) -> None:
    """The memory model on a padded conv stack within the memory model's goal (8 % over, 3 % under)."""
    torch.set_num_threads(1)
    net = ds.Network()
    x = net.input((4, 8, 32, 32))
    x = net.relu(net.conv2d(x, 16, 3, padding=2, padding_mode=mode))
    x = net.pad(x, (3, 3, 3, 3), mode if mode != "replicate" else "constant")
    x = net.relu(net.conv2d(x, 16, 3, padding=1, padding_mode=mode))
    net.output(net.linear(net.flatten(net.adaptive_avgpool2d(x, 1)), 10))
    kind = "train" if train else "inference"
    ex = memory_expressions(net, Budget(mode=kind, optimizer="sgd" if train else None), None)
    estimate = int(compile_scalar([ex["memory"]])({})[0])
    torch.manual_seed(0)
    module = GraphModule(concretize(net, {}))
    real = peak_memory(module, [torch.randn(4, 8, 32, 32)], train=train, optimizer="sgd").peak
    assert -0.03 <= (estimate - real) / real <= 0.08, (estimate, real)


# -- ConvTranspose1d ----------------------------------------------------------------------------------


class Up1d(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        self.up = nn.ConvTranspose1d(
            4, c["w"], c["k"], stride=c["s"], padding=c["p"], output_padding=c["op"], groups=c["g"]
        )
        self.head = nn.Linear(c["w"], 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(F.relu(self.up(x)).mean(-1))


def test_conv_transpose1d_exact() -> None:
    """Groups divide both channel counts, the output length is positive: invalid configurations
    included."""
    space = ds.Space(
        {
            "len": ds.Categorical([1, 5]),
            "w": ds.Categorical([4, 6]),
            "k": ds.Categorical([1, 2, 3]),
            "s": ds.Categorical([2, 3]),  # output_padding >= stride: the meta kernel accepts it, CPU not
            "p": ds.Categorical([0, 1, 2]),
            "op": ds.Categorical([0, 1]),
            "g": ds.Categorical([1, 2, 4]),
        }
    )
    _, valid, n = assert_exact(space, Up1d, lambda c: (torch.empty(2, 4, c["len"]),), n=60)
    assert 0 < valid < n


def _transpose_memory(nd: int, batch: int, k: int, s: int, g: int, train: bool) -> tuple[int, int]:
    """(estimate, PyTorch's peak) of two transposed convolutions, 1-D or the 2-D ones of height 1."""
    torch.set_num_threads(1)
    net = ds.Network()
    shape = (batch, 16, 40) if nd == 1 else (batch, 16, 1, 40)
    x = net.input(shape)
    if nd == 1:
        x = net.relu(net.conv_transpose1d(x, 24, k, stride=s, padding=1, groups=g))
        x = net.conv_transpose1d(x, 8, k, stride=s, groups=g)
    else:
        x = net.relu(net.conv_transpose2d(x, 24, (1, k), stride=(1, s), padding=(0, 1), groups=g))
        x = net.conv_transpose2d(x, 8, (1, k), stride=(1, s), groups=g)
    net.output(net.linear(net.flatten(x), 5))
    kind = "train" if train else "inference"
    ex = memory_expressions(net, Budget(mode=kind, optimizer="sgd" if train else None), None)
    estimate = int(compile_scalar([ex["memory"]])({})[0])
    torch.manual_seed(0)
    module = GraphModule(concretize(net, {}))
    return estimate, peak_memory(module, [torch.randn(*shape)], train=train, optimizer="sgd").peak


@pytest.mark.parametrize("batch,k,s,g", [(1, 3, 1, 1), (2, 5, 1, 4), (4, 3, 2, 1), (8, 2, 2, 1)])
@pytest.mark.parametrize("train", [True, False])
def test_conv_transpose1d_memory_is_the_2d_rule_of_height_1(
    batch: int, k: int, s: int, g: int, train: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """ATen runs a 1-D transposed convolution as the 2-D one of height 1: PyTorch's peaks are equal and
    so are the estimates. Unstrided: within 10 % over, 3 % under; strided ones are warned about (the
    2-D rule on kernels of height 1: -13 % on (4, 3, 2, 1) inference)."""
    with caplog.at_level("WARNING", logger="dnnsat.cost"):
        one = _transpose_memory(1, batch, k, s, g, train)
    assert one == _transpose_memory(2, batch, k, s, g, train)
    estimate, real = one
    warned = "strided conv_transpose1d" in caplog.text
    assert warned == (s > 1)
    if not warned:
        assert -0.03 <= (estimate - real) / real <= 0.10, (estimate, real)


# -- num_layers, bidirectional, bias, causal as hyperparameters ----------------------------------------

HYPER = ds.Space(
    {
        "layers": ds.Int(1, 3),
        "bi": ds.Categorical([False, True]),
        "bias": ds.Categorical([False, True]),
        "causal": ds.Categorical([False, True]),
    }
)


class Hyper(nn.Module):
    """An LSTM whose depth, direction and biases are hyperparameters, then causal attention or not."""

    def __init__(self, c: Config) -> None:
        super().__init__()
        self.rnn = nn.LSTM(
            5, 8, num_layers=c["layers"], bidirectional=c["bi"], bias=c["bias"], batch_first=True
        )
        self.proj = nn.Linear(16 if c["bi"] else 8, 12, bias=c["bias"])
        self.causal = c["causal"]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.rnn(x)
        q = self.proj(y).view(2, 6, 2, 6).transpose(1, 2)
        return F.scaled_dot_product_attention(q, q, q, is_causal=self.causal)


def _hyper_dsl(v: Any) -> ds.Network:
    net = ds.Network()
    y = net.lstm(net.input((2, 6, 5)), 8, num_layers=v.layers, max_layers=3, bidirectional=v.bi, bias=v.bias)
    q = net.permute(net.reshape(net.linear(y, 12, bias=v.bias), (2, 6, 2, 6)), (0, 2, 1, 3))
    return net.output(net.sdpa(q, q, q, causal=v.causal))


def test_flags_and_num_layers_as_hyperparameters() -> None:
    """The DSL takes them as variables (one op per value); from_torch traces a region per value; both
    equal PyTorch's params and FLOPs and each other's every cost."""
    _, valid, n = assert_exact(HYPER, Hyper, lambda c: (torch.empty(2, 6, 5),), n=24)
    assert valid == n == 24
    traced = ds.Problem(HYPER, model=from_torch(Hyper, lambda c: (torch.empty(2, 6, 5),)))
    twin = ds.Problem(HYPER, model=_hyper_dsl)
    for vals in itertools.product([1, 2, 3], [False, True], [False, True], [False, True]):
        cfg = dict(zip(HYPER.names, vals))
        a, b = traced.costs(cfg), twin.costs(cfg)
        assert a == pytest.approx(b, rel=1e-12), cfg

    def unbounded(v: Any) -> ds.Network:
        net = ds.Network()
        return net.output(net.lstm(net.input((2, 6, 5)), 8, num_layers=v.layers))

    with pytest.raises(ds.GraphError, match="num_layers given as an expression needs max_layers"):
        ds.Problem(HYPER, model=unbounded)


# -- what is still refused: the module or op and the user's line --------------------------------------


class CrossKV(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(d, 2, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attn(x, x, x + 1, need_weights=False)[0]  # refused: key is not value


class CausalNoMask(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(d, 2, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attn(x, x, x, need_weights=False, is_causal=True)[0]  # refused: no mask


@pytest.mark.parametrize(
    "cls,message",
    [
        (
            CrossKV,
            r"module attn: MultiheadAttention is supported as .*key is value.*refused: key is not value",
        ),
        (CausalNoMask, r"module attn: MultiheadAttention: is_causal=True needs attn_mask.*refused: no mask"),
    ],
)
def test_unsupported_names_module_op_and_line(cls: type, message: str) -> None:
    space = ds.Space({"d": ds.Categorical([8, 16])})
    with pytest.raises(ds.GraphError, match=message):
        ds.Problem(space, model=from_torch(lambda c: cls(c["d"]), lambda c: ((2, 4, c["d"]),)))
