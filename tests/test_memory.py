"""Memory model: component arithmetic, liveness rules, gates, GPU overhead; checked against PyTorch."""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from dnnsat.cost import Budget, DeviceProfile, detect_cpu_backend, get_device
from dnnsat.cost.memory import CUDA_BLOCK, CUDA_SEGMENT, MEMORY_KEYS, memory_expressions
from dnnsat.expr import Var, compile_scalar
from dnnsat.graph import Network
from dnnsat.torch import peak_memory, storage_bytes, track_memory

torch.set_num_threads(1)


@dataclass(frozen=True)
class _Gpu:
    """Stand-in for a device profile: only the attributes the memory model reads."""

    kind: str = "gpu"
    context_bytes: int = 500 * 2**20
    memory_bytes: int = 80 * 2**30


def _eval(exprs: dict[str, Any], env: dict[str, Any] | None = None) -> dict[str, Any]:
    return dict(zip(exprs, compile_scalar(list(exprs.values()))(env or {})))


def _mlp(batch: int = 4) -> Network:
    """x (batch, 8) -> linear 16 -> relu -> linear 4: 212 parameters."""
    net = Network()
    x = net.input((batch, 8))
    return net.output(net.linear(net.relu(net.linear(x, 16)), 4))


P = 8 * 16 + 16 + 16 * 4 + 4  # parameters of _mlp


def test_components_sum_exactly_to_memory() -> None:
    for kw in (
        dict(mode="train", optimizer="adam"),
        dict(mode="train", optimizer="sgd", dtype="mixed"),
        dict(mode="inference", dtype="float16"),
    ):
        for device in (None, _Gpu()):
            v = _eval(memory_expressions(_mlp(), Budget(**kw), device))  # type: ignore[arg-type]
            assert set(v) == set(MEMORY_KEYS)
            assert sum(v[k] for k in MEMORY_KEYS[1:]) == v["memory"]
            assert all(v[k] >= 0 for k in MEMORY_KEYS)


def test_optimizer_state_and_precision_arithmetic() -> None:
    def comp(**kw: Any) -> dict[str, Any]:
        return _eval(memory_expressions(_mlp(), Budget(mode="train", **kw), None))

    assert comp(optimizer="sgd")["memory_optimizer"] == 0
    assert comp(optimizer="momentum")["memory_optimizer"] == 4 * P
    assert comp(optimizer="adam")["memory_optimizer"] == 2 * 4 * P  # Adam: 2 x fp32 weights
    assert comp(optimizer="adamw")["memory_optimizer"] == 2 * 4 * P
    assert comp(optimizer=None)["memory_optimizer"] == 0  # None means SGD
    assert comp(optimizer="sgd")["memory_weights"] == 4 * P
    mixed = comp(optimizer="adam", dtype="mixed")
    assert mixed["memory_optimizer"] == 2 * 4 * P  # fp32 state
    assert mixed["memory_weights"] == 4 * P  # fp32 master weights
    # the fp16 copies autocast makes of the batch and of the weights are kept for backward, except the
    # first linear's weights: addmm keeps mat2 only for an input gradient, the batch needs none
    big = dict(mode="train", optimizer="adam", dtype="mixed")
    with_copies = _eval(memory_expressions(_mlp(512), Budget(**big), None))  # type: ignore[arg-type]
    half = _eval(memory_expressions(_mlp(512), Budget(**{**big, "dtype": "float16"}), None))  # type: ignore[arg-type]
    first = 8 * 16 + 16
    assert with_copies["memory_activations"] - half["memory_activations"] == 2 * (P - first) + 2 * 512 * 8
    assert mixed["memory_input"] == 4 * 4 * 8 + 8 * 4  # the batch stays fp32 under autocast
    half = comp(optimizer="adam", dtype="float16")
    assert half["memory_weights"] == 2 * P and half["memory_optimizer"] == 2 * 2 * P
    assert half["memory_input"] == 2 * 4 * 8 + 8 * 4  # fp16 batch + int64 targets


def test_hand_checked_training_step_matches_pytorch() -> None:
    # forward: h (4x16) freed after relu, relu output r saved; backward of linear1 holds every
    # parameter gradient (P*4), grad(h) (256 B), the output and the loss; base: weights, batch (128 B),
    # targets (32 B)
    v = _eval(memory_expressions(_mlp(), Budget(mode="train", optimizer="sgd"), None))
    assert v["memory"] == 4 * P + 128 + 32 + 4 * P + 256 + 64 + 8  # + output (4x4 fp32) + loss scalars
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    real = peak_memory(module, [torch.randn(4, 8)], train=True, optimizer="sgd")
    assert real.peak == v["memory"]
    adam = peak_memory(module, [torch.randn(4, 8)], train=True, optimizer="adam")
    assert adam.optimizer == 2 * 4 * P + 4 * 4  # + one fp32 step counter per parameter tensor


