"""Device kinds beyond desktop CPUs and GPUs: mobile CPUs (phones, Raspberry Pi) and accelerators
(systolic-array ASICs, FPGA designs): hand-computed rooflines, catalog entries, validation, fitting."""

from __future__ import annotations

import time

import numpy as np
import pytest

from dnnsat import zoo
from dnnsat.cost import Budget
from dnnsat.cost._devices import ACCELERATOR_NUMBERS, KINDS, DeviceProfile, get_device
from dnnsat.cost.latency import CLASS_SCALE, fit_device, latency_expressions, latency_model
from dnnsat.expr import compile_scalar, compile_vectorized
from dnnsat.graph import Network
from dnnsat.zoo._nasbench import EDGES, OPS

PEAK, BW, LAUNCH, PAR, EC, EM, ECONV = 1e9, 2e9, 1e-6, 5e-6, 0.5, 0.25, 0.2


def _value(e) -> float:  # type: ignore[no-untyped-def]
    return float(compile_scalar([e])({})[0])


def _mobile(**changes: object) -> DeviceProfile:
    p = DeviceProfile(
        name="toy-phone",
        kind="mobile_cpu",
        peak_flops={"fp32": PEAK},
        memory_bandwidth=BW,
        memory_bytes=2**30,
        launch_overhead_s=LAUNCH,
        parallel_overhead_s=PAR,
        channel_block=4,
        efficiency={"compute": EC, "memory": EM, "conv": ECONV},
    )
    return p.replace(**changes)


def _accelerator(**changes: object) -> DeviceProfile:
    p = DeviceProfile(
        name="toy-array",
        kind="accelerator",
        peak_flops={"fp32": PEAK},
        memory_bandwidth=BW,
        memory_bytes=2**30,
        launch_overhead_s=LAUNCH,
        array_rows=4,
        array_cols=8,
        buffer_bytes=2048,
        efficiency={"compute": EC, "memory": EM, "conv": ECONV},
    )
    return p.replace(**changes)


def test_mobile_cpu_runs_1x1_convs_as_conv_gemms_with_a_thread_pool_cost() -> None:
    """conv 1x1 (3 -> 6 channels, 8x8) then ReLU on 4-lane NEON blocks: 3 -> 4 and 6 -> 8 padded."""
    net = Network()
    net.output(net.relu(net.conv2d(net.input((1, 3, 8, 8)), 6, 1, bias=False)))
    conv_work = 2 * 64 * 6 * 3 * (4 / 3) * (8 / 6)  # = 4096 FLOPs
    conv_bytes = 4 * (3 * 64 + 6 * 64) + 4 * 6 * 3  # input + output + weights = 2376
    t_conv = max(conv_work / (PEAK * ECONV), conv_bytes / (BW * EM)) + LAUNCH + PAR
    t_relu = max(384 / (PEAK * EC * CLASS_SCALE["elementwise"]), 4 * 2 * 384 / (BW * EM)) + LAUNCH
    assert conv_work == 4096 and conv_bytes == 2376
    assert _value(latency_expressions(net, None, _mobile())["latency"]) == pytest.approx(
        t_conv + t_relu, rel=1e-12
    )
    # without a thread-pool cost the GEMM op pays the dispatch only; on a desktop CPU profile with the same
    # numbers the 1x1 convolution is class "pointwise" (no factor of its own: the compute efficiency)
    no_pool = _value(latency_expressions(net, None, _mobile(parallel_overhead_s=0.0))["latency"])
    assert no_pool == pytest.approx(t_conv - PAR + t_relu, rel=1e-12)
    assert "pointwise" not in latency_model(net, None, _mobile()).classes
    assert "pointwise" in latency_model(net, None, _mobile(kind="cpu")).classes
    assert latency_model(net, None, _mobile()).parallel


