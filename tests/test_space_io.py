"""Space conversions: Optuna, NNI (incl. nested choice), dict/JSON/YAML files - with the real libraries."""

from __future__ import annotations

import json
import logging
import math
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dnnsat as ds
from dnnsat.space import (
    Space,
    SpaceError,
    config_from_nni,
    config_to_nni,
    load_space,
    nni_child_name,
    save_space,
    space_to_dict,
)

optuna = pytest.importorskip("optuna")
hpo_utils = pytest.importorskip("nni.common.hpo_utils")
random_tuner = pytest.importorskip("nni.algorithms.hpo.random_tuner")

optuna.logging.set_verbosity(optuna.logging.WARNING)
logging.getLogger("nni").setLevel(logging.WARNING)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def strict_equal(a: Space, b: Space) -> bool:
    """Space equality that also tells 1 from 1.0 from True (the dict forms compare types via JSON)."""
    return a == b and json.dumps(space_to_dict(a)) == json.dumps(space_to_dict(b))


# -- strategies ------------------------------------------------------------------------------------

scalars = st.one_of(
    st.text(min_size=0, max_size=6),
    st.integers(-1000, 1000),
    st.floats(-1e6, 1e6, allow_nan=False).filter(lambda x: x != 0 or math.copysign(1, x) > 0),
    st.booleans(),
    st.none(),
)


@st.composite
def int_params(draw: Any) -> ds.Int:
    if draw(st.booleans()):
        low = draw(st.integers(1, 100))
        return ds.Int(low, low + draw(st.integers(0, 1000)), log=draw(st.booleans()))
    low, step = draw(st.integers(-100, 100)), draw(st.integers(1, 16))
    return ds.Int(low, low + step * draw(st.integers(0, 50)), step=step)


@st.composite
def float_params(draw: Any, nice: bool = False) -> ds.Float:
    if draw(st.booleans()):  # stepped, with binary-exact numbers so that every library agrees
        step = draw(st.sampled_from([0.25, 0.5, 1.0, 2.0, 8.0]))
        low = draw(st.integers(-40, 40)) * 0.25 if nice else draw(st.integers(-40, 40)) * step
        return ds.Float(low, low + step * draw(st.integers(0, 40)), step=step)
    low = draw(st.floats(1e-6, 1e3) if nice else st.floats(-1e3, 1e3))
    high = low + draw(st.floats(0, 1e3))
    log = low > 0 and draw(st.booleans())
    return ds.Float(low, high, log=log)


def categorical_params(elements: Any = scalars) -> Any:
    def dedupe(xs: list[Any]) -> list[Any]:  # choices equal in Python (1, 1.0, True) are rejected
        out: list[Any] = []
        for x in xs:
            if not any(x == y for y in out):
                out.append(x)
        return out

    return st.lists(elements, min_size=1, max_size=6).map(dedupe).map(ds.Categorical)


@st.composite
def spaces(draw: Any, conditions: bool = True) -> Space:
    params: dict[str, ds.Param] = {}
    for i in range(draw(st.integers(1, 6))):
        p = draw(st.one_of(int_params(), float_params(), categorical_params()))
        finite = [n for n in params if params[n].is_finite and len(params[n].values()) < 50]
        if conditions and finite and draw(st.booleans()):
            parent = draw(st.sampled_from(finite))
            values = draw(st.lists(st.sampled_from(params[parent].values()), min_size=1, max_size=3))
            object.__setattr__(p, "condition", {parent: tuple(dict.fromkeys(values))})
        params[f"p{i}"] = p
    return ds.Space(params)


keys = st.from_regex(r"[a-z][a-z0-9_]{0,5}", fullmatch=True)
labels = st.one_of(st.from_regex(r"[A-Za-z][A-Za-z0-9_\- ]{0,6}", fullmatch=True), st.integers(0, 9))


