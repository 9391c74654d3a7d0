"""Measure the local device: inference latency of a module, and a device profile from micro-benchmarks."""

from __future__ import annotations

import datetime
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import torch

from ..cost import DeviceProfile, detect_cpu_backend

__all__ = ["calibrate", "measure_latency"]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _median_time(
    fn: Callable[[], Any],
    repeats: int,
    warmup: int,
    device: torch.device,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    for _ in range(warmup):
        fn()
    _sync(device)
    times = []
    for _ in range(repeats):
        start = clock()
        fn()
        _sync(device)
        times.append(clock() - start)
    return statistics.median(times)


def _device_of(module: torch.nn.Module, inputs: Sequence[Any]) -> torch.device:
    for t in (*module.parameters(), *inputs):
        if isinstance(t, torch.Tensor):
            return t.device
    return torch.device("cpu")


def measure_latency(
    module: torch.nn.Module,
    inputs: Sequence[Any],
    repeats: int = 10,
    warmup: int = 2,
    threads: int | None = 1,
    clock: str = "wall",
) -> float:
    """Median time (seconds) of ``module(*inputs)`` in eval mode under ``torch.inference_mode``.

    ``threads``: ``torch.set_num_threads`` during the measurement (restored afterwards; ``None`` keeps
    the current setting). ``warmup`` untimed calls first; CUDA work is synchronised before each reading.
    ``clock``: ``"wall"`` (``time.perf_counter``) or ``"thread"`` (this thread's CPU time: with one
    torch thread on the CPU, the latency an idle core would show even on a busy shared machine).
    """
    if repeats < 1 or warmup < 0:
        raise ValueError(f"measure_latency: repeats must be >= 1 and warmup >= 0, got {repeats}, {warmup}")
    clocks = {"wall": time.perf_counter, "thread": time.thread_time}
    if clock not in clocks:
        raise ValueError(f"measure_latency: clock must be 'wall' or 'thread', got {clock!r}")
    device = _device_of(module, inputs)
    if clock == "thread" and (device.type != "cpu" or threads != 1):
        raise ValueError("measure_latency: clock='thread' measures one CPU thread: use threads=1 on the CPU")
    previous = torch.get_num_threads()
    was_training = module.training
    module.eval()
    try:
        if threads is not None:
            torch.set_num_threads(threads)
        with torch.inference_mode():
            return _median_time(lambda: module(*inputs), repeats, warmup, device, clocks[clock])
    finally:
        torch.set_num_threads(previous)
        module.train(was_training)


def _host_memory_bytes() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0


def _cache(
    dev: torch.device, repeats: int, dram_bandwidth: float, clock: Callable[[], float] = time.perf_counter
) -> tuple[int, float, str]:
    """(cache bytes, cache bandwidth, note): the largest copy working set (2 x 256 KiB ... 2 x 16 MiB) that
    still moves at >= 1.5x the DRAM bandwidth, and the median bandwidth of those sizes."""
    fast: list[tuple[int, float]] = []
    for size in (2**k for k in range(18, 25)):
        src = torch.randn(size // 4, device=dev)
        dst = torch.empty_like(src)
        calls = max(1, 2**24 // size)  # about 16 MiB per timing: amortises the per-call overhead

        def loop(src: torch.Tensor = src, dst: torch.Tensor = dst, calls: int = calls) -> None:
            for _ in range(calls):
                dst.copy_(src)

        bw = 2 * size / (_median_time(loop, repeats, 1, dev, clock) / calls)
        if bw < 1.5 * dram_bandwidth:
            break
        fast.append((2 * size, bw))
    if not fast:
        return 0, 0.0, "no copy size up to 2 x 16 MiB beats 1.5x the DRAM bandwidth: caches not modelled"
    note = f"Tensor.copy_ working sets {fast[0][0] >> 10}-{fast[-1][0] >> 10} KiB at >= 1.5x DRAM bandwidth"
    return fast[-1][0], statistics.median(bw for _, bw in fast), note


def _outside_allocator(dev: torch.device) -> int:
    """Bytes of device memory in use that PyTorch's caching allocator did not reserve."""
    torch.cuda.synchronize(dev)
    free, total = torch.cuda.mem_get_info(dev)
    return int(total - free - torch.cuda.memory_reserved(dev))


def _gpu_footprint(dev: torch.device) -> tuple[int, dict[str, int], int]:
    """(context bytes, bytes per library, cuBLAS workspace bytes) of ``dev``, measured with
    ``torch.cuda.mem_get_info`` around the first use of each stack: the CUDA context (a 1-element
    tensor), cuBLAS (an fp32 ``mm``), cuDNN (a conv2d and a batch norm, forward and backward) and
    attention kernels (fp16 and fp32 ``scaled_dot_product_attention``, softmax, layer norm); each is
    what the process holds outside the caching allocator afterwards, less what it held before. The
    cuBLAS workspace is what the allocator keeps allocated after the ``mm``'s tensors are freed.
    Meaningful in a fresh process only: a stack used earlier measures 0."""
    f = torch.nn.functional
    torch.zeros(1, device=dev)
    context = _outside_allocator(dev)
    before = torch.cuda.memory_allocated(dev)
    a = torch.randn(64, 64, device=dev)
    torch.mm(a, a)
    del a
    workspace = max(0, torch.cuda.memory_allocated(dev) - before)
    cublas = _outside_allocator(dev)
    x = torch.randn(2, 3, 16, 16, device=dev, requires_grad=True)
    w = torch.randn(4, 3, 3, 3, device=dev, requires_grad=True)
    y = f.batch_norm(f.conv2d(x, w), None, None, training=True)
    y.sum().backward()
    del x, w, y
    cudnn = _outside_allocator(dev)
    for dtype in (torch.float16, torch.float32):
        q = torch.randn(1, 2, 16, 64, device=dev, dtype=dtype)
        f.scaled_dot_product_attention(q, q, q)
        f.layer_norm(torch.softmax(q, -1), (64,))
    del q
    attention = _outside_allocator(dev)
    libraries = {"cublas": cublas - context, "cudnn": cudnn - cublas, "attention": attention - cudnn}
    return context, {k: max(0, v) for k, v in libraries.items()}, workspace


def _conv_overhead(repeats: int, launch: float, clock: Callable[[], float]) -> float:
    """Seconds a convolution through oneDNN costs beyond two op dispatches (its own and its reorders'),
    from a 1x1 convolution of 16 channels on a 16 x 16 x 1 x 1 input (negligible work; batch 16 runs
    oneDNN at any thread count)."""
    conv = torch.nn.Conv2d(16, 16, 1, bias=False).eval()
    x = torch.randn(16, 16, 1, 1)
    calls = 50

    def loop() -> None:
        for _ in range(calls):
            conv(x)

    with torch.inference_mode():
        return max(_median_time(loop, repeats, 1, torch.device("cpu"), clock) / calls - 2 * launch, 0.0)


def _probes() -> list[tuple[str, torch.nn.Module, tuple[int, ...], Callable[[Any, Any], Any]]]:
    """(op class, module, input shape, the same op on a dnnsat Network) for the CPU class probes."""
    nn = torch.nn
    return [
        (
            "conv",
            nn.Conv2d(64, 64, 3, padding=1, bias=False),
            (8, 64, 16, 16),
            lambda n, x: n.conv2d(x, 64, 3, padding=1, bias=False),
        ),
        (
            "pointwise",
            nn.Conv2d(128, 128, 1, bias=False),
            (16, 128, 8, 8),
            lambda n, x: n.conv2d(x, 128, 1, bias=False),
        ),
        (
            "aten_conv",
            nn.Conv2d(128, 128, 1, bias=False),
            (1, 128, 16, 16),
            lambda n, x: n.conv2d(x, 128, 1, bias=False),
        ),
        (
            "grouped_conv",
            nn.Conv2d(128, 128, 3, padding=1, groups=8, bias=False),
            (8, 128, 16, 16),
            lambda n, x: n.conv2d(x, 128, 3, padding=1, groups=8, bias=False),
        ),
        ("norm", nn.BatchNorm2d(64), (8, 64, 32, 32), lambda n, x: n.batchnorm(x)),
        ("pool", nn.MaxPool2d(2), (8, 64, 32, 32), lambda n, x: n.maxpool2d(x, 2)),
    ]


def _class_efficiencies(profile: DeviceProfile, repeats: int, clock: Callable[[], float]) -> dict[str, float]:
    """Compute efficiency per op class (CPU) at which the latency model reproduces the measured time of
    one probe op of that class (:func:`_probes`); classes whose probe the model finds memory-bound keep
    their defaults."""
    from ..cost.latency import latency_model
    from ..expr import compile_scalar
    from ..graph import Network

    found: dict[str, float] = {}
    for cls, module, shape, build in _probes():
        x = torch.randn(*shape)
        module.eval()
        with torch.inference_mode():
            seconds = _median_time(partial(module, x), repeats, 2, torch.device("cpu"), clock)
        net = Network(f"probe-{cls}")
        net.output(build(net, net.input(shape)))
        model = latency_model(net, None, profile)
        fn = compile_scalar([model.expr])
        base = {"launch_overhead_s": profile.launch_overhead_s, "memory": profile.efficiency["memory"]}
        base.update({c: 1.0 for c in model.classes})

        predict = lambda eff: float(fn(model.parameter_env({**base, cls: eff}))[0])  # noqa: B023, E731
        low, high = 1e-3, 1e3  # predict() falls as eff grows: bisect in log space
        if not predict(high) < seconds < predict(low):
            continue
        for _ in range(50):
            mid = (low * high) ** 0.5
            low, high = (mid, high) if predict(mid) > seconds else (low, mid)
        found[cls] = (low * high) ** 0.5
    return found


def calibrate(
    device: str = "cpu",
    threads: int | None = 1,
    quick: bool = False,
    name: str | None = None,
    clock: str = "wall",
) -> DeviceProfile:
    """A :class:`DeviceProfile` of the local ``device`` (``"cpu"`` or ``"cuda[:i]"``) from micro-benchmarks.

    * ``peak_flops``: best FLOP/s of square ``torch.mm`` (fp32, and fp16/bf16 on CUDA) - what GEMM
      reaches, so the ``compute`` efficiency is 1 for GEMM-shaped ops;
    * ``memory_bandwidth``: bytes read + written per second by ``Tensor.copy_`` of a large buffer;
    * ``launch_overhead_s``: time per call of a tiny op through an ``nn.Module`` (host dispatch);
    * ``context_bytes``, ``libraries``, ``cublas_workspace_bytes`` (CUDA): device memory outside
      PyTorch's caching allocator after initialisation and after the first use of cuBLAS, cuDNN and
      attention kernels, and the cuBLAS workspace PyTorch allocates (:func:`_gpu_footprint`; run it in
      a fresh process, before anything else touches the GPU);
    * ``isa``/``channel_block`` (CPU): the oneDNN ISA PyTorch's kernels use here and its channel block
      (16 AVX-512, 8 AVX2), detected from the CPU flags within ``ONEDNN_MAX_CPU_ISA``
      (:func:`~dnnsat.cost.detect_cpu_backend`);
    * ``cache_bytes``/``cache_bandwidth`` (CPU): the largest copy working set that runs clearly faster
      than DRAM, and its bandwidth;
    * ``conv_overhead_s``/``threads`` (CPU): the fixed cost of a convolution through oneDNN beyond two op
      dispatches (a 1x1 convolution on a 1x1 input), and the thread count (``threads``, else PyTorch's).

    ``threads``: CPU threads during the benchmarks (the latency model's profile is only valid for
    that thread count). ``quick`` uses smaller sizes and fewer repeats (a few seconds). ``clock``:
    ``"wall"`` (``time.perf_counter``) or ``"thread"`` (this thread's CPU time: with ``threads=1`` on the
    CPU, what an idle core would show even on a busy shared machine; see :func:`measure_latency`).
    """
    if not (device == "cpu" or device.split(":")[0] == "cuda"):
        raise ValueError(f"calibrate: device must be 'cpu' or 'cuda[:i]', got {device!r}")
    clocks = {"wall": time.perf_counter, "thread": time.thread_time}
    if clock not in clocks or (clock == "thread" and (device != "cpu" or threads != 1)):
        raise ValueError(
            f"calibrate: clock must be 'wall' or 'thread' (the latter with device='cpu', threads=1), got "
            f"{clock!r} with device={device!r}, threads={threads!r}"
        )
    timer = clocks[clock]
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"calibrate: device {device!r} requested but CUDA is not available")
    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    context, libraries, workspace = _gpu_footprint(dev) if dev.type == "cuda" else (0, {}, 0)
    try:
        repeats = 3 if quick else 7
        sizes = (256, 512) if quick else (512, 1024, 2048)
        if dev.type == "cuda":
            sizes = (1024, 4096) if quick else (2048, 4096, 8192)
        dtypes = {"fp32": torch.float32}
        if dev.type == "cuda":
            dtypes.update({"fp16_tensor": torch.float16, "bf16_tensor": torch.bfloat16})
        peaks: dict[str, float] = {}
        for key, dtype in dtypes.items():
            best = 0.0
            for n in sizes:
                a = torch.randn(n, n, device=dev, dtype=dtype)
                b = torch.randn(n, n, device=dev, dtype=dtype)
                t = _median_time(partial(torch.mm, a, b), repeats, 1, dev, timer)
                best = max(best, 2 * n**3 / t)
            peaks[key] = best
        numel = (4 if quick else 16) * 2**20 if dev.type == "cpu" else 64 * 2**20
        src = torch.randn(numel, device=dev)
        dst = torch.empty_like(src)
        t_copy = _median_time(lambda: dst.copy_(src), repeats, 1, dev, timer)
        bandwidth = 2 * numel * 4 / t_copy
        cache_bytes, cache_bandwidth, cache_note = (
            _cache(dev, repeats, bandwidth, timer) if dev.type == "cpu" else (0, 0.0, "not modelled on CUDA")
        )
        tiny = torch.nn.ReLU()
        x = torch.randn(1, device=dev)
        calls = 200 if quick else 2000

        def loop() -> None:
            for _ in range(calls):
                tiny(x)

        with torch.inference_mode():
            launch = _median_time(loop, repeats, 1, dev, timer) / calls
        conv_overhead = _conv_overhead(repeats, launch, timer) if dev.type == "cpu" else 0.0
        used_threads = torch.get_num_threads() if dev.type == "cpu" else 0
        if dev.type == "cuda":
            memory_bytes = int(torch.cuda.mem_get_info(dev)[1])
            label = torch.cuda.get_device_name(dev)
        else:
            memory_bytes = _host_memory_bytes()
            label = platform.processor() or platform.machine()
        backend = detect_cpu_backend() if dev.type == "cpu" else None
        efficiency = {"compute": 1.0, "memory": 1.0}
        probed: dict[str, float] = {}
        if backend is not None:  # class efficiencies at which the model reproduces probe ops
            probe = DeviceProfile(
                "probe",
                "cpu",
                peaks,
                bandwidth,
                memory_bytes,
                launch,
                channel_block=backend.channel_block,
                isa=backend.isa,
                cache_bytes=cache_bytes,
                cache_bandwidth=cache_bandwidth,
                conv_overhead_s=conv_overhead,
                threads=used_threads,
                efficiency=efficiency,
            )
            probed = _class_efficiencies(probe, repeats, timer)
            efficiency.update(probed)
    finally:
        torch.set_num_threads(previous)
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    how = (
        f"measured by dnnsat calibrate on {label}, {threads} thread(s), torch {torch.__version__}, {when}"
        + (", thread CPU time" if clock == "thread" else "")
    )
    return DeviceProfile(
        name=name or f"local-{dev.type}",
        kind="gpu" if dev.type == "cuda" else "cpu",
        peak_flops=peaks,
        memory_bandwidth=bandwidth,
        memory_bytes=memory_bytes,
        launch_overhead_s=launch,
        context_bytes=context,
        libraries=libraries,
        cublas_workspace_bytes=workspace,
        channel_block=backend.channel_block if backend else 1,
        isa=backend.isa if backend else "",
        cache_bytes=cache_bytes,
        cache_bandwidth=cache_bandwidth,
        conv_overhead_s=conv_overhead,
        threads=used_threads,
        efficiency=efficiency,
        probed=tuple(probed),
        sources={
            "peak_flops": f"{how}: best torch.mm FLOP/s over n in {list(sizes)}",
            "memory_bandwidth": f"{how}: Tensor.copy_ of {numel * 4 / 2**20:.0f} MiB, read + write bytes",
            "memory_bytes": f"{how}: "
            + ("torch.cuda.mem_get_info total" if dev.type == "cuda" else "host RAM"),
            "launch_overhead_s": f"{how}: per call of nn.ReLU on a 1-element tensor",
            "context_bytes": f"{how}: "
            + ("mem_get_info used - reserved after CUDA init" if dev.type == "cuda" else "none on CPU"),
            "libraries": f"{how}: "
            + (
                "mem_get_info used - reserved, growth at the first mm (cublas), conv2d + batch_norm "
                "(cudnn), scaled_dot_product_attention/softmax/layer_norm (attention)"
                if dev.type == "cuda"
                else "no GPU libraries on a CPU"
            ),
            "cublas_workspace_bytes": f"{how}: "
            + ("memory_allocated kept after the first mm" if dev.type == "cuda" else "no cuBLAS on a CPU"),
            "channel_block": f"{how}: "
            + (
                f"oneDNN ISA {backend.isa or 'none'} ({backend.source}), ATen {backend.aten}"
                if backend
                else "no padding modelled on CUDA"
            ),
            "cache_bytes": f"{how}: {cache_note}",
            "conv_overhead_s": f"{how}: "
            + (
                "per call of a 1x1 nn.Conv2d (16 channels, 16 x 16 x 1 x 1 input) through oneDNN, less two "
                "op dispatches"
                if dev.type == "cpu"
                else "not modelled on CUDA"
            ),
            "efficiency": f"{how}: compute and memory 1 by construction (peaks are measured, not "
            "spec-sheet)"
            + (
                f"; {', '.join(sorted(set(efficiency) - {'compute', 'memory'}))}: the factors at which the "
                "latency model reproduces one probe op each (3x3, 1x1 and grouped conv2d through oneDNN, a "
                "batch-1 1x1 conv2d through ATen, batch norm, max pool)"
                if dev.type == "cpu"
                else ""
            ),
        },
        description=f"local {dev.type} ({label})",
    )
