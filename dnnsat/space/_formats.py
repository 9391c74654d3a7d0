"""Conversions of :class:`~dnnsat.space.Space`: Optuna distributions, NNI search-space JSON, dict/JSON/YAML.

The readers return the parameters (``params_from_*``, :func:`read_space_file`); :mod:`dnnsat.space._space`
builds the ``Space`` from them (``space_from_*``, ``load_space``), so this module needs only the parameter
classes.

Every malformed input raises :class:`~dnnsat.space.SpaceError` with a message that names the parameter
and says how to fix it; errors of pydantic, PyYAML, ``json`` and Optuna never escape raw.

**NNI mapping** (``_type`` → parameter):

=============================  ===========================================================================
``choice``                     ``Categorical`` (choices of ``{"_name": ...}`` dicts: nested choice, below)
``randint [lo, hi]``           ``Int(lo, hi - 1)`` (NNI excludes the upper bound)
``uniform [lo, hi]``           ``Float(lo, hi)``
``loguniform [lo, hi]``        ``Float(lo, hi, log=True)``
``quniform [lo, hi, q]``       NNI returns ``clip(round(u / q) * q, lo, hi)`` (floats). When ``lo`` and
                               ``hi`` are multiples of ``q`` that set is the grid ``Float(lo, hi, step=q)``;
                               otherwise it is kept exactly as a numeric ``Categorical`` of the reachable
                               values (``[1, 10, 4]`` → ``[1.0, 4.0, 8.0]``: 10 is never reached).
``qloguniform [lo, hi, q]``    the same value set: ``Int(lo, hi, log=True)`` when ``q == 1`` and the bounds
                               are integers, ``Float(lo, hi, step=q)`` when the bounds are multiples of
                               ``q``, else the exact numeric ``Categorical``
``normal`` & co.               rejected (unbounded): use ``uniform`` / ``loguniform``
=============================  ===========================================================================

**Nested choice**: ``{"layer": {"_type": "choice", "_value": [{"_name": "conv", "k": {...}}, ...]}}``
becomes ``layer = Categorical(["conv", ...])`` and a child ``layer__conv__k`` with
``condition={"layer": ["conv"]}``; the child name is ``<parent>__<label>__<key>`` where ``label`` is
``str(_name)`` with every character that is not a letter, digit or ``_`` replaced by ``_``. Deeper
levels repeat the rule (``layer__conv__act__gelu__alpha``). :func:`space_to_nni` inverts it, so
``Space.from_nni(space.to_nni()) == space`` for spaces read from NNI. Conditions of other spaces are
nested where NNI can express them (one parent, a ``Categorical``); a child that does not match the naming
rule keeps its own name as its key inside the branch. Conditions NNI cannot express (several parents, a
numeric parent) are dropped with a warning: NNI then always samples the child, and
:func:`config_from_nni` drops it again when it is inactive. :func:`config_from_nni` /
:func:`config_to_nni` translate NNI's nested parameter dicts to flat dnnsat configs and back.
"""

from __future__ import annotations

import json
import logging
import math
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._params import Categorical, Float, Int, Param, SpaceError

if TYPE_CHECKING:
    from ._space import Space

__all__ = [
    "NNI_SEP",
    "config_from_nni",
    "config_to_nni",
    "nni_child_name",
    "params_from_dict",
    "params_from_nni",
    "params_from_optuna",
    "read_space_file",
    "save_space",
    "space_to_dict",
    "space_to_nni",
    "space_to_optuna",
]

log = logging.getLogger("dnnsat.space")

NNI_SEP = "__"  # separator of flattened nested-choice names: parent__label__key
MAX_EXACT_Q_VALUES = 10_000  # an unaligned q(log)uniform becomes a Categorical of at most this many values