@st.composite
def nni_param(draw: Any, depth: int) -> dict[str, Any]:
    kinds = ["choice", "randint", "uniform", "loguniform", "quniform", "qloguniform"]
    if depth > 0:
        kinds.append("nested")
    kind = draw(st.sampled_from(kinds))
    if kind == "nested":
        names = draw(st.lists(labels, min_size=1, max_size=3, unique_by=lambda x: nni_label(x)))
        value = []
        for name in names:
            branch: dict[str, Any] = {"_name": name}
            for key in draw(st.lists(keys, max_size=2, unique=True)):
                branch[key] = draw(nni_param(depth - 1))
            value.append(branch)
        return {"_type": "choice", "_value": value}
    if kind == "choice":
        elems = st.one_of(st.text(max_size=4), st.integers(-50, 50), st.sampled_from([0.5, 1.5, -2.25]))
        values = draw(st.lists(elems, min_size=1, max_size=5, unique_by=lambda x: (type(x), x)))
        return {"_type": "choice", "_value": values}
    if kind == "randint":
        low = draw(st.integers(-20, 20))
        return {"_type": "randint", "_value": [low, low + draw(st.integers(1, 30))]}
    if kind in ("uniform", "loguniform"):
        low = draw(st.floats(1e-4, 10)) if kind == "loguniform" else draw(st.floats(-10, 10))
        return {"_type": kind, "_value": [low, low + draw(st.floats(0.01, 100))]}
    q = draw(st.sampled_from([1, 2, 0.25, 0.5, 10]))
    if draw(st.booleans()):  # bounds on the grid
        k = draw(st.integers(1, 10))
        low = k * q
        high = low + q * draw(st.integers(1, 20))
    else:  # anywhere: NNI clips round(x / q) * q into [low, high]
        low = draw(st.sampled_from([0.3, 1, 1.7, 3]))
        high = low + draw(st.sampled_from([0.9, 5, 12.5, 40]))
    return {"_type": kind, "_value": [low, high, q]}


def nni_label(x: Any) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in str(x))


@st.composite
def nni_spaces(draw: Any) -> dict[str, Any]:
    names = draw(st.lists(keys, min_size=1, max_size=4, unique=True))
    return {name: draw(nni_param(2)) for name in names}


def nni_samples(search_space: dict[str, Any], n: int, seed: int = 0) -> list[dict[str, Any]]:
    """Up to ``n`` parameter dicts from NNI's random tuner (fewer when it has explored a tiny space)."""
    import nni

    tuner = random_tuner.RandomTuner(seed=seed)
    tuner.update_search_space(search_space)
    out = []
    for i in range(n):
        try:
            out.append(tuner.generate_parameters(i))
        except nni.NoMoreTrialError:
            break
    return out


def nesting_depth(search_space: Any) -> int:
    depth = 0
    for spec in search_space.values():
        if isinstance(spec, dict) and spec.get("_type") == "choice":
            for v in spec["_value"]:
                if isinstance(v, dict):
                    depth = max(depth, 1 + nesting_depth({k: s for k, s in v.items() if k != "_name"}))
    return depth


# -- Optuna ------------------------------------------------------------------------------------------


def test_optuna_example() -> None:
    d = optuna.distributions
    dists = {
        "w": d.IntDistribution(16, 512, step=16),
        "depth": d.IntDistribution(1, 64, log=True),
        "lr": d.FloatDistribution(1e-4, 1e-1, log=True),
        "drop": d.FloatDistribution(0.0, 0.5, step=0.1),
        "act": d.CategoricalDistribution(["relu", "gelu", None, 3, 2.5, True]),
    }
    s = ds.Space.from_optuna(dists)
    assert s["w"] == ds.Int(16, 512, step=16)
    assert s["depth"] == ds.Int(1, 64, log=True)
    assert s["lr"] == ds.Float(1e-4, 1e-1, log=True)
    assert s["drop"] == ds.Float(0.0, 0.5, step=0.1) and len(s["drop"].values()) == 6
    assert s["act"] == ds.Categorical(["relu", "gelu", None, 3, 2.5, True])
    assert s.to_optuna() == dists
    assert s.size() == 32 * 64 * 6 * 6


