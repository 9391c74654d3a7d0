"""Impossible sizes are invalid, as PyTorch says (issue 12 section 5).

For every operator and every size it takes, the smallest boundary values (-1, 0, 1, ...) are built
symbolically (a space variable ``v``) and materialized with :func:`dnnsat.torch.to_torch` on the CPU
and on the ``meta`` device (which must agree): dnnsat calls a configuration valid exactly when PyTorch
constructs the module and runs its forward pass into a non-empty tensor of the predicted shape. The same
values written as plain ints raise :class:`GraphError` at build time exactly when they are invalid.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import pytest

import dnnsat as ds
from dnnsat.graph import GraphError, Network, Tensor, encode_config

torch = pytest.importorskip("torch")

from dnnsat.torch import example_inputs, to_torch  # noqa: E402

VALUES = (-1, 0, 1, 2, 3)
SPACE = ds.Space({"v": ds.Int(min(VALUES), max(VALUES))})

Build = Callable[[Network, Any], Tensor]


def _x(net: Network, *shape: int) -> Tensor:
    return net.input(shape)


def _ids(net: Network) -> Tensor:
    return net.input((2, 3), dtype="int64")


# (case, argument, smallest plain value accepted at build time, rule violated for v < that value, build)
CASES: list[tuple[str, str, int, str, Build]] = [
    ("input", "shape", 1, "dimensions are positive", lambda n, v: n.relu(n.input((2, v)))),
    ("parameter", "shape", 1, "dimensions are positive",
     lambda n, v: n.add(_x(n, 1, 3), n.parameter((v, 3)))),
    ("conv1d-out", "out_channels", 1, "out_channels is positive",
     lambda n, v: n.conv1d(_x(n, 2, 2, 5), v, 1)),
    ("conv1d-kernel", "kernel_size", 1, "kernel, stride, dilation are positive",
     lambda n, v: n.conv1d(_x(n, 2, 2, 5), 2, v)),
    ("conv1d-stride", "stride", 1, "kernel, stride, dilation are positive",
     lambda n, v: n.conv1d(_x(n, 2, 2, 5), 2, 1, stride=v)),
    ("conv1d-padding", "padding", 0, "padding is non-negative",
     lambda n, v: n.conv1d(_x(n, 2, 2, 5), 2, 3, padding=v)),
    ("conv1d-dilation", "dilation", 1, "kernel, stride, dilation are positive",
     lambda n, v: n.conv1d(_x(n, 2, 2, 5), 2, 2, dilation=v)),
    ("conv1d-groups", "groups", 1, "groups divide in_channels",
     lambda n, v: n.conv1d(_x(n, 2, 2, 5), 2, 1, groups=v)),
    ("conv2d-out", "out_channels", 1, "out_channels is positive",
     lambda n, v: n.conv2d(_x(n, 2, 2, 4, 4), v, 1)),
    ("conv2d-kernel", "kernel_size", 1, "kernel, stride, dilation are positive",
     lambda n, v: n.conv2d(_x(n, 2, 2, 4, 4), 2, v)),
    ("conv2d-stride", "stride", 1, "kernel, stride, dilation are positive",
     lambda n, v: n.conv2d(_x(n, 2, 2, 4, 4), 2, 1, stride=v)),
    ("conv2d-same-stride", "stride", 1, "kernel, stride, dilation are positive",
     lambda n, v: n.conv2d(_x(n, 2, 2, 4, 4), 2, 3, stride=v, padding="same")),
    ("conv2d-padding", "padding", 0, "padding is non-negative",
     lambda n, v: n.conv2d(_x(n, 2, 2, 4, 4), 2, 3, padding=v)),
    ("conv2d-dilation", "dilation", 1, "kernel, stride, dilation are positive",
     lambda n, v: n.conv2d(_x(n, 2, 2, 5, 5), 2, 2, dilation=v)),
    ("conv2d-groups", "groups", 1, "groups divide in_channels",
     lambda n, v: n.conv2d(_x(n, 2, 2, 4, 4), 2, 1, groups=v)),
    ("depthwise", "multiplier", 1, "out_channels is positive",
     lambda n, v: n.depthwise(_x(n, 2, 2, 4, 4), 3, padding=1, multiplier=v)),
    ("convT-out", "out_channels", 1, "out_channels is positive",
     lambda n, v: n.conv_transpose2d(_x(n, 2, 2, 3, 3), v, 1)),
    ("convT-kernel", "kernel_size", 1, "kernel, stride, dilation are positive",
     lambda n, v: n.conv_transpose2d(_x(n, 2, 2, 3, 3), 2, v)),
    ("convT-stride", "stride", 1, "kernel, stride, dilation are positive",
     lambda n, v: n.conv_transpose2d(_x(n, 2, 2, 3, 3), 2, 1, stride=v)),
    ("convT-padding", "padding", 0, "padding is non-negative",
     lambda n, v: n.conv_transpose2d(_x(n, 2, 2, 3, 3), 2, 3, padding=v)),
    ("convT-output-padding", "output_padding", 0, "output_padding smaller than stride or dilation",
     lambda n, v: n.conv_transpose2d(_x(n, 2, 2, 3, 3), 2, 3, stride=2, output_padding=v)),
    ("convT-dilation", "dilation", 1, "kernel, stride, dilation are positive",
     lambda n, v: n.conv_transpose2d(_x(n, 2, 2, 3, 3), 2, 2, dilation=v)),
    ("convT-groups", "groups", 1, "groups divide in_channels",
     lambda n, v: n.conv_transpose2d(_x(n, 2, 2, 3, 3), 2, 1, groups=v)),
    ("linear", "out_features", 1, "out_features is positive", lambda n, v: n.linear(_x(n, 2, 3), v)),
    ("embedding-rows", "num_embeddings", 1, "num_embeddings and dim are positive",
     lambda n, v: n.embedding(_ids(n), v, 4)),
    ("embedding-dim", "dim", 1, "num_embeddings and dim are positive",
     lambda n, v: n.embedding(_ids(n), 5, v)),
    ("attention-heads", "heads", 1, "heads divide model width", lambda n, v: n.attention(_x(n, 2, 3, 4), v)),
    ("attention-kv-heads", "kv_heads", 1, "kv heads divide heads",
     lambda n, v: n.attention(_x(n, 2, 3, 4), 2, kv_heads=v)),
    ("lstm", "hidden_size", 1, "hidden size is positive", lambda n, v: n.lstm(_x(n, 2, 3, 4), v)),
    ("gru", "hidden_size", 1, "hidden size is positive",
     lambda n, v: n.gru(_x(n, 2, 3, 4), v, bidirectional=True)),
    ("groupnorm", "groups", 1, "groups divide channels", lambda n, v: n.groupnorm(_x(n, 2, 4, 3), v)),
    ("maxpool2d-kernel", "kernel_size", 1, "kernel and stride are positive",
     lambda n, v: n.maxpool2d(_x(n, 2, 2, 5, 5), v)),
    ("maxpool2d-stride", "stride", 1, "kernel and stride are positive",
     lambda n, v: n.maxpool2d(_x(n, 2, 2, 5, 5), 2, stride=v)),
    ("maxpool2d-padding", "padding", 0, "padding at most half the kernel",
     lambda n, v: n.maxpool2d(_x(n, 2, 2, 5, 5), 3, padding=v)),
    ("maxpool2d-dilation", "dilation", 1, "kernel and stride are positive",
     lambda n, v: n.maxpool2d(_x(n, 2, 2, 5, 5), 2, dilation=v)),
    ("maxpool1d-kernel", "kernel_size", 1, "kernel and stride are positive",
     lambda n, v: n.maxpool1d(_x(n, 2, 2, 5), v)),
    ("avgpool2d-kernel", "kernel_size", 1, "kernel and stride are positive",
     lambda n, v: n.avgpool2d(_x(n, 2, 2, 5, 5), v)),
    ("avgpool2d-stride", "stride", 1, "kernel and stride are positive",
     lambda n, v: n.avgpool2d(_x(n, 2, 2, 5, 5), 2, stride=v)),
    ("avgpool2d-padding", "padding", 0, "padding at most half the kernel",
     lambda n, v: n.avgpool2d(_x(n, 2, 2, 5, 5), 3, padding=v)),
    ("avgpool1d-kernel", "kernel_size", 1, "kernel and stride are positive",
     lambda n, v: n.avgpool1d(_x(n, 2, 2, 5), v)),
    ("adaptive-avgpool2d", "output_size", 1, "output size is positive",
     lambda n, v: n.adaptive_avgpool2d(_x(n, 2, 2, 5, 5), v)),
    ("adaptive-maxpool2d", "output_size", 1, "output size is positive",
     lambda n, v: n.adaptive_maxpool2d(_x(n, 2, 2, 5, 5), v)),
    ("adaptive-avgpool1d", "output_size", 1, "output size is positive",
     lambda n, v: n.adaptive_avgpool1d(_x(n, 2, 2, 5), v)),
    ("adaptive-maxpool1d", "output_size", 1, "output size is positive",
     lambda n, v: n.adaptive_maxpool1d(_x(n, 2, 2, 5), v)),
    ("reshape-inferred", "shape", 1, "target dimensions are positive",
     lambda n, v: n.reshape(_x(n, 2, 3), (v, -1))),
    ("reshape", "shape", 1, "target dimensions are positive", lambda n, v: n.reshape(_x(n, 2, 3), (v, 6))),
]  # fmt: skip

# PyTorch runs these, but into an empty tensor: dnnsat asks every dimension to be >= 1.
EMPTY_OUTPUT = {
    ("input", 0),
    ("parameter", 0),
    ("linear", 0),
    ("embedding-dim", 0),
    ("adaptive-avgpool2d", 0),
    ("adaptive-maxpool2d", 0),
    ("adaptive-avgpool1d", 0),
    ("adaptive-maxpool1d", 0),
}
# PyTorch runs this through empty key/value projections (its attention output is all zeros).
EMPTY_INSIDE = {("attention-kv-heads", 0)}
# PyTorch infers a -1 in reshape; dnnsat infers a literal -1 only (a symbolic dimension must be >= 1).
SYMBOLIC_MINUS_ONE = {("reshape", -1)}
LITERAL_MINUS_ONE = {"reshape", "reshape-inferred"}  # a literal -1 is "infer", not a size


def _run(module: Any, device: str) -> tuple[int, ...] | None:
    """Output shape of one forward pass, or None when PyTorch raises."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Initializing zero-element tensors is a no-op"
            y = module(*example_inputs(module, device))
    except Exception:  # noqa: BLE001 - any error is PyTorch's "invalid"
        return None
    return tuple(y.shape)


