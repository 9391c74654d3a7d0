"""Footprint per stack and cuBLAS workspaces per thread and stream, each in a fresh process (gpu_collect).

A child (``python -m benchmarks._gpu_footprint STACK``) imports torch only, creates the CUDA context
(a 1-element tensor), reads the device memory in use (``mem_get_info``: total - free), runs the stack's
first use (:data:`STACKS`), and prints one JSON line: the context and the stack as ``mem_get_info``
deltas less what the caching allocator reserved, the allocator's own numbers, the process's memory as
``nvidia-smi --query-compute-apps`` reports it (None where the driver hides it) and
``CUDA_MODULE_LOADING``. ``workspaces`` is the cuBLAS workspace experiment: an fp32 matmul on the main
thread, then on a side stream, then in a second thread, then a backward (run by autograd's device
thread), each as the growth of ``memory_allocated`` / ``memory_reserved`` it leaves behind; then
``torch._C._cuda_clearCublasWorkspaces`` and what that frees. On the CPU (a dry run) every stack runs on
the CPU and the device readings are None.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["ENV_RECORDED", "STACKS", "device_info", "run_stack", "stack_reading", "workspaces"]


def _matmul(dev: torch.device) -> None:
    a = torch.randn(256, 256, device=dev)
    torch.mm(a, a)


def _lt(dev: torch.device) -> None:
    """addmm with a 1-D bias: PyTorch's cublasLt path (gemm with a bias epilogue), fp32 and fp16."""
    for dtype in (torch.float32, torch.float16 if dev.type == "cuda" else torch.bfloat16):
        x = torch.randn(64, 128, device=dev, dtype=dtype)
        w = torch.randn(96, 128, device=dev, dtype=dtype)
        F.linear(x, w, torch.randn(96, device=dev, dtype=dtype))


def _cudnn(dev: torch.device) -> None:
    x = torch.randn(2, 3, 16, 16, device=dev, requires_grad=True)
    w = torch.randn(4, 3, 3, 3, device=dev, requires_grad=True)
    F.batch_norm(F.conv2d(x, w), None, None, training=True).sum().backward()


def _sdpa(backend: str) -> Callable[[torch.device], None]:
    def run(dev: torch.device) -> None:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        dtype = torch.float16 if dev.type == "cuda" else torch.float32
        q = torch.randn(2, 4, 128, 64, device=dev, dtype=dtype, requires_grad=True)
        with sdpa_kernel(getattr(SDPBackend, backend)):
            F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()

    return run


def _everything(dev: torch.device) -> None:
    errors = []
    for name, fn in STACKS.items():
        if name not in ("context", "all"):
            try:
                fn(dev)
            except Exception as err:  # one backend missing: the others still load
                errors.append(f"{name}: {type(err).__name__}")
    if errors:
        raise RuntimeError("; ".join(errors))


#: stack -> its first use (run after the context exists); "all": every stack in one process
STACKS: dict[str, Callable[[torch.device], None]] = {
    "context": lambda dev: None,
    "cublas": _matmul,
    "cublaslt": _lt,
    "cudnn": _cudnn,
    "sdpa_flash": _sdpa("FLASH_ATTENTION"),
    "sdpa_mem_efficient": _sdpa("EFFICIENT_ATTENTION"),
    "sdpa_math": _sdpa("MATH"),
    "sdpa_cudnn": _sdpa("CUDNN_ATTENTION"),
    "all": _everything,
}