def test_to_optuna_drops_conditions_and_aligns_high() -> None:
    s = ds.Space(
        {
            "act": ds.Categorical(["relu", "gelu"]),
            "k": ds.Int(1, 10, step=4, condition={"act": ["gelu"]}),
            "f": ds.Float(0.0, 1.0, step=0.3),
        }
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Optuna must not need to adjust anything
        dists = s.to_optuna()
    assert dists["k"] == optuna.distributions.IntDistribution(1, 9, step=4)
    assert dists["f"].high == pytest.approx(0.9)
    assert ds.Space.from_optuna(dists)["k"].values() == s["k"].values()


@SETTINGS
@given(spaces(conditions=False))
def test_optuna_round_trip_and_ask(space: Space) -> None:
    dists = space.to_optuna()
    back = ds.Space.from_optuna(dists)
    for name in space:
        p, q = space[name], back[name]
        assert type(p) is type(q)
        if p.is_finite:
            assert q.values() == pytest.approx(p.values()) if not isinstance(p, ds.Categorical) else q == p
    if all(not isinstance(p, ds.Float) or p.step is None for p in space.values()):
        assert back == space
    # the real thing accepts the distributions and its samples lie in the space
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(3):
        trial = study.ask(dists)
        assert set(space.validate(trial.params)) == set(space.names)
        study.tell(trial, 0.0)


def test_from_optuna_errors() -> None:
    with pytest.raises(SpaceError, match=r"parameter 'x': int is not an Optuna distribution"):
        ds.Space.from_optuna({"x": 3})
    with pytest.raises(SpaceError, match="takes a mapping"):
        ds.Space.from_optuna([optuna.distributions.IntDistribution(1, 2)])  # type: ignore[arg-type]
    with pytest.raises(SpaceError, match="parameter 'bad-name'|'bad-name' must be a Python identifier"):
        ds.Space.from_optuna({"bad-name": optuna.distributions.IntDistribution(1, 2)})


# -- NNI -----------------------------------------------------------------------------------------------

NESTED = {
    "layer0": {
        "_type": "choice",
        "_value": [
            {"_name": "Empty"},
            {"_name": "Conv", "kernel_size": {"_type": "choice", "_value": [1, 2, 3, 5]}},
            {"_name": "Max-pool", "pooling_size": {"_type": "choice", "_value": [2, 3, 5]}},
            {"_name": "Avg_pool", "pooling_size": {"_type": "choice", "_value": [2, 3, 5]}},
        ],
    },
    "lr": {"_type": "loguniform", "_value": [1e-4, 0.1]},
    "batch": {"_type": "randint", "_value": [16, 20]},
    "width": {"_type": "quniform", "_value": [16, 128, 16]},
    "depth": {"_type": "qloguniform", "_value": [1, 64, 1]},
    "drop": {"_type": "uniform", "_value": [0.0, 0.5]},
}


def test_nni_example_mapping() -> None:
    s = ds.Space.from_nni(NESTED)
    assert s.names == [
        "layer0",
        "layer0__Conv__kernel_size",
        "layer0__Max_pool__pooling_size",
        "layer0__Avg_pool__pooling_size",
        "lr",
        "batch",
        "width",
        "depth",
        "drop",
    ]
    assert s["layer0"] == ds.Categorical(["Empty", "Conv", "Max-pool", "Avg_pool"])
    assert s["layer0__Max_pool__pooling_size"].condition == {"layer0": ("Max-pool",)}
    assert nni_child_name("layer0", "Max-pool", "pooling_size") == "layer0__Max_pool__pooling_size"
    assert s["batch"] == ds.Int(16, 19)  # NNI's randint excludes the upper bound
    assert s["width"] == ds.Float(16, 128, step=16) and len(s["width"].values()) == 8
    assert s["depth"] == ds.Int(1, 64, log=True)
    assert s["lr"] == ds.Float(1e-4, 0.1, log=True) and s["drop"] == ds.Float(0.0, 0.5)
    assert s.size() == (1 + 4 + 3 + 3) * 4 * 8 * 64
    assert s.to_nni() == NESTED
    assert ds.Space.from_nni(s.to_nni()) == s


def test_nni_q_semantics_match_nni_sampling() -> None:
    """The value sets dnnsat derives are exactly what NNI's own tuner produces."""
    space = {
        "a": {"_type": "quniform", "_value": [1, 10, 4]},  # clip(round(x/4)*4, 1, 10) -> {1, 4, 8}
        "a2": {"_type": "quniform", "_value": [1, 11, 4]},  # -> {1, 4, 8, 11}
        "a3": {"_type": "quniform", "_value": [1, 14, 4]},  # 14 / 4 = 3.5 rounds to 4 -> 14 at x = 14 only
        "b": {"_type": "quniform", "_value": [0.1, 0.5, 0.1]},
        "c": {"_type": "qloguniform", "_value": [2, 20, 2]},
        "d": {"_type": "qloguniform", "_value": [3, 30, 10]},  # -> {3, 10, 20, 30}
        "e": {"_type": "randint", "_value": [-2, 2]},
        "f": {"_type": "qloguniform", "_value": [1, 8, 1]},
    }
    s = ds.Space.from_nni(space)
    assert s["a"] == ds.Categorical([1.0, 4.0, 8.0])
    assert s["a2"] == ds.Categorical([1.0, 4.0, 8.0, 11.0])
    assert s["a3"] == ds.Categorical([1.0, 4.0, 8.0, 12.0, 14.0])
    assert s["b"] == ds.Float(0.1, 0.5, step=0.1)
    assert s["c"] == ds.Float(2, 20, step=2)
    assert s["d"] == ds.Categorical([3.0, 10.0, 20.0, 30.0])
    assert s["e"] == ds.Int(-2, 1)
    assert s["f"] == ds.Int(1, 8, log=True)
    seen: dict[str, set[Any]] = {n: set() for n in s.names}
    for params in nni_samples(space, 600):
        config = config_from_nni(s, params)
        for n, v in config.items():
            seen[n].add(v)
    seen["a3"].add(config_from_nni(s, {**params, "a3": 14.0})["a3"])  # the end point itself
    for n in s.names:
        assert seen[n] == set(s[n].values()), n  # every value reachable, nothing else
    assert hpo_utils.validate_search_space(s.to_nni(), raise_exception=True)


@settings(max_examples=60, deadline=None)
@given(
    type_=st.sampled_from(["quniform", "qloguniform"]),
    lo=st.floats(0.01, 50),
    width=st.floats(0.01, 100),
    q=st.sampled_from([0.1, 0.25, 1, 3, 7.5]),
    u=st.lists(st.floats(0, 1), min_size=1, max_size=50),
)
def test_nni_q_values_are_exact(type_: str, lo: float, width: float, q: float, u: list[float]) -> None:
    """Every value NNI's own deformat_parameters can produce lies in the space dnnsat derives."""
    spec = {"_type": type_, "_value": [lo, lo + width, q]}
    try:
        s = ds.Space.from_nni({"x": spec})
    except SpaceError as err:
        assert "too many values" in str(err) or "more than" in str(err)
        return
    formatted = hpo_utils.format_search_space({"x": spec})
    key = ("x",)
    low, high = formatted[key].low, formatted[key].high
    ties = [(k + 0.5) * q for k in range(int(lo / q), int((lo + width) / q) + 1)]  # round-half-even
    points = [low + t * (high - low) for t in [0.0, 1.0, *u]]
    ties = [x for x in ties if lo <= x <= lo + width]
    points += [x if type_ == "quniform" else math.log(x) for x in ties[:10] + ties[-10:]]
    for internal in points:
        value = hpo_utils.deformat_parameters({key: internal}, formatted)["x"]
        assert config_from_nni(s, {"x": value}) == {"x": pytest.approx(value, rel=1e-9, abs=1e-12)}


@SETTINGS
@given(nni_spaces())
def test_nni_round_trip_property(search_space: dict[str, Any]) -> None:
    assert hpo_utils.validate_search_space(search_space, raise_exception=True)
    s = ds.Space.from_nni(search_space)
    out = s.to_nni()
    assert hpo_utils.validate_search_space(out, raise_exception=True)  # NNI's own validator
    back = ds.Space.from_nni(out)
    assert back == s
    assert strict_equal(back, s)
    # NNI's random tuner samples the converted space; each sample is a valid config and maps back.
    # (NNI 3.0's samplers raise KeyError on a choice nested two levels deep whose parent is inactive:
    # formatting.ParameterSpec.is_activated_in, so only spaces nested at most one level are sampled.)
    for params in nni_samples(out, 5) if nesting_depth(out) <= 1 else []:
        config = config_from_nni(s, params)
        assert config == s.validate(config)
        again = config_to_nni(s, config)
        assert config_from_nni(s, again) == config
        assert json.dumps(again, sort_keys=True) == json.dumps(_normalise_nni(s, params), sort_keys=True)


def _normalise_nni(space: Space, params: Any) -> Any:
    """NNI returns 4.0 for an integer qloguniform; dnnsat configs hold 4."""
    return config_to_nni(space, config_from_nni(space, params))


@SETTINGS
@given(spaces())
def test_to_nni_of_general_spaces(space: Space) -> None:
    """Any space without None choices converts to a valid NNI space whose samples map to valid configs."""
    if any(isinstance(p, ds.Categorical) and None in p.choices for p in space.values()):
        with pytest.raises(SpaceError, match="NNI choices must be numbers, strings or bools"):
            space.to_nni()
        return
    out = space.to_nni()
    assert hpo_utils.validate_search_space(out, raise_exception=True)
    for params in nni_samples(out, 5) if nesting_depth(out) <= 1 else []:
        config = config_from_nni(space, params)
        assert space.validate(config) == config


def test_to_nni_general_conditions() -> None:
    s = ds.Space(
        {
            "act": ds.Categorical(["relu", "gelu", "silu"]),
            "k": ds.Int(1, 3, condition={"act": ["gelu", "silu"]}),
            "n": ds.Int(1, 4),
            "m": ds.Int(0, 1, condition={"n": [2]}),  # numeric parent: not expressible in NNI
        }
    )
    out = s.to_nni()
    assert out["act"]["_value"] == [
        {"_name": "relu"},
        {"_name": "gelu", "k": {"_type": "randint", "_value": [1, 4]}},
        {"_name": "silu", "k": {"_type": "randint", "_value": [1, 4]}},
    ]
    assert out["m"] == {"_type": "randint", "_value": [0, 2]}  # condition dropped, kept at top level
    assert config_from_nni(s, {"act": {"_name": "silu", "k": 2}, "n": 1, "m": 1}) == {
        "act": "silu",
        "k": 2,
        "n": 1,
    }
    assert config_to_nni(s, {"act": "gelu", "k": 3, "n": 2, "m": 0}) == {
        "act": {"_name": "gelu", "k": 3},
        "n": 2,
        "m": 0,
    }


def test_to_nni_warns_for_dropped_conditions(caplog: pytest.LogCaptureFixture) -> None:
    s = ds.Space({"n": ds.Int(1, 4), "m": ds.Int(0, 1, condition={"n": [2]})})
    with caplog.at_level(logging.WARNING, logger="dnnsat.space"):
        s.to_nni()
    assert "'m'" in caplog.text and "nested choice" in caplog.text


def test_to_nni_special_cases() -> None:
    s = ds.Space(
        {
            "one": ds.Int(3, 3),
            "f1": ds.Float(0.5, 0.5),
            "w": ds.Int(8, 30, step=8),
            "odd": ds.Int(1, 9, step=4),
            "g": ds.Float(0.1, 1.0, step=0.3),
            "flag": ds.Categorical([True, False]),
        }
    )
    out = s.to_nni()
    assert out["one"] == {"_type": "randint", "_value": [3, 4]}
    assert out["f1"] == {"_type": "choice", "_value": [0.5]}
    assert out["w"] == {"_type": "quniform", "_value": [8, 24, 8]}
    assert out["odd"] == {"_type": "choice", "_value": [1, 5, 9]}  # low not a multiple of step
    assert out["g"]["_type"] == "choice" and out["g"]["_value"] == pytest.approx([0.1, 0.4, 0.7, 1.0])
    assert hpo_utils.validate_search_space(out, raise_exception=True)
    for params in nni_samples(out, 20):
        config = config_from_nni(s, params)
        assert isinstance(config["w"], int) and config["w"] in (8, 16, 24)


@pytest.mark.parametrize(
    ("search_space", "fragment"),
    [
        ({"x": {"_type": "normal", "_value": [0, 1]}}, "parameter 'x': NNI normal is unbounded"),
        ({"x": {"_type": "qlognormal", "_value": [0, 1, 1]}}, "use 'uniform' or 'loguniform'"),
        ({"x": {"_type": "lognormal", "_value": [0, 1]}}, "parameter 'x'"),
        ({"x": {"_type": "qnormal", "_value": [0, 1, 2]}}, "parameter 'x'"),
        ({"x": {"_type": "gaussian", "_value": [0, 1]}}, "parameter 'x': unknown NNI _type 'gaussian'"),
        ({"x": {"_value": [0, 1]}}, "parameter 'x': an NNI parameter is"),
        ({"x": [1, 2]}, "parameter 'x': an NNI parameter is"),
        ({"x": {"_type": "choice", "_value": 3}}, "parameter 'x': NNI _value must be a list"),
        ({"x": {"_type": "choice", "_value": []}}, "parameter 'x': NNI choice needs at least one value"),
        ({"x": {"_type": "choice", "_value": ["a", "a"]}}, "parameter 'x': duplicate choice 'a'"),
        ({"x": {"_type": "randint", "_value": [5, 5]}}, "parameter 'x': NNI randint [5, 5) is empty"),
        (
            {"x": {"_type": "randint", "_value": [1.5, 5]}},
            "parameter 'x': NNI randint bounds must be integers",
        ),
        ({"x": {"_type": "randint", "_value": [1]}}, "parameter 'x': NNI randint needs _value"),
        ({"x": {"_type": "uniform", "_value": [1, "2"]}}, "parameter 'x': NNI uniform needs _value"),
        ({"x": {"_type": "uniform", "_value": [2, 1]}}, "parameter 'x': empty range"),
        (
            {"x": {"_type": "uniform", "_value": [0, float("inf")]}},
            "parameter 'x': NNI uniform bounds must be",
        ),
        ({"x": {"_type": "loguniform", "_value": [0, 1]}}, "parameter 'x': log=True needs low > 0"),
        ({"x": {"_type": "quniform", "_value": [0, 1, 0]}}, "parameter 'x': NNI quniform needs q > 0"),
        ({"x": {"_type": "quniform", "_value": [3, 1, 1]}}, "parameter 'x': NNI quniform has low=3 > high=1"),
        (
            {"x": {"_type": "qloguniform", "_value": [0, 8, 1]}},
            "parameter 'x': NNI qloguniform needs low > 0",
        ),
        ({"x": {"_type": "quniform", "_value": [0.5, 1e6, 0.25]}}, "parameter 'x': more than 1000000 values"),
        ({"x": {"_type": "quniform", "_value": [0.3, 1e6, 0.25]}}, "too many values"),
        ({"bad-name": {"_type": "randint", "_value": [0, 2]}}, "NNI parameter 'bad-name'"),
        (
            {"x": {"_type": "choice", "_value": [{"_name": "a"}, "b"]}},
            "parameter 'x': a nested choice needs every value to be a dict with '_name'",
        ),
        (
            {"x": {"_type": "choice", "_value": [{"k": 1}]}},
            "parameter 'x': nested choice {'k': 1} has no '_name'",
        ),
        (
            {
                "x": {
                    "_type": "choice",
                    "_value": [{"_name": "a", "k": {"_type": "normal", "_value": [0, 1]}}],
                }
            },
            "parameter 'x__a__k' (key 'k' in choice 'a' of 'x'): NNI normal",
        ),
        (
            {
                "x": {
                    "_type": "choice",
                    "_value": [{"_name": "a", "k k": {"_type": "randint", "_value": [0, 2]}}],
                }
            },
            "NNI key 'k k' in choice 'a' of 'x'",
        ),
        (
            {
                "x": {"_type": "choice", "_value": [{"_name": "a-b"}, {"_name": "a_b"}]},
            },
            "",
        ),
        (
            {
                "x": {
                    "_type": "choice",
                    "_value": [
                        {"_name": "a-b", "k": {"_type": "randint", "_value": [0, 2]}},
                        {"_name": "a_b", "k": {"_type": "randint", "_value": [0, 2]}},
                    ],
                },
            },
            "parameter 'x__a_b__k' (key 'k' in choice 'a_b' of 'x'): the name is used twice",
        ),
        ([1, 2], "an NNI search space is a dict"),
    ],
)
def test_nni_errors(search_space: Any, fragment: str) -> None:
    if fragment == "":  # distinct labels that sanitise alike, without children: fine
        assert ds.Space.from_nni(search_space)["x"] == ds.Categorical(["a-b", "a_b"])
        return
    with pytest.raises(SpaceError) as info:
        ds.Space.from_nni(search_space)
    assert fragment in str(info.value)


def test_nni_unaligned_q_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="dnnsat.space"):
        s = ds.Space.from_nni({"x": {"_type": "quniform", "_value": [1, 10, 4]}})
    assert s["x"] == ds.Categorical([1.0, 4.0, 8.0])
    assert "exact value set" in caplog.text