def _torch_shape(
    net: Network, cfg: dict[str, Any], device: str, space: ds.Space = SPACE
) -> tuple[int, ...] | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = to_torch(net, cfg, space, device=device)
    except Exception:  # noqa: BLE001 - construction error: invalid
        return None
    return _run(module, device)


def _symbolic(build: Build) -> Callable[[Any], Network]:
    def model(v: Any) -> Network:
        net = Network()
        return net.output(build(net, v.v))

    return model


@pytest.mark.parametrize("case, arg, low, rule, build", CASES, ids=[c[0] for c in CASES])
def test_size_rules_agree_with_pytorch(case: str, arg: str, low: int, rule: str, build: Build) -> None:
    p = ds.Problem(SPACE, model=_symbolic(build))
    net = p.network
    out = net.outputs[0]
    seen = []
    for value in VALUES:
        cfg = {"v": value}
        verdict = p.check(cfg)
        cpu = _torch_shape(net, cfg, "cpu")
        assert _torch_shape(net, cfg, "meta") == cpu, (case, value)  # meta as strict as the CPU
        torch_valid = cpu is not None and math.prod(cpu) > 0 and (case, value) not in EMPTY_INSIDE
        if (case, value) in EMPTY_OUTPUT | EMPTY_INSIDE:
            assert cpu is not None and (math.prod(cpu) == 0) == ((case, value) in EMPTY_OUTPUT), (case, cpu)
        if (case, value) in SYMBOLIC_MINUS_ONE:
            assert torch_valid and not verdict.feasible
            continue
        assert verdict.feasible == torch_valid, (case, value, cpu, [v.name for v in verdict.violations])
        seen.append(verdict.feasible)
        if verdict.feasible:
            predicted = net.concretize(encode_config(SPACE, cfg)).shapes[out.index]
            assert cpu == predicted, (case, value)
        elif value < low:
            assert any(v.name.endswith(f": {rule}") for v in verdict.violations), (case, value, verdict)
    assert True in seen and False in seen  # each case has both valid and invalid boundary values


