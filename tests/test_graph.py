"""Symbolic networks: the op catalog against PyTorch, build-time errors, repeat/choose semantics, costs."""

from __future__ import annotations

import pytest

import dnnsat as ds
from dnnsat.expr import Var, compile_scalar
from dnnsat.graph import CATALOG, GraphError, Network, encode_config
from dnnsat.graph._catalog import lin

torch = pytest.importorskip("torch")

from dnnsat.torch import Checker, random_configs  # noqa: E402

# ------------------------------------------------------------------------------------------------
# catalog sweeps: whole modules on the meta device vs the symbolic model


CONV_SPACE = ds.Space(
    {
        "b": ds.Categorical([1, 2, 3]),
        "res": ds.Int(1, 12),
        "c": ds.Categorical([3, 4, 6, 8]),
        "k": ds.Int(1, 5),
        "s": ds.Int(1, 3),
        "p": ds.Int(0, 3),
        "d": ds.Int(1, 2),
        "g": ds.Categorical([1, 2, 3, 4]),
        "pad_mode": ds.Categorical(["same", "valid", "explicit"]),
        "pk": ds.Int(1, 3),
        "op": ds.Int(0, 2),
    }
)


def conv_build(v):
    net = Network("convs")
    x = net.input((v.b, 3, v.res, v.res))
    x = net.conv2d(x, 2 * v.c, 3, padding=1)
    y = net.choose(
        v.pad_mode,
        {
            "same": lambda t: net.conv2d(t, v.c * v.g, v.k, padding="same", dilation=v.d, groups=v.g),
            "valid": lambda t: net.conv2d(
                t, v.c * v.g, v.k, stride=v.s, padding="valid", groups=v.g, bias=False
            ),
            "explicit": lambda t: net.conv2d(
                t, v.c * v.g, v.k, stride=v.s, padding=v.p, dilation=v.d, groups=v.g
            ),
        },
        x,
    )
    y = net.groupnorm(net.hardswish(y), v.g)
    y = net.maxpool2d(y, v.pk, stride=1, padding=v.p, dilation=v.d)
    z = net.depthwise(y, 3, padding=1, multiplier=2)
    z = net.pointwise(net.silu(z), 8)
    z = net.conv_transpose2d(z, 4, v.k, stride=v.s, padding=v.p, output_padding=v.op, groups=2)
    z = net.avgpool2d(net.sigmoid(z), v.pk, padding=v.p, count_include_pad=False)
    z = net.batchnorm(z)
    w = net.adaptive_maxpool2d(z, (2, 3))
    w = net.mul(net.tanh(w), net.adaptive_avgpool2d(z, 1))  # broadcast (b,4,2,3) * (b,4,1,1)
    w = net.concat([w, net.relu(w)], dim=1)
    w = net.permute(w, (0, 2, 3, 1))
    w = net.reshape(w, (v.b, -1))
    w = net.softmax(net.dropout(net.linear(w, 5), 0.3))
    return net.output(w)


SEQ_SPACE = ds.Space(
    {
        "b": ds.Categorical([1, 2]),
        "seq": ds.Int(1, 6),
        "d": ds.Categorical([4, 6, 8, 12]),
        "h": ds.Categorical([1, 2, 3, 4]),
        "kv": ds.Categorical([1, 2, 4]),
        "hid": ds.Int(1, 5),
        "L": ds.Int(0, 3),
        "cell": ds.Categorical(["lstm", "gru"]),
        "ln": ds.Categorical([True, False]),
    }
)


def seq_build(v):
    net = Network("seq")
    ids = net.input((v.b, v.seq), dtype="int64")
    x = net.add(net.embedding(ids, 11, v.d), net.parameter((v.seq, v.d)))

    def block(i, t):
        t = net.add(t, net.attention(net.layernorm(t), v.h, v.kv, causal=i % 2 == 0, bias=i == 0))
        return net.add(t, net.linear(net.gelu(net.linear(t, 2 * v.d)), v.d))

    x = net.repeat(v.L, 3, block, x)
    r = net.choose(
        v.cell,
        {
            "lstm": lambda t: net.lstm(t, v.hid, num_layers=2, bidirectional=True),
            "gru": lambda t: net.gru(t, v.hid, bias=False),
        },
        x,
    )
    r = net.layernorm(r, dims=2, bias=False)
    att = net.bmm(r, net.transpose(r, 1, 2))  # (b, seq, seq)
    m = net.matmul(net.softmax(att), x)  # (b, seq, d)
    m = net.matmul(net.reshape(m, (v.b, 1, v.seq, v.d)), net.parameter((v.d, 3)))  # broadcast batch dims
    y = net.mean(m, dim=2)
    return net.output(net.linear(net.flatten(y), 2))