def test_nni_config_errors() -> None:
    s = ds.Space.from_nni(NESTED)
    ok = {"layer0": {"_name": "Conv", "kernel_size": 3}, "lr": 0.01, "batch": 17, "width": 32.0, "depth": 4.0}
    assert config_from_nni(s, {**ok, "drop": 0.1}) == {
        "layer0": "Conv",
        "layer0__Conv__kernel_size": 3,
        "lr": 0.01,
        "batch": 17,
        "width": 32.0,
        "depth": 4,
        "drop": 0.1,
    }
    with pytest.raises(SpaceError, match="parameter 'layer0': a nested choice value is"):
        config_from_nni(s, {**ok, "layer0": "Conv", "drop": 0.1})
    with pytest.raises(SpaceError, match="parameter 'layer0': 'Dense' is not one of the choices"):
        config_from_nni(s, {**ok, "layer0": {"_name": "Dense"}, "drop": 0.1})
    with pytest.raises(SpaceError, match=r"missing active parameter\(s\) \['drop'\]"):
        config_from_nni(s, ok)
    with pytest.raises(SpaceError, match="parameter 'batch'"):
        config_from_nni(s, {**ok, "batch": 20, "drop": 0.1})  # randint upper bound is excluded
    with pytest.raises(SpaceError, match="NNI parameters are a dict"):
        config_from_nni(s, [1])  # type: ignore[arg-type]


