"""``compile_scalar``'s point forms give the same values, bit for bit, as the plain generated code.

The point forms are: conditions on one expression rewritten as intervals of it, integer ``x - x`` and
``x == x`` folded, a large integer maximum of sums evaluated by a numpy sweep (``Peak``), and nodes
read only under ``where(c, ...)`` computed under ``if c:`` (chains ``where(c, t + k, t)`` assign in
place). Given the box the values lie in (``box=``, as ``Problem`` passes it): conditions constant over
the box folded, exact cheaper integer and division forms, and one variant per structural choice.
Interval bounds are not affected: only the point evaluator uses them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import dnnsat.expr as E
from dnnsat import zoo
from dnnsat.cost import Budget
from dnnsat.expr._point_forms import peaks, split_names
from dnnsat.torch import random_configs
from tests.test_expr import X, Y, Z, int_exprs

R = E.Var("r", "real")
SPECIAL = [math.nan, math.inf, -math.inf, -0.0, 0.0, 0.5, 2.0, 2.5, -3.0, 7.0]


def same(roots: list[E.Expr], env: dict[str, Any]) -> None:
    """Point forms and plain code agree on ``env``: values and types (``repr``: -0.0, NaN, True vs 1)."""
    fast = E.compile_scalar(roots, point_forms=True)(env)
    plain = E.compile_scalar(roots, point_forms=False)(env)
    assert repr(fast) == repr(plain)
    assert [type(v) for v in fast] == [type(v) for v in plain]


def conditions(
    subject: st.SearchStrategy[E.Expr], consts: st.SearchStrategy[Any]
) -> st.SearchStrategy[E.Expr]:
    """``and``/``or``/``not`` of comparisons of one expression with constants (either side)."""
    ops = st.sampled_from(["lt", "le", "gt", "ge", "eq", "ne"])

    def atom(t: tuple[str, E.Expr, Any, bool]) -> E.Expr:
        op, x, c, flip = t
        a, b = (E.Const(c), x) if flip else (x, E.Const(c))
        return {"lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b, "eq": a == b, "ne": a != b}[op]

    atoms = st.tuples(ops, subject, consts, st.booleans()).map(atom)
    return st.recursive(
        atoms,
        lambda ch: st.one_of(
            st.tuples(ch, ch).map(lambda t: t[0] & t[1]),
            st.tuples(ch, ch).map(lambda t: t[0] | t[1]),
            ch.map(lambda e: ~e),
        ),
        max_leaves=10,
    )


int_points = st.fixed_dictionaries(
    {"x": st.integers(-9, 9), "y": st.integers(-9, 9), "z": st.integers(-9, 9)}
)


@settings(max_examples=300, deadline=None)
@given(conditions(st.sampled_from([X, X + Y]), st.integers(-5, 5)), int_exprs(), int_points)
def test_integer_conditions(cond: E.Expr, other: E.Expr, point: dict[str, int]) -> None:
    same([cond, E.where(cond, other, Y), E.where(cond, X - X, other) + E.where(other == other, 1, 2)], point)


@settings(max_examples=300, deadline=None)
@given(
    conditions(st.just(R), st.sampled_from([-1.5, 0, 0.0, 2, 2.5, 7])),
    st.sampled_from(SPECIAL),
    st.integers(-9, 9),
)
def test_real_conditions_nan_and_signed_zero(cond: E.Expr, r: float, x: int) -> None:
    """Real subjects: NaN (false for every comparison but ``!=``) and -0.0 give the plain values."""
    same([cond, E.where(cond, R, 0.0), E.where(~cond, R + 0.0, R * -1.0)], {"r": r, "x": x, "y": 0, "z": 0})


@settings(max_examples=300, deadline=None)
@given(st.lists(int_exprs(), min_size=1, max_size=4), int_points)
def test_random_integer_dags(exprs: list[E.Expr], point: dict[str, int]) -> None:
    """Shared subexpressions, nested ``where`` and reassigned chains over random integer DAGs."""
    chain: E.Expr = exprs[0]
    for i, e in enumerate(exprs[1:]):
        chain = E.where(e > i, chain + e, chain)
    same([*exprs, chain, E.maximum(chain, exprs[-1]) + exprs[0]], point)


def _timeline(gates: list[E.Expr], sizes: list[E.Expr], width: int) -> E.Expr:
    """A memory timeline: tensors live over windows of moments, the peak a balanced max of sums."""
    leaves = [E.where(g, s, 0) for g, s in zip(gates, sizes)]
    moments = [E.sum_(leaves[k : k + width]) + k % 3 for k in range(len(leaves))]
    while len(moments) > 1:
        moments = [
            E.maximum(*moments[i : i + 2]) if i + 1 < len(moments) else moments[i]
            for i in range(0, len(moments), 2)
        ]
    return moments[0]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(-4, 4), st.integers(-3, 40)), min_size=70, max_size=90),
    st.integers(3, 9),
    st.one_of(
        int_points,
        st.fixed_dictionaries(
            {"x": st.just(3), "y": st.sampled_from([2**62, 2**70, -(2**66)]), "z": st.just(1)}
        ),
    ),
)
def test_peak_sweep(spec: list[tuple[int, int]], width: int, point: dict[str, int]) -> None:
    """The numpy sweep equals the sums and max it replaces; values past int64 take the exact path."""
    gates = [g < X if g % 2 else g <= (X + Y) for g, _ in spec]
    sizes = [E.ceildiv(Z * c + Y, 4) * 512 - Y + i for i, (_, c) in enumerate(spec)]
    peak = _timeline(gates, sizes, width)
    assert peaks([peak]), "the timeline should be evaluated as a sweep"
    same([peak, peak + 1], point)


def test_peak_float_values_take_the_exact_path() -> None:
    """Leaf values that are not Python ints (a float or numpy int given for an int variable) are
    summed as written."""
    peak = _timeline([i < X for i in range(80)], [Z * (i + 1) for i in range(80)], 5)
    assert peaks([peak])
    same([peak], {"x": 50, "y": 0, "z": 0.1})
    same([peak], {"x": 50, "y": 0, "z": np.int64(3)})  # numpy ints stay numpy ints, as in plain code


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 9), st.floats(0, 1e-3), st.floats(0, 1e-2)), min_size=1, max_size=40),
    st.integers(-1, 10),
    st.sampled_from([0.5, 1.0, 3.0]),
)
def test_gated_chains(terms: list[tuple[int, float, float]], x: int, r: float) -> None:
    """The latency model's chains ``where(g, t + c, t)`` with partial results read by ``max``."""
    issue: E.Expr = E.Const(0.0)
    end: E.Expr = E.Const(0.0)
    ends, kept = [], []
    for k, (i, launch, work) in enumerate(terms):
        gate = i < X
        new = issue + launch
        if k % 3 == 1:
            kept.append(issue)  # read again after the chain moved on: must not be overwritten
        issue = E.where(gate, new, issue)
        end = E.where(gate, E.maximum(new, end) + work * R, end)
        ends.append(end)
    roots = [E.maximum(issue, end), ends[len(ends) // 2] * 2.0, E.sum_(kept) + end + issue]
    same(roots, {"x": x, "y": 0, "z": 0, "r": r})


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from([X, Y, Z]), min_size=10, max_size=14), int_points)
def test_deep_guards(subjects: list[E.Expr], point: dict[str, int]) -> None:
    """Nested ``where`` deeper than the guard limit, shared values and reassigned chains inside."""
    shared = X * Y + Z
    inner: E.Expr = shared
    for i, s in enumerate(subjects):  # each level read twice, only under all the gates outside it
        gate = (s > i - 5) & (i != X)
        twice = inner * 3 + i
        inner = E.where(gate, twice + twice * shared, i - shared)
        inner = E.where(gate & (-i < Y), inner + 2, inner)
    same([inner, E.where(Z > 0, inner + shared, shared)], point)