NEW_SPACE = ds.Space(
    {
        "b": ds.Categorical([1, 2]),
        "s": ds.Int(1, 5),
        "h": ds.Categorical([1, 2, 4]),
        "kv": ds.Categorical([1, 2]),
        "e": ds.Categorical([2, 3]),
        "i": ds.Int(-2, 6),
        "n": ds.Int(1, 4),
        "size": ds.Int(1, 5),
        "up": ds.Int(1, 3),
        "mode": ds.Categorical(["nearest", "bilinear"]),
    }
)


def new_build(v):
    """Ops added for from_torch: a CLS token (expand, concat, select), RMSNorm, LeakyReLU/ELU/Mish,
    SDPA with its own head width and GQA, chunk/narrow, upsample, a head tied to the embedding, sub,
    shift (a tensor and a number), sum, pooling with ceil_mode."""
    net = Network("new")
    ids = net.input((v.b, v.s), dtype="int64")
    x = net.embedding(ids, 7, 4 * v.e, name="emb")
    x = net.concat([net.expand(net.parameter((1, 1, 4 * v.e)), (v.b, -1, -1)), x], dim=1)
    x = net.mish(net.rmsnorm(x))

    def heads(t, n):
        return net.transpose(net.reshape(net.linear(t, n * v.e), (v.b, v.s + 1, n, v.e)), 1, 2)

    y = net.sdpa(heads(x, v.h), heads(x, v.kv), heads(x, v.kv), causal=True, gqa=True)
    y = net.reshape(net.transpose(y, 1, 2), (v.b, v.s + 1, v.h * v.e))
    a, c = net.chunk(y, 2, dim=2)
    a = net.leaky_relu(net.narrow(a, 1, v.i, v.n))
    img = net.upsample(net.reshape(net.elu(c), (v.b, 1, v.s + 1, -1)), scale_factor=v.up, mode="bilinear")
    img = net.choose(
        v.mode,
        {m: (lambda t, m=m: net.upsample(t, size=(v.size, 3), mode=m)) for m in ("nearest", "bilinear")},
        img,
    )
    img = net.maxpool2d(img, v.up, stride=2, ceil_mode=True)
    head = net.linear(net.select_index(x, 1, v.i), 7, bias=False, tied="emb")
    out = net.sub(net.shift(head, 1.5, negate=True), net.sum(net.flatten(img, 1), 1))
    return net.output(net.shift(out, -0.5), net.mean(a, 1))


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel lengths")
@pytest.mark.parametrize(
    "space,build,n", [(CONV_SPACE, conv_build, 260), (SEQ_SPACE, seq_build, 160), (NEW_SPACE, new_build, 160)]
)
def test_catalog_matches_pytorch(space, build, n):
    """Params and FLOPs exact, validity verdict == 'the meta forward raises' (precision and recall 100%)."""
    net = build(space.vars)
    checker = Checker(net, space)
    invalid = 0
    for cfg in random_configs(space, n, seed=3):
        sym = checker.symbolic(cfg)
        real = checker.torch(cfg)
        assert real["raised"] == (not sym["valid"]), (cfg, real.get("error"), checker.violated(cfg))
        invalid += not sym["valid"]
        if sym["valid"]:
            assert (sym["params"], sym["flops"]) == (real["params"], real["flops"]), cfg
    assert 0.1 * n < invalid < 0.95 * n  # the sweep exercises both verdicts


def test_catalog_entries_have_materializers():
    missing = [name for name, entry in CATALOG.items() if entry.build is None and name != "input"]
    assert missing == []
    for name in (
        "conv1d",
        "conv2d",
        "conv_transpose2d",
        "linear",
        "matmul",
        "bmm",
        "batchnorm",
        "layernorm",
        "groupnorm",
        "relu",
        "gelu",
        "silu",
        "sigmoid",
        "tanh",
        "hardswish",
        "softmax",
        "dropout",
        "maxpool2d",
        "avgpool2d",
        "adaptive_avgpool2d",
        "add",
        "mul",
        "concat",
        "flatten",
        "reshape",
        "permute",
        "embedding",
        "attention",
        "lstm",
        "gru",
    ):
        assert name in CATALOG


def test_conv1d_and_pool1d():
    space = ds.Space({"L": ds.Int(1, 9), "k": ds.Int(1, 4), "s": ds.Int(1, 2)})

    def build(v):
        net = Network()
        x = net.input((2, 3, v.L))
        x = net.conv1d(x, 4, v.k, stride=v.s, padding=1)
        x = net.avgpool1d(net.maxpool1d(x, 2, stride=1), v.k, stride=1)
        return net.output(net.adaptive_avgpool1d(x, 1))

    checker = Checker(build(space.vars), space)
    for cfg in random_configs(space, 60, seed=0):
        sym, real = checker.symbolic(cfg), checker.torch(cfg)
        assert real["raised"] == (not sym["valid"]), cfg
        if sym["valid"]:
            assert (sym["params"], sym["flops"]) == (real["params"], real["flops"])