# -- dict / JSON / YAML ----------------------------------------------------------------------------


BRIEF_EXAMPLE = {
    "params": {
        "w": {"type": "int", "low": 16, "high": 512, "step": 16},
        "act": {"type": "categorical", "choices": ["relu", "gelu"]},
        "k": {"type": "int", "low": 1, "high": 3, "condition": {"act": ["gelu"]}},
        "lr": {"type": "float", "low": 1e-4, "high": 0.1, "log": True},
    }
}


def test_dict_example() -> None:
    s = ds.Space.from_dict(BRIEF_EXAMPLE)
    assert s == ds.Space(
        {
            "w": ds.Int(16, 512, step=16),
            "act": ds.Categorical(["relu", "gelu"]),
            "k": ds.Int(1, 3, condition={"act": ["gelu"]}),
            "lr": ds.Float(1e-4, 0.1, log=True),
        }
    )
    assert s.to_dict() == BRIEF_EXAMPLE
    # lax but safe coercions: YAML "1e-4" (a string in YAML 1.1), 16.0 for an int, a scalar condition
    s2 = ds.Space.from_dict(
        {
            "params": {
                "w": {"type": "int", "low": 16.0, "high": "512", "step": 16},
                "act": {"type": "categorical", "choices": ["relu", "gelu"]},
                "k": {"type": "int", "low": 1, "high": 3, "condition": {"act": "gelu"}},
                "lr": {"type": "float", "low": "1e-4", "high": 0.1, "log": "true"},
            }
        }
    )
    assert s2 == s


