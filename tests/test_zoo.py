"""Zoo models: costs and validity vs PyTorch on >= 300 random configs each; NAS-Bench reference numbers."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import pytest

import dnnsat as ds
from dnnsat.cost import Budget
from dnnsat.zoo._nasbench import arch_str_from_config, config_from_arch_str
from dnnsat.zoo._registry import REGISTRY, get, problem_from_spec

torch = pytest.importorskip("torch")

from dnnsat.torch import Checker, random_configs  # noqa: E402
from dnnsat.torch._audit import OpChecker  # noqa: E402

MODELS = ["mlp", "cnn", "resnet", "mobilenetv2", "transformer", "gpt", "nasbench201", "nats_sss"]
FIXTURE = Path(__file__).resolve().parents[2] / "shared" / "data" / "nasbench201" / "nats_fixture_3archs.csv"


def test_registry_lists_every_model():
    get("mlp")
    assert set(MODELS) <= set(REGISTRY)
    with pytest.raises(KeyError, match="unknown zoo model"):
        get("zoo:alexnet")


@pytest.mark.parametrize("name", MODELS)
def test_zoo_model_matches_pytorch_op_by_op(name):
    """300 random configs (valid and invalid): params and FLOPs exact, verdict == PyTorch raises.

    Every active op is materialized on the meta device from its symbolic input shapes and its real
    output shape must equal the symbolic one, so the whole-module result follows (see OpChecker).
    """
    model = get(name)
    space = model.space()
    checker = OpChecker(model.network(), space)
    verdicts = []
    for cfg in random_configs(space, 300, seed=11):
        r = checker.run(cfg)
        assert r["mismatch"] is None, (cfg, r["mismatch"])
        assert r["raised"] == (not r["valid"]), cfg
        if r["valid"]:
            assert (r["params"], r["flops"]) == (r["torch_params"], r["torch_flops"])
        verdicts.append(r["valid"])
    if name in ("cnn", "resnet", "transformer", "gpt"):  # these spaces contain invalid configs
        assert 0 < verdicts.count(False) < len(verdicts)


@pytest.mark.parametrize("name", MODELS)
def test_zoo_model_whole_module(name):
    """The whole materialized module on the meta device agrees too (4 configs here; 300 with -m slow)."""
    _whole_module_sweep(name, 4)


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_zoo_model_whole_module_300(name):
    _whole_module_sweep(name, 300)


def _whole_module_sweep(name: str, n: int) -> None:
    model = get(name)
    space = model.space()
    checker = Checker(model.network(), space)
    for cfg in random_configs(space, n, seed=5):
        sym, real = checker.symbolic(cfg), checker.torch(cfg)
        assert real["raised"] == (not sym["valid"]), (cfg, real.get("error"), checker.violated(cfg))
        if sym["valid"]:
            assert (sym["params"], sym["flops"]) == (real["params"], real["flops"]), cfg


# ------------------------------------------------------------------------------------------------
# factories and problems


def test_gpt_factory_with_budget():
    p = get("gpt")(budget=Budget(params="125M"))
    cfg = {
        "batch_size": 8,
        "seq_len": 1024,
        "layers": 12,
        "d_model": 768,
        "heads": 12,
        "kv_heads": 12,
        "ffn_mult": 4,
        "vocab": 50304,
    }
    costs = p.costs(cfg)
    # GPT-2 small shape with an untied head and a 1024-position table
    d, L, V, S = 768, 12, 50304, 1024
    expected = V * d + S * d + L * (12 * d * d + 13 * d) + 2 * d + V * d
    assert costs["params"] == expected
    assert costs["weight_bytes"] == 4 * expected
    assert costs["macs"] * 2 == costs["flops"]
    assert not p.check(cfg).feasible  # 163M > 125M
    names = [c.name for c in p.constraints]
    assert "params" in names and "attention#5: heads divide model width" in names
    small = dict(cfg, d_model=512, heads=8, kv_heads=2, layers=8)
    assert p.check(small).feasible


def test_problem_from_spec_and_budget_parse():
    p = problem_from_spec("zoo:resnet", "params=25M,flops=4G")
    cfg = {
        "batch_size": 8,
        "resolution": 224,
        "block": "bottleneck",
        "groups": 1,
        "w0": 64,
        "w1": 128,
        "w2": 256,
        "w3": 512,
        "d0": 3,
        "d1": 4,
        "d2": 6,
        "d3": 3,
    }
    costs = p.costs(cfg)
    assert costs["params"] == 25_557_032  # torchvision resnet50
    assert costs["flops"] == 8 * 2 * 4_089_184_256  # fvcore: 4.09 GMACs per image for ResNet-50
    verdict = p.check(cfg)
    assert {v.name for v in verdict.violations} == {"params", "flops"}
    with pytest.raises(ValueError, match="unknown budget item"):
        Budget.parse("parms=3M")


def test_mobilenetv2_matches_torchvision_size():
    p = get("mobilenetv2")()
    cfg = {"batch_size": 1, "resolution": 224, "width_mult": 1.0, "expansion": 6, "kernel": 3}
    assert p.costs(cfg)["params"] == 3_504_872  # torchvision mobilenet_v2
    assert p.costs(cfg)["macs"] == 300_774_272  # conv + linear multiply-adds (~300 M, as published)


def test_configs_outside_space_are_rejected():
    p = get("mlp")()
    with pytest.raises(ds.SpaceError):
        p.costs({"batch_size": 16, "depth": 9, "width": 64, "activation": "relu"})
    with pytest.raises(ds.SpaceError):
        p.costs({"batch_size": 16, "depth": 2, "width": 64, "activation": "swish"})


# ------------------------------------------------------------------------------------------------
# NAS-Bench-201 / NATS-Bench


def test_arch_str_roundtrip():
    s = "|nor_conv_3x3~0|+|none~0|skip_connect~1|+|nor_conv_1x1~0|none~1|avg_pool_3x3~2|"
    cfg = config_from_arch_str(s)
    assert cfg["edge_0_1"] == "nor_conv_3x3" and cfg["edge_2_3"] == "avg_pool_3x3"
    assert arch_str_from_config(cfg) == s
    nb = get("nasbench201")
    assert nb.config_from_arch_str(s) == cfg  # type: ignore[attr-defined]
    for bad in (
        "",
        "|conv~0|+|none~0|none~1|+|none~0|none~1|none~2|",
        "|none~1|+|none~0|none~1|+|none~0|none~1|none~2|",
    ):
        with pytest.raises(ValueError):
            config_from_arch_str(bad)


@pytest.mark.skipif(
    not FIXTURE.exists() and not os.environ.get("CI"), reason="shared NATS-Bench fixture not available"
)
def test_nats_reference_costs_match_fixture():
    nb, sss = get("nasbench201"), get("nats_sss")
    rows = list(csv.DictReader(FIXTURE.open()))
    assert len(rows) == 60
    checked = 0
    for row in rows:
        if row["space"] == "tss":
            ref = nb.reference_costs(row["arch_str"], row["dataset"])  # type: ignore[attr-defined]
        else:
            ref = sss.reference_costs(row["arch_str"], row["dataset"])  # type: ignore[attr-defined]
        for key in ("flops_m", "params_mb"):
            printed = row[key]
            digits = len(printed.split(".")[1]) if "." in printed else 0
            assert round(ref[key], digits) == float(printed), (
                row["space"],
                row["arch_index"],
                row["dataset"],
                key,
            )
        checked += 1
    assert checked == 60


def test_nasbench_problem_counts():
    p = get("nasbench201")(budget=Budget(params="1M"))
    assert p.space.size() == 15625
    cfg = config_from_arch_str(
        "|nor_conv_3x3~0|+|nor_conv_3x3~0|avg_pool_3x3~1|+|none~0|nor_conv_3x3~1|avg_pool_3x3~2|"
    )
    assert p.costs(cfg)["params"] == 802_426  # NATS-Bench params_mb 0.802426 (cifar10)
    assert p.check(cfg).feasible
    p16 = get("nasbench201")(dataset="ImageNet16-120")
    assert p16.costs(cfg)["params"] == 809_576  # 120 classes
    with pytest.raises(ValueError, match="unknown dataset"):
        get("nasbench201")(dataset="mnist")
