"""Vector forms and the vectorized evaluator's shortcuts (condition counts in bytes, arrays reused in
place): the same value as the exact scalar evaluator at every point of the box."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import dnnsat.expr as E
from dnnsat.zoo import synthetic_resnet_problem
from tests.test_expr import NAMES, bool_exprs, int_exprs


def gated_sums() -> st.SearchStrategy[E.Expr]:
    """``y + x + where(c1, x, 0) + ...`` (``None``: an ungated ``x``), also with gates of 1."""
    gates = st.lists(st.one_of(st.none(), bool_exprs()), min_size=1, max_size=5)
    return st.tuples(int_exprs(), gates, int_exprs()).map(
        lambda t: E.sum_([t[2]] + [t[0] if c is None else E.where(c, t[0], 0) for c in t[1]])
    )


def counts() -> st.SearchStrategy[E.Expr]:
    """``x * (k + where(c1, 1, 0) + ...)``: a count of conditions, as the factored sums read them."""
    conds = st.lists(bool_exprs(), min_size=1, max_size=4)
    return st.tuples(int_exprs(), st.integers(0, 3), conds).map(
        lambda t: t[0] * E.sum_([E.Const(t[1])] + [E.where(c, 1, 0) for c in t[2]])
    )


Box = tuple[int, int]
boxes = st.fixed_dictionaries({n: st.tuples(st.integers(-9, 9), st.integers(0, 5)) for n in NAMES})


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(gated_sums(), counts(), int_exprs(), bool_exprs()), min_size=1, max_size=3), boxes)
def test_vector_forms_keep_every_value_of_the_box(
    roots: list[E.Expr], box: dict[str, tuple[int, int]]
) -> None:
    bounds = {n: (a, a + w) for n, (a, w) in box.items()}
    points = list(itertools.product(*(range(a, a + w + 1) for a, w in box.values())))
    cols = {n: np.array([p[i] for p in points], dtype=np.int64) for i, n in enumerate(box)}
    exact = E.compile_scalar(roots)
    want = [exact(dict(zip(box, p))) for p in points]
    for f in (
        E.compile_vectorized(E.vector_forms(roots, bounds), bounds, in_place=True),
        E.compile_vectorized(roots, bounds, in_place=True),
        E.compile_vectorized(roots),
    ):
        got = f(cols)
        for k, root in enumerate(roots):
            values = np.broadcast_to(got[k], (len(points),))
            assert [int(v) for v in values] == [int(w[k]) for w in want], root


def test_gated_sums_are_one_product_per_stage() -> None:
    """The reference problem: each stage's four gated blocks (``where(d_i >= j, x, 0)``) become one
    product with the count of its gates, shared by FLOPs and parameters."""
    p = synthetic_resnet_problem()
    c = p._c()
    forms = E.vector_forms(c.vector_exprs, c.domain.value_box())
    before, after = E.topological(c.vector_exprs), E.topological(forms)

    def gated(nodes: list[E.Expr]) -> int:  # where(c, x, 0) of an array x: a multiply by a condition
        return sum(n.op == "where" and n.args[1].op != "const" for n in nodes)

    def arithmetic(nodes: list[E.Expr]) -> int:
        return sum(n.op in ("add", "mul") for n in nodes) + gated(nodes)

    assert (gated(before), gated(after)) == (32, 0)
    counts = [n for n in after if n.op == "where"]  # where(d_i >= j, 1, 0): d_i >= 1 always holds
    assert len(counts) == 12 and all(n.args[1].value == 1 for n in counts)
    assert arithmetic(after) < arithmetic(before) - 20


def test_in_place_never_writes_into_the_callers_columns() -> None:
    x, y = E.Var("x"), E.Var("y")
    roots = [x * y + x, (x + 1) * (y + 2) - y, E.where(x <= 2, x + y, 0) + x]
    cols = {"x": np.arange(6, dtype=np.int64), "y": np.arange(6, 12, dtype=np.int64)}
    saved = {k: v.copy() for k, v in cols.items()}
    got = E.compile_vectorized(roots, {"x": (0, 5), "y": (6, 11)}, in_place=True)(cols)
    assert all((cols[k] == saved[k]).all() for k in cols)
    want = E.compile_vectorized(roots)(saved)
    assert all((a == b).all() for a, b in zip(got, want))