# ------------------------------------------------------------------------------------------------
# counting conventions, by hand


def test_conv_and_linear_formulas():
    v = ds.Space({"w": ds.Int(1, 64), "r": ds.Int(8, 32)}).vars
    net = Network()
    x = net.input((2, 3, v.r, v.r))
    x = net.conv2d(x, v.w, 3, stride=2, padding=1)
    x = net.linear(net.flatten(net.adaptive_avgpool2d(x)), 10)
    net.output(x)
    c = net.costs()
    params, flops, macs = compile_scalar([c["params"], c["flops"], c["macs"]])({"w": 16, "r": 32})
    out = (32 + 2 - 3) // 2 + 1  # 16
    conv_macs = 2 * out * out * 16 * 3 * 9
    lin_macs = 2 * 16 * 10
    assert params == 16 * 3 * 9 + 16 + 16 * 10 + 10
    assert macs == conv_macs + lin_macs and flops == 2 * macs


def test_shapes_are_canonical():
    v = ds.Space({"h": ds.Int(4, 64), "k": ds.Categorical([3, 5])}).vars
    net = Network()
    x = net.input((1, 3, v.h, v.h))
    y = net.conv2d(x, 8, 3, padding=1)
    assert y.shape[2] is v.h  # (h + 2 - 2 - 1) // 1 + 1 folds to h
    z = net.conv2d(y, 8, v.k, padding=(v.k - 1) // 2)
    assert str(z.shape[2]) != "h"  # symbolic kernel: not folded (wrong for even kernels)
    assert lin(2 * v.h - v.h - v.h + 3) is ds.Const(3)


# ------------------------------------------------------------------------------------------------
# repeat / choose


def test_repeat_gates_costs_and_output():
    space = ds.Space({"n": ds.Int(0, 3), "w": ds.Int(1, 8)})
    v = space.vars
    net = Network()
    x = net.input((1, v.w))
    x = net.repeat(v.n, 3, lambda i, t: net.linear(t, v.w), x)
    net.output(x)
    f = compile_scalar([net.costs()["params"]])
    for n in range(4):
        assert f({"n": n, "w": 5})[0] == n * (5 * 5 + 5)
    with pytest.raises(GraphError, match="block 0 changes the rank"):
        net.repeat(v.n, 2, lambda i, t: net.flatten(net.reshape(t, (1, 1, -1)), 0), x)


def test_repeat_shape_change_is_a_rule():
    space = ds.Space({"n": ds.Int(0, 2), "w": ds.Int(1, 8)})
    v = space.vars
    net = Network()
    x = net.input((1, 4))
    x = net.repeat(v.n, 2, lambda i, t: net.linear(t, v.w), x)
    net.output(net.linear(x, 2))
    checks = dict(net.checks())
    rule = checks["repeat#1: block 0 keeps the shape"]
    ok = compile_scalar([rule, net.valid()])
    assert ok({"n": 1, "w": 4}) == (True, True)
    assert ok({"n": 1, "w": 5}) == (False, False)
    assert ok({"n": 0, "w": 5}) == (True, True)
    checker = Checker(net, space)
    for cfg in random_configs(space, 20, seed=1):
        assert checker.torch(cfg)["raised"] == (not checker.symbolic(cfg)["valid"])


def test_choose_selects_costs_and_shapes():
    space = ds.Space({"op": ds.Categorical(["conv", "pool", "skip"])})
    v = space.vars
    net = Network()
    x = net.input((1, 4, 8, 8))
    y = net.choose(
        v.op,
        {
            "conv": lambda t: net.conv2d(t, 6, 3, padding=1),
            "pool": lambda t: net.maxpool2d(t, 2),
            "skip": lambda t: t,
        },
        x,
    )
    net.output(y)
    f = compile_scalar([net.costs()["params"], *y.shape])
    assert f({"op": 0}) == (4 * 6 * 9 + 6, 1, 6, 8, 8)
    assert f({"op": 1}) == (0, 1, 4, 4, 4)
    assert f({"op": 2}) == (0, 1, 4, 8, 8)
    assert not any("some case applies" in name for name, _ in net.checks())  # every label has a branch


def test_branch_without_fallback_is_a_rule():
    space = ds.Space({"k": ds.Int(1, 3)})
    v = space.vars
    net = Network()
    x = net.input((1, 4))
    net.output(net.branch([(v.k == 1, lambda t: net.relu(t)), (v.k == 2, lambda t: net.gelu(t))], x))
    f = compile_scalar([net.valid()])
    assert [f({"k": k})[0] for k in (1, 2, 3)] == [True, True, False]


# ------------------------------------------------------------------------------------------------
# errors


def test_structural_errors_name_the_op():
    net = Network()
    x = net.input((2, 3, 8, 8))
    with pytest.raises(GraphError, match=r"conv1d#1: expects a 3-D input"):
        net.conv1d(x, 4, 3)
    with pytest.raises(GraphError, match="unknown operator"):
        net.apply("conv9d", [x])
    with pytest.raises(GraphError, match="padding must be"):
        net.conv2d(x, 4, 3, padding="full")
    with pytest.raises(GraphError, match="needs an int64 input"):
        net.embedding(x, 10, 4)
    with pytest.raises(GraphError, match="not a permutation"):
        net.permute(x, (0, 1, 1, 2))
    other = Network()
    with pytest.raises(GraphError, match="another Network"):
        other.relu(x)


def test_constant_false_rule_fails_at_build_time():
    net = Network()
    x = net.input((2, 3, 8, 8))
    with pytest.raises(GraphError, match=r"conv2d#1: rule 'kernel fits padded input' can never hold"):
        net.conv2d(x, 4, 11)
    with pytest.raises(GraphError, match=r"groups divide in_channels"):
        net.conv2d(x, 4, 3, groups=2)


def test_always_false_over_space_fails_when_attached():
    from dnnsat.problem._model import attach

    space = ds.Space({"r": ds.Int(4, 8), "w": ds.Int(1, 4)})

    def build(v):
        net = Network()
        x = net.input((1, 3, v.r, v.r))
        return net.output(net.conv2d(x, v.w, 9))  # kernel 9 > any resolution in the space

    p = ds.Problem(space)
    with pytest.raises(GraphError, match=r"conv2d#1: kernel fits padded input: this rule fails for every"):
        attach(p, build, None)


def test_configs_outside_space_rejected():
    space = ds.Space({"w": ds.Int(8, 64, step=8)})
    with pytest.raises(ds.SpaceError, match="outside"):
        encode_config(space, {"w": 9})
    with pytest.raises(ds.SpaceError, match="unknown parameter"):
        encode_config(space, {"w": 8, "depth": 2})


def test_tensor_operators_and_summary():
    net = Network()
    x = net.input((2, 4))
    y = x + net.relu(x)
    z = y * y
    assert z.shape == (ds.Const(2), ds.Const(4))
    assert "add#2" in net.summary() and "mul#3" in net.summary()
    assert repr(net).startswith("Network(")


def test_vars_without_space():
    w = Var("w")
    net = Network()
    net.output(net.linear(net.input((1, 3)), w))
    assert compile_scalar([net.costs()["params"]])({"w": 7}) == (3 * 7 + 7,)


def test_design_example_builds_a_problem():
    """The DESIGN.md section 5 example, verbatim apart from the residual block."""
    space = ds.Space({
        "batch_size": ds.Categorical([32, 64]),
        "resolution": ds.Categorical([32, 64]),
        "width": ds.Int(16, 256, step=16),
        "kernel": ds.Categorical([3, 5]),
        "depth": ds.Int(1, 4),
        "lr": ds.Float(1e-4, 1e-1, log=True),
    })  # fmt: skip

    def build(v) -> Network:
        net = Network()

        def residual_block(n, x, v):
            return net.add(x, net.relu(net.conv2d(x, v.width, 3, padding=1)))

        x = net.input((v.batch_size, 3, v.resolution, v.resolution))
        x = net.conv2d(x, out_channels=v.width, kernel_size=v.kernel, stride=1, padding="same")
        x = net.relu(net.batchnorm(x))
        x = net.repeat(v.depth, max=4, body=lambda n, x: residual_block(n, x, v))
        x = net.linear(net.flatten(net.adaptive_avgpool(x, 1)), 10)
        return net.output(x)

    from dnnsat.cost import Budget

    p = ds.Problem(space, model=build, budget=Budget(params="300K"))
    cfg = {"batch_size": 32, "resolution": 32, "width": 64, "kernel": 3, "depth": 2, "lr": 0.01}
    w = 64
    params = (3 * w * 9 + w) + 2 * w + 2 * (w * w * 9 + w) + w * 10 + 10
    assert p.costs(cfg)["params"] == params
    assert [c.name for c in p.constraints] == ["params"]  # every validity rule is provably true here
    assert p.check(dict(cfg, width=256)).violations[0].name == "params"