def _smi_process_bytes() -> int | None:
    """This process's device memory as nvidia-smi reports it (None: not reported, or no nvidia-smi)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        pid, _, mib = line.partition(",")
        if pid.strip() == str(os.getpid()) and mib.strip().isdigit():
            return int(mib.strip()) * 2**20
    return None


def _nvml_used(dev: torch.device) -> int | None:
    """Device memory in use as NVML reports it (needs no CUDA context; None where unavailable)."""
    fn = getattr(torch.cuda, "device_memory_used", None)
    if dev.type != "cuda" or fn is None:
        return None
    try:
        return int(fn(dev.index or 0))
    except Exception:  # no NVML (pynvml missing, driver hides it)
        return None


def _reading(dev: torch.device) -> dict[str, int | None]:
    if dev.type != "cuda":
        return {"used": None, "reserved": None, "allocated": None, "nvml_used": None}
    torch.cuda.synchronize(dev)
    free, total = torch.cuda.mem_get_info(dev)
    return {
        "used": int(total - free),
        "reserved": torch.cuda.memory_reserved(dev),
        "allocated": torch.cuda.memory_allocated(dev),
        "nvml_used": _nvml_used(dev),
    }


def _delta(after: dict[str, int | None], before: dict[str, int | None], key: str) -> int | None:
    a, b = after[key], before[key]
    return None if a is None or b is None else a - b


def stack_reading(stack: str, dev: torch.device) -> dict[str, Any]:
    """Run ``stack``'s first use after the context on ``dev``; its footprint (bytes, see the module doc).

    ``context``: device memory in use after the context exists, less the allocator's reservation, less
    what NVML saw in use before it (other processes; None without NVML). Meaningful in a fresh process
    on an otherwise idle GPU: the collector runs these before it touches CUDA itself."""
    t0 = time.perf_counter()
    before_nvml = _nvml_used(dev)
    torch.zeros(1, device=dev)
    ctx = _reading(dev)
    error = None
    try:
        STACKS[stack](dev)
    except Exception as err:  # a backend this GPU or build lacks: recorded, not fatal
        error = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:300]
    after = _reading(dev)
    outside, grown = _delta(after, ctx, "used"), _delta(after, ctx, "reserved")
    context = None
    if ctx["used"] is not None and ctx["reserved"] is not None and before_nvml is not None:
        context = ctx["used"] - ctx["reserved"] - before_nvml
    return {
        "stack": stack,
        "device": dev.type,
        "cuda_module_loading": os.environ.get("CUDA_MODULE_LOADING"),
        "lazy_loading": _lazy_loading(),
        "used_before_context_nvml": before_nvml,
        "context": context,
        "context_used_minus_reserved": None if ctx["used"] is None else ctx["used"] - (ctx["reserved"] or 0),
        "stack_outside_allocator": None if outside is None or grown is None else outside - grown,
        "stack_reserved": grown,
        "stack_allocated": _delta(after, ctx, "allocated"),
        "used_total": after["used"],
        "nvml_used_total": after["nvml_used"],
        "nvidia_smi_process": _smi_process_bytes() if dev.type == "cuda" else None,
        "error": error,
        "seconds": round(time.perf_counter() - t0, 3),
    }


def _lazy_loading() -> bool | None:
    fn = getattr(torch._C, "_cuda_isLazyLoadingEnabled", None)  # not in every build
    try:
        return None if fn is None or not torch.cuda.is_available() else bool(fn())
    except RuntimeError:
        return None


def _grow(dev: torch.device, fn: Callable[[], Any]) -> dict[str, int | None]:
    before = _reading(dev)
    fn()
    after = _reading(dev)
    return {"allocated": _delta(after, before, "allocated"), "reserved": _delta(after, before, "reserved")}


def workspaces(dev: torch.device) -> dict[str, Any]:
    """cuBLAS workspace growth per thread and stream (see the module doc); bytes, None on the CPU."""
    torch.zeros(1, device=dev)
    a = torch.randn(512, 512, device=dev)
    out: dict[str, Any] = {"cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG")}
    out["main_thread"] = _grow(dev, lambda: torch.mm(a, a).sum().item())
    out["main_thread_again"] = _grow(dev, lambda: torch.mm(a, a).sum().item())
    if dev.type == "cuda":
        side = torch.cuda.Stream(dev)

        def on_side() -> None:
            side.wait_stream(torch.cuda.current_stream(dev))
            with torch.cuda.stream(side):
                torch.mm(a, a)
            torch.cuda.synchronize(dev)

        out["side_stream"] = _grow(dev, on_side)

    def in_thread() -> None:
        t = threading.Thread(target=lambda: torch.mm(a, a).sum().item())
        t.start()
        t.join()

    out["second_thread"] = _grow(dev, in_thread)
    w = torch.randn(512, 512, device=dev, requires_grad=True)
    out["backward"] = _grow(dev, lambda: torch.mm(a, w).sum().backward())
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if dev.type == "cuda" and clear is not None:
        out["after_clear"] = _grow(dev, clear)
    return out


def run_stack(stack: str, env: dict[str, str] | None = None, timeout: float = 120.0) -> dict[str, Any]:
    """``stack`` (or ``"workspaces"``) measured in a fresh Python process with ``env`` added to the
    environment; ``{"stack": ..., "error": ...}`` when the child fails."""
    cmd = [sys.executable, "-m", "benchmarks._gpu_footprint", stack]
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
        )
    except subprocess.TimeoutExpired:
        return {"stack": stack, "error": f"timed out after {timeout:.0f} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"stack": stack, "error": f"child exited {proc.returncode}: {tail[:300]}"}
    row: dict[str, Any] = json.loads(lines[-1])
    return row


def device_info() -> dict[str, Any]:
    """The header of a collection file: GPU, driver, torch, CUDA, cuDNN, TF32 defaults, environment."""
    info: dict[str, Any] = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "cuda_available": torch.cuda.is_available(),
        "allow_tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        "allow_tf32_cudnn": torch.backends.cudnn.allow_tf32,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "env": {k: os.environ.get(k) for k in ENV_RECORDED},
        "gpu": None,
        "driver": None,
    }
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        info["gpu"] = {
            "name": p.name,
            "total_memory": int(p.total_memory),
            "multi_processor_count": p.multi_processor_count,
            "capability": f"{p.major}.{p.minor}",
            "l2_cache_size": getattr(p, "L2_cache_size", None),
        }
        info["lazy_loading"] = _lazy_loading()
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            info["driver"] = (
                subprocess.run(
                    ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                    capture_output=True,
                    text=True,
                    timeout=20,
                )
                .stdout.split("\n")[0]
                .strip()
                or None
            )
    return info


#: environment variables that change what the GPU stacks take (recorded in the header and per stack)
ENV_RECORDED = (
    "CUDA_MODULE_LOADING",
    "CUBLAS_WORKSPACE_CONFIG",
    "CUBLASLT_WORKSPACE_SIZE",
    "PYTORCH_CUDA_ALLOC_CONF",
    "TORCH_CUDNN_V8_API_LRU_CACHE_LIMIT",
)


def _child(stack: str) -> None:
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    row: dict[str, Any]
    if stack == "device":
        row = device_info()
    elif stack == "workspaces":
        row = {
            "stack": stack,
            "cuda_module_loading": os.environ.get("CUDA_MODULE_LOADING"),
            **workspaces(dev),
        }
    else:
        row = stack_reading(stack, dev)
    print(json.dumps(row))


if __name__ == "__main__":
    _child(sys.argv[1])
