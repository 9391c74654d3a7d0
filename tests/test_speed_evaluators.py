"""The generated interval evaluators give the same bounds, bit for bit, as the per-node rules they
inline and specialise (products with a constant, divisions by a nonzero constant), and a problem's
sample pool is computed once and gives the same draws as a fresh problem."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import dnnsat.expr as E
from dnnsat import Categorical, Int, Problem, Space
from tests.test_expr import NAMES, X, Y, Z, bool_exprs, int_exprs

R = E.Var("r", "real")


def _scaled(children: st.SearchStrategy[E.Expr]) -> st.SearchStrategy[E.Expr]:
    """Integer products with constants on either side and divisions by constants (0 included), as
    the cost models write them (``4 * numel``, ``ceildiv(bytes, 512)``)."""
    consts = st.sampled_from([-7, -2, -1, 0, 1, 2, 3, 512])
    return st.one_of(
        st.tuples(children, children).map(lambda t: E.maximum(t[0], t[1] + Z)),
        st.tuples(consts, children).map(lambda t: E.Const(t[0]) * t[1]),
        st.tuples(children, consts).map(lambda t: t[0] * E.Const(t[1])),
        st.tuples(children, consts).map(lambda t: t[0] // E.Const(t[1])),
        st.tuples(children, consts).map(lambda t: E.ceildiv(t[0], E.Const(t[1]))),
    )


def exprs() -> st.SearchStrategy[E.Expr]:
    """Integer expressions, and real ones divided or multiplied by constants (``flops / 1e12``)."""
    leaves = st.one_of(int_exprs(), bool_exprs().map(lambda c: E.where(c, X, Y)))
    ints = st.recursive(leaves, _scaled, max_leaves=6)
    return st.one_of(
        ints,
        st.tuples(ints, st.sampled_from([-3.0, 0.5, 1.0, 2.5, 1e12])).map(lambda t: (t[0] + R) / t[1]),
        st.tuples(st.sampled_from([-1.5, 0.0, 2.0]), ints).map(lambda t: t[0] * (t[1] + R)),
    )


def _reference(roots: list[E.Expr], lo: Mapping[str, Any], hi: Mapping[str, Any], python: bool) -> Any:
    """Every node by its rule function (``_imul``/``_idiv`` for every product and division), with the
    variable casts of the numpy evaluator: what the generated code must reproduce."""
    rules = E._interval_functions(python)
    b: dict[int, tuple[Any, Any]] = {}
    for node in E.topological(roots):
        if node.op == "var":
            vlo, vhi = lo[node.name], hi[node.name]
            if not python:
                dt = {"real": np.float64, "bool": np.bool_}.get(node.sort, np.int64)
                vlo, vhi = np.asarray(vlo, dtype=dt), np.asarray(vhi, dtype=dt)
            b[id(node)] = (vlo, vhi)
        elif node.op == "const":
            b[id(node)] = (node.payload, node.payload)
        else:
            b[id(node)] = rules[node.op](*(x for a in node.args for x in b[id(a)]))
    return tuple(b[id(r)] for r in roots)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    x, y = np.asarray(a), np.asarray(b)
    return x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y, equal_nan=True)


box_columns = st.lists(
    st.tuples(*[st.tuples(st.integers(-9, 9), st.integers(0, 6)) for _ in NAMES], st.floats(-5, 5)),
    min_size=1,
    max_size=5,
)


@settings(max_examples=400, deadline=None)
@given(exprs(), box_columns)
def test_generated_numpy_bounds_equal_the_rules(e: E.Expr, rows: list[Any]) -> None:
    lo = {n: np.array([r[i][0] for r in rows]) for i, n in enumerate(NAMES)}
    hi = {n: np.array([r[i][0] + r[i][1] for r in rows]) for i, n in enumerate(NAMES)}
    lo["r"] = np.array([r[3] for r in rows])
    hi["r"] = lo["r"] + 1.5
    with np.errstate(all="ignore"):
        assert _same(E.compile_interval([e])(lo, hi), _reference([e], lo, hi, python=False))


@settings(max_examples=400, deadline=None)
@given(exprs(), box_columns)
def test_generated_scalar_bounds_equal_the_rules(e: E.Expr, rows: list[Any]) -> None:
    (x, y, z, r) = rows[0]
    lo = {"x": x[0], "y": y[0], "z": z[0], "r": r}
    hi = {"x": x[0] + x[1], "y": y[0] + y[1], "z": z[0] + z[1], "r": r + 1.5}
    got = E.compile_interval_scalar([e])(lo, hi)
    want = _reference([e], lo, hi, python=True)
    assert got == want
    assert [type(v) for pair in got for v in pair] == [type(v) for pair in want for v in pair]
    assert got == E.compile_interval([e], python=True)(lo, hi)


@given(st.lists(st.one_of(st.floats(allow_nan=True), st.integers(-3, 3)), min_size=2, max_size=2))
def test_inlined_min_and_max_are_the_builtins(pair: list[Any]) -> None:
    """NaN included: the builtins keep the first argument unless the second compares smaller/larger."""
    a, b = pair
    lo, hi = (
        E._interval_text("min", [("a", "a"), ("b", "b")], python=True)[0],
        E._interval_text("max", [("a", "a"), ("b", "b")], python=True)[0],
    )
    got = eval(lo, {"a": a, "b": b}), eval(hi, {"a": a, "b": b})
    want = min(a, b), max(a, b)
    assert all(g is w or (g == w and type(g) is type(w)) for g, w in zip(got, want))


def test_constant_divisors_skip_the_zero_test() -> None:
    """``x // 512`` without ``if 512 else 0``; a variable divisor keeps it (x // 0 == 0)."""
    f = E.compile_scalar([E.ceildiv(X, 512) * 512, X // Y, X / E.Const(4.0), (X + 1) // 2])
    assert f({"x": 1000, "y": 0}) == (1024, 0, 250.0, 500)
    assert f({"x": -1000, "y": 3}) == (-512, -334, -250.0, -500)


def _problem() -> Problem:
    space = Space(
        {
            "w": Int(8, 512, step=8),
            "d": Int(1, 24),
            "act": Categorical(["relu", "gelu", "silu"]),
        }
    )
    v = space.vars
    return Problem(space).require(v.w * v.w * v.d + E.where(v.act == "gelu", 4 * v.w * v.d, 0) <= 1_500_000)


def test_sample_pool_is_decomposed_once_and_draws_like_a_fresh_problem() -> None:
    p = _problem()
    first = p._sample_decomposed(5, seed=0)  # what sample falls back on (and the guards' witnesses)
    boxes = p._c().engine.stats["boxes"]
    again = p._sample_decomposed(7, seed=3)
    assert p._c().engine.stats["boxes"] == boxes  # drawn from the kept pool
    assert again == _problem()._sample_decomposed(7, seed=3)
    assert first == _problem()._sample_decomposed(5, seed=0)
    assert all(p.check(c).feasible for c in first + again)
    lo, hi, undecided = p._c().pools[20_000]
    assert not lo.flags.writeable and len(lo) == len(hi) == len(undecided)
    p._sample_pool(p._c(), 3)
    assert set(p._c().pools) == {20_000, 3}
    p.require(p.space.vars.d <= 2)  # a new constraint: a new pool
    assert all(c["d"] <= 2 for c in p.sample(20, seed=0))
    assert all(c["d"] <= 2 for c in p._sample_decomposed(20, seed=0))
    assert set(p._c().pools) == {20_000}
