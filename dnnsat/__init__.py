"""dnnsat: prune AutoML search spaces for deep learning before any trial runs.

Public API: spaces (:class:`Space`, :class:`Int`, :class:`Float`, :class:`Categorical`), symbolic
expressions (:mod:`dnnsat.expr`), :class:`Problem` and its results, symbolic networks
(:class:`Network`), budgets and device profiles (:class:`Budget`, :func:`get_device`), and ready
problems in :mod:`dnnsat.zoo`. Adapters live in ``dnnsat.integrations.optuna`` and
``dnnsat.integrations.nni``.
"""

from . import expr, zoo
from .cost import Budget, DeviceProfile, UnknownDeviceError, fit_device, get_device, list_devices
from .expr import Const, Expr, Var, ceildiv, maximum, minimum, sum_, where
from .graph import GraphError, Network, Tensor
from .problem import (
    Constraint,
    Estimate,
    Explanation,
    InfeasibleSpaceError,
    OpaqueConstraintWarning,
    Optimum,
    Problem,
    Verdict,
    Violation,
)
from .space import Categorical, Float, Int, Param, Space, SpaceError
from .units import UnitError, format_quantity, parse_quantity

__all__ = [
    "Budget",
    "Categorical",
    "Const",
    "Constraint",
    "DeviceProfile",
    "Estimate",
    "Explanation",
    "Expr",
    "Float",
    "GraphError",
    "InfeasibleSpaceError",
    "Int",
    "Network",
    "OpaqueConstraintWarning",
    "Optimum",
    "Param",
    "Problem",
    "Space",
    "SpaceError",
    "Tensor",
    "UnitError",
    "UnknownDeviceError",
    "Var",
    "Verdict",
    "Violation",
    "ceildiv",
    "expr",
    "fit_device",
    "format_quantity",
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