def test_accelerator_pads_channels_to_the_array_folds_norms_and_refetches_inputs() -> None:
    """4 x 8 PE array, 2 KiB buffer: conv 3x3 (6 -> 10) + batch norm + ReLU, then conv 1x1 (10 -> 12)."""
    net = Network()
    x = net.batchnorm(net.conv2d(net.input((1, 6, 8, 8)), 10, 3, padding=1, bias=False))
    net.output(net.conv2d(net.relu(x), 12, 1, bias=False))
    # conv 3x3: 6 input channels on 4 rows -> 8, 10 output channels on 8 columns -> 16
    work3 = 2 * 64 * 10 * 6 * 9 * (8 / 6) * (16 / 10)
    # weights 2160 bytes > half the buffer (1024): 3 tiles, the 1536-byte input streamed 3 times
    bytes3 = 1536 * 3 + 2160 + 2560
    # conv 1x1: 10 input channels on 4 rows -> 12, 12 output channels on 8 columns -> 16; weights fit
    work1 = 2 * 64 * 12 * 10 * (12 / 10) * (16 / 12)
    bytes1 = 2560 + 480 + 3072
    assert (work3, bytes3, work1, bytes1) == (147456, 9328, 24576, 6112)
    # the batch norm is folded into the convolution and the ReLU applied on the fly: 2 layers in all
    compute_bound = _accelerator(memory_bandwidth=1e18)
    want = (work3 + work1) / (PEAK * ECONV) + 2 * LAUNCH
    assert _value(latency_expressions(net, None, compute_bound)["latency"]) == pytest.approx(want, rel=1e-12)
    slow = 1e7  # a 10 MB/s DRAM link: both layers wait on DRAM
    want = (bytes3 + bytes1) / (slow * EM) + 2 * LAUNCH
    got = _value(latency_expressions(net, None, _accelerator(memory_bandwidth=slow))["latency"])
    assert got == pytest.approx(want, rel=1e-12)
    big = _accelerator(memory_bandwidth=slow, buffer_bytes=2**20)  # every layer's weights fit: no refetch
    got = _value(latency_expressions(net, None, big)["latency"])
    assert got == pytest.approx((bytes3 - 2 * 1536 + bytes1) / (slow * EM) + 2 * LAUNCH, rel=1e-12)


def test_accelerator_depthwise_uses_one_row_per_channel() -> None:
    net = Network()
    net.output(net.depthwise(net.input((1, 8, 8, 8)), 3, padding=1, bias=False))
    p = _accelerator(memory_bandwidth=1e18)  # compute-bound
    work = 2 * 64 * 8 * 9 * 4  # 8 channels fill the 8 columns; each uses 1 of the 4 rows
    want = work / (PEAK * EC * CLASS_SCALE["grouped_conv"]) + LAUNCH
    assert _value(latency_expressions(net, None, p)["latency"]) == pytest.approx(want, rel=1e-12)


def test_catalog_has_mobile_and_accelerator_entries_from_spec_sheets() -> None:
    assert set(KINDS) == {"gpu", "cpu", "mobile_cpu", "accelerator"}
    eyeriss = get_device("eyeriss")
    assert eyeriss.kind == "accelerator"
    assert eyeriss.peak("float32") == 168 * 200e6 * 2 == eyeriss.peak("float16")  # 16-bit fixed point
    assert (eyeriss.array_rows * eyeriss.array_cols, eyeriss.buffer_bytes) == (168, 108 * 1024)
    fpga = get_device("fpga")
    assert fpga.name == "zc706" and fpga.kind == "accelerator" and fpga.memory_bandwidth == 12.8e9
    pi = get_device("Raspberry-Pi-4")
    assert (
        pi.kind == "mobile_cpu" and pi.peak_flops["fp32"] == 4 * 1.5e9 * 8 and pi.memory_bandwidth == 12.8e9
    )
    assert pi.channel_block == 4 and pi.cache_bytes == 2**20
    for name in (
        "pixel2",
        "pixel3",
        "essential-ph-1",
        "samsung-a50",
        "samsung-s7",
        "raspi4",
        "eyeriss",
        "zc706",
    ):
        p = get_device(name)
        fields = ACCELERATOR_NUMBERS if p.kind == "accelerator" else ("parallel_overhead_s", "cache_bytes")
        for field in (*fields, "peak_flops", "memory_bandwidth", "launch_overhead_s", "efficiency"):
            assert len(p.sources.get(field, "")) > 10, (name, field)
        assert p.cpu_backend().isa == ""  # no oneDNN x86-64 kernels: the memory model's ARM/host rules