@SETTINGS
@given(spaces())
def test_dict_round_trip(space: Space) -> None:
    d = space.to_dict()
    assert strict_equal(ds.Space.from_dict(d), space)
    assert strict_equal(ds.Space.from_dict(json.loads(json.dumps(d))), space)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(space=spaces(), suffix=st.sampled_from([".json", ".yaml", ".yml"]))
def test_file_round_trip(tmp_path: Path, space: Space, suffix: str) -> None:
    path = tmp_path / f"space{suffix}"
    space.save(str(path))
    assert strict_equal(ds.Space.load(str(path)), space)
    assert strict_equal(load_space(path), space)  # PathLike too


def test_yaml_file_is_readable(tmp_path: Path) -> None:
    path = tmp_path / "space.yaml"
    path.write_text(
        "params:\n"
        "  w: {type: int, low: 16, high: 512, step: 16}\n"
        "  act: {type: categorical, choices: [relu, gelu]}\n"
        "  k: {type: int, low: 1, high: 3, condition: {act: [gelu]}}\n"
        "  lr: {type: float, low: 1e-4, high: 0.1, log: true}\n"
    )
    assert ds.Space.load(str(path)) == ds.Space.from_dict(BRIEF_EXAMPLE)
    save_space(ds.Space.from_dict(BRIEF_EXAMPLE), tmp_path / "out.yml")
    text = (tmp_path / "out.yml").read_text()
    assert text.startswith("params:\n  w:\n    type: int\n")


