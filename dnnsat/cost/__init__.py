"""Cost models over symbolic networks: weights, FLOPs, memory and latency; the device catalog.

``attach(problem, model, budget)`` is what ``dnnsat.Problem(space, model=, budget=)`` calls.
This package never imports torch.
"""

from ._allocator import AllocatorConfig
from ._attach import attach, build_network, cost_expressions
from ._budget import DTYPE_BYTES, MIXED, OPTIMIZERS, Budget
from ._devices import (
    CPU_ISAS,
    CpuBackend,
    DeviceProfile,
    UnknownDeviceError,
    cpu_backend_from_flags,
    detect_cpu_backend,
    fit_device,
    get_device,
    list_devices,
)
from ._latency import latency_expressions
from ._memory import memory_expressions
from ._reserved import GpuMemory, ReservedMemory

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
    "attach",
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
