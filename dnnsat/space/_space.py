"""The search space: ``Space``, an ordered, validated mapping ``name -> Param``, and its symbolic variables.

Conversions to and from Optuna distributions, NNI search-space JSON and dict/JSON/YAML live in
:mod:`dnnsat.space._formats` (which works on parameters) and are exposed as ``Space`` methods and as the
functions at the end of this module (the ones that build a ``Space``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from os import PathLike
from types import MappingProxyType
from typing import Any

from ..expr import Expr, Var
from ._formats import (
    params_from_dict,
    params_from_nni,
    params_from_optuna,
    read_space_file,
    save_space,
    space_to_dict,
    space_to_nni,
    space_to_optuna,
)
from ._params import Param, SpaceError, _check_condition

__all__ = ["Space", "load_space", "space_from_dict", "space_from_nni", "space_from_optuna"]


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

    # -- conversions (implemented in _formats) ---------------------------------------------------
    @classmethod
    def from_optuna(cls, distributions: Mapping[str, Any]) -> Space:
        """Build a space from ``{name: optuna.distributions.BaseDistribution}``."""
        return space_from_optuna(distributions)

    def to_optuna(self) -> dict[str, Any]:
        """``{name: optuna distribution}``; conditions are dropped (Optuna has none)."""
        return space_to_optuna(self)

    @classmethod
    def from_nni(cls, search_space: Mapping[str, Any]) -> Space:
        """Build a space from an NNI search-space dict (nested choices become conditions)."""
        return space_from_nni(search_space)

    def to_nni(self) -> dict[str, Any]:
        """An NNI search-space dict (conditions become nested choices where possible)."""
        return space_to_nni(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Space:
        """Build a space from its dict form (see :meth:`to_dict`), validated by a pydantic schema."""
        return space_from_dict(data)

    def to_dict(self) -> dict[str, Any]:
        """A JSON/YAML-serialisable dict form of the space."""
        return space_to_dict(self)

    @classmethod
    def load(cls, path: str) -> Space:
        """Read a space from a ``.json``, ``.yaml`` or ``.yml`` file."""
        return load_space(path)

    def save(self, path: str) -> None:
        """Write the space to a ``.json``, ``.yaml`` or ``.yml`` file."""
        save_space(self, path)


def _count_conditional(space: Space, names: list[str]) -> int:
    """Number of finite configs where inactive children take a single placeholder value (exact: Python
    ints, at any size).

    A parameter whose condition names one parent hangs below it in a tree: a tree counts as the sum over
    its root's values of the product of its subtrees (1 for a subtree left inactive), in one pass from the
    leaves up. Parameters conditioned on several parents, with their ancestors and descendants, are
    counted by enumerating those parents' assignments (exponential in them alone).
    """
    unconditional = [n for n in names if not space[n].condition]
    if len(unconditional) == len(names):
        return math.prod(len(space[n].encoded()) for n in names)
    chosen = set(names)
    parent_of = {n: next(iter(space[n].condition or {})) for n in names if space[n].condition}
    multi = {n for n in names if len(space[n].condition or {}) > 1 or parent_of.get(n, n) not in chosen}
    # the tangled part: multi-parent parameters and every parameter connected to one by a condition
    tangled: set[str] = set()
    frontier = list(multi)
    while frontier:
        n = frontier.pop()
        if n in tangled:
            continue
        tangled.add(n)
        frontier.extend(p for p in space[n].condition or {} if p in chosen)
        frontier.extend(c for c in names if n in (space[c].condition or {}))
    total = _enumerate_conditional(space, [n for n in names if n in tangled])
    children: dict[str, list[str]] = {}
    for n in names:
        if n not in tangled and n in parent_of:
            children.setdefault(parent_of[n], []).append(n)
    tree: dict[str, int] = {}  # name -> configurations of its subtree, given it is active
    for n in reversed(names):  # children before parents (names are in conditional order)
        if n in tangled:
            continue
        values = space[n].encoded()
        sub = 0
        for v in values:
            ways = 1
            for c in children.get(n, ()):
                p = space[n]
                if v in {p.encode(x) for x in (space[c].condition or {})[n]}:
                    ways *= tree[c]
            sub += ways
        tree[n] = sub
    for n in names:
        if n not in tangled and n not in parent_of:
            total *= tree[n]
    return total


def _enumerate_conditional(space: Space, names: list[str]) -> int:
    """:func:`_count_conditional` over ``names`` by enumerating the assignments of their parents."""
    if not names:
        return 1
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


# ------------------------------------------------------------------------------------------------
# conversions that build a Space (the parameters come from _formats)
# ------------------------------------------------------------------------------------------------


def space_from_optuna(distributions: Mapping[str, Any]) -> Space:
    """Build a space from ``{name: optuna.distributions.BaseDistribution}`` (unconditional)."""
    return Space(params_from_optuna(distributions))


def space_from_nni(search_space: Mapping[str, Any]) -> Space:
    """Build a space from an NNI search-space dict (see :mod:`dnnsat.space._formats` for the mapping)."""
    return Space(params_from_nni(search_space))


def space_from_dict(data: Mapping[str, Any]) -> Space:
    """Build a space from ``{"params": {name: {"type": "int"|"float"|"categorical", ...}}}``.

    Fields: ``int``: low, high, step (1), log (false); ``float``: low, high, log (false), step (null);
    ``categorical``: choices; every type: condition ``{parent: [values]}`` (optional).
    """
    return Space(params_from_dict(data))


def load_space(path: str | PathLike[str]) -> Space:
    """Read a space from a ``.json``/``.yaml``/``.yml`` file in the dict form of :func:`space_to_dict`.

    A file without a top-level ``params`` mapping whose entries all have ``_type`` is read as an NNI
    search space (``search_space.json``). A missing file raises :class:`FileNotFoundError`.
    """
    data, looks_nni = read_space_file(path)
    try:
        return space_from_nni(data) if looks_nni else space_from_dict(data)
    except SpaceError as err:
        raise SpaceError(f"space file {str(path)!r}: {err}") from None