def _optuna_distributions() -> Any:
    try:
        import optuna.distributions as dists
    except ImportError as err:  # pragma: no cover - optuna is an optional dependency
        raise ImportError("Optuna conversions need optuna: pip install 'dnnsat[optuna]'") from err
    return dists


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _grid_high(p: Int | Float) -> int | float:
    """The largest grid value of a stepped parameter; ``high`` itself when it lies on the grid."""
    if isinstance(p, Int):
        return int(p.low + (p.high - p.low) // p.step * p.step)
    if p.step is None:
        return p.high
    last = float(p.encoded()[-1])
    return p.high if math.isclose(last, p.high, rel_tol=1e-9, abs_tol=1e-12) else last


# ------------------------------------------------------------------------------------------------
# Optuna
# ------------------------------------------------------------------------------------------------


def params_from_optuna(distributions: Mapping[str, Any]) -> dict[str, Param]:
    """The parameters of ``{name: optuna.distributions.BaseDistribution}`` (unconditional)."""
    if not isinstance(distributions, Mapping):
        raise SpaceError(
            "Space.from_optuna takes a mapping {name: optuna distribution}, "
            f"got {type(distributions).__name__}"
        )
    d = _optuna_distributions()
    params: dict[str, Param] = {}
    for name, dist in distributions.items():
        if isinstance(dist, d.IntDistribution):
            params[name] = Int(int(dist.low), int(dist.high), step=int(dist.step), log=bool(dist.log))
        elif isinstance(dist, d.FloatDistribution):
            step = None if dist.step is None else float(dist.step)
            params[name] = Float(float(dist.low), float(dist.high), log=bool(dist.log), step=step)
        elif isinstance(dist, d.CategoricalDistribution):
            params[name] = Categorical(list(dist.choices))
        else:
            raise SpaceError(
                f"parameter {name!r}: {type(dist).__name__} is not an Optuna distribution; use "
                "optuna.distributions.IntDistribution, FloatDistribution or CategoricalDistribution"
            )
    return params


def space_to_optuna(space: Space) -> dict[str, Any]:
    """``{name: IntDistribution | FloatDistribution | CategoricalDistribution}``.

    Conditions are dropped (Optuna distributions have none). ``high`` of a stepped parameter is the
    largest grid value, so Optuna never has to adjust it.
    """
    d = _optuna_distributions()
    out: dict[str, Any] = {}
    for name, p in space.items():
        if p.condition:
            log.debug("to_optuna: condition of %r dropped (Optuna distributions have no conditions)", name)
        if isinstance(p, Int):
            out[name] = d.IntDistribution(int(p.low), int(_grid_high(p)), log=bool(p.log), step=int(p.step))
        elif isinstance(p, Float):
            with warnings.catch_warnings():  # Decimal re-check of a float grid end: same grid either way
                warnings.simplefilter("ignore")
                out[name] = d.FloatDistribution(
                    float(p.low), float(_grid_high(p)), log=bool(p.log), step=p.step
                )
        elif isinstance(p, Categorical):
            out[name] = d.CategoricalDistribution(list(p.choices))
        else:  # pragma: no cover - Space only holds the three kinds
            raise SpaceError(f"parameter {name!r}: cannot convert {type(p).__name__} to Optuna")
    return out


# ------------------------------------------------------------------------------------------------
# NNI
# ------------------------------------------------------------------------------------------------

_NNI_NORMAL = {"normal", "qnormal", "lognormal", "qlognormal"}
_NNI_TYPES = {"choice", "randint", "uniform", "quniform", "loguniform", "qloguniform"} | _NNI_NORMAL


def _label(value: Any) -> str:
    return re.sub(r"\W", "_", str(value), flags=re.ASCII)


def nni_child_name(parent: str, choice: Any, key: str) -> str:
    """Flat dnnsat name of the nested-choice child ``key`` under ``parent``'s branch ``choice``."""
    return f"{parent}{NNI_SEP}{_label(choice)}{NNI_SEP}{key}"


def _nni_bounds(name: str, type_: str, value: Sequence[Any], n: int, example: str) -> list[float]:
    if len(value) != n or not all(_is_number(v) for v in value):
        raise SpaceError(
            f"parameter {name!r}: NNI {type_} needs _value = {example} ({n} numbers), got {list(value)!r}"
        )
    if not all(math.isfinite(v) for v in value):
        raise SpaceError(f"parameter {name!r}: NNI {type_} bounds must be finite, got {list(value)!r}")
    return list(value)


def _aligned(x: float, q: float) -> bool:
    k = x / q
    return abs(k - round(k)) <= 1e-9 * max(1.0, abs(k))


def _q_param(name: str, type_: str, lo: float, hi: float, q: float, cond: Any) -> Param:
    """The exact value set of NNI's ``clip(round(x / q) * q, lo, hi)``."""
    if q <= 0:
        raise SpaceError(f"parameter {name!r}: NNI {type_} needs q > 0, got q={q}; e.g. [16, 512, 16]")
    if lo > hi:
        raise SpaceError(f"parameter {name!r}: NNI {type_} has low={lo} > high={hi}; swap them")
    if type_ == "qloguniform" and lo <= 0:
        raise SpaceError(f"parameter {name!r}: NNI qloguniform needs low > 0, got {lo}; use quniform for 0")
    if _aligned(lo, q) and _aligned(hi, q):
        if type_ == "qloguniform" and q == 1 and float(lo).is_integer() and float(hi).is_integer():
            return Int(int(lo), int(hi), log=True, condition=cond)
        return Float(lo, hi, step=q, condition=cond)
    # round() is monotone, so round(x / q) for x in [lo, hi] takes every integer from round(lo / q) to
    # round(hi / q) (Python's round, as NNI's deformat_parameters; the ends count: a tuner may propose them)
    qf = float(q)
    k_lo, k_hi = round(lo / qf), round(hi / qf)
    if k_hi - k_lo + 1 > MAX_EXACT_Q_VALUES:
        raise SpaceError(
            f"parameter {name!r}: NNI {type_} [{lo}, {hi}, {q}] has bounds that are not multiples of q and "
            f"too many values to list exactly; use bounds that are multiples of q, e.g. "
            f"[{max(k_lo, 1 if type_ == 'qloguniform' else k_lo) * qf:g}, {k_hi * qf:g}, {q}]"
        )
    values = {min(max(k * qf, float(lo)), float(hi)) for k in range(k_lo, k_hi + 1)}
    log.info(
        "from_nni: %s %r [%s, %s, %s]: bounds are not multiples of q; kept as the exact value set "
        "(%d values)",
        type_, name, lo, hi, q, len(values),
    )  # fmt: skip
    return Categorical(sorted(values), condition=cond)


def _nni_param(name: str, spec: Any, cond: Any, params: dict[str, Param], where: str) -> None:
    if not isinstance(spec, Mapping) or "_type" not in spec or "_value" not in spec:
        raise SpaceError(
            f"parameter {name!r}{where}: an NNI parameter is {{'_type': ..., '_value': [...]}}, got {spec!r}"
        )
    type_, value = spec["_type"], spec["_value"]
    if type_ not in _NNI_TYPES:
        raise SpaceError(
            f"parameter {name!r}{where}: unknown NNI _type {type_!r}; "
            f"use one of {sorted(_NNI_TYPES - _NNI_NORMAL)}"
        )
    if type_ in _NNI_NORMAL:
        raise SpaceError(
            f"parameter {name!r}{where}: NNI {type_} is unbounded, so its space cannot be pruned; "
            f"use 'uniform' or 'loguniform' (or their q- variants) with explicit bounds"
        )
    if not isinstance(value, list | tuple):
        raise SpaceError(f"parameter {name!r}{where}: NNI _value must be a list, got {value!r}")
    if name in params:
        raise SpaceError(
            f"parameter {name!r}{where}: the name is used twice (nested names are parent__choice__key); "
            "rename one of them"
        )
    if type_ == "choice":
        if not value:
            raise SpaceError(f"parameter {name!r}{where}: NNI choice needs at least one value")
        nested = [isinstance(v, Mapping) for v in value]
        if any(nested) and not all(nested):
            raise SpaceError(
                f"parameter {name!r}{where}: a nested choice needs every value to be a dict with '_name'; "
                f"write plain values as {{'_name': value}}"
            )
        if not all(nested):
            params[name] = Categorical(list(value), condition=cond)
            return
        names = []
        for v in value:
            if "_name" not in v:
                raise SpaceError(
                    f"parameter {name!r}{where}: nested choice {dict(v)!r} has no '_name'; add one"
                )
            names.append(v["_name"])
        params[name] = Categorical(names, condition=cond)
        for v in value:
            child_cond = {name: [v["_name"]]}
            for key, sub in v.items():
                if key == "_name":
                    continue
                if not isinstance(key, str) or not key.isidentifier():
                    raise SpaceError(
                        f"NNI key {key!r} in choice {v['_name']!r} of {name!r}: dnnsat names must be Python "
                        f"identifiers; rename it, e.g. {_label(key)!r}"
                    )
                child = nni_child_name(name, v["_name"], key)
                _nni_param(
                    child, sub, child_cond, params, f" (key {key!r} in choice {v['_name']!r} of {name!r})"
                )
        return
    if type_ == "randint":
        lo, hi = _nni_bounds(name, type_, value, 2, "[lower, upper) with upper excluded")
        if not (float(lo).is_integer() and float(hi).is_integer()):
            raise SpaceError(
                f"parameter {name!r}{where}: NNI randint bounds must be integers, got {list(value)}"
            )
        if hi <= lo:
            raise SpaceError(
                f"parameter {name!r}{where}: NNI randint [{lo}, {hi}) is empty "
                "(the upper bound is excluded); "
                f"use [{lo}, {int(lo) + 1}] for the single value {lo}"
            )
        params[name] = Int(int(lo), int(hi) - 1, condition=cond)
    elif type_ in ("uniform", "loguniform"):
        lo, hi = _nni_bounds(name, type_, value, 2, "[low, high]")
        params[name] = Float(lo, hi, log=type_ == "loguniform", condition=cond)
    else:
        lo, hi, q = _nni_bounds(name, type_, value, 3, "[low, high, q]")
        params[name] = _q_param(name, type_, lo, hi, q, cond)


def params_from_nni(search_space: Mapping[str, Any]) -> dict[str, Param]:
    """The parameters of an NNI search-space dict (see the module docstring for the mapping)."""
    if not isinstance(search_space, Mapping):
        raise SpaceError(
            f"an NNI search space is a dict {{name: {{'_type': ..., '_value': [...]}}}}, "
            f"got {type(search_space).__name__}"
        )
    params: dict[str, Param] = {}
    for name, spec in search_space.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise SpaceError(
                f"NNI parameter {name!r}: dnnsat names must be Python identifiers; "
                f"rename it, e.g. {_label(name)!r}"
            )
        _nni_param(name, spec, None, params, "")
    return params


@dataclass
class _Node:
    """One parameter in the NNI layout: its key inside its dict and, for a nested parent, its branches."""

    key: str
    name: str
    branches: dict[int, list[_Node]] = field(default_factory=dict)  # choice index -> children


def _nni_layout(space: Space) -> list[_Node]:
    """Top-level nodes of the NNI form of ``space``; children sit in the branches of their parent."""
    nodes = {n: _Node(n, n) for n in space.names}
    top: list[_Node] = []
    for name in space.conditional_order:
        p = space[name]
        cond = p.condition or {}
        parent = next(iter(cond)) if len(cond) == 1 else None
        if parent is None or not isinstance(space[parent], Categorical):
            if cond:
                log.warning(
                    "to_nni: the condition of %r (%s) cannot be a nested choice (needs one categorical "
                    "parent); NNI will sample it always and config_from_nni drops it when inactive",
                    name, dict(cond),
                )  # fmt: skip
            top.append(nodes[name])
            continue
        pp = space[parent]
        assert isinstance(pp, Categorical)
        wanted = {pp.encode(v) for v in cond[parent]}
        for i, c in enumerate(pp.choices):
            if pp.encode(c) not in wanted:
                continue
            branch = nodes[parent].branches.setdefault(i, [])
            prefix = nni_child_name(parent, c, "")
            key = name[len(prefix) :] if name.startswith(prefix) and len(name) > len(prefix) else name
            if key == "_name" or any(n.key == key for n in branch):
                key = name
            node = nodes[name] if len(wanted) == 1 else _Node(key, name)
            node.key = key
            if len(wanted) > 1:  # the same parameter sits in several branches: share its children
                node.branches = nodes[name].branches
            branch.append(node)
    return top


def _nni_spec(name: str, p: Param) -> dict[str, Any]:
    if isinstance(p, Categorical):
        bad = [c for c in p.choices if not (isinstance(c, int | float | str))]
        if bad:
            raise SpaceError(
                f"parameter {name!r}: NNI choices must be numbers, strings or bools, got {bad[0]!r}; "
                f"use a string such as 'none' instead"
            )
        return {"_type": "choice", "_value": list(p.choices)}
    if isinstance(p, Int):
        if p.log and p.low < p.high:
            return {"_type": "qloguniform", "_value": [int(p.low), int(p.high), 1]}
        if p.step == 1 or p.low == p.high:
            return {"_type": "randint", "_value": [int(p.low), int(p.high) + 1]}
        if p.low % p.step == 0 and _grid_high(p) > p.low:
            return {"_type": "quniform", "_value": [int(p.low), int(_grid_high(p)), int(p.step)]}
        return {"_type": "choice", "_value": list(p.values())}
    if isinstance(p, Float):
        if p.step is None:
            if p.low == p.high:
                return {"_type": "choice", "_value": [float(p.low)]}
            return {"_type": "loguniform" if p.log else "uniform", "_value": [p.low, p.high]}
        high = _grid_high(p)
        if _aligned(p.low, p.step) and high > p.low:
            return {"_type": "quniform", "_value": [p.low, high, p.step]}
        return {"_type": "choice", "_value": list(p.values())}
    raise SpaceError(f"parameter {name!r}: cannot convert {type(p).__name__} to NNI")  # pragma: no cover


def space_to_nni(space: Space) -> dict[str, Any]:
    """An NNI search-space dict; conditions on one categorical parent become nested choices."""

    def emit(nodes: list[_Node], out: dict[str, Any]) -> dict[str, Any]:
        for node in nodes:
            p = space[node.name]
            spec = _nni_spec(node.name, p)
            if node.branches:
                assert isinstance(p, Categorical)
                spec["_value"] = [
                    emit(node.branches.get(i, []), {"_name": c}) for i, c in enumerate(p.choices)
                ]
            out[node.key] = spec
        return out

    return emit(_nni_layout(space), {})


def _snap(p: Param, value: Any) -> Any:
    """NNI returns floats for q-types (``32.0``, ``0.30000000000000004``): map them onto the domain."""
    if isinstance(p, Categorical) and p.numeric and _is_number(value):
        for c in p.choices:
            if math.isclose(c, value, rel_tol=1e-9, abs_tol=1e-12):
                return c
    return value


def _choice_index(p: Categorical, value: Any, name: str) -> int:
    try:
        return p.index(value)
    except SpaceError as err:
        raise SpaceError(f"parameter {name!r}: {err}") from None


def config_from_nni(space: Space, parameters: Mapping[str, Any]) -> dict[str, Any]:
    """The flat dnnsat config of NNI trial parameters (nested dicts of a :func:`space_to_nni` space).

    Values are normalised to the domain types (e.g. NNI's ``32.0`` for an ``Int`` becomes ``32``),
    inactive parameters are dropped, and the result is checked with :meth:`Space.validate`.
    """
    if not isinstance(parameters, Mapping):
        raise SpaceError(f"NNI parameters are a dict, got {type(parameters).__name__}")
    config: dict[str, Any] = {}

    def walk(nodes: list[_Node], params: Mapping[str, Any], where: str) -> None:
        for node in nodes:
            if node.key not in params:
                continue
            value = params[node.key]
            p = space[node.name]
            if node.branches:
                if not isinstance(value, Mapping) or "_name" not in value:
                    raise SpaceError(
                        f"parameter {node.name!r}{where}: a nested choice value is {{'_name': ..., ...}}, "
                        f"got {value!r}"
                    )
                assert isinstance(p, Categorical)
                config[node.name] = _snap(p, value["_name"])
                i = _choice_index(p, config[node.name], node.name)
                walk(node.branches.get(i, []), value, f" (in choice {config[node.name]!r} of {node.name!r})")
            else:
                config[node.name] = _snap(p, value)

    walk(_nni_layout(space), parameters, "")
    active = {n: v for n, v in config.items() if space.is_active(n, config)}
    return space.validate(active)


def config_to_nni(space: Space, config: Mapping[str, Any]) -> dict[str, Any]:
    """NNI's nested parameter dict for a flat dnnsat ``config`` (the inverse of :func:`config_from_nni`)."""
    config = space.validate(config, partial=True)

    def emit(nodes: list[_Node], out: dict[str, Any]) -> dict[str, Any]:
        for node in nodes:
            if node.name not in config:
                continue
            value = config[node.name]
            if node.branches:
                p = space[node.name]
                assert isinstance(p, Categorical)
                out[node.key] = emit(
                    node.branches.get(_choice_index(p, value, node.name), []), {"_name": value}
                )
            else:
                out[node.key] = value
        return out

    return emit(_nni_layout(space), {})


# ------------------------------------------------------------------------------------------------
# dict / JSON / YAML
# ------------------------------------------------------------------------------------------------


def params_from_dict(data: Mapping[str, Any]) -> dict[str, Param]:
    """The parameters of ``{"params": {name: {"type": "int"|"float"|"categorical", ...}}}``.

    Fields: ``int``: low, high, step (1), log (false); ``float``: low, high, log (false), step (null);
    ``categorical``: choices; every type: condition ``{parent: [values]}`` (optional). Validated by a
    pydantic schema (:mod:`dnnsat.space._schema`, imported on first use: ``import dnnsat`` needs no
    pydantic).
    """
    from ._schema import params_from_dict as validated

    return validated(data)


def _py(x: Any) -> Any:
    """Plain Python scalars (numpy numbers become int/float)."""
    if hasattr(x, "item") and not isinstance(x, int | float | str | bool):
        return x.item()
    return x


def space_to_dict(space: Space) -> dict[str, Any]:
    """The dict form read by :func:`space_from_dict`; fields with default values are left out."""
    params: dict[str, Any] = {}
    for name, p in space.items():
        d: dict[str, Any]
        if isinstance(p, Int):
            d = {"type": "int", "low": int(p.low), "high": int(p.high)}
            if p.step != 1:
                d["step"] = int(p.step)
            if p.log:
                d["log"] = True
        elif isinstance(p, Float):
            d = {"type": "float", "low": float(p.low), "high": float(p.high)}
            if p.log:
                d["log"] = True
            if p.step is not None:
                d["step"] = float(p.step)
        elif isinstance(p, Categorical):
            d = {"type": "categorical", "choices": [_py(c) for c in p.choices]}
        else:  # pragma: no cover
            raise SpaceError(f"parameter {name!r}: cannot convert {type(p).__name__} to a dict")
        if p.condition:
            d["condition"] = {parent: [_py(v) for v in values] for parent, values in p.condition.items()}
        params[name] = d
    return {"params": params}


_SUFFIXES = (".json", ".yaml", ".yml")


def _suffix(path: str | PathLike[str]) -> str:
    suffix = Path(path).suffix.lower()
    if suffix not in _SUFFIXES:
        raise SpaceError(f"space file {str(path)!r}: unknown extension {suffix!r}; use .json, .yaml or .yml")
    return suffix


def read_space_file(path: str | PathLike[str]) -> tuple[Mapping[str, Any], bool]:
    """The mapping in a ``.json``/``.yaml``/``.yml`` space file, and whether it reads as an NNI search space.

    A file without a top-level ``params`` mapping whose entries all have ``_type`` is read as an NNI
    search space (``search_space.json``). A missing file raises :class:`FileNotFoundError`.
    ``load_space`` (in :mod:`dnnsat.space._space`) builds the space from it.
    """
    suffix = _suffix(path)
    raw = Path(path).read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise SpaceError(
            f"space file {str(path)!r} is not UTF-8 text (byte {raw[err.start]:#04x} at offset {err.start}); "
            "save it as UTF-8 (e.g. `iconv -f latin1 -t utf-8`)"
        ) from None
    try:
        if suffix == ".json":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except json.JSONDecodeError as err:
        raise SpaceError(
            f"space file {str(path)!r}: invalid JSON at line {err.lineno}, column {err.colno}: {err.msg}"
        ) from None
    except Exception as err:  # yaml.YAMLError and its subclasses
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err)
        raise SpaceError(f"space file {str(path)!r}: invalid YAML{at}: {problem}") from None
    if data is None:
        raise SpaceError(f"space file {str(path)!r} is empty; write {{'params': {{name: {{...}}}}}}")
    if not isinstance(data, Mapping):
        raise SpaceError(
            f"space file {str(path)!r}: expected a mapping with 'params', got {type(data).__name__}"
        )
    looks_nni = (
        data
        and all(isinstance(v, Mapping) and "_type" in v for v in data.values())
        and not (isinstance(data.get("params"), Mapping) and "_type" not in data["params"])
    )
    return data, bool(looks_nni)


def save_space(space: Space, path: str | PathLike[str]) -> None:
    """Write ``space`` to a ``.json``/``.yaml``/``.yml`` file (the dict form of :func:`space_to_dict`)."""
    suffix = _suffix(path)
    data = space_to_dict(space)
    if suffix == ".json":
        text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    else:
        text = _yaml_dump(data)
    Path(path).write_text(text, encoding="utf-8")


def _yaml_dump(data: Any) -> str:
    """``yaml.safe_dump`` that keeps every string: PyYAML writes a NEL (``\x85``, a YAML line break)
    raw inside a single-quoted scalar, which reads back as a space; such strings are double-quoted
    (escaped) instead."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        style = '"' if "\x85" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text)
    return yaml.dump(data, Dumper=Dumper, sort_keys=False, allow_unicode=True)
