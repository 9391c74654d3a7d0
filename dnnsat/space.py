"""Search spaces: parameters, conditions and the symbolic variables that stand for them.

A finite parameter (``Int``, stepped ``Float``, ``Categorical``) has an ordered list of *encoded* values
that the solver works with: numbers sorted ascending for numeric parameters, or the choice index
``0..n-1`` for categoricals whose choices are not all numbers. ``Float`` without a step is continuous.
Conversions to and from Optuna distributions, NNI search-space JSON and dict/JSON/YAML live in
:mod:`dnnsat._space_io` and are exposed as ``Space`` methods.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from .expr import Expr, Var, label_index

__all__ = ["Param", "Int", "Float", "Categorical", "Space", "SpaceError"]

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


class _Vars:
    """Attribute access to the symbolic variables of a space: ``space.vars.width``."""

    _table: Mapping[str, Expr]

    def __init__(self, table: Mapping[str, Expr]) -> None:
        object.__setattr__(self, "_table", table)

    def __getattr__(self, name: str) -> Expr:
        try:
            return self._table[name]  # type: ignore[no-any-return]
        except KeyError:
            raise AttributeError(
                f"no parameter {name!r} in the space; parameters: {list(self._table)}"
            ) from None

    def __getitem__(self, name: str) -> Expr:
        return self.__getattr__(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._table)

    def __dir__(self) -> list[str]:
        return list(self._table)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Vars, (dict(self._table),))


class Space(Mapping[str, Param]):
    """An ordered, validated mapping ``name -> Param``.

    ``space.vars.name`` is the symbolic variable of a parameter. Conditions must name parameters of
    the space, with values from their domains, and must not form cycles.
    """

    def __init__(self, params: Mapping[str, Param]) -> None:
        if not isinstance(params, Mapping):
            raise SpaceError("Space takes a mapping {name: Int(...)|Float(...)|Categorical(...)}")
        if not params:
            raise SpaceError("a Space needs at least one parameter")
        self._params: dict[str, Param] = {}
        for name, p in params.items():
            if not isinstance(name, str) or not name.isidentifier():
                raise SpaceError(f"parameter name {name!r} must be a Python identifier (letters, digits, _)")
            if not isinstance(p, Param):
                raise SpaceError(
                    f"parameter {name!r}: expected Int, Float or Categorical, got {type(p).__name__}"
                )
            p._validate(name)  # type: ignore[attr-defined]
            self._params[name] = p
        self._check_conditions()
        self._vars = {name: Var(name, p.sort, p.labels) for name, p in self._params.items()}
        self.vars = _Vars(MappingProxyType(self._vars))

    def _check_conditions(self) -> None:
        for name, p in self._params.items():
            if p.condition is not None:
                object.__setattr__(p, "condition", _check_condition(name, p.condition))
            for parent, values in (p.condition or {}).items():
                if parent not in self._params:
                    raise SpaceError(
                        f"parameter {name!r}: condition refers to unknown parameter {parent!r}; "
                        f"known: {list(self._params)}"
                    )
                if parent == name:
                    raise SpaceError(f"parameter {name!r}: a condition cannot refer to itself")
                if not self._params[parent].is_finite:
                    raise SpaceError(
                        f"parameter {name!r}: condition on {parent!r}, a continuous Float; conditions need a "
                        f"finite parent (Int, Categorical or Float with step)"
                    )
                for v in values:
                    try:
                        self._params[parent].encode(v)
                    except SpaceError as err:
                        raise SpaceError(
                            f"parameter {name!r}: condition value for {parent!r}: {err}"
                        ) from None
        self._order: list[str] = []
        state: dict[str, int] = {}

        def visit(n: str, path: tuple[str, ...]) -> None:
            if state.get(n) == 2:
                return
            if state.get(n) == 1:
                raise SpaceError(f"conditions form a cycle: {' -> '.join((*path, n))}")
            state[n] = 1
            for parent in self._params[n].condition or {}:
                visit(parent, (*path, n))
            state[n] = 2
            self._order.append(n)

        for n in self._params:
            visit(n, ())

    # -- Mapping --------------------------------------------------------------------------------
    def __contains__(self, name: object) -> bool:
        return name in self._params

    def __getitem__(self, name: str) -> Param:
        try:
            return self._params[name]
        except KeyError:
            raise SpaceError(f"unknown parameter {name!r}; parameters: {list(self._params)}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._params)

    def __len__(self) -> int:
        return len(self._params)

    def __repr__(self) -> str:
        inner = ", ".join(f"{n!r}: {p!r}" for n, p in self._params.items())
        return f"Space({{{inner}}})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Space) and self._params == other._params

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles as its parameters; unpickling validates them again and re-interns the variables."""
        return (Space, (self._params,))

    # -- queries --------------------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        return list(self._params)

    @property
    def conditional_order(self) -> list[str]:
        """Parameter names with every parent before its children."""
        return list(self._order)

    def is_active(self, name: str, config: Mapping[str, Any]) -> bool:
        """Whether ``name`` is active under ``config`` (its parents active and matching)."""
        cond = self[name].condition
        if not cond:
            return True
        for parent, values in cond.items():
            if parent not in config or not self.is_active(parent, config):
                return False
            p = self._params[parent]
            if p.encode(config[parent]) not in {p.encode(v) for v in values}:
                return False
        return True

    def size(self) -> int:
        """Number of configurations of the finite parameters (inactive children counted once)."""
        finite = [n for n in self._order if self._params[n].is_finite]
        return _count_conditional(self, finite)

    def validate(self, config: Mapping[str, Any], partial: bool = False) -> dict[str, Any]:
        """Check a configuration; returns it with values normalised to their domain types.

        Unknown names and out-of-domain values raise :class:`SpaceError`. Unless ``partial``, every
        active parameter must be present; inactive ones may be missing.
        """
        if not isinstance(config, Mapping):
            raise SpaceError(f"a configuration is a mapping {{name: value}}, got {type(config).__name__}")
        out: dict[str, Any] = {}
        for name, value in config.items():
            if name not in self._params:
                raise SpaceError(
                    f"unknown parameter {name!r} in configuration; parameters: {list(self._params)}"
                )
            p = self._params[name]
            try:
                out[name] = p.decode(p.encode(value)) if p.is_finite else float(p.encode(value))
            except SpaceError as err:
                raise SpaceError(f"parameter {name!r}: {err}") from None
        if not partial:
            missing = [n for n in self._order if n not in out and self.is_active(n, out)]
            if missing:
                raise SpaceError(f"configuration is missing active parameter(s) {missing}")
        return out

    # -- conversions (implemented in _space_io) ---------------------------------------------------
    @classmethod
    def from_optuna(cls, distributions: Mapping[str, Any]) -> Space:
        """Build a space from ``{name: optuna.distributions.BaseDistribution}``."""
        from ._space_io import space_from_optuna

        return space_from_optuna(distributions)

    def to_optuna(self) -> dict[str, Any]:
        """``{name: optuna distribution}``; conditions are dropped (Optuna has none)."""
        from ._space_io import space_to_optuna

        return space_to_optuna(self)

    @classmethod
    def from_nni(cls, search_space: Mapping[str, Any]) -> Space:
        """Build a space from an NNI search-space dict (nested choices become conditions)."""
        from ._space_io import space_from_nni

        return space_from_nni(search_space)

    def to_nni(self) -> dict[str, Any]:
        """An NNI search-space dict (conditions become nested choices where possible)."""
        from ._space_io import space_to_nni

        return space_to_nni(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Space:
        """Build a space from its dict form (see :meth:`to_dict`), validated by a pydantic schema."""
        from ._space_io import space_from_dict

        return space_from_dict(data)

    def to_dict(self) -> dict[str, Any]:
        """A JSON/YAML-serialisable dict form of the space."""
        from ._space_io import space_to_dict

        return space_to_dict(self)

    @classmethod
    def load(cls, path: str) -> Space:
        """Read a space from a ``.json``, ``.yaml`` or ``.yml`` file."""
        from ._space_io import load_space

        return load_space(path)

    def save(self, path: str) -> None:
        """Write the space to a ``.json``, ``.yaml`` or ``.yml`` file."""
        from ._space_io import save_space

        save_space(self, path)


def _count_conditional(space: Space, names: list[str]) -> int:
    """Number of finite configs where inactive children take a single placeholder value."""
    unconditional = [n for n in names if not space[n].condition]
    if len(unconditional) == len(names):
        return math.prod(len(space[n].encoded()) for n in names)
    # enumerate the parents' assignments (conditions are on finite parents) - spaces with conditions
    # are small in their parents, so this is cheap
    parents = sorted({p for n in names for p in (space[n].condition or {})}, key=names.index)
    total = 0

    def rec(i: int, partial: dict[str, Any]) -> None:
        nonlocal total
        if i == len(parents):
            count = 1
            for n in names:
                if n in partial:
                    continue
                count *= len(space[n].encoded()) if space.is_active(n, partial) else 1
            total += count
            return
        name = parents[i]
        if not space.is_active(name, partial):
            rec(i + 1, partial)
            return
        for v in space[name].values():
            partial[name] = v
            rec(i + 1, partial)
            del partial[name]

    rec(0, {})
    return total
