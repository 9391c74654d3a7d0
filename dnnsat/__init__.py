"""dnnsat: prune AutoML search spaces for deep learning before any trial runs.

Public API: spaces (:class:`Space`, :class:`Int`, :class:`Float`, :class:`Categorical`), symbolic
expressions (:mod:`dnnsat.expr`), :class:`Problem` and its results, and ready problems in
:mod:`dnnsat.zoo`. Adapters live in ``dnnsat.integrations.optuna`` and ``dnnsat.integrations.nni``.
"""

from . import expr
from .expr import Const, Expr, Var, ceildiv, maximum, minimum, sum_, where
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

__all__ = [
    "Categorical",
    "Const",
    "Constraint",
    "Estimate",
    "Explanation",
    "Expr",
    "Float",
    "InfeasibleSpaceError",
    "Int",
    "OpaqueConstraintWarning",
    "Optimum",
    "Param",
    "Problem",
    "Space",
    "SpaceError",
    "Var",
    "Verdict",
    "Violation",
    "ceildiv",
    "expr",
    "maximum",
    "minimum",
    "sum_",
    "where",
]
__version__ = "0.1.0"