def same_in_box(roots: list[E.Expr], env: dict[str, Any], box: dict[str, tuple[Any, Any]]) -> None:
    """Point forms compiled for ``box`` and plain code agree on ``env`` (a point of the box)."""
    fast = E.compile_scalar(roots, box=box)(env)
    plain = E.compile_scalar(roots, point_forms=False)(env)
    assert repr(fast) == repr(plain)
    assert [type(v) for v in fast] == [type(v) for v in plain]


def boxed(point: dict[str, int], widths: tuple[int, int, int, int, int, int]) -> dict[str, tuple[int, int]]:
    """A box around ``point``: each variable's range reaches ``widths`` below and above it."""
    return {v: (point[v] - widths[2 * i], point[v] + widths[2 * i + 1]) for i, v in enumerate("xyz")}


widths = st.tuples(*[st.integers(0, 4)] * 6)


@settings(max_examples=300, deadline=None)
@given(conditions(st.sampled_from([X, X + Y, X * Z]), st.integers(-5, 5)), int_exprs(), int_points, widths)
def test_box_decided_conditions(cond: E.Expr, other: E.Expr, point: dict[str, int], w: Any) -> None:
    """Conditions constant over a (narrow) box fold, and the gated chains above them with them."""
    chain: E.Expr = E.Const(0.5)
    for i in range(4):
        chain = E.where(cond | (i < X), chain + 1e-05 * i, chain)
    roots = [cond, E.where(cond, other, Y), E.where(cond, other * 2, other - 1) // 3, chain, chain / 4.0]
    same_in_box(roots, point, boxed(point, w))


@settings(max_examples=300, deadline=None)
@given(
    int_exprs(),
    st.integers(-4, 9),
    st.sampled_from([1244000000000.0, 3.7, -0.25, 1e-290, 1e300, 2.0**-1000, 2.0**-998]),
    int_points,
    widths,
)
# a difference that is 0 in the box, over a negative constant: -0.0 (a folded -0.0 was interned as 0.0)
@example(X - X, 0, -0.25, {"x": 0, "y": 0, "z": 0}, (0, 0, 0, 0, 0, 0))
def test_box_integer_and_division_forms(e: E.Expr, k: int, c: float, point: dict[str, int], w: Any) -> None:
    """``k*x - x``, ``x + x``, ``k*x + k*y``, ``k1*(k2*x)``, ``x // x`` (divisor bounded away from 0 or
    not) and ``(2**m * x) / c``, ``(1.0 * x) / c`` (tiny and huge ``c`` included) give the plain values."""
    box = boxed(point, w)
    roots = [
        k * e - e,
        (e + e) * 3,
        k * e + k * X,
        2 * (k * (4 * e)),
        X // X + e // e * 5,
        (2 * e) / c,
        (1.0 * (4 * (2 * e))) / c,
        (8 * (X * Y)) / c + (1.0 * (k * Z)) / c,
    ]
    same_in_box(roots, point, box)


B = E.Var("b", "int", labels=("basic", "bottleneck"))


@settings(max_examples=100, deadline=None)
@given(int_exprs(), int_points, st.integers(0, 1))
def test_split_by_labelled_choice(e: E.Expr, point: dict[str, int], b: int) -> None:
    """A structural choice (a labelled categorical) gets one variant per choice, the same values."""
    roots = [E.where(B == "basic", e * 2, e + X), E.where((B == "bottleneck") & (X > 0), 1.5, 0.0) + e]
    box = {**boxed(point, (9, 9, 9, 9, 9, 9)), "b": (0, 1)}
    assert split_names(roots, box) == ["b"]
    same_in_box(roots, {**point, "b": b}, box)


MODELS = ["mlp", "cnn", "resnet", "mobilenetv2", "transformer", "gpt"]


@pytest.mark.parametrize("name", MODELS)
def test_zoo_costs_identical(name: str) -> None:
    """``Problem.costs`` (point forms for the space's box) equals the plain code on every zoo model with
    a memory budget."""
    p = zoo.get(name)(budget=Budget(device="a100_40gb", memory=2 * 2**30))
    plain = E.compile_scalar(list(p.cost_exprs.values()), point_forms=False)
    for config in random_configs(p.space, 60, seed=3):
        costs = p.costs(config)
        expected = dict(zip(p.cost_exprs, plain(p._env(config)[1])))
        assert repr(costs) == repr(expected)
