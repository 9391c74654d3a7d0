"""PyTorch bridge: materialize a symbolic network, measure a real module, audit the cost model.

Importing this package imports torch; the rest of dnnsat does not.
"""

from ._audit import AuditReport, Checker, CostError, audit, audit_table, random_configs
from ._calibrate import calibrate, measure_latency
from ._materialize import GraphModule, concretize, example_inputs, resolve_network, to_torch
from ._measure import Measurement, measure
from ._memory import MemoryMeasurement, MemoryTracker, peak_memory, storage_bytes, track_memory
from ._trace import MeasureError, TorchModel, TraceError, from_torch

__all__ = [
    "AuditReport",
    "Checker",
    "CostError",
    "GraphModule",
    "Measurement",
    "MeasureError",
    "MemoryMeasurement",
    "MemoryTracker",
    "audit",
    "audit_table",
    "calibrate",
    "concretize",
    "example_inputs",
    "from_torch",
    "measure",
    "measure_latency",
    "peak_memory",
    "random_configs",
    "resolve_network",
    "storage_bytes",
    "to_torch",
    "track_memory",
    "TorchModel",
    "TraceError",
]
