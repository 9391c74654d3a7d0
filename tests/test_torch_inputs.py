"""``dnnsat.torch.example_inputs`` follows the module: one default device with ``to_torch`` (the CPU)."""

from __future__ import annotations

import pytest

import dnnsat as ds
from dnnsat.graph import Network

torch = pytest.importorskip("torch")

from dnnsat.torch import example_inputs, measure, to_torch  # noqa: E402

SPACE = ds.Space({"width": ds.Int(8, 32, step=8), "vocab": ds.Categorical([50, 100])})


def build(v):  # type: ignore[no-untyped-def]
    """Two inputs, the second one after an op (``forward`` once confused plan and input positions)."""
    net = Network("inputs")
    tokens = net.input((2, 6), dtype="int64")
    x = net.embedding(tokens, v.vocab, v.width)
    image = net.input((2, 3, 8, 8))
    y = net.flatten(net.adaptive_avgpool2d(net.conv2d(image, v.width, 3), 1))
    return net.output(net.add(net.mean(x, dim=1), y))


CFG = {"width": 16, "vocab": 50}


def test_default_inputs_run_on_the_default_module() -> None:
    module = to_torch(build, CFG, space=SPACE)  # default device: cpu
    inputs = example_inputs(module)
    assert [t.device.type for t in inputs] == ["cpu", "cpu"]
    assert inputs[0].dtype == torch.long and inputs[0].shape == (2, 6)
    assert inputs[1].dtype == torch.float32 and inputs[1].shape == (2, 3, 8, 8) and inputs[1].std() > 0
    out = module(*inputs)
    assert out.shape == (2, 16) and torch.isfinite(out).all()
    m = measure(module, inputs, train=True)  # real memory tracking needs real tensors
    assert m.peak_bytes is not None and m.peak_bytes > 0


def test_inputs_follow_a_meta_module_and_an_explicit_device() -> None:
    module = to_torch(build, CFG, space=SPACE, device="meta")
    assert all(t.is_meta for t in example_inputs(module))
    assert module(*example_inputs(module)).is_meta
    assert [t.device.type for t in example_inputs(module, "cpu")] == ["cpu", "cpu"]
