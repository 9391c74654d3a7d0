"""Latency samples and per-op host/kernel figures of the GPU collection (issue 29), for gpu_collect.

:func:`latency` times ``module(*inputs)`` in ``eval()`` under ``torch.inference_mode``: ``warmup`` calls,
then ``repeats`` calls each between two CUDA events (``perf_counter`` on the CPU); the row holds the
median, the 10th and 90th percentiles (ms). ``how`` marks the serving style: ``eager``, ``cuda_graph``
(one captured forward replayed) or ``compile`` (``torch.compile``, default mode; compile seconds
recorded). :func:`op_profile` reads the profiler's CPU and CUDA timelines for one op repeated: host
time per call (Python call to return, launches asynchronous), kernels per call and their names,
device time per call.
"""

from __future__ import annotations

import csv
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["OPS", "latency", "nb201_archs", "op_profile"]


def _quantile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def latency(
    module: nn.Module, inputs: tuple[Any, ...], warmup: int, repeats: int, how: str = "eager"
) -> dict[str, Any]:
    """Latency row of ``module(*inputs)`` (see the module doc); ``how``: eager | cuda_graph | compile."""
    params = list(module.parameters())
    dev = params[0].device if params else inputs[0].device
    module.eval()
    extra: dict[str, Any] = {}
    fn: Callable[[], Any]
    with torch.inference_mode():
        if how == "compile":
            t0 = time.perf_counter()
            compiled = torch.compile(module)
            compiled(*inputs)
            extra["compile_seconds"] = round(time.perf_counter() - t0, 2)

            def fn() -> Any:
                return compiled(*inputs)
        elif how == "cuda_graph":
            side = torch.cuda.Stream(dev)
            side.wait_stream(torch.cuda.current_stream(dev))
            with torch.cuda.stream(side):
                for _ in range(3):
                    module(*inputs)
            torch.cuda.current_stream(dev).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                module(*inputs)
            fn = graph.replay
        else:

            def fn() -> Any:
                return module(*inputs)

        for _ in range(warmup):
            fn()
        times = _timed(fn, repeats, dev)
    return {
        "how": how,
        "median_ms": statistics.median(times),
        "p10_ms": _quantile(times, 0.1),
        "p90_ms": _quantile(times, 0.9),
        "repeats": repeats,
        "warmup": warmup,
        **extra,
    }


def _timed(fn: Callable[[], Any], repeats: int, dev: torch.device) -> list[float]:
    if dev.type != "cuda":
        out = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t0) * 1e3)
        return out
    events = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeats)
    ]
    torch.cuda.synchronize(dev)
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize(dev)
    return [start.elapsed_time(end) for start, end in events]


def nb201_archs(path: Path, n: int, seed: int) -> list[tuple[int, str]]:
    """``n`` ``(arch_index, arch_str)`` of NAS-Bench-201 drawn with ``seed`` from ``nb201.csv`` (the first
    two columns of the shared table, or a copy of them); [] when the file is absent."""
    if not path.is_file():
        return []
    with path.open() as f:
        rows = [(int(r["arch_index"]), r["arch_str"]) for r in csv.DictReader(f)]
    return sorted(random.Random(seed).sample(rows, min(n, len(rows))))


def _sdpa(backend: str) -> Callable[[torch.device], tuple[Callable[[], Any], str]]:
    def make(dev: torch.device) -> tuple[Callable[[], Any], str]:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        dtype = torch.float16 if dev.type == "cuda" else torch.float32
        q = torch.randn(8, 12, 256, 64, device=dev, dtype=dtype)

        def run() -> Any:
            with sdpa_kernel(getattr(SDPBackend, backend)):
                return F.scaled_dot_product_attention(q, q, q, is_causal=True)

        return run, f"sdpa {backend} fp16/fp32(cpu) (8, 12, 256, 64) causal"

    return make


def _module_op(
    build: Callable[[], nn.Module], shape: tuple[int, ...], what: str
) -> Callable[[torch.device], tuple[Callable[[], Any], str]]:
    def make(dev: torch.device) -> tuple[Callable[[], Any], str]:
        module = build().to(dev).eval()
        x = torch.randn(shape, device=dev)
        return (lambda: module(x)), f"{what} {tuple(shape)}"

    return make


def _aten_add(dev: torch.device) -> tuple[Callable[[], Any], str]:
    x = torch.randn(16, device=dev)
    return (lambda: torch.add(x, x)), "torch.add of 16 floats: ATen dispatch + one launch"


#: op -> make(device) -> (one call, description); each profiled by :func:`op_profile`
OPS: dict[str, Callable[[torch.device], tuple[Callable[[], Any], str]]] = {
    "module_call_identity": _module_op(nn.Identity, (16,), "nn.Identity module call"),
    "aten_add_tiny": _aten_add,
    "linear_bias": _module_op(lambda: nn.Linear(768, 768), (32, 768), "nn.Linear(768, 768)"),
    "conv_bias_relu": _module_op(
        lambda: nn.Sequential(nn.Conv2d(64, 64, 3, padding=1), nn.ReLU()), (1, 64, 56, 56), "Conv2d+ReLU"
    ),
    "batchnorm_eval": _module_op(lambda: nn.BatchNorm2d(64), (1, 64, 56, 56), "BatchNorm2d eval"),
    "layernorm": _module_op(lambda: nn.LayerNorm(768), (32, 128, 768), "LayerNorm(768)"),
    "sdpa_flash": _sdpa("FLASH_ATTENTION"),
    "sdpa_mem_efficient": _sdpa("EFFICIENT_ATTENTION"),
    "sdpa_math": _sdpa("MATH"),
    "sdpa_cudnn": _sdpa("CUDNN_ATTENTION"),
}


def op_profile(op: str, dev: torch.device, calls: int) -> dict[str, Any]:
    """Host time, kernels and device time per call of ``OPS[op]`` (``calls`` profiled calls after as many
    warm-ups, at most 5); an op this device lacks is recorded with its error."""
    from torch.profiler import ProfilerActivity, profile

    try:
        fn, what = OPS[op](dev)
        with torch.inference_mode():
            for _ in range(min(5, calls)):
                fn()
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            host = (time.perf_counter() - t0) / calls
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
            with profile(activities=activities) as prof:
                for _ in range(calls):
                    fn()
                if dev.type == "cuda":
                    torch.cuda.synchronize(dev)
    except Exception as err:  # e.g. an SDPA backend this GPU or dtype has no kernel for
        return {
            "op": op,
            "error": f"{type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''}",
        }
    kernels: dict[str, list[float]] = {}
    aten: dict[str, float] = {}
    for e in prof.events():
        if e.device_type.name == "CUDA":
            kernels.setdefault(e.name, []).append(e.device_time)
        elif e.name.startswith("aten::"):
            aten[e.name] = aten.get(e.name, 0.0) + e.self_cpu_time_total
    return {
        "op": op,
        "what": what,
        "calls": calls,
        "host_us_per_call": host * 1e6,
        "kernels_per_call": sum(len(v) for v in kernels.values()) / calls,
        "device_us_per_call": sum(sum(v) for v in kernels.values()) / calls,
        "kernels": {k: {"count": len(v), "us_median": statistics.median(v)} for k, v in kernels.items()},
        "aten_self_cpu_us_per_call": {
            k: v / calls for k, v in sorted(aten.items(), key=lambda kv: -kv[1])[:8]
        },
    }
