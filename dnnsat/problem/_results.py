"""What a :class:`~dnnsat.Problem` answers and raises: constraints, verdicts, violations, estimates,
explanations, optima, and its error and warning classes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..expr import Expr, topological
from ._format import _fmt

__all__ = [
    "Constraint",
    "Violation",
    "Verdict",
    "Estimate",
    "Explanation",
    "Optimum",
    "InfeasibleSpaceError",
    "OpaqueConstraintWarning",
    "TimeLimitError",
    "PartialResultWarning",
]


class InfeasibleSpaceError(RuntimeError):
    """No configuration satisfies the constraints; ``core`` names constraints that conflict."""

    def __init__(self, message: str, core: list[str] | None = None) -> None:
        super().__init__(message)
        self.core = list(core or [])


class TimeLimitError(TimeoutError):
    """A query did not finish within its time limit (``max_seconds``, each query has a default).

    ``limit`` is that limit in seconds; ``estimate`` (an :class:`Estimate`, or None) what is known of the
    count when the query counts; ``partial`` what the query had produced when it stopped (sampled or
    enumerated configurations), flagged as partial by being here rather than returned.
    """

    def __init__(
        self, message: str, limit: float, estimate: Estimate | None = None, partial: list[Any] | None = None
    ) -> None:
        super().__init__(message)
        self.limit = limit
        self.estimate = estimate
        self.partial = list(partial or [])


class PartialResultWarning(UserWarning):
    """A query stopped at its time limit and returned a sound but partial answer (e.g. ``prune`` keeps
    the values it could not decide in time)."""


class OpaqueConstraintWarning(UserWarning):
    """A Python predicate constraint: checked per configuration only, never used for pruning bounds."""


@dataclass(frozen=True)
class Constraint:
    """A named requirement. ``lhs sense limit`` when it is a comparison with a constant."""

    name: str
    expr: Expr | None
    lhs: Expr | None = None
    sense: str | None = None  # "<=", "<", ">=", ">", "==" or None
    limit: float | None = None
    predicate: Callable[[dict[str, Any]], bool] | None = None
    uses: tuple[str, ...] | None = None  # parameters a predicate reads (None: possibly all of them)

    @property
    def opaque(self) -> bool:
        return self.predicate is not None

    def __str__(self) -> str:
        if self.expr is None:
            return f"{self.name}: <python predicate>"
        size = len(topological([self.expr]))
        if size > 200:  # printed as a tree, a large shared DAG would be unreadable (or exponential)
            lhs = f"<{self.name} cost, {size} expression nodes>"
            limit = _fmt(self.limit, self.name)
            return f"{self.name}: {lhs} {self.sense} {limit}" if self.limit is not None else lhs
        return f"{self.name}: {self.expr}"


@dataclass(frozen=True)
class Violation:
    """A violated constraint: ``value`` (of its left-hand side) against ``limit``, over by ``excess``."""

    name: str
    value: float | None
    limit: float | None
    excess: float | None

    def __str__(self) -> str:
        if self.value is None:
            return f"{self.name} is violated"
        rel = f" ({self.excess / abs(self.limit):+.1%})" if self.limit and self.excess is not None else ""
        value, limit, excess = (_fmt(x, self.name) for x in (self.value, self.limit, self.excess))
        return f"{self.name} = {value} exceeds the limit {limit} by {excess}{rel}"


@dataclass(frozen=True)
class Verdict:
    feasible: bool
    violations: list[Violation]
    costs: dict[str, float]

    def __bool__(self) -> bool:
        return self.feasible


@dataclass(frozen=True)
class Estimate:
    """An estimated count with a 95 % confidence interval (``low == high == value`` when exact)."""

    value: float
    low: float
    high: float
    exact: bool = False


@dataclass(frozen=True)
class Explanation:
    """Why a config is infeasible: ``core`` alone admits no feasible completion."""

    core: dict[str, Any]
    constraints: list[str]
    sentence: str

    def __str__(self) -> str:
        return self.sentence


@dataclass(frozen=True)
class Optimum:
    config: dict[str, Any]
    value: float
    proven: bool = True
