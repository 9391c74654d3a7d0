"""Expression DAG: construction rules and agreement of the numpy, Python, interval and Z3 evaluators."""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import z3
from hypothesis import given, settings
from hypothesis import strategies as st

import dnnsat.expr as E

X, Y, Z = E.Var("x"), E.Var("y"), E.Var("z")
NAMES = ("x", "y", "z")


def int_exprs() -> st.SearchStrategy[E.Expr]:
    leaves = st.one_of(st.sampled_from([X, Y, Z]), st.integers(-6, 6).map(E.Const))

    def extend(children: st.SearchStrategy[E.Expr]) -> st.SearchStrategy[E.Expr]:
        binary = st.tuples(
            st.sampled_from(["add", "sub", "mul", "floordiv", "ceildiv", "min", "max"]), children, children
        )
        cond = st.tuples(st.sampled_from(["lt", "le", "eq", "ne"]), children, children)
        return st.one_of(
            binary.map(lambda t: _apply(*t)),
            st.tuples(cond, children, children).map(lambda t: E.where(_compare(*t[0]), t[1], t[2])),
            children.map(lambda e: -e),
        )

    return st.recursive(leaves, extend, max_leaves=8)


def _apply(op: str, a: E.Expr, b: E.Expr) -> E.Expr:
    return {
        "add": lambda: a + b,
        "sub": lambda: a - b,
        "mul": lambda: a * b,
        "floordiv": lambda: a // b,
        "ceildiv": lambda: E.ceildiv(a, b),
        "min": lambda: E.minimum(a, b),
        "max": lambda: E.maximum(a, b),
    }[op]()


def _compare(op: str, a: E.Expr, b: E.Expr) -> E.Expr:
    return {"lt": a < b, "le": a <= b, "eq": a == b, "ne": a != b}[op]


def bool_exprs() -> st.SearchStrategy[E.Expr]:
    atoms = st.tuples(st.sampled_from(["lt", "le", "eq", "ne"]), int_exprs(), int_exprs()).map(
        lambda t: _compare(*t)
    )

    def extend(children: st.SearchStrategy[E.Expr]) -> st.SearchStrategy[E.Expr]:
        return st.one_of(
            st.tuples(children, children).map(lambda t: t[0] & t[1]),
            st.tuples(children, children).map(lambda t: t[0] | t[1]),
            children.map(lambda e: ~e),
        )

    return st.recursive(atoms, extend, max_leaves=4)


points = st.fixed_dictionaries({n: st.integers(-9, 9) for n in NAMES})


def _z3_value(e: E.Expr, point: dict[str, int]) -> object:
    zv = {n: z3.Int(n) for n in NAMES}
    term = E.to_z3(e, zv)
    val = z3.simplify(z3.substitute(term, *[(zv[n], z3.IntVal(point[n])) for n in NAMES]))
    if z3.is_true(val):
        return True
    if z3.is_false(val):
        return False
    return val.as_long()


@settings(max_examples=300, deadline=None)
@given(int_exprs(), points)
def test_numpy_python_and_z3_agree(e: E.Expr, point: dict[str, int]) -> None:
    scalar = E.compile_scalar([e])(point)[0]
    vector = E.compile_vectorized([e])({n: np.array([v]) for n, v in point.items()})[0]
    assert int(np.broadcast_to(vector, (1,))[0]) == scalar
    assert _z3_value(e, point) == scalar


@settings(max_examples=200, deadline=None)
@given(bool_exprs(), points)
def test_boolean_evaluators_agree(e: E.Expr, point: dict[str, int]) -> None:
    scalar = bool(E.compile_scalar([e])(point)[0])
    vector = E.compile_vectorized([e])({n: np.array([v]) for n, v in point.items()})[0]
    assert bool(np.broadcast_to(vector, (1,))[0]) == scalar
    assert _z3_value(e, point) == scalar


boxes = st.fixed_dictionaries({n: st.tuples(st.integers(-9, 9), st.integers(0, 6)) for n in NAMES})


@settings(max_examples=300, deadline=None)
@given(st.one_of(int_exprs(), bool_exprs()), boxes)
def test_values_lie_inside_interval_bounds(e: E.Expr, box: dict[str, tuple[int, int]]) -> None:
    """At every point of the box (at most 7**3), for the numpy, the exact and the one-box evaluators."""
    lo = {n: np.array([a]) for n, (a, w) in box.items()}
    hi = {n: np.array([a + w]) for n, (a, w) in box.items()}
    ((blo, bhi),) = E.compile_interval([e])(lo, hi)
    py = E.interval([e], {n: (a, a + w) for n, (a, w) in box.items()})[id(e)]
    one = E.compile_interval_scalar([e])(
        {n: a for n, (a, w) in box.items()}, {n: a + w for n, (a, w) in box.items()}
    )
    assert one[0] == py
    f = E.compile_scalar([e])
    for values in itertools.product(*(range(a, a + w + 1) for a, w in box.values())):
        v = f(dict(zip(box, values)))[0]
        assert np.all(blo <= v) and np.all(v <= bhi)
        assert py[0] <= v <= py[1]


