"""The model-zoo coverage benchmark (``benchmarks.model_zoo``) on a few models: a traced model's params,
FLOPs and validity equal PyTorch's on random configurations of its space (resnet18's holds invalid ones:
its BasicBlock raises for a ``width_per_group`` other than 64); MobileNet v3's ``Hardsigmoid`` and ConvNeXt's
``F.layer_norm`` (channels-last ``LayerNorm2d``) map to catalog ops, BERT has constant tensors in its
forward."""

from __future__ import annotations

import importlib.util

import pytest

pytest.importorskip("torch")
if importlib.util.find_spec("torchvision") is None or importlib.util.find_spec("transformers") is None:
    pytest.skip("torchvision and transformers (the dev extra) are needed", allow_module_level=True)

from benchmarks.model_zoo import cases, categorise, run_model  # noqa: E402

MODELS = ["resnet18", "mobilenet_v3_small", "convnext_tiny", "bert"]


@pytest.mark.parametrize("name", MODELS)
def test_zoo_model_is_traced_and_exact(name):
    (case,) = cases(only=[name])
    result = run_model(case, n_configs=4, seed=0)  # pytest-timeout bounds it
    assert result.traced, result.error
    assert len(result.checks) == 4 and result.measured == 4
    assert any(check.torch_valid for check in result.checks)
    for check in result.checks:
        assert check.dnnsat_valid == check.torch_valid, check
        if check.torch_valid:
            assert (check.params, check.flops) == (check.torch_params, check.torch_flops), check
    assert result.exact and result.agree == 4


def test_refusal_categories():
    assert (
        categorise("tensor function or method 'layer_norm' is not supported: m.py:3: x")
        == "function layer_norm"
    )
    assert (
        categorise("module features.1.act (Hardsigmoid) is not supported: m.py:1: y") == "module Hardsigmoid"
    )
    assert (
        categorise(
            "from_torch: the model raises on every configuration: NotImplementedError: "
            "Cannot copy out of meta tensor; no data!"
        )
        == "build: copy out of a meta tensor"
    )
    assert categorise("something new") == "something new"
