"""Issue 32, deliverables 3 and 4: malformed input is refused by dnnsat itself, never by numpy, NNI or the
codec deep inside, with a message that names the argument and what to do."""

from __future__ import annotations

import json
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn as nn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dnnsat as ds
from dnnsat.integrations.nni import DnnSATTuner
from dnnsat.integrations.optuna import DnnSATSampler
from dnnsat.problem import MAX_REQUEST_BYTES, ArgumentError

DNNSAT = Path(ds.__file__).resolve().parent
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def problem() -> ds.Problem:
    space = ds.Space({"w": ds.Int(1, 64), "d": ds.Int(1, 8), "act": ds.Categorical(["relu", "gelu"])})
    p = ds.Problem(space)
    p.require(space.vars.w * space.vars.d <= 100, name="wd")
    return p


P = problem()


def refused(call: Any, *names: str) -> str:
    """Run ``call``: it must raise a ValueError/TypeError from dnnsat's own code (the innermost frame is in
    the dnnsat package) whose message names every one of ``names``; returns the message."""
    try:
        call()
    except (ValueError, TypeError) as err:
        frames = traceback.extract_tb(err.__traceback__)
        where = Path(frames[-1].filename).resolve()
        assert DNNSAT in where.parents, f"raised outside dnnsat ({where}): {type(err).__name__}: {err}"
        msg = str(err)
        for name in names:
            assert name in msg, (name, msg)
        return msg
    raise AssertionError(f"accepted: {call}")


# -- the four raw tracebacks of the issue ------------------------------------------------------------


@pytest.mark.parametrize("seed", [1.5, "x", -1, [1.5], np.float64(2.0), True])
def test_a_bad_seed_is_refused_where_it_enters(seed: Any) -> None:
    for where, call in [
        ("sample", lambda: P.sample(2, seed=seed)),
        ("estimate_count", lambda: P.estimate_count(100, seed=seed)),
        ("Guard", lambda: P.guard(seed=seed)),
        ("DnnSATSampler", lambda: DnnSATSampler(P, seed=seed)),
        ("DnnSATTuner", lambda: DnnSATTuner(P, base_tuner="Random", seed=seed)),
    ]:
        msg = refused(call, where, "seed", "e.g. seed=0")
        assert isinstance(pytest.raises(ArgumentError, call).value, ValueError), msg


def test_integral_float_seed_names_the_int_to_pass() -> None:
    assert "use seed=3" in refused(lambda: P.sample(1, seed=3.0), "seed")


def test_good_seeds_still_work() -> None:
    assert P.sample(3, seed=np.int64(7)) == P.sample(3, seed=7)
    assert len(P.sample(1, seed=2**70)) == 1
    assert DnnSATSampler(P, seed=0) is not None


