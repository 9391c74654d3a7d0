"""Speed paths of ``Problem.sample``'s decomposition that must not change answers: the one-``np.where``
bounds of a gated tensor size ``where(c, x, 0)`` (``expr._gate_signs``) give the general rule's
bounds bit for bit, and the engine's staged point checks (small constraints first, ``_engine._stages``)
give the same feasibility, so the decomposition, the sample pool and the draws stay the same."""

from __future__ import annotations

from typing import Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dnnsat.expr as E
from dnnsat import zoo
from dnnsat.cost import Budget
from dnnsat.problem import SAMPLE_BOXES
from dnnsat.solver import _engine
from dnnsat.torch import random_configs
from tests._random_problems import random_problem
from tests.test_expr import NAMES, bool_exprs, int_exprs
from tests.test_speed_evaluators import _reference, _same

DOMAIN = {n: (-9, 15) for n in NAMES}  # the global box the evaluators are compiled for


def _general(roots: list[E.Expr], box: dict[str, Any]) -> Any:
    """The numpy interval evaluator without the gate forms: every ``where`` by the general rule."""
    with mock.patch.object(E, "_gate_signs", lambda *args: {}):
        return E.compile_interval(roots, box=box)


def _gated(parts: tuple[E.Expr, E.Expr, str]) -> E.Expr:
    c, x, sign = parts
    x = {"pos": E.maximum(x, 0), "neg": E.minimum(x, 0), "any": x, "wide": E.maximum(x, 0) * 2**61}[sign]
    return E.where(c, x, 0)


gates = st.tuples(bool_exprs(), int_exprs(), st.sampled_from(["pos", "neg", "any", "wide"])).map(_gated)
# sums and maxima of gated sizes: a memory peak in small
peaks = st.lists(gates, min_size=1, max_size=4).map(lambda g: E.maximum(E.sum_(g), g[0] + 0 * g[-1]))
boxes = st.lists(st.tuples(*[st.tuples(st.integers(-9, 15), st.integers(0, 24)) for _ in NAMES]), min_size=1)


@settings(max_examples=300, deadline=None)
@given(peaks, boxes)
def test_gate_bounds_equal_the_general_rule_bit_for_bit(e: E.Expr, rows: list[Any]) -> None:
    nodes = E.topological([e])  # every node a root: each node's bounds are compared
    lo = {n: np.array([r[i][0] for r in rows]) for i, n in enumerate(NAMES)}
    hi = {n: np.minimum(lo[n] + [r[i][1] for r in rows], DOMAIN[n][1]) for i, n in enumerate(NAMES)}
    with np.errstate(all="ignore"):
        got = E.compile_interval(nodes, box=DOMAIN)(lo, hi)
        assert _same(got, _general(nodes, DOMAIN)(lo, hi))
        plain = [k for k, n in enumerate(nodes) if not E._dtype_plan([n], DOMAIN)]  # int64 throughout
        want = _reference([nodes[k] for k in plain], lo, hi, python=False)
        assert _same(tuple(got[k] for k in plain), want)


def test_gate_forms_cover_sizes_of_one_sign_only() -> None:
    x, y = E.Var("x"), E.Var("y")
    pos, neg = E.where(x < y, E.maximum(x, 1) * 4, 0), E.where(x < 3, E.minimum(x, 0) * 4, 0)
    mixed, wide = E.where(y < 0, x, 0), E.where(x < y, E.maximum(x, 1) * 2**60, 0)
    roots = [pos, neg, mixed, wide]
    bounds = E.interval(roots, DOMAIN)
    signs = E._gate_signs(roots, bounds, E._dtype_plan(roots, DOMAIN, bounds))
    assert signs == {id(pos): 1, id(neg): -1}  # a mixed sign or a float64 (wide) node: general rule


