"""Parameters of a search space: ``Int``, ``Float``, ``Categorical``, their conditions, and ``SpaceError``.

A finite parameter (``Int``, stepped ``Float``, ``Categorical``) has an ordered list of *encoded* values
that the solver works with: numbers sorted ascending for numeric parameters, or the choice index
``0..n-1`` for categoricals whose choices are not all numbers. ``Float`` without a step is continuous.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..expr import label_index

__all__ = ["MAX_FINITE_VALUES", "Categorical", "Condition", "Float", "Int", "Param", "SpaceError"]

MAX_FINITE_VALUES = 1_000_000  # a finite parameter with more values is a usage error


class SpaceError(ValueError):
    """A search space or a configuration is malformed; the message names the parameter and the fix."""


Condition = Mapping[str, Sequence[Any]]


def _check_condition(name: str, condition: Condition | None) -> dict[str, tuple[Any, ...]] | None:
    if condition is None:
        return None
    if not isinstance(condition, Mapping) or not condition:
        raise SpaceError(
            f"parameter {name!r}: condition must be a non-empty mapping {{parent: [values]}}, "
            f"got {condition!r}"
        )
    out: dict[str, tuple[Any, ...]] = {}
    for parent, values in condition.items():
        if isinstance(values, str | bytes) or not isinstance(values, Sequence | set | frozenset):
            values = (values,)
        if not values:
            raise SpaceError(f"parameter {name!r}: condition on {parent!r} lists no values")
        out[str(parent)] = tuple(values)
    return out


def _normalise_condition(condition: Any) -> Any:
    """Normalise a condition at construction; a malformed one is kept as given and rejected by ``Space``
    (which knows the parameter's name for the message)."""
    try:
        return _check_condition("?", condition)
    except SpaceError:
        return condition


def _repr_param(p: Param, args: list[str], defaults: dict[str, Any]) -> str:
    for attr, default in defaults.items():
        value = getattr(p, attr)
        if value != default or type(value) is not type(default):
            args.append(f"{attr}={value!r}")
    if p.condition:
        args.append(f"condition={ {k: list(v) for k, v in p.condition.items()}!r}")
    return f"{type(p).__name__}({', '.join(args)})"


@dataclass(frozen=True)
class Param:
    """Base class of parameters. ``condition`` maps parent names to the values that activate this one."""

    condition: Mapping[str, Sequence[Any]] | None = field(default=None, kw_only=True)

    @property
    def is_finite(self) -> bool:
        return True

    @property
    def sort(self) -> str:
        """Sort of the symbolic variable: ``"int"`` or ``"real"``."""
        return "int"

    @property
    def labels(self) -> tuple[Any, ...] | None:
        """Choices when the encoding is a choice index, else ``None``."""
        return None

    def values(self) -> tuple[Any, ...]:
        """Every user-facing value in encoded order (finite parameters only)."""
        raise NotImplementedError

    def encoded(self) -> np.ndarray:
        """Encoded values, ascending (finite parameters only)."""
        raise NotImplementedError

    def encode(self, value: Any) -> int | float:
        """The encoded number of a user value; raises :class:`SpaceError` if it is not in the domain."""
        raise NotImplementedError

    def decode(self, number: Any) -> Any:
        """The user value of an encoded number."""
        raise NotImplementedError

    def bounds(self) -> tuple[float, float]:
        enc = self.encoded()
        return enc[0].item(), enc[-1].item()


@dataclass(frozen=True)
class Int(Param):
    """Integers ``low, low+step, ..., <= high`` (inclusive), optionally sampled on a log scale."""

    low: int
    high: int
    step: int = 1
    log: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "condition", _normalise_condition(self.condition))

    def __repr__(self) -> str:
        return _repr_param(self, [repr(self.low), repr(self.high)], {"step": 1, "log": False})

    def _validate(self, name: str) -> None:
        for attr in ("low", "high", "step"):
            v = getattr(self, attr)
            if isinstance(v, bool) or not isinstance(v, int | np.integer):
                raise SpaceError(f"parameter {name!r}: Int {attr} must be an integer, got {v!r}")
        if self.step < 1:
            raise SpaceError(f"parameter {name!r}: Int step must be >= 1, got {self.step}")
        if self.low > self.high:
            raise SpaceError(f"parameter {name!r}: empty range, low={self.low} > high={self.high}")
        if self.log and (self.low < 1 or self.step != 1):
            raise SpaceError(f"parameter {name!r}: log=True needs low >= 1 and step == 1")
        if (self.high - self.low) // self.step + 1 > MAX_FINITE_VALUES:
            raise SpaceError(f"parameter {name!r}: more than {MAX_FINITE_VALUES} values; use a larger step")

    def values(self) -> tuple[int, ...]:
        return tuple(range(self.low, self.high + 1, self.step))

    def encoded(self) -> np.ndarray:
        return np.arange(self.low, self.high + 1, self.step, dtype=np.int64)

    def encode(self, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int | np.integer | float | np.floating):
            raise SpaceError(f"expected an integer, got {value!r}")
        if float(value) != int(value):
            raise SpaceError(f"expected an integer, got {value!r}")
        v = int(value)
        if not (self.low <= v <= self.high) or (v - self.low) % self.step:
            raise SpaceError(f"{v} is outside Int({self.low}, {self.high}, step={self.step})")
        return v

    def decode(self, number: Any) -> int:
        return int(number)