def test_a_request_too_large_for_memory_is_refused_before_numpy_allocates() -> None:
    msg = refused(lambda: P.sample(10**9, seed=0), "sample", "n=1000000000", "GiB", "ask for n <=")
    fits = int(msg.split("ask for n <= ")[1].split()[0])
    assert 0 < fits < 10**9
    refused(lambda: P.estimate_count(samples=10**10), "estimate_count", "samples=", "ask for samples <=")
    n = MAX_REQUEST_BYTES  # a broadcast view costs nothing; check_batch's answer would
    cols = {k: np.broadcast_to(np.asarray(v), (n,)) for k, v in {"w": 1, "d": 1, "act": "relu"}.items()}
    refused(lambda: P.check_batch(cols), "check_batch", "rows=", "ask for rows <=")


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_a_space_file_that_is_not_utf8_names_the_file_and_the_encoding(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"space{suffix}"
    path.write_bytes('{"params": {"w": {"type": "int", "low": 1, "high": 3}}} # café'.encode("latin-1"))
    with pytest.raises(ds.SpaceError) as info:
        ds.Space.load(str(path))
    assert (
        str(path) in str(info.value)
        and "not UTF-8" in str(info.value)
        and "save it as UTF-8" in str(info.value)
    )


def test_an_nni_optimize_mode_is_checked_against_the_allowed_values() -> None:
    msg = refused(
        lambda: DnnSATTuner(P, base_tuner="TPE", base_args={"optimize_mode": "sideways"}), "optimize_mode"
    )
    assert "'maximize', 'minimize'" in msg and "'sideways'" in msg
    assert (
        DnnSATTuner(P, base_tuner="TPE", base_args={"optimize_mode": "minimize"}).optimize_mode == "minimize"
    )


# -- the two messages a newcomer meets first ----------------------------------------------------------


def _torch_builder(cfg: Any) -> nn.Module:
    return nn.Sequential(nn.Linear(cfg["w"], cfg["d"]), nn.ReLU())


def test_a_plain_torch_builder_is_told_to_use_from_torch() -> None:
    budget = ds.Budget(params="1M")
    msg = refused(lambda: ds.Problem(P.space, model=_torch_builder, budget=budget), "_torch_builder")
    assert "wrap the builder in ds.from_torch(build, inputs)" in msg
    msg = refused(lambda: ds.Problem(P.space, model=lambda c: torch.zeros(c["w"]), budget=budget), "PyTorch")
    assert "wrap the builder in ds.from_torch(build, inputs)" in msg
    msg = refused(lambda: ds.Problem(P.space, model=lambda c: nn.Identity(), budget=budget), "Identity")
    assert "wrap the builder in ds.from_torch(build, inputs)" in msg
    wrapped = ds.from_torch(_torch_builder, inputs=lambda cfg: (torch.empty(2, cfg["w"]),))
    assert ds.Problem(P.space, model=wrapped, budget=budget).count() > 0


def test_an_error_of_the_users_own_dsl_builder_is_not_rewritten() -> None:
    def build(v: Any) -> Any:
        raise KeyError("my own bug")

    with pytest.raises(KeyError, match="my own bug"):
        ds.Problem(P.space, model=build, budget=ds.Budget(params="1M"))


def test_a_latency_budget_needs_a_device() -> None:
    msg = refused(lambda: ds.Budget(latency="1ms"), "latency")
    assert (
        "a latency budget needs a device: Budget(latency=..., device=...)" in msg and "dnnsat devices" in msg
    )
    refused(lambda: ds.Budget.parse("latency=1ms"), "device")
    assert ds.Budget(latency="1ms", device="cpu").latency == 0.001


# -- properties: random malformed input, only dnnsat's refusals -------------------------------------

BAD_SEEDS = st.one_of(
    st.floats(allow_nan=True).filter(lambda x: not float(x).is_integer() if np.isfinite(x) else True),
    st.text(max_size=5),
    st.integers(max_value=-1),
    st.booleans(),
    st.lists(st.integers(0, 9), max_size=2),
    st.just(b"\x00"),
)


@FAST
@given(seed=BAD_SEEDS, which=st.sampled_from(["sample", "estimate_count", "Guard", "DnnSATSampler"]))
def test_property_bad_seeds(seed: Any, which: str) -> None:
    calls = {
        "sample": lambda: P.sample(1, seed=seed),
        "estimate_count": lambda: P.estimate_count(10, seed=seed),
        "Guard": lambda: P.guard(seed=seed),
        "DnnSATSampler": lambda: DnnSATSampler(P, seed=seed),
    }
    refused(calls[which], which, "seed")


BAD_COUNTS = st.one_of(
    st.integers(max_value=-1),
    st.integers(min_value=10**9, max_value=10**30),
    st.floats(allow_nan=True),
    st.text(max_size=3),
    st.none(),
    st.booleans(),
)


@FAST
@given(value=BAD_COUNTS, which=st.sampled_from(["n", "samples", "max_boxes", "limit"]))
def test_property_bad_sizes(value: Any, which: str) -> None:
    calls = {
        "n": lambda: P.sample(value, seed=0),
        "samples": lambda: P.estimate_count(value),
        "max_boxes": lambda: P.sample(1, seed=0, max_boxes=value),
        "limit": lambda: list(P.enumerate(limit=value)),
    }
    if (
        which == "limit"
        and value is None
        or which in ("max_boxes", "limit")
        and isinstance(value, int)
        and value > 0
    ):
        return  # None: no limit; a large cap is no request to allocate
    refused(calls[which], which)


UNIT_FIELDS = ["params", "weight_bytes", "flops", "memory", "latency"]
JUNK = st.one_of(
    st.text(max_size=8),
    st.floats(max_value=-1e-9),
    st.floats(allow_nan=True, allow_infinity=True).filter(lambda x: not np.isfinite(x)),
    st.integers(max_value=-1),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=1),
    st.booleans(),
)
OTHER_FIELDS = {
    "dtype": JUNK,
    "optimizer": st.one_of(
        st.text(min_size=1, max_size=5), st.integers(), st.lists(st.integers(), max_size=1)
    ),
    "mode": JUNK,
    "batch_size": JUNK,
    "latency_batch": JUNK,
    "dataset_size": JUNK,
    "margin": st.one_of(st.floats(min_value=1.0), st.floats(max_value=-1e-9), st.text(max_size=3)),
    "accumulation_steps": JUNK,
    "device": st.one_of(st.text(min_size=1, max_size=6), st.integers(), st.lists(st.integers(), max_size=1)),
}


