"""The values a tool accepts for one parameter (:class:`Within`), and comparing a tool's values with a
parameter's domain."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ..space import Param

__all__ = ["Within", "same_choice"]


@dataclass(frozen=True)
class Within:
    """The values a tool accepts for one parameter (e.g. an Optuna distribution or an NNI range).

    Either ``choices`` (a list of values), or a range ``[low, high]`` with an optional ``step`` grid
    from ``low`` (``integer``: whole numbers only). ``log`` is the scale of distances (None: the
    parameter's own).
    """

    low: float | None = None
    high: float | None = None
    step: float | None = None
    choices: tuple[Any, ...] | None = None
    log: bool | None = None
    integer: bool = False

    def contains(self, value: Any) -> bool:
        """Whether ``value`` (in the problem's domain) is one the tool accepts."""
        if self.choices is not None:
            return any(same_choice(c, value) for c in self.choices)
        if not _is_number(value) or self.low is None or self.high is None:
            return False
        v = float(value)
        if self.integer:
            return v == int(v) and self.low <= v <= self.high and (int(v) - self.low) % (self.step or 1) == 0
        tol = 1e-9 * max(1.0, abs(self.low), abs(self.high))
        if not self.low - tol <= v <= self.high + tol:
            return False
        if self.step is not None:
            k = round((v - self.low) / self.step)
            return abs(self.low + k * self.step - v) <= tol
        return True

    def overlaps(self, param: Param) -> bool:
        """Whether some value of the parameter's domain is one the tool accepts."""
        from ..space import Categorical

        if self.choices is not None:
            return any(_in_domain(param, c) for c in self.choices)
        if (isinstance(param, Categorical) and not param.numeric) or self.low is None or self.high is None:
            return False
        low, high = param.bounds()
        return bool(self.low <= high and low <= self.high)

    def candidates(self, spans: Sequence[tuple[float, float]], proposal: Any, log: bool) -> list[float]:
        """Accepted values inside the feasible intervals ``spans``, nearest to ``proposal`` first.

        Per interval: the proposal clamped into it and, as a fallback strictly inside, its middle
        (continuous range); the nearest grid point (stepped range); or every numeric choice inside
        it. Distances are taken in log scale for ``log``.
        """
        p = float(proposal) if _is_number(proposal) else None
        out: list[float] = []
        for a, b in spans:
            if self.choices is not None:
                out += [float(c) for c in self.choices if _is_number(c) and a <= float(c) <= b]
                continue
            if self.low is None or self.high is None:
                continue
            lo, hi = max(a, float(self.low)), min(b, float(self.high))
            if lo > hi:
                continue
            target = min(max(p, lo), hi) if p is not None else lo
            if self.step is None:
                out += [target, (lo + hi) / 2]
                continue
            k_lo = math.ceil((lo - self.low) / self.step - 1e-9)
            k_hi = math.floor((hi - self.low) / self.step + 1e-9)
            if k_lo <= k_hi:
                k = min(max(round((target - self.low) / self.step), k_lo), k_hi)
                out.append(float(self.low + k * self.step))
        if p is None:
            return out

        def distance(v: float) -> float:
            if log and v > 0 and p > 0:
                return abs(math.log(v) - math.log(p))
            return abs(v - p)

        return sorted(out, key=distance)

    @classmethod
    def of(cls, param: Param) -> Within:
        """The parameter's own domain."""
        from ..space import Categorical, Float, Int

        if isinstance(param, Int):
            return cls(param.low, param.high, param.step, log=param.log, integer=True)
        if isinstance(param, Float):
            return cls(param.low, param.high, param.step, log=param.log)
        assert isinstance(param, Categorical)
        return cls(choices=tuple(param.choices))


def _is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float | np.integer | np.floating)


def same_choice(choice: Any, value: Any) -> bool:
    """Whether ``value`` is ``choice`` (numbers by value, booleans and other objects by type and value)."""
    if isinstance(choice, bool) or isinstance(value, bool):
        return type(choice) is type(value) and choice == value
    if isinstance(choice, int | float) and _is_number(value):
        return bool(choice == value)
    return type(choice) is type(value) and bool(choice == value)


def _in_domain(param: Param, value: Any) -> bool:
    try:
        param.encode(value)
    except Exception:
        return False
    return True