def test_kind_specific_fields_are_validated_with_the_fix() -> None:
    with pytest.raises(ValueError, match="kind must be one of 'gpu', 'cpu', 'mobile_cpu', 'accelerator'"):
        _mobile(kind="phone")
    with pytest.raises(ValueError, match="an accelerator needs 'array_rows' >= 1"):
        _accelerator(array_rows=0)
    with pytest.raises(ValueError, match="'buffer_bytes' >= 1.*on-chip buffer in bytes"):
        _accelerator(buffer_bytes=0)
    with pytest.raises(
        ValueError, match="array_rows, array_cols, buffer_bytes only apply to kind 'accelerator'"
    ):
        _accelerator(kind="cpu")
    with pytest.raises(ValueError, match="parallel_overhead_s must be >= 0 seconds and only applies"):
        _mobile(kind="gpu")
    with pytest.raises(ValueError, match="parallel_overhead_s must be >= 0"):
        _mobile(parallel_overhead_s=-1e-6)
    data = _accelerator().to_dict()
    del data["memory_bandwidth"]
    with pytest.raises(ValueError, match=r"missing fields \['memory_bandwidth'\].*memory_bandwidth bytes/s"):
        DeviceProfile.from_dict(data)
    assert DeviceProfile.from_json(_accelerator().to_json()) == _accelerator()
    assert DeviceProfile.from_json(_mobile().to_json()) == _mobile()


def _nb201(profile: DeviceProfile, n: int, seed: int) -> list[tuple[object, float]]:
    model = zoo.get("nasbench201")
    net = model.build(batch_size=1)(model.space().vars)
    rng = np.random.default_rng(seed)
    cols = {e: rng.integers(0, len(OPS), n) for e in EDGES}
    seconds = compile_vectorized([latency_expressions(net, None, profile)["latency"]])(cols)[0]
    return [((net, {e: int(cols[e][i]) for e in EDGES}), float(seconds[i])) for i in range(n)]


@pytest.mark.parametrize("device", ["raspi4", "eyeriss"])
def test_fit_device_recovers_the_factors_of_a_mobile_cpu_and_an_accelerator(device: str) -> None:
    base = get_device(device)
    eff = {**base.efficiency, "conv": 0.05, "pool": 0.02, "memory": 0.3}
    truth = base.replace(launch_overhead_s=3 * base.launch_overhead_s, efficiency=eff)
    if base.kind == "mobile_cpu":
        truth = truth.replace(parallel_overhead_s=2.5 * base.parallel_overhead_s)
    samples = _nb201(truth, 20, seed=0)
    start = time.perf_counter()
    fitted = fit_device(base, samples, prior_weight=1e-8)
    assert time.perf_counter() - start < 5.0
    assert fitted.kind == base.kind and fitted.peak_flops == base.peak_flops
    assert fitted.efficiency["conv"] == pytest.approx(0.05, rel=0.05)
    if base.kind == "mobile_cpu":
        assert fitted.parallel_overhead_s == pytest.approx(truth.parallel_overhead_s, rel=0.05)
        assert "fitted by fit_device on 20" in fitted.sources["parallel_overhead_s"]
    zero_shot = fit_device(base, samples)  # default: the prior chosen by cross-validation
    assert zero_shot.efficiency["conv"] == pytest.approx(0.05, rel=0.2)


def test_budgets_work_on_the_new_kinds() -> None:
    for device in ("pixel2", "eyeriss"):
        p = zoo.nasbench201(budget=Budget(latency="50ms", memory="1GiB", device=device))
        cfg = p.sample(1, seed=0)[0]
        costs = p.costs(cfg)
        assert 0 < costs["latency"] < 1.0 and costs["memory"] > 0