def _valid_unit(field: str, value: Any) -> bool:
    try:
        ds.parse_quantity(value, field)
        return True
    except (ValueError, TypeError):
        return False


@FAST
@given(data=st.data(), field=st.sampled_from(UNIT_FIELDS + sorted(OTHER_FIELDS)))
def test_property_bad_budgets(data: st.DataObject, field: str) -> None:
    value = data.draw(JUNK if field in UNIT_FIELDS else OTHER_FIELDS[field])
    if field in UNIT_FIELDS and _valid_unit(field, value):
        return
    if field == "dtype" and value in ("float32", "mixed"):
        return
    kwargs: dict[str, Any] = {field: value}
    if field == "latency":
        kwargs["device"] = "cpu"
    if field in ("optimizer", "device") and isinstance(value, str):
        try:  # a real optimizer or device name is no malformed input
            ds.Budget(**kwargs)
            return
        except (ValueError, TypeError):
            pass
    refused(lambda: ds.Budget(**kwargs), field)


PARAM_JUNK = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=True), st.text(max_size=4)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
PARAM = st.one_of(
    PARAM_JUNK,
    st.fixed_dictionaries(
        {"type": st.sampled_from(["int", "float", "categorical", "choice", 3])},
        optional={
            "low": PARAM_JUNK,
            "high": PARAM_JUNK,
            "step": PARAM_JUNK,
            "log": PARAM_JUNK,
            "choices": PARAM_JUNK,
            "condition": PARAM_JUNK,
            "bogus": PARAM_JUNK,
        },
    ),
)
SPACES = st.one_of(
    st.fixed_dictionaries({"params": st.dictionaries(st.text(min_size=1, max_size=3), PARAM, max_size=3)}),
    st.dictionaries(st.text(max_size=4), PARAM_JUNK, max_size=3),
)


@FAST
@given(data=SPACES, kind=st.sampled_from(["dict", ".json", ".yaml", "bytes"]), junk=st.binary(max_size=20))
def test_property_malformed_spaces(tmp_path: Path, data: dict[str, Any], kind: str, junk: bytes) -> None:
    if kind == "dict":
        try:
            ds.Space.from_dict(data)
        except ds.SpaceError:
            refused(lambda: ds.Space.from_dict(data))
        return
    path = tmp_path / f"space{'.json' if kind == 'bytes' else kind}"
    if kind == "bytes":
        path.write_bytes(b"\xff" + junk)  # never UTF-8
    elif kind == ".json":
        path.write_text(json.dumps(data, allow_nan=True))
    else:
        import yaml

        path.write_text(yaml.safe_dump(data))
    try:
        ds.Space.load(str(path))
    except ds.SpaceError as err:
        assert str(path) in str(err), str(err)
        refused(lambda: ds.Space.load(str(path)))
