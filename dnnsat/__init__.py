"""dnnsat: prune AutoML search spaces for deep learning before any trial runs.

Public API: spaces (:class:`Space`, :class:`Int`, :class:`Float`, :class:`Categorical`), symbolic
expressions (:mod:`dnnsat.expr`), :class:`Problem` and its results, symbolic networks
(:class:`Network`), budgets and device profiles (:class:`Budget`, :func:`get_device`), and ready
problems in :mod:`dnnsat.zoo`; :func:`from_torch` (your own PyTorch builder as a model; imports torch
on first use). Adapters live in ``dnnsat.integrations.optuna`` and
``dnnsat.integrations.nni``.
"""

from typing import Any

from . import expr, zoo
from .cost import (
    AllocatorConfig,
    Budget,
    DeviceProfile,
    GpuMemory,
    UnknownDeviceError,
    fit_device,
    get_device,
    list_devices,
)
from .expr import Const, Expr, Var, ceildiv, maximum, minimum, sum_, where
from .graph import GraphError, Network, Tensor
from .guard import Decision, Guard, GuardStats, Within
from .problem import (
    ArgumentError,
    Constraint,
    Estimate,
    Explanation,
    InfeasibleSpaceError,
    OpaqueConstraintWarning,
    Optimum,
    PartialResultWarning,
    Problem,
    TimeLimitError,
    Verdict,
    Violation,
)
from .space import Categorical, Float, Int, Param, Space, SpaceError
from .units import UnitError, format_quantity, parse_quantity

__all__ = [
    "AllocatorConfig",
    "ArgumentError",
    "Budget",
    "Categorical",
    "Const",
    "Constraint",
    "Decision",
    "DeviceProfile",
    "Estimate",
    "Explanation",
    "Expr",
    "Float",
    "GpuMemory",
    "GraphError",
    "Guard",
    "GuardStats",
    "InfeasibleSpaceError",
    "Int",
    "Network",
    "OpaqueConstraintWarning",
    "Optimum",
    "Param",
    "PartialResultWarning",
    "Problem",
    "Space",
    "SpaceError",
    "Tensor",
    "TimeLimitError",
    "UnitError",
    "UnknownDeviceError",
    "Var",
    "Verdict",
    "Violation",
    "Within",
    "ceildiv",
    "expr",
    "fit_device",
    "format_quantity",
    "from_torch",
    "get_device",
    "list_devices",
    "maximum",
    "minimum",
    "parse_quantity",
    "sum_",
    "where",
    "zoo",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """``ds.from_torch`` without importing torch when dnnsat is imported."""
    if name == "from_torch":
        from .torch import from_torch

        return from_torch
    raise AttributeError(f"module 'dnnsat' has no attribute {name!r}")
