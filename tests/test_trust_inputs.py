"""Issue 12, sections 4, 6 and 8: spaces and expressions reject nonsense; Space and Expr pickle."""

from __future__ import annotations

import copy
import functools
import pickle
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import optuna.distributions as od
import pytest

import dnnsat as ds
import dnnsat.expr as E
from dnnsat.space import SpaceError

# -- choices that Python equality aliases -----------------------------------------------------------


@pytest.mark.parametrize(
    ("choices", "first", "second"),
    [
        ([1, True], "1", "True"),
        ([0, False], "0", "False"),
        ([1, 1.0], "1", "1.0"),
        ([True, 1.0], "True", "1.0"),
        ([0.0, False, "x"], "0.0", "False"),
        (["a", 1, None, True], "1", "True"),
    ],
)
def test_choices_equal_in_python_are_rejected(choices: list[Any], first: str, second: str) -> None:
    with pytest.raises(SpaceError) as info:
        ds.Space({"w": ds.Int(1, 2), "c": ds.Categorical(choices)})
    msg = str(info.value)
    assert f"parameter 'c': choices {first} and {second} clash" in msg
    assert "keep one of them, or use distinct strings" in msg


def test_aliased_choices_are_rejected_by_every_conversion(tmp_path: Path) -> None:
    yaml_file = tmp_path / "space.yaml"
    yaml_file.write_text("params:\n  c: {type: categorical, choices: [1, true, 1.0]}\n")
    json_file = tmp_path / "space.json"
    json_file.write_text('{"params": {"c": {"type": "categorical", "choices": [1, true, 1.0]}}}')
    for path in (yaml_file, json_file):
        with pytest.raises(SpaceError, match=r"space\.(yaml|json)'.*parameter 'c': choices 1 and True clash"):
            ds.Space.load(str(path))
    with pytest.raises(SpaceError, match="parameter 'c': choices 1 and True clash"):
        ds.Space.from_optuna({"c": od.CategoricalDistribution([1, True])})
    with pytest.raises(SpaceError, match="parameter 'c': choices 1 and 1.0 clash"):
        ds.Space.from_nni({"c": {"_type": "choice", "_value": [1, 1.0]}})
    branches: list[Any] = [{"_name": 0, "k": {"_type": "randint", "_value": [1, 3]}}, {"_name": False}]
    nested = {"c": {"_type": "choice", "_value": branches}}
    with pytest.raises(SpaceError, match="parameter 'c': choices 0 and False clash"):
        ds.Space.from_nni(nested)


def test_a_value_matches_only_a_choice_of_its_own_kind() -> None:
    s = ds.Space({"b": ds.Categorical([1, 2]), "m": ds.Categorical(["a", 1, None, False])})
    assert s.validate({"b": 2.0, "m": 1.0}) == {"b": 2, "m": 1}  # numbers match numbers
    assert s.validate({"b": np.int64(1), "m": np.str_("a")}) == {"b": 1, "m": "a"}
    assert s["m"].encode(False) == 3 and s["m"].encode(None) == 2
    with pytest.raises(SpaceError, match=r"parameter 'b': True is not one of the choices \[1, 2\]"):
        s.validate({"b": True})  # True == 1 in Python, but a bool is not a batch size
    with pytest.raises(SpaceError, match="parameter 'm': 0 is not one of the choices"):
        s.validate({"m": 0})  # 0 == False
    with pytest.raises(ValueError, match="True is not a choice of 'm'"):
        s.vars.m == True  # noqa: B015, E712
    assert (s.vars.m == False) is (s.vars.m == E.Const(3))  # noqa: E712
    assert E.Var("m", labels=("a", 1)) is not E.Var("m", labels=("a", True))  # interned apart


@pytest.mark.parametrize(
    ("choices", "example"),
    [
        ("abc", "Categorical(['abc'])"),
        (b"ab", "Categorical([b'ab'])"),
        ({"b", "a"}, "Categorical(['a', 'b'])"),
        (3, "Categorical([3])"),
    ],
)
def test_choices_must_be_a_list(choices: Any, example: str) -> None:
    with pytest.raises(SpaceError) as info:
        ds.Space({"act": ds.Categorical(choices)})
    msg = str(info.value)
    assert msg.startswith(
        f"parameter 'act': Categorical takes a list of choices, got the {type(choices).__name__}"
    )
    assert f"pass a list of choices, e.g. {example}" in msg


# -- arithmetic and ordering on non-numeric categoricals --------------------------------------------

