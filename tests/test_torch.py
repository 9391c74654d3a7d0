"""PyTorch bridge: to_torch, measure, audit, audit_table."""

from __future__ import annotations

import pytest

import dnnsat as ds
from dnnsat.cost import Budget
from dnnsat.graph import Network
from dnnsat.zoo._registry import get

torch = pytest.importorskip("torch")

from dnnsat.torch import audit, audit_table, example_inputs, measure, to_torch  # noqa: E402

SPACE = ds.Space(
    {
        "width": ds.Int(8, 64, step=8),
        "depth": ds.Int(1, 3),
        "kernel": ds.Categorical([1, 3, 5]),
        "act": ds.Categorical(["relu", "gelu"]),
    }
)


def build(v):
    net = Network("small")
    x = net.input((4, 3, 16, 16))
    x = net.activation(v.act, net.batchnorm(net.conv2d(x, v.width, v.kernel, padding="same")))

    def block(i, t):
        y = net.relu(net.batchnorm(net.conv2d(t, v.width, 3, padding=1, bias=False)))
        return net.add(t, y)

    x = net.repeat(v.depth, 3, block, x)
    return net.output(net.linear(net.flatten(net.adaptive_avgpool2d(x, 1)), 10))


CFG = {"width": 16, "depth": 2, "kernel": 3, "act": "gelu"}


def test_to_torch_runs_on_cpu_and_matches_costs():
    p = ds.Problem(SPACE, model=build, budget=Budget())
    module = to_torch(p, CFG)
    x = torch.randn(4, 3, 16, 16)
    y = module(x)
    assert y.shape == (4, 10)
    m = measure(module, (x,), train=True)
    costs = p.costs(CFG)
    assert m.params == costs["params"]
    # on the CPU FlopCounterMode counts the same conv/linear kernels as on meta for this model
    assert m.flops == costs["flops"]
    assert m.train_flops is not None and m.train_flops > m.flops
    assert m.saved_bytes > 0 and m.time_s > 0
    # params, the input and the tensors saved for backward are all alive when the forward ends
    assert m.peak_bytes is not None and m.peak_bytes >= 4 * costs["params"] + x.nbytes + m.saved_bytes
    # a backward pass works: it is a real trainable module
    assert all(p_.grad is not None for p_ in module.parameters())


def test_to_torch_from_build_function_needs_space():
    with pytest.raises(TypeError, match="needs space="):
        to_torch(build, CFG)
    module = to_torch(build, CFG, space=SPACE, device="meta")
    assert all(p_.is_meta for p_ in module.parameters())
    assert module(*example_inputs(module)).shape == (4, 10)


def test_meta_materialization_allocates_no_weights():
    gpt = get("gpt")
    cfg = {
        "batch_size": 1,
        "seq_len": 2048,
        "layers": 48,
        "d_model": 2048,
        "heads": 16,
        "kv_heads": 16,
        "ffn_mult": 4,
        "vocab": 65536,
    }
    module = to_torch(gpt.network(), cfg, space=gpt.space(), device="meta")  # ~2.7 B parameters
    n = sum(p_.numel() for p_ in module.parameters())
    assert n > 2_000_000_000
    assert all(p_.is_meta for p_ in module.parameters())


def test_measure_saved_bytes_close_to_estimate():
    p = ds.Problem(SPACE, model=build, budget=Budget())
    module = to_torch(p, CFG, device="meta")
    m = measure(module, example_inputs(module), train=True, backward=False)
    est = p.costs(CFG)["activation_bytes"]
    assert 0.5 < est / m.saved_bytes < 2.0  # an estimate, audited rather than exact
    assert m.peak_bytes is None  # meta tensors have no storage to track


def test_audit_reports_precision_recall_and_costs():
    space = ds.Space({"k": ds.Int(1, 9), "w": ds.Int(1, 4), "g": ds.Categorical([1, 2, 3])})

    def b(v):
        net = Network()
        x = net.input((2, 6, 8, 8))
        x = net.conv2d(x, 6 * v.w, v.k, groups=v.g)
        return net.output(net.maxpool2d(x, 2))

    p = ds.Problem(space, model=b, budget=Budget(params="2K"))
    report = audit(p, n=40, seed=1)
    assert report.n == 40
    assert report.precision == 1.0 and report.recall == 1.0
    assert report.true_invalid > 0 and report.true_valid > 0
    assert report.costs["params"].exact == report.costs["params"].n > 0
    assert report.costs["flops"].exact == report.costs["flops"].n
    assert report.mismatches == []
    table = audit_table(report)
    assert table.row_count == 5
    assert "precision 100.0%" in report.summary()


def test_to_torch_invalid_config_raises():
    space = ds.Space({"k": ds.Int(1, 12)})

    def b(v):
        net = Network()
        return net.output(net.conv2d(net.input((1, 3, 8, 8)), 4, v.k))

    module = to_torch(b, {"k": 11}, space=space, device="meta")
    with pytest.raises(RuntimeError):
        module(*example_inputs(module))


def test_audit_by_op_on_a_zoo_problem():
    p = get("transformer")(budget=Budget(params="20M"))
    report = audit(p, n=30, seed=2, by_op=True)
    assert report.precision == 1.0 and report.recall == 1.0
    assert report.costs["params"].exact == report.costs["params"].n > 0
    assert report.costs["flops"].exact == report.costs["flops"].n
    assert "saved_bytes" not in report.costs
