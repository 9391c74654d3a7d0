"""Budgets and attach(): costs, validity rules and limits added to a Problem (no torch needed)."""

from __future__ import annotations

import pytest

import dnnsat as ds
from dnnsat.cost import Budget, cost_expressions
from dnnsat.graph import Network
from dnnsat.problem._model import attach

SPACE = ds.Space(
    {
        "b": ds.Categorical([1, 4]),
        "w": ds.Int(8, 64, step=8),
        "k": ds.Categorical([3, 5, 9]),
        "n": ds.Int(1, 3),
        "g": ds.Categorical([1, 3]),
    }
)


def build(v):
    net = Network()
    x = net.input((v.b, 3, 8, 8))
    x = net.relu(net.batchnorm(net.conv2d(x, v.w, v.k)))
    x = net.repeat(v.n, 3, lambda i, t: net.relu(net.conv2d(t, v.w, 3, padding=1, groups=v.g)), x)
    x = net.flatten(net.adaptive_avgpool2d(x, 1))
    return net.output(net.batchnorm(net.linear(x, 10)))


CFG = {"b": 4, "w": 24, "k": 3, "n": 2, "g": 3}


def test_budget_units_and_validation():
    b = Budget(params="25M", weight_bytes="100MB", flops="4G", dtype="bfloat16", mode="inference")
    assert (b.params, b.weight_bytes, b.flops, b.dtype_bytes, b.train) == (
        25_000_000,
        10**8,
        4 * 10**9,
        2,
        False,
    )
    assert Budget(flops="2 GMACs").flops == 4 * 10**9
    assert Budget.parse("params=25M, flops=4G,dtype=float16").limits() == {
        "params": 25_000_000,
        "flops": 4 * 10**9,
    }
    with pytest.raises(ValueError, match="dtype"):
        Budget(dtype="float13")
    with pytest.raises(ValueError, match="mode"):
        Budget(mode="training")
    with pytest.raises(ValueError, match="optimizer"):
        Budget(optimizer="lion")
    with pytest.raises(ValueError):
        Budget(params="25 GiB")  # bytes are not a count


def test_budget_device_memory_default_and_mixed_precision():
    b = Budget(latency="10ms", device="a100-80gb")
    assert b.latency == pytest.approx(0.01) and b.device == b.device_profile.name
    assert b.memory == b.device_profile.memory_bytes > 80 * 10**9  # the device's capacity by default
    assert Budget(memory="16GiB", device="a100-80gb").memory == 16 * 2**30
    assert Budget().device_profile is None and Budget().memory is None
    m = Budget(dtype="mixed")
    assert (m.param_bytes, m.act_bytes, Budget(dtype="bf16").param_bytes) == (4, 2, 2)
    with pytest.raises(ValueError, match="a100-80gb"):  # lists the known devices
        Budget(device="a100-81gb")
    p = ds.Problem(SPACE, model=build, budget=Budget(memory="1GiB", latency="1s", device="a100-80gb"))
    assert {"memory", "latency"} <= {c.name for c in p.constraints}


def test_problem_costs_rules_and_limits():
    p = ds.Problem(SPACE, model=build, budget=Budget(params="5K", flops="3M"))
    costs = p.costs(CFG)
    assert set(costs) >= {"params", "weight_bytes", "flops", "macs", "train_flops", "activation_bytes"}
    conv1 = 24 * 3 * 9 + 24
    convs = 2 * (24 * 8 * 9 + 24)
    expected = conv1 + 2 * 24 + convs + 24 * 10 + 10 + 2 * 10
    assert costs["params"] == expected and costs["weight_bytes"] == 4 * expected
    out = 8 - 3 + 1
    assert costs["macs"] == 4 * out * out * 24 * 3 * 9 + 2 * 4 * out * out * 24 * 8 * 9 + 4 * 24 * 10
    assert costs["flops"] == 2 * costs["macs"]
    names = [c.name for c in p.constraints]
    assert "conv2d#1: kernel fits padded input" in names
    assert "conv2d#4: groups divide in_channels" in names  # first repeated block; covers the others
    assert "batchnorm#16: more than one value per channel (training)" in names
    assert names[-2:] == ["params", "flops"]
    assert p.network is not None and p.network.check_sources["conv2d#4: groups divide in_channels"] == [
        "conv2d#4",
        "conv2d#7",
        "conv2d#10",
    ]
    v = p.check(dict(CFG, k=9))  # 9x9 kernel on 8x8 input
    assert not v.feasible and "conv2d#1: kernel fits padded input" in {x.name for x in v.violations}
    v = p.check(dict(CFG, g=3, w=16))  # 16 channels not divisible by 3 groups
    assert "conv2d#4: groups divide in_channels" in {x.name for x in v.violations}
    v = p.check(dict(CFG, b=1))  # BatchNorm1d on a (1, 10) batch cannot train
    assert {x.name for x in v.violations} == {"batchnorm#16: more than one value per channel (training)"}


def test_inference_mode_drops_training_rules_and_dtype_sets_bytes():
    p = ds.Problem(SPACE, model=build, budget=Budget(mode="inference", dtype="float16"))
    assert not any("training" in c.name for c in p.constraints)
    assert p.check(dict(CFG, b=1)).feasible
    assert p.costs(CFG)["weight_bytes"] == 2 * p.costs(CFG)["params"]


def test_budget_without_model_is_an_error():
    with pytest.raises(ValueError, match="needs a model"):
        ds.Problem(SPACE, budget=Budget(params="1M"))


def test_attach_rejects_non_networks():
    with pytest.raises(TypeError, match="must return a dnnsat Network"):
        ds.Problem(SPACE, model=lambda v: None, budget=Budget())
    with pytest.raises(TypeError, match="budget must be"):
        attach(ds.Problem(SPACE), build, {"params": 3})  # type: ignore[arg-type]


def test_cost_expressions_without_problem():
    net = build(SPACE.vars)
    exprs = cost_expressions(net, Budget(dtype="int8"))
    assert exprs["weight_bytes"] is exprs["params"] or str(exprs["weight_bytes"]) == str(exprs["params"])
