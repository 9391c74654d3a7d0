"""Memory peaks as matrix products (``dnnsat.expr._gated_peaks``) give the node-by-node values bit for bit:
random timelines of gated sizes (inside the compile box and outside it) and the zoo GPT's training
memory."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import dnnsat.expr as E
from dnnsat.expr._gated_peaks import gated_peaks
from dnnsat.torch import random_configs
from tests.test_sample_speed import _gpt

L, K, B, D = E.Var("layers"), E.Var("kind"), E.Var("b"), E.Var("d")
BOX = {"layers": (1, 8), "kind": (0, 2), "b": (1, 16), "d": (1, 64)}
SIZES = [
    B * D,
    D * D,
    4 * B,
    E.ceildiv(3 * B * D, 7),
    D + B,
    E.maximum(B, D) * 2,
    B - D,
]  # the last: either sign
GATES = [
    *(i < L for i in range(8)),
    L == 3,
    (L < 5) & (K == 1),
    ~(L > 2) | (K == 0),
    None,  # an ungated size
]
# one step of a timeline: a size allocated (+) or freed (-) under a gate, plus a constant
steps = st.tuples(
    st.integers(0, len(GATES) - 1),
    st.integers(0, len(SIZES) - 1),
    st.sampled_from([1, 1, 2, -1]),
    st.integers(0, 9),
)


def _peak(timeline: list[tuple[int, int, int, int]]) -> E.Expr:
    """The maximum over the running totals of ``timeline`` (a memory peak in small)."""
    total: E.Expr = E.Const(0)
    moments = []
    for gate, size, sign, const in timeline:
        term = SIZES[size] if GATES[gate] is None else E.where(GATES[gate], SIZES[size], 0)
        total = total + sign * term + const
        moments.append(total)
    return E.maximum(*moments)


def _points(rng: np.random.Generator, n: int, outside: bool) -> dict[str, Any]:
    cols = {k: rng.integers(lo, hi + 1, n) for k, (lo, hi) in BOX.items()}
    if outside:  # a few values beyond the box: the node-by-node code answers there
        cols["layers"][: n // 4] = 9
        cols["d"][n // 4 : n // 2] = 65
    return cols


def _factored(roots: list[E.Expr]) -> dict[int, Any]:
    wide = E._dtype_plan(roots, BOX)
    return gated_peaks(
        roots, BOX, wide, lambda s: E.compile_vectorized(s), lambda n: E.compile_vectorized([n])
    )


@settings(max_examples=60, deadline=None)
@given(st.lists(steps, min_size=64, max_size=120), st.integers(0, 2**32 - 1), st.booleans())
def test_gated_peak_equals_node_by_node(
    timeline: list[tuple[int, int, int, int]], seed: int, outside: bool
) -> None:
    peak = _peak(timeline)
    roots = [peak, peak <= 5000]
    assert _factored(roots), "the timeline must factor (else this test checks nothing)"
    cols = _points(np.random.default_rng(seed), 300, outside)
    got = E.compile_vectorized(roots, box=BOX)(cols)
    want = E._compile_vectorized(roots, BOX, gated=False)(cols)
    for g, w in zip(got, want):
        assert np.array_equal(np.broadcast_to(g, (300,)), np.broadcast_to(w, (300,)))
        assert np.asarray(g).dtype == np.asarray(w).dtype


def test_scalars_and_empty_batches() -> None:
    peak = _peak([(k % len(GATES), k % len(SIZES), 1 if k % 3 else -1, k % 5) for k in range(80)])
    f = E.compile_vectorized([peak], box=BOX)
    g = E._compile_vectorized([peak], BOX, gated=False)
    point = {"layers": 4, "kind": 1, "b": 7, "d": 33}
    assert int(f(point)[0][0]) == int(g(point)[0])
    empty = {k: np.zeros(0, dtype=np.int64) for k in BOX}
    assert f(empty)[0].shape == (0,)


def test_gpt_training_memory_is_factored_and_exact() -> None:
    p = _gpt()
    engine = p._c().engine
    roots, box = engine._open_exprs, engine._box
    factored = gated_peaks(
        roots, box, E._dtype_plan(roots, box), E.compile_vectorized, lambda n: E.compile_vectorized([n])
    )
    assert len(factored) == 1
    (peak,) = factored.values()
    configs = random_configs(p.space, 400, seed=3)
    cols = {n: np.array([p.space[n].encode(c[n]) for c in configs]) for n in box}
    got = E.compile_vectorized(roots, box=box)(cols)
    want = E._compile_vectorized(roots, box, gated=False)(cols)
    assert all(np.array_equal(g, w) for g, w in zip(got, want))
    assert np.array_equal(peak(cols), E._compile_vectorized([peak.node], box, gated=False)(cols)[0])
    assert 0 < int(np.sum(got[-1])) < len(configs)  # the budget splits them: both answers occur