SPACE = ds.Space(
    {
        "w": ds.Int(1, 8),
        "act": ds.Categorical(["relu", "gelu"]),
        "flag": ds.Categorical([False, True]),
        "norm": ds.Categorical([None, "bn", 2]),
    }
)
V = SPACE.vars

MISUSES: dict[str, Callable[[E.Expr], Any]] = {
    "a + 1": lambda a: a + 1,
    "1 + a": lambda a: 1 + a,
    "a - w": lambda a: a - V.w,
    "w * a": lambda a: V.w * a,
    "a / 2": lambda a: a / 2,
    "a // 2": lambda a: a // 2,
    "a ** 2": lambda a: a**2,
    "-a": lambda a: -a,
    "minimum": lambda a: ds.minimum(a, 1),
    "maximum": lambda a: ds.maximum(V.w, a),
    "ceildiv": lambda a: ds.ceildiv(V.w, a),
    "sum_": lambda a: ds.sum_([V.w, a]),
    "a < 1": lambda a: a < 1,
    "a <= label": lambda a: a <= SPACE[a.name].values()[0],
    "a > w": lambda a: a > V.w,
    "w >= a": lambda a: V.w >= a,
    "2 < a": lambda a: 2 < a,  # noqa: SIM300
}


@pytest.mark.parametrize("name", ["act", "flag", "norm"])
@pytest.mark.parametrize("misuse", list(MISUSES))
def test_arithmetic_and_ordering_on_labels_raise(name: str, misuse: str) -> None:
    with pytest.raises(TypeError) as info:
        MISUSES[misuse](V[name])
    msg = str(info.value)
    assert msg.startswith(f"parameter {name!r} has the non-numeric choices {list(SPACE[name].values())}")
    assert "only == and != do" in msg and "dnnsat.where" in msg


def test_equality_on_labels_keeps_working_in_problems() -> None:
    assert str(V.act == "gelu") == "act == 1" and str(V.norm != None) == "norm != 0"  # noqa: E711
    cost = ds.where(V.act == "relu", V.w, 2 * V.w) + ds.where((V.norm == "bn") | (V.norm == 2), 1, 0)
    p = ds.Problem(SPACE).require(cost <= 6, name="cost")
    configs: list[dict[str, Any]] = [
        {"w": w, "act": a, "flag": f, "norm": n}
        for w in range(1, 9)
        for a in ("relu", "gelu")
        for f in (False, True)
        for n in (None, "bn", 2)
    ]
    truth = [c for c in configs if c["w"] * (1 if c["act"] == "relu" else 2) + (c["norm"] is not None) <= 6]
    assert p.count() == len(truth) == 46  # relu: (6 + 5 + 5) * 2, gelu: (3 + 2 + 2) * 2
    assert all(p.check(c).feasible == (c in truth) for c in configs)
    assert sorted(map(repr, p.enumerate())) == sorted(map(repr, truth))


# -- error messages point to nothing the user lacks --------------------------------------------------


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"params": {"a": {"type": "int", "low": 1, "high": 3, "condition": [1]}}},
         "field 'condition': Input should be a valid dictionary (got [1]); write a condition as {parent: "),
        ({"params": {"a": {"type": "int", "low": 1, "high": 3, "condition": {"b": {"x": 1}}}}},
         "field 'condition.b': Input should be a valid list"),
        ({"params": {"a": {"type": "categorical", "choices": [[1]]}}},
         "field 'choices.0': Input should be a valid boolean (got [1]); choices are a list of numbers"),
        ({"params": {"a": {"type": "categorical", "choices": "abc"}}},
         "field 'choices': Input should be a valid list (got 'abc'); choices are a list"),
        ({"params": {"a": "int"}}, "params maps names to {type: int|float|categorical, ...}, e.g."),
        ({"params": [1]}, "params maps names to {type: int|float|categorical, ...}, e.g."),
    ],
)  # fmt: skip
def test_dict_errors_state_the_rule_inline(data: dict[str, Any], fragment: str) -> None:
    with pytest.raises(SpaceError) as info:
        ds.Space.from_dict(data)
    assert fragment in str(info.value)
    assert "notes/" not in str(info.value) and "DESIGN" not in str(info.value)


# -- pickling ---------------------------------------------------------------------------------------


