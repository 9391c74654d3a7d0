"""Space: validation errors (each naming the parameter), configs, activity, size with conditions."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dnnsat as ds
from dnnsat.space import MAX_FINITE_VALUES, Space, SpaceError


def example() -> Space:
    return ds.Space(
        {
            "w": ds.Int(16, 512, step=16),
            "act": ds.Categorical(["relu", "gelu"]),
            "lr": ds.Float(1e-4, 1e-1, log=True),
            "k": ds.Int(1, 3, condition={"act": ["gelu"]}),
        }
    )


# -- construction errors ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("param", "fragment"),
    [
        (ds.Int(5, 1), "empty range"),
        (ds.Float(2.0, 1.0), "empty range"),
        (ds.Int(1, 10, step=0), "step must be >= 1"),
        (ds.Int(1, 10, step=-2), "step must be >= 1"),
        (ds.Int(1, 10, step=1.5), "must be an integer"),  # type: ignore[arg-type]
        (ds.Int(1.5, 10), "must be an integer"),  # type: ignore[arg-type]
        (ds.Int(True, 10), "must be an integer"),  # type: ignore[arg-type]
        (ds.Int(0, 10, log=True), "log=True needs low >= 1"),
        (ds.Int(1, 10, step=2, log=True), "log=True needs low >= 1 and step == 1"),
        (ds.Int(0, 10 * MAX_FINITE_VALUES), "more than"),
        (ds.Float(0.0, 1.0, log=True), "log=True needs low > 0"),
        (ds.Float(0.1, 1.0, log=True, step=0.1), "both step and log"),
        (ds.Float(0.0, 1.0, step=0.0), "step must be > 0"),
        (ds.Float(0.0, 1.0, step=-0.5), "step must be > 0"),
        (ds.Float(0.0, 1.0, step=float("inf")), "step must be > 0"),
        (ds.Float(0.0, float("inf")), "finite number"),
        (ds.Float(float("nan"), 1.0), "finite number"),
        (ds.Float(0.0, 1.0, step=1e-9), "more than"),
        (ds.Categorical([]), "at least one choice"),
        (ds.Categorical(["a", "b", "a"]), "duplicate choice 'a'"),
        (ds.Categorical([1, 2, 2]), "duplicate choice 2"),
        (ds.Categorical([[1], 2]), "is a list"),
        (ds.Categorical([1.0, float("nan")]), "not finite"),
        (ds.Int(1, 3, condition={}), "non-empty mapping"),
        (ds.Int(1, 3, condition=5), "non-empty mapping"),  # type: ignore[arg-type]
        (ds.Int(1, 3, condition={"other": []}), "lists no values"),
    ],
)
def test_param_errors_name_the_parameter(param: ds.Param, fragment: str) -> None:
    with pytest.raises(SpaceError) as info:
        ds.Space({"first": ds.Int(1, 2), "other": ds.Categorical(["x", "y"]), "bad_param": param})
    assert fragment in str(info.value)
    assert "'bad_param'" in str(info.value)


def test_condition_errors() -> None:
    with pytest.raises(SpaceError, match=r"parameter 'k': condition refers to unknown parameter 'actt'"):
        ds.Space({"act": ds.Categorical(["relu"]), "k": ds.Int(1, 3, condition={"actt": ["relu"]})})
    with pytest.raises(SpaceError, match=r"parameter 'k': a condition cannot refer to itself"):
        ds.Space({"k": ds.Int(1, 3, condition={"k": [1]})})
    with pytest.raises(SpaceError, match=r"parameter 'k': condition value for 'act': 'tanh' is not one"):
        ds.Space({"act": ds.Categorical(["relu"]), "k": ds.Int(1, 3, condition={"act": ["tanh"]})})
    with pytest.raises(SpaceError, match=r"parameter 'k': condition on 'lr', a continuous Float"):
        ds.Space({"lr": ds.Float(0.1, 1.0), "k": ds.Int(1, 3, condition={"lr": [0.5]})})
    with pytest.raises(SpaceError, match=r"conditions form a cycle: .*a -> b -> a|b -> a -> b"):
        ds.Space({"a": ds.Int(1, 3, condition={"b": [1]}), "b": ds.Int(1, 3, condition={"a": [1]})})
    with pytest.raises(SpaceError, match=r"cycle: .*a -> c -> b -> a|cycle"):
        ds.Space(
            {
                "a": ds.Int(1, 3, condition={"c": [1]}),
                "b": ds.Int(1, 3, condition={"a": [1]}),
                "c": ds.Int(1, 3, condition={"b": [2]}),
            }
        )
    # a single value instead of a list is accepted
    s = ds.Space({"act": ds.Categorical(["relu", "gelu"]), "k": ds.Int(1, 3, condition={"act": "gelu"})})
    assert s["k"].condition == {"act": ("gelu",)}


def test_space_level_errors() -> None:
    with pytest.raises(SpaceError, match="at least one parameter"):
        ds.Space({})
    with pytest.raises(SpaceError, match="must be a Python identifier"):
        ds.Space({"my-param": ds.Int(1, 2)})
    with pytest.raises(SpaceError, match=r"parameter 'x': expected Int, Float or Categorical, got tuple"):
        ds.Space({"x": (1, 2)})  # type: ignore[dict-item]
    with pytest.raises(SpaceError, match="takes a mapping"):
        ds.Space([("x", ds.Int(1, 2))])  # type: ignore[arg-type]
    with pytest.raises(SpaceError, match=r"unknown parameter 'nope'"):
        example()["nope"]


def test_repr_is_readable() -> None:
    s = example()
    assert repr(s["w"]) == "Int(16, 512, step=16)"
    assert repr(s["lr"]) == "Float(0.0001, 0.1, log=True)"
    assert repr(s["act"]) == "Categorical(['relu', 'gelu'])"
    assert repr(s["k"]) == "Int(1, 3, condition={'act': ['gelu']})"
    assert repr(ds.Float(0.0, 1.0, step=0.25)) == "Float(0.0, 1.0, step=0.25)"
    assert repr(s).startswith("Space({'w': Int(16, 512, step=16), 'act': ")


# -- configurations --------------------------------------------------------------------------------


def test_validate_configs() -> None:
    s = example()
    assert s.validate({"w": 32, "act": "relu", "lr": 0.01}) == {"w": 32, "act": "relu", "lr": 0.01}
    out = s.validate({"w": 32.0, "act": "gelu", "lr": 1e-3, "k": 2.0})
    assert out == {"w": 32, "act": "gelu", "lr": 1e-3, "k": 2} and isinstance(out["w"], int)
    assert s.validate({"w": 48}, partial=True) == {"w": 48}
    cases = [
        ({"w": 32, "act": "relu", "lr": 0.01, "depth": 3}, "unknown parameter 'depth'"),
        ({"w": 33, "act": "relu", "lr": 0.01}, "parameter 'w': 33 is outside Int(16, 512, step=16)"),
        ({"w": 528, "act": "relu", "lr": 0.01}, "parameter 'w'"),
        ({"w": 32.5, "act": "relu", "lr": 0.01}, "parameter 'w': expected an integer"),
        ({"w": "32", "act": "relu", "lr": 0.01}, "parameter 'w': expected an integer"),
        ({"w": 32, "act": "tanh", "lr": 0.01}, "parameter 'act': 'tanh' is not one of the choices"),
        ({"w": 32, "act": "relu", "lr": 0.5}, "parameter 'lr': 0.5 is outside Float"),
        ({"w": 32, "act": "gelu", "lr": 0.01, "k": 4}, "parameter 'k'"),
        ({"w": 32, "act": "gelu", "lr": 0.01}, r"missing active parameter(s) ['k']"),
        ({"w": 32, "lr": 0.01}, "missing active parameter(s) ['act']"),
    ]
    config: Any
    for config, fragment in cases:
        with pytest.raises(SpaceError) as info:
            s.validate(config)
        assert fragment in str(info.value), (config, str(info.value))
    with pytest.raises(SpaceError, match="a configuration is a mapping"):
        s.validate([("w", 32)])  # type: ignore[arg-type]


def test_float_grid_tolerance() -> None:
    s = ds.Space({"d": ds.Float(0.0, 0.5, step=0.1)})
    assert s["d"].values() == (0.0, 0.1, 0.2, 0.3, 0.4, 0.5)
    assert s.validate({"d": 3 * 0.1}) == {"d": 0.3}  # 0.30000000000000004 snaps onto the grid
    with pytest.raises(SpaceError, match="parameter 'd': 0.25 is not on the grid"):
        s.validate({"d": 0.25})


def test_is_active_nested() -> None:
    s = ds.Space(
        {
            "layer": ds.Categorical(["conv", "pool"]),
            "k": ds.Int(1, 3, condition={"layer": ["conv"]}),
            "dil": ds.Int(1, 2, condition={"k": [3]}),
        }
    )
    assert s.conditional_order == ["layer", "k", "dil"]
    assert s.is_active("k", {"layer": "conv"}) and not s.is_active("k", {"layer": "pool"})
    assert s.is_active("dil", {"layer": "conv", "k": 3})
    assert not s.is_active("dil", {"layer": "conv", "k": 2})
    assert not s.is_active("dil", {"layer": "pool", "k": 3})  # parent k is inactive
    assert not s.is_active("k", {})


# -- size --------------------------------------------------------------------------------------------


def test_size_unconditional_and_conditional() -> None:
    # w: 32 values; act relu -> k inactive (1), act gelu -> k 3 values; lr continuous (not counted)
    assert example().size() == 32 * (1 + 3)
    s = ds.Space(
        {
            "layer": ds.Categorical(["a", "b", "c"]),
            "x": ds.Int(1, 3, condition={"layer": ["a"]}),
            "y": ds.Categorical([True, False], condition={"layer": ["b"]}),
            "z": ds.Float(0.0, 0.75, step=0.25, condition={"x": [1]}),
            "both": ds.Int(0, 1, condition={"layer": ["a", "b"]}),
        }
    )
    # a: x=1 -> z 4 values, x=2,3 -> 1 each; times both (2) -> 12; b: y 2 * both 2 = 4; c: 1
    assert s.size() == 12 + 4 + 1
    assert ds.Space({"a": ds.Int(1, 10), "b": ds.Categorical(list("xyz")), "f": ds.Float(0, 1)}).size() == 30


def _brute_force_size(space: Space) -> int:
    """Number of distinct active finite assignments (enumerating everything)."""
    finite = [n for n in space.names if space[n].is_finite]
    seen = set()
    for values in itertools.product(*(space[n].values() for n in finite)):
        config = dict(zip(finite, values))
        active = tuple(sorted((n, v) for n, v in config.items() if space.is_active(n, config)))
        seen.add(active)
    return len(seen)


@st.composite
def conditional_spaces(draw: Any) -> Space:
    n = draw(st.integers(1, 5))
    params: dict[str, ds.Param] = {}
    for i in range(n):
        kind = draw(st.sampled_from(["int", "cat", "float"]))
        if kind == "int":
            low = draw(st.integers(-3, 3))
            p: ds.Param = ds.Int(low, low + draw(st.integers(0, 3)))
        elif kind == "cat":
            p = ds.Categorical(draw(st.lists(st.sampled_from("abcd"), min_size=1, max_size=3, unique=True)))
        else:
            p = ds.Float(0.0, 1.0, step=draw(st.sampled_from([0.5, 1.0])))
        parents = [m for m in params if params[m].is_finite]
        if parents and draw(st.booleans()):
            parent = draw(st.sampled_from(parents))
            vals = draw(
                st.lists(st.sampled_from(params[parent].values()), min_size=1, max_size=2, unique=True)
            )
            p = (
                type(p)(**{**p.__dict__, "condition": {parent: vals}})
                if not isinstance(p, ds.Categorical)
                else ds.Categorical(p.choices, condition={parent: vals})
            )
        params[f"p{i}"] = p
    return ds.Space(params)


@settings(max_examples=60, deadline=None)
@given(conditional_spaces())
def test_size_matches_brute_force(space: Space) -> None:
    assert space.size() == _brute_force_size(space)