def test_hash_consing_and_folding() -> None:
    assert (X + 1) is (X + 1)
    assert 2 * X is X * 2
    assert (X + 0) is X and (X * 1) is X
    assert (E.Const(3) * 4).value == 12
    assert E.where(E.Const(True), X, Y) is X
    assert E.substitute(X * Y + 3, {"x": 2, "y": 5}).value == 13
    assert str(2 * X * Y + X // 2) == "2*x*y + x // 2"


def test_division_by_zero_is_zero_everywhere() -> None:
    e = X // Y + E.ceildiv(X, Y)
    assert E.compile_scalar([e])({"x": 7, "y": 0})[0] == 0
    assert int(E.compile_vectorized([e])({"x": np.array([7]), "y": np.array([0])})[0][0]) == 0
    assert _z3_value(e + Z * 0, {"x": 7, "y": 0, "z": 0}) == 0


def test_wide_values_switch_to_float64() -> None:
    big = X * X * X * X
    f = E.compile_vectorized([big], box={"x": (0, 10**6)})
    assert f({"x": np.array([10**6])})[0].dtype == np.float64
    assert E.compile_vectorized([big], box={"x": (0, 100)})({"x": np.array([100])})[0].dtype == np.int64


def test_misuse_gives_clear_errors() -> None:
    with pytest.raises(TypeError, match="no truth value"):
        bool(X < 3)
    with pytest.raises(TypeError, match="integer operands"):
        E.Var("r", "real") // 2
    with pytest.raises(TypeError, match="non-boolean"):
        X & Y
    with pytest.raises(ValueError, match="finite"):
        E.Const(float("inf"))
    act = E.Var("act", labels=("relu", "gelu"))
    assert (act == "gelu") is (act == E.Const(1))
    with pytest.raises(ValueError, match="not a choice"):
        act == "tanh"  # noqa: B015


def test_digest_is_structural_and_linear_in_the_dag():
    x, y = E.Var("x"), E.Var("y")
    assert E.digest(x + 2 * y) == E.digest(x + 2 * y) != E.digest(x + 2 * x)
    deep = x
    for _ in range(300):  # printed as a tree this would have 2**300 leaves
        deep = E.maximum(deep + deep, deep * 2)
    assert len(E.digest(deep)) == 16 and E.digest(deep) != E.digest(deep + 1)


@settings(max_examples=60, deadline=None)
@given(st.data(), points)
def test_scalar_inlining_agrees_on_large_shared_dags(data: st.DataObject, point: dict[str, int]) -> None:
    """Big DAGs with shared nodes, chains deeper than the inlining cap and min/max trees, as the
    memory model builds them: the inlined code agrees with a node-by-node reference interpreter."""
    pool: list[E.Expr] = [X, Y, Z, E.Const(3)]
    for _ in range(data.draw(st.integers(20, 120))):
        op = data.draw(st.sampled_from(["add", "sub", "mul", "max", "min", "where", "floordiv", "chain"]))
        a, b, c = (pool[data.draw(st.integers(0, len(pool) - 1))] for _ in range(3))
        if op == "where":
            new = E.where(a < b, c, 0)
        elif op == "chain":  # a long single-use sum, as sum_() builds
            new = E.sum_(a + k for k in range(data.draw(st.integers(1, 300))))
        elif op == "mul":
            new = E.minimum(a, 50) * E.maximum(b, -50)  # keep magnitudes inside int64
        else:
            new = _apply(op, a, b)
        pool.append(new)
    tree = E.maximum(E.maximum(pool[-1], pool[-2]), E.maximum(pool[-3], pool[-4]))
    roots = [tree, pool[-5], E.sum_(pool[4:])]
    assert E.compile_scalar(roots)(point) == _reference(roots, point)


def _reference(roots: list[E.Expr], point: dict[str, int]) -> tuple[int, ...]:
    ops: dict[str, Callable[..., Any]] = {
        "add": operator.add,
        "sub": operator.sub,
        "mul": operator.mul,
        "max": max,
        "min": min,
        "lt": operator.lt,
        "le": operator.le,
        "neg": operator.neg,
        "floordiv": lambda a, b: a // b if b else 0,
        "where": lambda c, a, b: a if c else b,
    }
    val: dict[int, object] = {}
    for n in E.topological(roots):
        if n.op in ("var", "const"):
            val[id(n)] = point[n.name] if n.op == "var" else n.value
        else:
            val[id(n)] = ops[n.op](*(val[id(a)] for a in n.args))
    return tuple(val[id(r)] for r in roots)  # type: ignore[misc]