def conditional_space() -> ds.Space:
    return ds.Space(
        {
            "layer": ds.Categorical(["conv", "pool", None, True, 3]),
            "k": ds.Int(1, 7, step=2, condition={"layer": ["conv"]}),
            "b": ds.Categorical([8, 16.0, 32]),
            "lr": ds.Float(1e-4, 1e-1, log=True),
            "d": ds.Float(0.0, 0.5, step=0.1, condition={"layer": ["conv", "pool"], "b": [8]}),
        }
    )


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_space_pickles_to_an_equal_space(protocol: int) -> None:
    s = conditional_space()
    s2 = pickle.loads(pickle.dumps(s, protocol=protocol))
    assert s2 == s and repr(s2) == repr(s) and s2.conditional_order == s.conditional_order
    assert all(s2.vars[n] is s.vars[n] for n in s)  # variables are interned again
    assert s2.size() == s.size() == 4 * (6 + 2) + (6 + 2) + 3 * 3  # conv, pool, the other three layers
    assert s2.validate({"layer": "conv", "k": 3, "b": 16, "lr": 0.01}) == {
        "layer": "conv",
        "k": 3,
        "b": 16.0,
        "lr": 0.01,
    }
    assert pickle.loads(pickle.dumps(s.vars, protocol=protocol)).k is s.vars.k


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_expressions_pickle_to_the_interned_node(protocol: int) -> None:
    v = conditional_space().vars
    e = ds.where((v.layer == "conv") & (v.k >= 3), v.k * v.b / 2, ds.maximum(v.b, 7)) + v.lr
    cases = [e, v.layer == None, E.Const(2.5), E.Const(True), v.k, -v.k // 3]  # noqa: E711
    for x in cases:
        assert pickle.loads(pickle.dumps(x, protocol=protocol)) is x
    assert pickle.loads(pickle.dumps(cases, protocol=protocol)) == cases
    assert copy.copy(e) is e and copy.deepcopy([e, e])[1] is e


@functools.cache
def deep_chain(depth: int) -> E.Expr:
    x, y = E.Var("x"), E.Var("y")
    e = x
    for i in range(depth):
        e = ds.maximum(e + i, y) if i % 3 else e * 2 - y
    return e


def test_deep_dags_pickle_without_hitting_the_recursion_limit() -> None:
    e = deep_chain(15_000)  # 40k nodes, 30k deep
    data = pickle.dumps(e)
    assert pickle.loads(data) is e
    assert sys.getrecursionlimit() <= 10_000  # the test means something: far below the depth


class _FullDisk:
    def __init__(self) -> None:
        self.writes = 0

    def write(self, data: bytes) -> int:
        self.writes += 1
        if self.writes > 2:
            raise OSError("no space left on device")
        return len(data)


def test_a_pickle_that_failed_midway_leaves_nothing_behind() -> None:
    e = deep_chain(15_000)
    with pytest.raises(OSError, match="no space"):
        pickle.dump(e, _FullDisk())  # aborts inside the node list, after two 64 KiB frames
    order = E.topological([e])
    for x in (order[len(order) // 2], order[-2], e):
        assert pickle.loads(pickle.dumps(x)) is x


def test_shared_subgraphs_are_written_once_per_pickle() -> None:
    e = deep_chain(5_000)
    one = len(pickle.dumps(e))
    roots = [e + k for k in range(10)]
    many = pickle.dumps(roots)
    assert pickle.loads(many) == roots
    assert len(many) < 4 * one  # ten roots over one DAG: its nodes once, then a back-reference each


def test_threads_pickle_independently() -> None:
    exprs = [deep_chain(3_000 + 100 * i) for i in range(4)]
    out: dict[int, bool] = {}

    def work(i: int) -> None:
        out[i] = all(
            pickle.loads(pickle.dumps([exprs[i], exprs[(i + 1) % 4]]))[0] is exprs[i] for _ in range(5)
        )

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == dict.fromkeys(range(4), True)


CHILD = """
import pickle, sys
import dnnsat as ds
loaded = pickle.loads(sys.stdin.buffer.read())
p = ds.zoo.resnet(budget=ds.Budget(memory="16GiB"))
assert p.space == loaded["space"]
assert list(loaded["costs"]) == list(p.cost_exprs)
print([k for k, e in loaded["costs"].items() if e is not p.cost_exprs[k]])  # each one is interned
"""


def test_zoo_cost_expressions_round_trip_into_a_fresh_process() -> None:
    """A fresh interpreter interns the unpickled DAG: building the problem there yields the same nodes."""
    p = ds.zoo.resnet(budget=ds.Budget(memory="16GiB"))
    assert len(E.topological([p.cost_exprs["memory"]])) > 5_000
    data = pickle.dumps({"space": p.space, "costs": p.cost_exprs})
    assert pickle.loads(data)["costs"]["memory"] is p.cost_exprs["memory"]
    run = subprocess.run(
        [sys.executable, "-c", CHILD], input=data, capture_output=True, check=True, timeout=120
    )
    assert run.stdout.decode().strip() == "[]"
