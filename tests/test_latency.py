"""Latency model: roofline arithmetic on hand-checked networks, GPU overlap, gating, dtype, real PyTorch."""

from __future__ import annotations

import pytest

from dnnsat import zoo
from dnnsat.cost import Budget, DeviceProfile, fit_device, get_device
from dnnsat.cost.latency import CLASS_SCALE, latency_expressions
from dnnsat.expr import Var, compile_scalar
from dnnsat.graph import Network, encode_config
from dnnsat.space import Categorical, Space

PEAK, BW, LAUNCH, EC, EM = 1e9, 2e9, 1e-6, 0.5, 0.25


def _profile(kind: str) -> DeviceProfile:
    return DeviceProfile(
        name="toy",
        kind=kind,
        peak_flops={"fp32": PEAK, "fp16_tensor": 4 * PEAK},
        memory_bandwidth=BW,
        memory_bytes=2**30,
        launch_overhead_s=LAUNCH,
        efficiency={"compute": EC, "memory": EM},
    )


def _linear_relu() -> Network:
    net = Network()
    x = net.input((Var("b"), 64))
    return net.output(net.relu(net.linear(x, 32)))


def _value(e, **env):  # type: ignore[no-untyped-def]
    return compile_scalar([e])(env)[0]


def _op_times(
    b: int, elem: int = 4, peak: float = PEAK, cache: tuple[int, float] = (0, 0.0)
) -> tuple[float, float]:
    """Hand roofline of linear(64 -> 32, bias) and relu on (b, 64), seconds (launch excluded)."""
    lin_flops = 2 * b * 64 * 32
    lin_bytes = elem * (b * 64 + b * 32) + elem * (64 * 32 + 32)
    relu_bytes = elem * 2 * b * 32
    bw_lin, bw_relu = (cache[1] if n <= cache[0] else BW for n in (lin_bytes, relu_bytes))
    t_lin = max(lin_flops / (peak * EC), lin_bytes / (bw_lin * EM))
    t_relu = max(b * 32 / (peak * EC * CLASS_SCALE["elementwise"]), relu_bytes / (bw_relu * EM))
    return t_lin, t_relu


@pytest.mark.parametrize("b", [1, 4, 4096])
def test_cpu_roofline_sums_ops_and_launches(b: int) -> None:
    lat = latency_expressions(_linear_relu(), None, _profile("cpu"))["latency"]
    t_lin, t_relu = _op_times(b)
    assert _value(lat, b=b) == pytest.approx(t_lin + t_relu + 2 * LAUNCH, rel=1e-12)


def test_ops_that_fit_in_the_cache_move_at_cache_bandwidth() -> None:
    cache = (20_000, 50 * BW)
    lat = latency_expressions(
        _linear_relu(), None, _profile("cpu").replace(cache_bytes=cache[0], cache_bandwidth=cache[1])
    )
    for b in (1, 16, 4096):  # both ops fit in the cache, one, none
        assert _value(lat["latency"], b=b) == pytest.approx(
            sum(_op_times(b, cache=cache)) + 2 * LAUNCH, rel=1e-12
        )
    assert _op_times(1, cache=cache)[0] < _op_times(1)[0] / 2  # the weights-bound linear at batch 1


def test_gpu_overlaps_dispatch_with_kernels() -> None:
    lat = latency_expressions(_linear_relu(), None, _profile("gpu"))["latency"]
    for b in (1, 4096):
        t_lin, t_relu = _op_times(b)
        end1 = LAUNCH + t_lin  # kernel 1 starts when dispatched
        end2 = max(2 * LAUNCH, end1) + t_relu  # kernel 2 waits for its dispatch and for kernel 1
        assert _value(lat, b=b) == pytest.approx(end2, rel=1e-12)
    slow_host = latency_expressions(_linear_relu(), None, _profile("gpu").replace(launch_overhead_s=1e-3))
    assert _value(slow_host["latency"], b=1) == pytest.approx(
        2e-3 + _op_times(1)[1], rel=1e-12
    )  # dispatch-bound


def test_batch_and_dtype_awareness() -> None:
    net = _linear_relu()
    fp32 = latency_expressions(net, Budget(dtype="float32"), _profile("cpu"))["latency"]
    fp16 = latency_expressions(net, Budget(dtype="float16"), _profile("cpu"))["latency"]
    b = 1 << 16
    assert _value(fp32, b=b) > 100 * _value(fp32, b=1)
    t_lin, t_relu = _op_times(b, elem=2, peak=4 * PEAK)  # 2-byte elements, fp16 on the tensor-core peak
    assert _value(fp16, b=b) == pytest.approx(t_lin + t_relu + 2 * LAUNCH, rel=1e-12)