@pytest.mark.parametrize("case, arg, low, rule, build", CASES, ids=[c[0] for c in CASES])
def test_plain_int_sizes_fail_at_build_time(case: str, arg: str, low: int, rule: str, build: Build) -> None:
    symbolic = ds.Problem(SPACE, model=_symbolic(build))
    for value in VALUES:
        net = Network()
        if value < low and not (value == -1 and case in LITERAL_MINUS_ONE):
            with pytest.raises(GraphError, match=rf"#\d+: {arg} must be >= {low}\b.*, got {value}$"):
                build(net, value)
        elif symbolic.check({"v": value}).feasible or (case, value) in SYMBOLIC_MINUS_ONE:
            build(net, value)
        else:
            with pytest.raises(GraphError, match=r"^[a-z0-9_]+#\d+: "):  # names the op
                build(net, value)


def test_issue_reproductions() -> None:
    """``net.linear(x, -5)`` built with params -85; a squeeze-excitation with ``c // r == 0`` was valid."""
    net = Network()
    x = net.input((2, 16))
    with pytest.raises(GraphError, match=r"linear#1: out_features must be >= 1, got -5"):
        net.linear(x, -5)
    # a literal impossible size raises under a gate too (here in one branch of an op choice)
    space = ds.Space({"op": ds.Categorical(["a", "b"]), "r": ds.Categorical([4, 8, 32])})
    net = Network()
    x = net.input((2, 16))
    with pytest.raises(GraphError, match=r"linear#\d+: out_features must be >= 1, got 0"):
        net.choose(space.vars.op, {"a": net.relu, "b": lambda t: net.linear(t, 0)}, x)

    def se_block(v: Any) -> Network:
        net = Network()
        x = net.input((2, 16, 8, 8))
        y = net.relu(net.conv2d(net.adaptive_avgpool2d(x, 1), 16 // v.r, 1))
        return net.output(net.mul(x, net.sigmoid(net.conv2d(y, 16, 1))))

    p = ds.Problem(space, model=se_block)
    assert [p.check({"op": "a", "r": r}).feasible for r in (4, 8, 32)] == [True, True, False]
    assert [v.name for v in p.check({"op": "a", "r": 32}).violations] == [
        "conv2d#2: out_channels is positive"
    ]
    assert p.count() == 4
    assert _torch_shape(p.network, {"op": "a", "r": 8}, "cpu", space) == (2, 16, 8, 8)
    for device in ("cpu", "meta"):  # PyTorch rejects 0 output channels
        assert _torch_shape(p.network, {"op": "a", "r": 32}, device, space) is None


# ------------------------------------------------------------------------------------------------
# arguments that are plain Python values only: build-time errors exactly where PyTorch raises


def _raises(fn: Callable[[], Any]) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn()
    except Exception:  # noqa: BLE001
        return True
    return False


def _builds(fn: Callable[[Network, Tensor], Any], *shape: int) -> bool:
    net = Network()
    x = net.input(shape)
    try:
        fn(net, x)
    except GraphError:
        return False
    return True


@pytest.mark.parametrize("dim", range(-4, 4))
def test_dims_in_range_as_pytorch(dim: int) -> None:
    x = torch.ones(2, 3, 4)
    pairs = [
        (lambda n, t: n.softmax(t, dim), lambda: torch.softmax(x, dim)),
        (lambda n, t: n.mean(t, dim), lambda: x.mean(dim)),
        (lambda n, t: n.concat([t, t], dim), lambda: torch.cat([x, x], dim)),
        (lambda n, t: n.flatten(t, dim), lambda: torch.flatten(x, dim)),
        (lambda n, t: n.flatten(t, 0, dim), lambda: torch.flatten(x, 0, dim)),
        (lambda n, t: n.transpose(t, 0, dim), lambda: x.transpose(0, dim)),
        (lambda n, t: n.permute(t, (dim, 1, 2)), lambda: x.permute(dim, 1, 2)),
    ]
    for ours, theirs in pairs:
        assert _builds(ours, 2, 3, 4) == (not _raises(theirs)), (dim, ours)
    net = Network()
    with pytest.raises(
        GraphError, match=r"softmax#1: dim must be an int in \[-3, 2\] for a 3-D input, got 3"
    ):
        net.softmax(net.input((2, 3, 4)), 3)


@pytest.mark.parametrize("p", [-0.1, 0.0, 0.5, 1.0, 1.1])
def test_dropout_probability_as_pytorch(p: float) -> None:
    assert _builds(lambda n, t: n.dropout(t, p), 2, 3) == (not _raises(lambda: torch.nn.Dropout(p)))


@pytest.mark.parametrize("layers", [-1, 0, 1, 2])
def test_rnn_layers_as_pytorch(layers: int) -> None:
    x = torch.ones(2, 3, 4)
    theirs = lambda: torch.nn.LSTM(4, 5, num_layers=layers, batch_first=True)(x)  # noqa: E731
    assert _builds(lambda n, t: n.lstm(t, 5, num_layers=layers), 2, 3, 4) == (not _raises(theirs))


# ------------------------------------------------------------------------------------------------
# repeat: counts and bodies that change the shape


def test_repeat_count_is_non_negative() -> None:
    net = Network()
    x = net.input((2, 4))
    with pytest.raises(GraphError, match=r"repeat#1: n must be >= 0, got -1"):
        net.repeat(-1, 2, lambda i, t: net.relu(t), x)
    with pytest.raises(GraphError, match=r"repeat#1: n must be <= max=2, got 3"):
        net.repeat(3, 2, lambda i, t: net.relu(t), x)
    space = ds.Space({"n": ds.Int(-1, 3)})

    def build(v: Any) -> Network:
        net = Network()
        x = net.input((2, 4))
        return net.output(net.repeat(v.n, 2, lambda i, t: net.linear(t, 4), x))

    p = ds.Problem(space, model=build)
    verdicts = {n: p.check({"n": n}) for n in range(-1, 4)}
    assert [n for n, vd in verdicts.items() if vd.feasible] == [0, 1, 2]
    assert [v.name for v in verdicts[-1].violations] == ["repeat#1: depth is non-negative"]
    assert [v.name for v in verdicts[3].violations] == ["repeat#1: depth at most max=2"]


def _widening(v: Any) -> Network:
    net = Network()
    x = net.conv2d(net.input((2, 3, 8, 8)), v.w, 3, padding=1)
    x = net.repeat(v.d, 3, lambda i, t: net.conv2d(t, 2 * v.w, 3, padding=1), x)
    return net.output(net.linear(net.flatten(x), 10))


def test_repeat_body_changing_the_shape_fails_when_the_problem_is_built() -> None:
    space = ds.Space({"w": ds.Int(16, 64, step=16), "d": ds.Int(0, 3)})
    msg = (
        r"repeat#2: block 0 changes the shape \(2, w, 8, 8\) -> \(2, 2\*w, 8, 8\) in every configuration "
        r"of the space where it runs"
    )
    with pytest.raises(GraphError, match=msg):
        ds.Problem(space, model=_widening)
    # constant shapes: at once, when the body is built
    net = Network()
    x = net.input((2, 4, 8, 8))
    with pytest.raises(
        GraphError, match=r"repeat#1: block 0 changes the shape \(2, 4, 8, 8\) -> \(2, 4, 4, 4\)"
    ):
        net.repeat(space.vars.d, 2, lambda i, t: net.maxpool2d(t, 2), x)


def test_repeat_shape_rules_inside_an_op_choice() -> None:
    space = ds.Space({"op": ds.Categorical(["keep", "widen"]), "w": ds.Int(4, 8, step=4), "d": ds.Int(1, 2)})

    def build(v: Any) -> Network:
        net = Network()
        x = net.input((2, v.w))
        body = {"keep": lambda i, t: net.linear(t, v.w), "widen": lambda i, t: net.linear(t, v.w + 1)}
        y = net.choose(v.op, {k: (lambda t, f=f: net.repeat(v.d, 2, f, t)) for k, f in body.items()}, x)
        return net.output(y)

    with pytest.raises(GraphError, match=r"block 0 changes the shape \(2, w\) -> \(2, w \+ 1\)"):
        ds.Problem(space, model=build)


def test_repeat_shape_rule_that_some_configurations_meet_is_a_constraint() -> None:
    space = ds.Space({"w": ds.Int(16, 64, step=16), "c": ds.Int(16, 64, step=16), "d": ds.Int(0, 2)})

    def build(v: Any) -> Network:
        net = Network()
        x = net.input((2, v.c))
        return net.output(net.repeat(v.d, 2, lambda i, t: net.linear(t, v.w), x))

    p = ds.Problem(space, model=build)
    assert p.check({"w": 32, "c": 32, "d": 2}).feasible
    assert not p.check({"w": 32, "c": 16, "d": 1}).feasible
    assert p.check({"w": 32, "c": 16, "d": 0}).feasible


def test_repeat_shape_check_falls_back_to_intervals(monkeypatch: pytest.MonkeyPatch) -> None:
    import dnnsat.graph._network as network

    space = ds.Space({"w": ds.Int(16, 64, step=16), "d": ds.Int(0, 3)})

    def build(v: Any) -> Network:
        net = Network()
        x = net.conv2d(net.input((2, 3, 8, 8)), v.w, 3, padding=1)
        return net.output(net.repeat(v.d, 2, lambda i, t: net.conv2d(t, v.w + 64, 1), x))

    monkeypatch.setattr(network, "_ENUMERATE_LIMIT", 0)
    with pytest.raises(GraphError, match=r"block 0 changes the shape"):
        ds.Problem(space, model=build)  # w + 64 > 64 >= w: interval bounds decide
    p = ds.Problem(space, model=_widening)  # intervals cannot tell 2*w from w: sound, a rule then
    assert p.check({"w": 16, "d": 0}).feasible
    assert [v.name for v in p.check({"w": 16, "d": 1}).violations] == ["repeat#2: block 0 keeps the shape"]