@dataclass(frozen=True)
class Float(Param):
    """Reals in ``[low, high]``; with ``step`` the finite grid ``low, low+step, ...``."""

    low: float
    high: float
    log: bool = False
    step: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "condition", _normalise_condition(self.condition))

    def __repr__(self) -> str:
        return _repr_param(self, [repr(self.low), repr(self.high)], {"log": False, "step": None})

    def _validate(self, name: str) -> None:
        for attr in ("low", "high"):
            v = getattr(self, attr)
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise SpaceError(f"parameter {name!r}: Float {attr} must be a finite number, got {v!r}")
        if self.low > self.high:
            raise SpaceError(f"parameter {name!r}: empty range, low={self.low} > high={self.high}")
        if self.log and self.low <= 0:
            raise SpaceError(f"parameter {name!r}: log=True needs low > 0, got low={self.low}")
        if self.step is not None:
            if self.log:
                raise SpaceError(f"parameter {name!r}: Float cannot have both step and log=True")
            if not (self.step > 0 and math.isfinite(self.step)):
                raise SpaceError(f"parameter {name!r}: Float step must be > 0, got {self.step}")
            if (self.high - self.low) / self.step + 1 > MAX_FINITE_VALUES:
                raise SpaceError(
                    f"parameter {name!r}: more than {MAX_FINITE_VALUES} values; use a larger step"
                )

    @property
    def is_finite(self) -> bool:
        return self.step is not None

    @property
    def sort(self) -> str:
        return "real"

    def values(self) -> tuple[float, ...]:
        return tuple(float(x) for x in self.encoded())

    def encoded(self) -> np.ndarray:
        if self.step is None:
            raise SpaceError("a Float without step has no finite value list")
        n = int(math.floor((self.high - self.low) / self.step + 1e-9)) + 1
        return np.round(self.low + self.step * np.arange(n), 12)

    def encode(self, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
            raise SpaceError(f"expected a number, got {value!r}")
        v = float(value)
        tol = 1e-9 * max(1.0, abs(self.high), abs(self.low))
        if not (self.low - tol <= v <= self.high + tol):
            raise SpaceError(f"{v} is outside Float({self.low}, {self.high})")
        if self.step is not None:
            enc = self.encoded()
            i = int(np.argmin(np.abs(enc - v)))
            if abs(enc[i] - v) > tol:
                raise SpaceError(
                    f"{v} is not on the grid of Float({self.low}, {self.high}, step={self.step})"
                )
            return float(enc[i])
        return v

    def decode(self, number: Any) -> float:
        return float(number)

    def bounds(self) -> tuple[float, float]:
        return float(self.low), float(self.high)


def _choice_list(choices: Any) -> Any:
    """``choices`` as a tuple; a string, bytes, a set or a non-iterable is kept as given and rejected by
    ``Space`` (which knows the parameter's name for the message)."""
    if isinstance(choices, str | bytes | set | frozenset) or not isinstance(choices, Iterable):
        return choices
    return tuple(choices)


@dataclass(frozen=True)
class Categorical(Param):
    """A choice among ``choices`` (numbers, strings, bools or None), in the given order.

    Choices must differ under Python equality, which treats ``1``, ``1.0`` and ``True`` (and ``0``,
    ``0.0``, ``False``) as equal: a space holding two of them is rejected. A value matches a choice
    of its own kind only: ``True`` is not ``1``, ``1.0`` is ``1``.
    """

    choices: tuple[Any, ...]

    def __init__(self, choices: Sequence[Any], *, condition: Condition | None = None) -> None:
        object.__setattr__(self, "choices", _choice_list(choices))
        object.__setattr__(self, "condition", _normalise_condition(condition))

    def __repr__(self) -> str:
        return _repr_param(self, [repr(list(self.choices))], {})

    def _validate(self, name: str) -> None:
        if not isinstance(self.choices, tuple):
            c = self.choices
            example = sorted(c, key=repr) if isinstance(c, set | frozenset) else [c]
            raise SpaceError(
                f"parameter {name!r}: Categorical takes a list of choices, got the {type(c).__name__} {c!r}; "
                f"pass a list of choices, e.g. Categorical({example!r})"
            )
        if not self.choices:
            raise SpaceError(f"parameter {name!r}: Categorical needs at least one choice")
        seen: dict[Any, Any] = {}  # keys compare with Python equality: 1, 1.0 and True collide
        for c in self.choices:
            if not (c is None or isinstance(c, bool | int | float | str)):
                raise SpaceError(
                    f"parameter {name!r}: choice {c!r} is a {type(c).__name__}; "
                    "use numbers, strings, bools or None"
                )
            if isinstance(c, float) and not math.isfinite(c):
                raise SpaceError(f"parameter {name!r}: choice {c!r} is not finite")
            if c in seen:
                first = seen[c]
                if type(first) is type(c):
                    raise SpaceError(f"parameter {name!r}: duplicate choice {c!r}")
                raise SpaceError(
                    f"parameter {name!r}: choices {first!r} and {c!r} clash: Python treats them as equal "
                    f"({first!r} == {c!r}), so a configuration value cannot say which one it means; keep one "
                    f"of them, or use distinct strings such as {str(first)!r} and {str(c)!r}"
                )
            seen[c] = c

    @property
    def numeric(self) -> bool:
        """True when every choice is a number (not bool): the variable then takes the value itself."""
        return all(isinstance(c, int | float) and not isinstance(c, bool) for c in self.choices)

    @property
    def sort(self) -> str:
        if self.numeric and any(isinstance(c, float) and not float(c).is_integer() for c in self.choices):
            return "real"
        return "int"

    @property
    def labels(self) -> tuple[Any, ...] | None:
        return None if self.numeric else self.choices

    def values(self) -> tuple[Any, ...]:
        if self.numeric:
            return tuple(sorted(self.choices))
        return self.choices

    def encoded(self) -> np.ndarray:
        if self.numeric:
            dtype = np.float64 if self.sort == "real" else np.int64
            return np.array(sorted(self.choices), dtype=dtype)
        return np.arange(len(self.choices), dtype=np.int64)

    def index(self, value: Any) -> int:
        """Position in ``choices`` of the choice ``value`` means (see the class docstring)."""
        i = label_index(self.choices, value)
        if i is None:
            raise SpaceError(f"{value!r} is not one of the choices {list(self.choices)}")
        return i

    def encode(self, value: Any) -> int | float:
        i = self.index(value)
        if not self.numeric:
            return i
        return int(self.choices[i]) if self.sort == "int" else float(self.choices[i])

    def decode(self, number: Any) -> Any:
        if self.numeric:
            for c in self.choices:
                if c == number:
                    return c
            raise SpaceError(f"{number!r} is not one of the choices {list(self.choices)}")
        return self.choices[int(number)]