def test_inactive_ops_cost_nothing() -> None:
    space = Space({"op": Categorical(["relu", "linear"]), "depth": Categorical([0, 1, 2])})
    v = space.vars

    def build(vars_):  # type: ignore[no-untyped-def]
        net = Network()
        x = net.input((8, 64))
        x = net.choose(vars_.op, {"relu": net.relu, "linear": lambda y: net.linear(y, 64)}, x)
        x = net.repeat(vars_.depth, 2, lambda i, y: net.relu(y), x)
        return net.output(x)

    lat = latency_expressions(build(v), None, _profile("cpu"))["latency"]
    f = compile_scalar([lat])
    for op in ("relu", "linear"):
        for depth in (0, 1, 2):
            got = f(encode_config(space, {"op": op, "depth": depth}))[0]
            fixed = Network()
            x = fixed.input((8, 64))
            x = fixed.relu(x) if op == "relu" else fixed.linear(x, 64)
            for _ in range(depth):
                x = fixed.relu(x)
            want = _value(latency_expressions(fixed.output(x), None, _profile("cpu"))["latency"])
            assert got == pytest.approx(want, rel=1e-12), (op, depth)


def test_train_step_time_of_one_linear_layer() -> None:
    net = Network()
    net.output(net.linear(net.input((Var("b"), 64)), 32))
    p = _profile("cpu")
    for opt, (rw, kernels) in {"sgd": (3, 1), "adam": (7, 4)}.items():
        e = latency_expressions(net, Budget(optimizer=opt), p)["train_step_time"]
        b = 256
        flops, nbytes = 2 * b * 64 * 32, 4 * (b * 64 + b * 32 + 64 * 32 + 32)
        fwd = max(flops / (PEAK * EC), nbytes / (BW * EM)) + LAUNCH
        back = max(2 * flops / (PEAK * EC), 2 * nbytes / (BW * EM)) + 2 * LAUNCH
        step = rw * 4 * (64 * 32 + 32) / (BW * EM) + kernels * LAUNCH
        assert _value(e, b=b) == pytest.approx(fwd + back + step, rel=1e-12)


def test_default_device_is_the_generic_cpu_and_problem_costs_agree() -> None:
    net = _linear_relu()
    assert _value(latency_expressions(net)["latency"], b=8) == _value(
        latency_expressions(net, None, get_device("cpu"))["latency"], b=8
    )
    p = zoo.mlp(budget=Budget(device="t4"))
    cfg = p.sample(1, seed=0)[0]
    want = _value(
        latency_expressions(p.network, Budget(device="t4"), "t4")["latency"], **encode_config(p.space, cfg)
    )
    assert p.costs(cfg)["latency"] == pytest.approx(want)


def test_fitted_cpu_model_ranks_real_pytorch_latencies() -> None:
    """Calibrate + fit on 6 measured MLPs; the model orders 4 other measured MLPs (FLOPs 3-12x apart)."""
    pytest.importorskip("torch")
    from dnnsat.torch import calibrate, example_inputs, measure_latency, to_torch

    problem = zoo.mlp()
    configs = [
        {"batch_size": b, "depth": d, "width": w, "activation": "relu"}
        for b, d, w in [(16, 1, 64), (64, 2, 256), (128, 3, 512), (32, 1, 1024), (256, 2, 128), (64, 3, 1024),
                        (256, 1, 32), (16, 4, 512), (128, 2, 512), (256, 4, 1024)]
    ]  # fmt: skip
    modules = [to_torch(problem, cfg) for cfg in configs]
    inputs = [example_inputs(m, "cpu") for m in modules]
    rounds = [
        [measure_latency(m, x, repeats=3, warmup=1, threads=1) for m, x in zip(modules, inputs)]
        for _ in range(3)
    ]
    measured = [
        min(ts) for ts in zip(*rounds)
    ]  # interleaved rounds; the least disturbed one (shared machine)
    local = calibrate("cpu", threads=1, quick=True)
    fitted = fit_device(local, [((problem, c), t) for c, t in zip(configs[:6], measured[:6])])
    f = compile_scalar([latency_expressions(problem.network, None, fitted)["latency"]])
    pred = [f(encode_config(problem.space, c))[0] for c in configs[6:]]
    order = sorted(range(4), key=lambda i: measured[6 + i])
    assert sorted(range(4), key=lambda i: pred[i]) == order
    for p_, t in zip(pred, measured[6:]):
        assert 1 / 3 < p_ / t < 3.0


