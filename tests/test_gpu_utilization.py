"""The ``gpu_utilization`` cost (achieved FLOP/s over the GPU's peak for the dtype, from the latency model)
and its lower limit ``Budget(gpu_utilization=...)``: formula, brute-force pruning, errors and units."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import dnnsat as ds
from dnnsat.cost import get_device
from dnnsat.units import UnitError, format_quantity, parse_quantity

SPACE = {
    "batch": ds.Categorical([1, 8, 64, 256]),
    "width": ds.Int(16, 256, step=48),
    "out": ds.Int(8, 1024, step=203),
}


def _model(v: object) -> ds.Network:
    net = ds.Network("mlp")
    x = net.input([v.batch, 64])  # type: ignore[attr-defined]
    net.linear(net.relu(net.linear(x, v.width)), v.out)  # type: ignore[attr-defined]
    return net


def _configs() -> list[dict[str, int]]:
    space = ds.Space(SPACE)
    names = list(SPACE)
    values = [space[n].values() for n in names]
    return [dict(zip(names, combo)) for combo in itertools.product(*values)]


@pytest.mark.parametrize("mode", ["train", "inference"])
def test_utilization_is_flops_over_time_over_peak(mode: str) -> None:
    budget = ds.Budget(device="h200", dtype="bfloat16", mode=mode)
    p = ds.Problem(ds.Space(SPACE), model=_model, budget=budget)
    peak = get_device("h200").peak("bfloat16")
    for cfg in _configs()[::5]:
        costs = p.costs(cfg)
        flops = 3 * costs["flops"] if mode == "train" else costs["flops"]
        seconds = costs["train_step_time"] if mode == "train" else costs["latency"]
        assert costs["gpu_utilization"] == pytest.approx(flops / seconds / peak, rel=1e-9)
        assert 0 < costs["gpu_utilization"] < 1


def test_served_batch_utilization_uses_the_served_flops() -> None:
    budget = ds.Budget(device="a100-80gb", mode="inference", latency_batch=1)
    p = ds.Problem(ds.Space(SPACE), model=_model, budget=budget)
    cfg = {"batch": 256, "width": 208, "out": 1023}
    one = ds.Problem(ds.Space(SPACE), model=_model, budget=ds.Budget(device="a100-80gb", mode="inference"))
    costs, at_one = p.costs(cfg), one.costs({**cfg, "batch": 1})
    assert costs["latency"] == pytest.approx(at_one["latency"])
    assert costs["gpu_utilization"] == pytest.approx(at_one["gpu_utilization"])


def test_lower_limit_prunes_exactly_the_idle_configurations() -> None:
    """The feasible set equals brute force over every configuration, and small batches are the idle ones."""
    limit = 0.02
    budget = ds.Budget(device="h200", mode="inference", gpu_utilization=f"{100 * limit:g}%")
    p = ds.Problem(ds.Space(SPACE), model=_model, budget=budget)
    free = ds.Problem(ds.Space(SPACE), model=_model, budget=ds.Budget(device="h200", mode="inference"))
    configs = _configs()
    expected = [free.costs(c)["gpu_utilization"] >= limit for c in configs]
    assert 0 < sum(expected) < len(configs)
    assert [p.check(c).feasible for c in configs] == expected
    assert p.count() == sum(expected)
    idle = {"batch": 1, "width": 16, "out": 8}
    assert not p.check(idle).feasible and "gpu_utilization" in str(p.explain(idle))
    assert set(np.unique([c["batch"] for c, ok in zip(configs, expected) if ok])) <= {8, 64, 256}


def test_errors_name_the_parameter_and_the_fix() -> None:
    with pytest.raises(ValueError, match=r"gpu_utilization needs a GPU device: .*device='h200'"):
        ds.Budget(gpu_utilization="40%")
    with pytest.raises(ValueError, match="gpu_utilization needs a GPU device"):
        ds.Budget(gpu_utilization=0.4, device="xeon-gold-6226")
    with pytest.raises(ValueError, match=r"share in \(0, 1\]"):
        ds.Budget(gpu_utilization=1.5, device="h200")
    with pytest.raises(UnitError, match="'ms' is a unit of a time, not of a share"):
        ds.Budget(gpu_utilization="4ms", device="h200")
    assert ds.Budget.parse("device=h200,gpu_utilization=40%").gpu_utilization == pytest.approx(0.4)
    assert "gpu_utilization" not in ds.Problem(
        ds.Space(SPACE), model=_model, budget=ds.Budget(device="xeon-gold-6226")
    ).costs({"batch": 1, "width": 16, "out": 8})


def test_share_units_round_trip() -> None:
    assert parse_quantity("40%", "share") == pytest.approx(0.4)
    assert parse_quantity("12.5 %", "share") == pytest.approx(0.125)
    assert parse_quantity(0.3, "share") == pytest.approx(0.3)
    for x in (0.0004, 0.0123, 0.5, 1.0):
        assert parse_quantity(format_quantity(x, "share"), "share") == pytest.approx(x, rel=5e-3)
    assert format_quantity(0.4123, "share") == "41.2 %"