def test_load_nni_search_space_file(tmp_path: Path) -> None:
    path = tmp_path / "search_space.json"
    path.write_text(json.dumps(NESTED))
    assert ds.Space.load(str(path)) == ds.Space.from_nni(NESTED)


@pytest.mark.parametrize(
    ("data", "fragments"),
    [
        ({"params": {"w": {"type": "int", "low": 16, "hihg": 512}}}, ["parameter 'w'", "'hihg'", "remove"]),
        (
            {"params": {"w": {"type": "int", "low": 16}}},
            ["parameter 'w'", "'high'", "add the required field"],
        ),
        ({"params": {"w": {"type": "integer", "low": 1, "high": 2}}}, ["parameter 'w'", "'int', 'float' or"]),
        ({"params": {"w": {"low": 1, "high": 2}}}, ["parameter 'w'", "set 'type'"]),
        (
            {"params": {"w": {"type": "int", "low": 1.5, "high": 2}}},
            ["parameter 'w'", "'low'", "whole number"],
        ),
        ({"params": {"w": {"type": "int", "low": True, "high": 2}}}, ["parameter 'w'", "'low'"]),
        ({"params": {"w": {"type": "float", "low": "abc", "high": 2}}}, ["parameter 'w'", "use a number"]),
        (
            {"params": {"w": {"type": "float", "low": 0, "high": 1, "log": "maybe"}}},
            ["parameter 'w'", "true or"],
        ),
        ({"params": {"c": {"type": "categorical", "choices": []}}}, ["parameter 'c'", "at least one"]),
        ({"params": {"c": {"type": "categorical", "choices": [[1, 2]]}}}, ["parameter 'c'", "choices"]),
        ({"params": {"c": {"type": "categorical", "choices": ["a", "a"]}}}, ["parameter 'c'", "duplicate"]),
        ({"params": {"w": {"type": "int", "low": 5, "high": 1}}}, ["parameter 'w'", "empty range"]),
        ({"params": {"w": {"type": "float", "low": 0, "high": "inf"}}}, ["parameter 'w'", "finite"]),
        ({"params": {"w": {"type": "float", "low": 0, "high": 1, "step": 0}}}, ["parameter 'w'", "step"]),
        (
            {"params": {"k": {"type": "int", "low": 1, "high": 2, "condition": {"act": ["gelu"]}}}},
            ["parameter 'k'", "unknown parameter 'act'"],
        ),
        ({"params": {}}, ["at least one"]),
        ({"parameters": {}}, ["'params'"]),
        (
            {"params": {"w": {"type": "int", "low": 1, "high": 2}}, "extra": 1},
            ["'extra'", "only one is 'params'"],
        ),
        ([1, 2], ["a space dict is"]),
    ],
)
def test_dict_errors(data: Any, fragments: list[str]) -> None:
    with pytest.raises(SpaceError) as info:
        ds.Space.from_dict(data)
    for fragment in fragments:
        assert fragment in str(info.value), str(info.value)