def test_channel_blocks_pad_gemm_work_and_attention_is_split() -> None:
    """With 16-lane blocks (AVX-512), 3 -> 20 channels run as 16 -> 32; depthwise pads the channels."""
    p = _profile("cpu").replace(memory_bandwidth=1e18, channel_block=16)  # compute-bound: no memory term
    net = Network()
    x = net.conv2d(net.input((1, 3, 8, 8)), 20, 3, padding=1, bias=False)
    net.output(net.depthwise(net.conv2d(x, 24, 1, bias=False), 3, padding=1, bias=False))
    conv = 2 * 64 * 20 * 3 * 9 * (16 / 3) * (32 / 20)
    pointwise = 2 * 64 * 24 * 20 * (32 / 20) * (32 / 24)
    depthwise = 2 * 64 * 24 * 9 * (32 / 24) / CLASS_SCALE["grouped_conv"]
    want = (conv + pointwise + depthwise) / (PEAK * EC) + 3 * LAUNCH
    assert _value(latency_expressions(net, None, p)["latency"]) == pytest.approx(want, rel=1e-12)

    net = Network()
    net.output(net.attention(net.input((1, 8, 32)), heads=4))  # head dim 8: half a 16-lane block
    proj = 2 * 8 * 32 * (4 * 32)  # q, k, v, out projections
    sdpa = 4 * 4 * 8 * 8 * 8 * (16 / 8)  # scores and values over 4 heads, padded head dim
    want = proj / (PEAK * EC) + 5 * LAUNCH + sdpa / (PEAK * EC * CLASS_SCALE["attention"]) + LAUNCH
    assert _value(latency_expressions(net, None, p)["latency"]) == pytest.approx(want, rel=1e-12)


def test_measure_latency_thread_clock_and_bad_arguments():
    torch = pytest.importorskip("torch")
    from dnnsat.torch import measure_latency

    m, x = torch.nn.Linear(256, 256), torch.randn(64, 256)
    wall = measure_latency(m, (x,), repeats=5, warmup=1)
    cpu = measure_latency(m, (x,), repeats=5, warmup=1, clock="thread")
    assert 0 < cpu < 20 * wall and m.training  # train mode is restored
    with pytest.raises(ValueError, match="clock must be 'wall' or 'thread'"):
        measure_latency(m, (x,), clock="cycles")
    with pytest.raises(ValueError, match="threads=1"):
        measure_latency(m, (x,), threads=2, clock="thread")


def _served_mlp(batch: object) -> Network:
    net = Network()
    x = net.input((batch, 256))
    return net.output(net.linear(net.relu(net.linear(x, 512)), 10))


def test_latency_batch_serves_one_image_while_memory_stays_at_the_training_batch() -> None:
    """``Budget(latency_batch=1)``: the latency (and its limit) is the forward of one image; memory and
    the training step stay at the space's batch."""
    import dnnsat as ds

    space = Space({"batch_size": Categorical([64, 256])})
    cfg = {"batch_size": 256}
    train = Budget(device="t4", optimizer="adam")
    served = Budget(device="t4", optimizer="adam", latency_batch=1)
    at_train = ds.Problem(space, model=lambda v: _served_mlp(v.batch_size), budget=train).costs(cfg)
    at_one = ds.Problem(space, model=lambda v: _served_mlp(v.batch_size), budget=served).costs(cfg)
    one = _value(latency_expressions(_served_mlp(1), served, "t4")["latency"])
    assert at_one["latency"] == pytest.approx(one)
    assert at_one["latency"] < at_train["latency"]
    for key in ("memory", "train_step_time", "flops"):
        assert at_one[key] == at_train[key]
    # the limit applies to the served batch: between the two latencies, only latency_batch=1 passes
    limit = (at_one["latency"] + at_train["latency"]) / 2
    assert ds.Problem(
        space,
        model=lambda v: _served_mlp(v.batch_size),
        budget=Budget(device="t4", latency=limit, latency_batch=1),
    ).check(cfg)
    assert not ds.Problem(
        space, model=lambda v: _served_mlp(v.batch_size), budget=Budget(device="t4", latency=limit)
    ).check(cfg)
    with pytest.raises(ValueError, match="latency_batch=1: the batch .* must be a space variable"):
        ds.Problem(space, model=lambda v: _served_mlp(32), budget=served)
    with pytest.raises(ValueError, match="latency_batch must be a positive int"):
        Budget(latency_batch=0)
    assert Budget.parse("latency=5ms,latency_batch=1,device=t4").latency_batch == 1