def test_tracker_counts_each_storage_once() -> None:
    x = torch.randn(100)
    assert storage_bytes(x, x.view(10, 10), [x[:5]]) == 400
    with track_memory(x) as mt:
        y = x.exp()
        z = y.sin()
        del y, z
    assert mt.baseline == 400 and mt.peak == 400 + 800 and mt.current == 400


def _chain(residual: bool, n: int = 1000) -> Network:
    net = Network()
    x = net.input((1, n))
    a = net.relu(x)
    c = net.relu(net.relu(a))
    return net.output(net.add(a, c) if residual else c)


def test_liveness_residual_keeps_input_alive() -> None:
    t = 4000  # bytes of one activation
    inf = Budget(mode="inference")
    chain = _eval(memory_expressions(_chain(False), inf, None))["memory"]
    res = _eval(memory_expressions(_chain(True), inf, None))["memory"]
    assert chain == t + 2 * t  # input + producer's input and output
    assert res == t + 3 * t  # the skip tensor a lives until the add
    for residual, expected in ((False, chain), (True, res)):

        class M(torch.nn.Module):
            def __init__(self, residual: bool) -> None:
                super().__init__()
                self.residual = residual

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                if not self.residual:
                    return torch.relu(torch.relu(torch.relu(x)))
                a = torch.relu(x)
                return a + torch.relu(torch.relu(a))

        m = peak_memory(M(residual), [torch.randn(1, 1000)], train=False)
        assert m.peak == expected


def test_gated_repeat_depth() -> None:
    depth = Var("depth")
    net = Network()
    x = net.input((8, 64))
    x = net.repeat(depth, 4, lambda i, y: net.relu(net.linear(y, 64)), net.linear(x, 64))
    net.output(net.linear(x, 10))
    block_params = 4 * (64 * 64 + 64)
    train = memory_expressions(net, Budget(mode="train", optimizer="adam"), None)
    inf = memory_expressions(net, Budget(mode="inference"), None)
    vals = [_eval(train, {"depth": d}) for d in range(5)]
    infs = [_eval(inf, {"depth": d})["memory"] for d in range(5)]
    for d in range(1, 5):
        assert vals[d]["memory_weights"] - vals[d - 1]["memory_weights"] == block_params
        assert vals[d]["memory_optimizer"] - vals[d - 1]["memory_optimizer"] == 2 * block_params
        # linear input and relu output saved per block (the relu output is the next block's input)
        assert vals[d]["memory_activations"] - vals[d - 1]["memory_activations"] == 8 * 64 * 4
        assert vals[d]["memory"] > infs[d]
    # inference holds at most two activations at once whatever the depth
    assert len({infs[d] - infs[0] - 4 * d * (64 * 64 + 64) for d in range(1, 5)}) == 1


def test_gpu_overhead_and_rounding() -> None:
    dev = _Gpu()
    cpu = _eval(memory_expressions(_mlp(), Budget(mode="train", optimizer="adam"), None))
    gpu = _eval(memory_expressions(_mlp(), Budget(mode="train", optimizer="adam"), dev))
    assert cpu["memory_overhead"] == 0
    # each weight and bias (all < 512 B) takes one 512-byte block; the peak is rounded to 2 MiB segments
    assert gpu["memory_weights"] == 4 * CUDA_BLOCK
    assert gpu["memory_optimizer"] == 2 * 4 * CUDA_BLOCK
    assert (gpu["memory"] - dev.context_bytes) % CUDA_SEGMENT == 0
    assert gpu["memory"] - gpu["memory_overhead"] < CUDA_SEGMENT
    assert gpu["memory_overhead"] >= dev.context_bytes


def test_inference_smaller_than_training_and_budget_wiring() -> None:
    from dnnsat import zoo

    p = zoo.get("mlp")(budget=Budget(mode="train", optimizer="adam"))
    cfg = {"batch_size": 64, "depth": 2, "width": 256, "activation": "gelu"}
    costs = p.costs(cfg)
    if "memory" not in costs:
        pytest.skip("memory_expressions is not wired into cost_expressions yet")
    q = zoo.get("mlp")(budget=Budget(mode="inference"))
    assert q.costs(cfg)["memory"] < costs["memory"]
    assert sum(costs[k] for k in MEMORY_KEYS[1:]) == costs["memory"]


