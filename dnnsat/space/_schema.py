"""The pydantic schema of a space's dict form (``Space.from_dict``): validation and readable errors.

Imported on first use by :func:`dnnsat.space._formats.params_from_dict`, so that ``import dnnsat`` works
without pydantic (e.g. on a GPU machine that only has torch and numpy, see ``benchmarks/gpu_collect.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ._params import Categorical, Float, Int, Param, SpaceError

__all__ = ["params_from_dict"]

Scalar = Union[bool, int, float, str, None]  # noqa: UP007 - pydantic keeps the order (strict smart mode)


def _no_bool(v: Any) -> Any:
    if isinstance(v, bool):
        raise ValueError("a boolean is not a number here")
    return v


class _ParamModel(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=False)
    condition: dict[str, Union[list[Scalar], Scalar]] | None = None  # noqa: UP007


class _IntModel(_ParamModel):
    type: Literal["int"]
    low: int
    high: int
    step: int = 1
    log: bool = False

    _check = field_validator("low", "high", "step", mode="before")(_no_bool)


class _FloatModel(_ParamModel):
    type: Literal["float"]
    low: float
    high: float
    log: bool = False
    step: float | None = None

    _check = field_validator("low", "high", "step", mode="before")(_no_bool)


class _CategoricalModel(_ParamModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    type: Literal["categorical"]
    choices: list[Scalar] = Field(min_length=1)


_AnyParam = Annotated[Union[_IntModel, _FloatModel, _CategoricalModel], Field(discriminator="type")]  # noqa: UP007


class _SpaceModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    params: dict[str, _AnyParam] = Field(min_length=1)


_FIELDS = {
    "int": "type, low, high, step, log, condition",
    "float": "type, low, high, log, step, condition",
    "categorical": "type, choices, condition",
}


def _fix_hint(err: Mapping[str, Any], field_name: str, tag: str | None) -> str:
    kind = err["type"]
    if kind == "missing":
        return f"add the required field {field_name!r}"
    if kind == "extra_forbidden":
        allowed = _FIELDS.get(tag or "", "params")
        return f"remove the unknown field {field_name!r} (allowed: {allowed})"
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        return "set 'type' to 'int', 'float' or 'categorical'"
    if kind == "too_short":
        return "give at least one entry"
    if field_name == "condition":
        return "write a condition as {parent: [values]}, e.g. condition: {act: [gelu]}"
    if field_name == "choices" or tag == "categorical":
        return "choices are a list of numbers, strings, booleans or null, e.g. choices: [relu, gelu]"
    if kind.startswith("int_"):
        return "use a whole number"
    if kind.startswith("float_") or kind == "value_error":
        return "use a number"
    if kind.startswith("bool_"):
        return "use true or false"
    if tag is None:
        hint = "params maps names to {type: int|float|categorical, ...}"
        return hint + ", e.g. {w: {type: int, low: 1, high: 8}}"
    return f"the fields of a {tag!r} parameter are {_FIELDS[tag]}"


_UNION_MEMBERS = {"bool", "int", "float", "str"}


def _field_path(rest: Sequence[Any]) -> str:
    """``condition.b`` for pydantic's ``condition.b.list[nullable[...]]`` (drops union member names)."""
    parts = [str(x) for i, x in enumerate(rest) if not (i and (x in _UNION_MEMBERS or "[" in str(x)))]
    return ".".join(parts) or "type"


def _pydantic_error(err: ValidationError) -> SpaceError:
    lines = []
    seen: set[tuple[Any, ...]] = set()
    for e in err.errors():
        loc = tuple(e["loc"])
        if len(loc) < 2 or loc[0] != "params":
            what = "the space" if not loc else f"field {'.'.join(map(str, loc))!r}"
            if e["type"] == "missing" and loc == ("params",):
                lines.append("the space needs a top-level 'params' mapping {name: {type: ..., ...}}")
            elif e["type"] == "extra_forbidden":
                lines.append(f"unknown top-level field {loc[-1]!r}; the only one is 'params'")
            else:
                lines.append(f"{what}: {e['msg']}; {_fix_hint(e, str(loc[-1]) if loc else '', None)}")
            continue
        name = loc[1]
        tag = loc[2] if len(loc) > 2 and loc[2] in _FIELDS else None
        rest = loc[3:] if tag else loc[2:]
        field_name = str(rest[0]) if rest else "type"
        key = (name, field_name)
        if key in seen:  # one line per field (unions of scalars report one error per member)
            continue
        seen.add(key)
        where = _field_path(rest)
        got = "" if e["type"] in ("missing",) else f" (got {e.get('input')!r})"
        lines.append(f"parameter {name!r}: field {where!r}: {e['msg']}{got}; {_fix_hint(e, field_name, tag)}")
    return SpaceError("invalid space: " + "; ".join(lines))


def params_from_dict(data: Mapping[str, Any]) -> dict[str, Param]:
    """The parameters of ``{"params": {name: {"type": "int"|"float"|"categorical", ...}}}``.

    Fields: ``int``: low, high, step (1), log (false); ``float``: low, high, log (false), step (null);
    ``categorical``: choices; every type: condition ``{parent: [values]}`` (optional).
    """
    if not isinstance(data, Mapping):
        raise SpaceError(f"a space dict is {{'params': {{name: {{...}}}}}}, got {type(data).__name__}")
    try:
        model = _SpaceModel.model_validate(dict(data))
    except ValidationError as err:
        raise _pydantic_error(err) from None
    params: dict[str, Param] = {}
    for name, m in model.params.items():
        cond: Any = m.condition
        if isinstance(m, _IntModel):
            params[name] = Int(m.low, m.high, step=m.step, log=m.log, condition=cond)
        elif isinstance(m, _FloatModel):
            params[name] = Float(m.low, m.high, log=m.log, step=m.step, condition=cond)
        else:
            params[name] = Categorical(m.choices, condition=cond)
    return params
