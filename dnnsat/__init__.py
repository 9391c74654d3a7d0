"""dnnsat: prune AutoML search spaces for deep learning before any trial runs."""

from .expr import Const, Expr, Var, ceildiv, maximum, minimum, sum_, where
from .space import Categorical, Float, Int, Param, Space, SpaceError

__all__ = [
    "Categorical",
    "Const",
    "Expr",
    "Float",
    "Int",
    "Param",
    "Space",
    "SpaceError",
    "Var",
    "ceildiv",
    "maximum",
    "minimum",
    "sum_",
    "where",
]
__version__ = "0.1.0"
