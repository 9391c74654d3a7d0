"""The CPU latency model's oneDNN convolution rules (profiles with ``conv_overhead_s > 0``)."""

from __future__ import annotations

import pytest

from dnnsat.cost._devices import DeviceProfile
from dnnsat.cost.latency import latency_expressions
from dnnsat.expr import Var, compile_scalar
from dnnsat.graph import Network

PEAK, BW, LAUNCH, CONV = 1e9, 1e18, 1e-6, 5e-5  # BW: no memory-bound op time from the roofline


def _cpu(block: int = 16, threads: int = 1, conv_overhead_s: float = CONV) -> DeviceProfile:
    return DeviceProfile(
        name="toy-cpu",
        kind="cpu",
        peak_flops={"fp32": PEAK},
        memory_bandwidth=BW,
        memory_bytes=2**30,
        launch_overhead_s=LAUNCH,
        channel_block=block,
        conv_overhead_s=conv_overhead_s,
        threads=threads,
        efficiency={"compute": 1.0, "memory": 1.0, "grouped_conv": 1.0},
    )


def _conv(batch, cin, cout, k, res, groups=1, stride=1):  # type: ignore[no-untyped-def]
    net = Network()
    x = net.input((batch, cin, res, res))
    return net.output(net.conv2d(x, cout, k, stride=stride, padding=k // 2, groups=groups, bias=False))


def _latency(net: Network, profile: DeviceProfile, **env: int) -> float:
    return float(compile_scalar([latency_expressions(net, None, profile)["latency"]])(env)[0])


CASES = [  # (batch, cin, cout, kernel, resolution, groups, stride)
    (8, 16, 16, 1, 4, 1, 1),  # 1x1 below batch 16 on one thread: ATen's own kernels
    (15, 16, 16, 1, 4, 1, 1),
    (16, 16, 16, 1, 4, 1, 1),
    (8, 16, 16, 1, 4, 1, 2),  # strided
    (1, 16, 16, 3, 4, 1, 1),  # single small input, 3x3: ATen's im2col
    (1, 16, 16, 3, 36, 1, 1),  # 16 * 36 * 36 > 20480 elements
    (1, 16, 16, 5, 4, 1, 1),  # kernel > 3
    (1, 16, 16, 3, 4, 2, 1),  # grouped
    (2, 16, 16, 3, 4, 1, 1),
]


@pytest.mark.parametrize("threads", [1, 2])
def test_onednn_dispatch_matches_pytorch(threads: int) -> None:
    """The model charges oneDNN's fixed cost exactly where PyTorch selects its oneDNN backend."""
    torch = pytest.importorskip("torch")
    previous = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        for b, ci, co, k, res, g, s in CASES:
            x, w = torch.randn(b, ci, res, res), torch.randn(co, ci // g, k, k)
            pad = [k // 2] * 2
            backend = torch._C._select_conv_backend(x, w, None, [s, s], pad, [1, 1], False, [0, 0], g, None)
            onednn = backend.name == "Mkldnn"
            net = _conv(b, ci, co, k, res, g, s)
            extra = _latency(net, _cpu(threads=threads)) - _latency(
                net, _cpu(threads=threads, conv_overhead_s=1e-12)
            )
            assert (extra > CONV / 2) == onednn, (b, ci, co, k, res, g, s, backend)
    finally:
        torch.set_num_threads(previous)


def test_reorder_and_overhead_are_charged_once_per_onednn_convolution() -> None:
    """A oneDNN convolution costs its roofline time + conv_overhead_s + a reorder of input, output and
    weights (each read and written) at the memory bandwidth, plus one dispatch for the reorder."""
    bw = 1e9
    p = _cpu().replace(memory_bandwidth=bw)
    net = _conv(16, 32, 32, 3, 8)
    x = y = 16 * 32 * 8 * 8
    weights = 32 * 32 * 9
    flops = 2 * y * 32 * 9
    roofline = max(flops / PEAK, 4 * (x + y + weights) / bw)
    reorder = 2 * 4 * (x + y + weights) / bw
    want = roofline + LAUNCH + reorder + LAUNCH + CONV
    assert _latency(net, p) == pytest.approx(want, rel=1e-12)
    # symbolic batch: the rule is an expression (ATen's kernels below 16 on one thread for 1x1 convs)
    net = Network()
    net.output(net.conv2d(net.input((Var("b"), 32, 8, 8)), 32, 1, bias=False))
    gap = [_latency(net, p, b=b) - _latency(net, _cpu(conv_overhead_s=0).replace(memory_bandwidth=bw), b=b)
           for b in (8, 16)]  # fmt: skip
    assert gap[0] == 0.0 and gap[1] > CONV


@pytest.mark.parametrize(
    ("block", "cpg", "factor"),
    [
        (16, 16, 1.0),  # direct kernels, whole vectors
        (16, 8, 2.0),  # direct kernels with 8-channel sub-blocks: half of each 16-lane vector
        (16, 4, 4.0),
        (16, 2, 64.0),  # im2col + GEMM per group: both channel counts padded to 16
        (16, 6, (16 / 6) ** 2),
        (8, 8, 1.0),  # AVX2: 8-lane blocks, no sub-blocks
        (8, 4, 4.0),  # im2col + GEMM (oneDNN has no 4-channel direct kernel on AVX2)
    ],
)
def test_grouped_convolution_work_follows_onednn_kernels(block: int, cpg: int, factor: float) -> None:
    groups, res, b = 4, 8, 16
    c = groups * cpg
    net = _conv(b, c, c, 3, res, groups)
    base = 2 * b * c * res * res * cpg * 9 / PEAK
    fixed = 2 * LAUNCH + CONV  # the convolution's and its reorder's dispatch, oneDNN's fixed cost
    assert _latency(net, _cpu(block)) - fixed == pytest.approx(base * factor, rel=1e-9)


def test_first_layer_input_channels_are_not_padded() -> None:
    """oneDNN's plain-source kernels take 3 input channels as they are (no padding to a 16-channel block)."""
    net = _conv(16, 3, 32, 3, 8)
    flops = 2 * 16 * 32 * 64 * 3 * 9
    assert _latency(net, _cpu()) - 2 * LAUNCH - CONV == pytest.approx(flops / PEAK, rel=1e-9)
    old = _latency(net, _cpu(conv_overhead_s=0)) - LAUNCH
    assert old == pytest.approx(flops * 16 / 3 / PEAK, rel=1e-9)  # profiles without the rule pad as before


def test_conv_overhead_and_threads_only_on_cpus() -> None:
    with pytest.raises(ValueError, match="conv_overhead_s .* only apply to kind 'cpu'"):
        _cpu().replace(kind="gpu", channel_block=1)
    with pytest.raises(ValueError, match="must be >= 0"):
        _cpu(conv_overhead_s=-1.0)
    p = _cpu()
    assert DeviceProfile.from_json(p.to_json()) == p


def test_calibrate_thread_clock_measures_onednn_overhead_and_probe_efficiencies() -> None:
    pytest.importorskip("torch")
    from dnnsat.torch import calibrate

    with pytest.raises(ValueError, match="clock must be 'wall' or 'thread'"):
        calibrate("cpu", threads=2, quick=True, clock="thread")
    p = calibrate("cpu", threads=1, quick=True, clock="thread")
    assert p.threads == 1 and p.conv_overhead_s > 0
    assert {"conv", "pointwise", "aten_conv", "grouped_conv", "pool"} <= set(p.probed) <= set(p.efficiency)
    assert all(v > 0 for v in p.efficiency.values())
    assert "thread CPU time" in p.sources["conv_overhead_s"]


def test_aten_convolutions_are_their_own_class_padded_like_a_matmul() -> None:
    """A 1x1 convolution below batch 16 on one thread runs ATen's GEMM (class ``aten_conv``, both channel
    counts padded, no oneDNN reorder or overhead); at batch 16 it is oneDNN's ``pointwise``."""
    from dnnsat.cost.latency import latency_model

    p = _cpu().replace(efficiency={"compute": 1.0, "memory": 1.0, "aten_conv": 0.5, "pointwise": 2.0})
    net = _conv(8, 24, 24, 1, 4)
    flops = 2 * 8 * 24 * 16 * 24
    assert _latency(net, p) - LAUNCH == pytest.approx(flops * (32 / 24) ** 2 / (0.5 * PEAK), rel=1e-9)
    assert "aten_conv" in latency_model(net, None, p).classes
    net = _conv(16, 24, 24, 1, 4)
    want = 2 * 16 * 24 * 16 * 24 * (32 / 24) ** 2 / (2.0 * PEAK) + 2 * LAUNCH + CONV
    assert _latency(net, p) == pytest.approx(want, rel=1e-9)
    assert "aten_conv" not in latency_model(net, None, p).classes


def test_probed_classes_round_trip_and_need_a_factor() -> None:
    p = _cpu().replace(probed=("grouped_conv",))
    assert DeviceProfile.from_json(p.to_json()) == p
    with pytest.raises(ValueError, match="probed .* no factor in efficiency"):
        _cpu().replace(probed=("norm",))