def test_file_errors(tmp_path: Path) -> None:
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{"params": {"w": {"type": "int",, }}}')
    with pytest.raises(SpaceError, match=r"bad.json.*invalid JSON at line 1, column 33"):
        ds.Space.load(str(bad_json))
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("params:\n  w: {type: int, low: [1\n")
    with pytest.raises(SpaceError, match=r"bad.yaml.*invalid YAML at line \d+"):
        ds.Space.load(str(bad_yaml))
    empty = tmp_path / "empty.yml"
    empty.write_text("")
    with pytest.raises(SpaceError, match="is empty"):
        ds.Space.load(str(empty))
    scalar = tmp_path / "scalar.yml"
    scalar.write_text("3\n")
    with pytest.raises(SpaceError, match="expected a mapping with 'params', got int"):
        ds.Space.load(str(scalar))
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("params:\n  w: {type: int, low: 1}\n")
    with pytest.raises(SpaceError, match=r"wrong.yaml.*parameter 'w'.*'high'"):
        ds.Space.load(str(wrong))
    with pytest.raises(SpaceError, match=r"unknown extension '.toml'; use .json, .yaml or .yml"):
        ds.Space.load(str(tmp_path / "space.toml"))
    with pytest.raises(SpaceError, match="unknown extension"):
        ds.Space.from_dict(BRIEF_EXAMPLE).save(str(tmp_path / "space.txt"))
    with pytest.raises(FileNotFoundError):
        ds.Space.load(str(tmp_path / "missing.json"))
