"""Problem = Space + constraints (+ a model's costs): the object every dnnsat operation takes, its answers
(verdicts, counts, samples, repairs, explanations, optima) and its errors."""

from ._args import MAX_REQUEST_BYTES as MAX_REQUEST_BYTES
from ._args import ArgumentError
from ._count import REJECTION_DRAWS as REJECTION_DRAWS
from ._count import SAMPLE_BOXES as SAMPLE_BOXES
from ._count import TIME_LIMIT as TIME_LIMIT
from ._feasible import ENUMERATE_FREE as ENUMERATE_FREE
from ._feasible import FLOAT_STEPS as FLOAT_STEPS
from ._feasible import FLOAT_TOL as FLOAT_TOL
from ._problem import BATCH_ROWS as BATCH_ROWS
from ._problem import Problem
from ._results import (
    Constraint,
    Estimate,
    Explanation,
    InfeasibleSpaceError,
    OpaqueConstraintWarning,
    Optimum,
    PartialResultWarning,
    TimeLimitError,
    Verdict,
    Violation,
)

__all__ = [
    "Problem",
    "Constraint",
    "Violation",
    "Verdict",
    "Estimate",
    "Explanation",
    "Optimum",
    "InfeasibleSpaceError",
    "ArgumentError",
    "OpaqueConstraintWarning",
    "TimeLimitError",
    "PartialResultWarning",
]