def test_zoo_families_against_pytorch() -> None:
    """A few small configs per family, fp32 (Adam, SGD, inference) and mixed precision (bfloat16
    autocast): |error| <= 10 % each, median <= 3 % (CPU, one thread)."""
    from benchmarks.memory_accuracy import _family_configs, measure_config

    rng = random.Random(1)
    errors = []
    for fam in ("mlp", "cnn", "resnet", "gpt"):
        net, space, configs = _family_configs(fam, 2, rng)
        for cfg in configs:
            for label, est, real in measure_config(net, space, cfg):
                err = abs(est - real) / real
                assert err <= 0.10, (fam, label, cfg, est, real)
                errors.append(err)
    assert statistics.median(errors) <= 0.03


def _conv12() -> Network:
    """BatchNorm, then a 3x3 conv from 12 to 16 channels on a (4, 12, 12, 12) batch: fewer input
    channels than an AVX-512 block (oneDNN reads the input as it is) but more than an AVX2 block
    (oneDNN copies it, padded to 16 channels)."""
    net = Network()
    x = net.batchnorm(net.input((4, 12, 12, 12)))
    return net.output(net.conv2d(x, 16, 3, padding=1))


_CONV12_MODES = {
    "train": Budget(mode="train", optimizer="sgd"),
    "inference": Budget(mode="inference"),
    "mixed": Budget(mode="train", optimizer="sgd", dtype="mixed"),
}


def conv12_peaks() -> dict[str, int]:
    """Peak bytes PyTorch allocates for :func:`_conv12` per mode on this process's CPU backend."""
    from dnnsat.torch import GraphModule, concretize, example_inputs

    out = {}
    for mode, budget in _CONV12_MODES.items():
        torch.manual_seed(0)
        module = GraphModule(concretize(_conv12(), {}))
        amp = torch.bfloat16 if budget.dtype == "mixed" else None
        m = peak_memory(
            module, example_inputs(module, "cpu"), train=budget.train, optimizer="sgd", autocast=amp
        )
        out[mode] = m.peak
    return out


def _conv12_predicted(device: DeviceProfile | None) -> dict[str, int]:
    net = _conv12()
    return {m: _eval(memory_expressions(net, b, device))["memory"] for m, b in _CONV12_MODES.items()}


def _emulated_peaks(isa: str, aten: str) -> dict[str, int]:
    """:func:`conv12_peaks` in a fresh interpreter whose PyTorch runs oneDNN's ``isa`` kernels."""
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": isa, "ATEN_CPU_CAPABILITY": aten}
    code = "import json; from tests.test_memory import conv12_peaks; print(json.dumps(conv12_peaks()))"
    root = Path(__file__).resolve().parents[1]
    res = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(("isa", "aten", "block"), [("AVX2", "avx2", 8), ("SSE41", "default", 8)])
def test_conv_memory_follows_the_cpu_backend(isa: str, aten: str, block: int) -> None:
    """Each backend's prediction is what PyTorch allocates under it: here (the detected backend) and
    in a subprocess limited to ``isa`` (``ONEDNN_MAX_CPU_ISA``). On an AVX-512 CPU the two predictions
    differ exactly as the two measurements do."""
    here = conv12_peaks()
    emulated = _emulated_peaks(isa, aten)
    profile = get_device("cpu").replace(isa=isa.lower(), channel_block=block)
    local = _conv12_predicted(None)
    assert local == _conv12_predicted(get_device("cpu"))  # the generic CPU profile is this machine's
    for predicted, real in ((local, here), (_conv12_predicted(profile), emulated)):
        assert predicted["train"] == real["train"] and predicted["inference"] == real["inference"]
        # autocast: the model keeps a bfloat16 copy of the bias that PyTorch does not (16 x 2 bytes;
        # 0 without a bias, measured on AVX-512, AVX2 and SSE4.1)
        assert 0 <= predicted["mixed"] - real["mixed"] <= 32
    if detect_cpu_backend().avx512:
        other = _conv12_predicted(profile)
        assert {m: local[m] - other[m] for m in local} == {m: here[m] - emulated[m] for m in here}
        assert here["inference"] < emulated["inference"] and here["mixed"] < emulated["mixed"]


def test_gpu_inference_max_pool_keeps_its_indices_with_the_output() -> None:
    # PyTorch's own fake-CUDA tracker (MemTracker under FakeTensorMode) runs a no-grad forward on this
    # CPU-only build: CUDA max pooling allocates int64 indices in inference too (the CPU does not)
    from benchmarks.fake_memory import dnnsat_tensor_memory, fake_inference_peak
    from dnnsat.space import Int, Space

    space = Space({"batch": Int(1, 32)})
    net = Network()
    x = net.input((space.vars.batch, 8, 32, 32))
    net.output(net.maxpool2d(net.conv2d(x, 24, 3, padding=1), 2))
    cfg = {"batch": 16}
    measured, estimate = fake_inference_peak(net, space, cfg), dnnsat_tensor_memory(net, space, cfg)
    assert abs(estimate - measured) <= 0.01 * measured