def _gpt(name: str = "gpt") -> Any:
    """A zoo model with a training-memory budget at the 25th percentile of 40 random configurations."""
    free = zoo.get(name)(budget=Budget(device="a100_40gb"))
    mem = sorted(free.costs(c)["memory"] for c in random_configs(free.space, 40, seed=0))
    return zoo.get(name)(budget=Budget(device="a100_40gb", memory=mem[len(mem) // 4]))


def test_resnet_sample_pool_is_unchanged() -> None:
    p = _gpt("resnet")  # every box of its first 20,000 holds a feasible and an infeasible corner
    pool = p._sample_pool(p._c(), SAMPLE_BOXES)
    with mock.patch.object(E, "_gate_signs", lambda *args: {}):  # evaluators compile on first use
        q = _gpt("resnet")
        q._c().engine._exact = False
        old = q._sample_pool(q._c(), SAMPLE_BOXES)
    assert all(x.dtype == y.dtype and np.array_equal(x, y) for x, y in zip(pool, old))
    assert p.sample(20, seed=4) == q.sample(20, seed=4)


def test_memory_budget_bounds_points_and_sample_pool_are_unchanged() -> None:
    p = _gpt()
    engine = p._c().engine
    exprs = engine._open_exprs
    assert _engine._stages(exprs) == [[0, 1], [2]]  # two divisibility checks before the memory peak
    roots = exprs + [a for e in exprs for a in e.args if a.sort != "bool" and a.op != "const"]
    dom = engine.domain
    rng = np.random.default_rng(0)
    a, b = (rng.integers(0, dom.sizes, size=(400, dom.ndim)) for _ in range(2))
    vlo, vhi = dom.value_columns(np.minimum(a, b), np.maximum(a, b))
    assert _same(E.compile_interval(roots, box=engine._box)(vlo, vhi), _general(roots, engine._box)(vlo, vhi))
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    _, split = engine._witness_pairs(lo, hi, np.full((len(lo), 2 * dom.ndim), -1, dtype=np.int64))
    assert split.any()  # a feasible low corner and an infeasible high one: no bounds of the peak needed
    got, want = engine.bounds(lo, hi, None, split), engine.bounds(lo, hi, None)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])

    idx = dom.canonical(rng.integers(0, dom.sizes, size=(3000, dom.ndim)))
    values = E.compile_vectorized(exprs, box=engine._box)(dom.value_columns(idx)[0])
    for mask in (None, np.array([True, False, True]), np.array([False, True, False])):
        want = np.ones(len(idx), dtype=bool)
        for k, v in enumerate(values):
            if mask is None or mask[engine._open[k]]:
                want &= v
        assert np.array_equal(engine.feasible_points(idx, mask), want)
    assert 0 < want.sum() < len(idx)

    pool = p._sample_pool(p._c(), SAMPLE_BOXES)
    draws = p.sample(20, seed=3)
    with (
        mock.patch.object(E, "_gate_signs", lambda *args: {}),
        mock.patch.object(_engine, "STAGE_RATIO", 10**9),
    ):
        q = _gpt()  # the general rule everywhere, one stage of checks and bounds of every box
        assert len(_engine._stages(q._c().engine._open_exprs)) == 1
        assert engine._exact
        q._c().engine._exact = False
        old = q._sample_pool(q._c(), SAMPLE_BOXES)
    assert all(x.dtype == y.dtype and np.array_equal(x, y) for x, y in zip(pool, old))
    assert q.sample(20, seed=3) == draws


@pytest.mark.parametrize("seed", range(30))
def test_bounds_of_boxes_with_witness_pairs_are_unchanged(seed: int) -> None:
    p = random_problem(seed, conditional=seed % 2 == 1)
    engine = p._c().engine
    if not engine._exact or not engine._open_exprs:
        return
    dom = engine.domain
    rng = np.random.default_rng(seed)
    a, b = (rng.integers(0, dom.sizes, size=(200, dom.ndim)) for _ in range(2))
    nb = dom.normalize(np.minimum(a, b), np.maximum(a, b))
    none = np.full((200, 2 * dom.ndim), -1, dtype=np.int64)
    known, split = engine._witness_pairs(nb.lo, nb.hi, none)
    known, split = engine._witness_pairs(nb.lo, nb.hi, known[rng.permutation(200)])  # others' points
    masks = [None, *(rng.random(len(engine.constraints)) < 0.5 for _ in range(3))]
    for mask in masks:
        got = engine.bounds(nb.lo, nb.hi, mask, split)
        want = engine.bounds(nb.lo, nb.hi, mask)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
