"""PyTorch bridge: materialize a symbolic network, measure a real module, audit the cost model.

Importing this package imports torch; the rest of dnnsat does not.
"""

from ._audit import AuditReport, Checker, CostError, audit, audit_table, random_configs
from ._materialize import GraphModule, concretize, example_inputs, resolve_network, to_torch
from ._measure import Measurement, measure

__all__ = [
    "AuditReport",
    "Checker",
    "CostError",
    "GraphModule",
    "Measurement",
    "audit",
    "audit_table",
    "concretize",
    "example_inputs",
    "measure",
    "random_configs",
    "resolve_network",
    "to_torch",
]
