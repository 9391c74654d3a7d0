"""``Problem.sample`` draws from the whole space first and from the decomposition when that runs short:
uniform over the feasible set in each regime (chi-square against brute force), and the same draws for
a seed whatever was called before."""

from __future__ import annotations

import math
import pickle
from collections import Counter

import pytest

import dnnsat as ds
from dnnsat.problem import REJECTION_DRAWS


def _products(n: int, k: int) -> ds.Problem:
    """``a * b <= k`` over ``a, b`` in ``1..n``: feasible share about ``k ln k / n**2``."""
    space = ds.Space({"a": ds.Int(1, n), "b": ds.Int(1, n), "act": ds.Categorical(["relu", "gelu"])})
    return ds.Problem(space).require(space.vars.a * space.vars.b <= k, name="area")


def _chi2_limit(k: int) -> float:
    """Chi-square critical value at p = 0.001 for ``k`` degrees of freedom (Wilson-Hilferty)."""
    return k * (1 - 2 / (9 * k) + 3.09 * math.sqrt(2 / (9 * k))) ** 3


@pytest.mark.parametrize(
    ("n", "k", "decomposed"),
    [
        (20, 100, False),  # 56 % feasible: the draws from the whole space suffice
        (100, 60, True),  # 2.6 %: they find about a fifth, the decomposition the rest
        (10_000, 2, True),  # 3 of 2e8: they find none
    ],
)
def test_draws_are_uniform_over_the_feasible_set(n: int, k: int, decomposed: bool) -> None:
    p = _products(n, k)
    feasible = {
        (a, b, act) for a in range(1, n + 1) for b in range(1, k // a + 1) for act in ("relu", "gelu")
    }
    feasible = {c for c in feasible if c[1] <= n}
    draws = 60 * len(feasible)
    got = p.sample(draws, seed=1)
    assert bool(p._c().pools) == decomposed  # the regime the case is meant to exercise
    counts = Counter((c["a"], c["b"], c["act"]) for c in got)
    assert set(counts) == feasible
    expected = draws / len(feasible)
    chi2 = sum((counts[c] - expected) ** 2 / expected for c in feasible)
    assert chi2 < _chi2_limit(len(feasible) - 1)


def test_draws_depend_on_the_seed_alone() -> None:
    p = _products(100, 60)
    fresh = pickle.loads(pickle.dumps(p))
    first = p.sample(40, seed=7)  # from the whole space only
    assert not p._c().pools
    p.count()  # keeps a decomposition
    assert p._c().pools
    assert p.sample(40, seed=7) == first == fresh.sample(40, seed=7)
    many = 8 * REJECTION_DRAWS  # needs the decomposition too
    assert p.sample(many, seed=3) == fresh.sample(many, seed=3)


def test_empty_problem_raises_after_both_steps() -> None:
    p = _products(50, 1)
    p.require(p.space.vars.a >= 2, name="a_big")
    with pytest.raises(ds.InfeasibleSpaceError):
        p.sample(3, seed=0)
    with pytest.raises(ds.InfeasibleSpaceError):
        p.sample(0)
