"""Cost models over symbolic networks: weights, FLOPs, memory and latency; the device catalog.

Layout: :mod:`dnnsat.cost.memory` (peak memory: the analytic peak, CPU kernel rules, the GPU's
footprint and caching allocator), :mod:`dnnsat.cost.latency` (a roofline per op by device kind, fitting
a profile to measurements), ``_devices`` (profiles and the ``devices.yaml`` catalog), ``_cpu_backend``
(which kernels PyTorch runs on a CPU), ``_budget`` (:class:`Budget`).

``attach(problem, model, budget)`` is what ``dnnsat.Problem(space, model=, budget=)`` calls.
This package never imports torch.
"""

from ._attach import build_network, cost_expressions
from ._budget import DTYPE_BYTES, MIXED, OPTIMIZERS, Budget
from ._cpu_backend import CPU_ISAS, CpuBackend, cpu_backend_from_flags, detect_cpu_backend
from ._devices import DeviceProfile, UnknownDeviceError, get_device, list_devices
from .latency import fit_device, latency_expressions
from .memory import AllocatorConfig, GpuMemory, ReservedMemory, memory_expressions

__all__ = [
    "AllocatorConfig",
    "Budget",
    "CPU_ISAS",
    "CpuBackend",
    "DTYPE_BYTES",
    "DeviceProfile",
    "MIXED",
    "OPTIMIZERS",
    "UnknownDeviceError",
    "build_network",
    "cost_expressions",
    "cpu_backend_from_flags",
    "detect_cpu_backend",
    "fit_device",
    "get_device",
    "GpuMemory",
    "latency_expressions",
    "list_devices",
    "memory_expressions",
    "ReservedMemory",
]
