"""Every time limit is a real limit (issue 32): ``count``, ``estimate_count``, ``sample``, ``prune`` and
``enumerate`` on deep chains of conditional parameters (spaces above 2**1024 configurations, where
float64 overflows), and exact answers where they were exact."""

from __future__ import annotations

import itertools
import time
import warnings

import pytest

import dnnsat as ds
from dnnsat.expr import sum_

SLACK = 10.0  # seconds: compiling a 1,100-parameter problem, a loaded 2-core machine


def chain(n: int, activating: tuple[int, ...]) -> ds.Problem:
    """``x0 .. x{n-1}`` binary, each active when the previous one takes a value in ``activating``; at most
    half of them may be 1."""
    params = {"x0": ds.Categorical([0, 1])}
    for i in range(1, n):
        params[f"x{i}"] = ds.Categorical([0, 1], condition={f"x{i - 1}": list(activating)})
    space = ds.Space(params)
    p = ds.Problem(space)
    p.require(sum_(space.vars[f"x{i}"] for i in range(n)) <= n // 2, name="half")
    return p


def brute(p: ds.Problem) -> tuple[int, int]:
    """(space size, feasible count) by enumerating every assignment, inactive parameters dropped."""
    names = list(p.space)
    configs = set()
    for values in itertools.product(*(p.space[n].values() for n in names)):
        full = dict(zip(names, values))
        cfg = {n: v for n, v in full.items() if p.space.is_active(n, full)}
        configs.add(tuple(sorted(cfg.items())))
    feasible = sum(p.satisfied(dict(c)) for c in configs)
    return len(configs), feasible


@pytest.mark.parametrize("activating", [(1,), (0, 1)])
def test_small_chains_count_exactly(activating: tuple[int, ...]) -> None:
    for n in (1, 2, 5, 9):
        p = chain(n, activating)
        size, feasible = brute(p)
        assert p.space.size() == size
        assert p.count() == feasible
        assert p.estimate_count().value == feasible


def test_size_of_deep_chains_is_exact_and_instant() -> None:
    start = time.perf_counter()
    assert chain(3000, (1,)).space.size() == 3001
    assert chain(3000, (0, 1)).space.size() == 2**3000
    assert time.perf_counter() - start < SLACK


def test_prune_drops_conditional_parameters_never_active() -> None:
    """x5 is active only when x0..x4 are all 1, which the budget forbids: the old prune said 'empty'."""
    p = chain(10, (1,))
    pruned = p.prune()
    assert list(pruned) == [f"x{i}" for i in range(6)]
    assert pruned["x5"].choices == (0,)


@pytest.mark.parametrize("n", [1100, 3000])
@pytest.mark.parametrize("activating", [(1,), (0, 1)])
def test_every_query_honours_its_limit_on_deep_chains(n: int, activating: tuple[int, ...]) -> None:
    p = chain(n, activating)
    p._c()  # compiled outside the timings
    limit = 2.0

    start = time.perf_counter()
    try:
        c = p.count(max_seconds=limit)
        assert activating == (1,) and c == n // 2 + 1  # a prefix of k ones then a 0, k <= n // 2
    except ds.TimeLimitError as err:
        assert isinstance(err, TimeoutError) and err.limit == limit and err.estimate is not None
        assert "max_seconds" in str(err) and "estimate_count()" in str(err)
    assert time.perf_counter() - start < limit + SLACK

    start = time.perf_counter()
    e = p.estimate_count(max_seconds=limit)
    assert e.low <= e.value <= e.high
    assert time.perf_counter() - start < limit + SLACK

    start = time.perf_counter()
    try:
        assert len(p.sample(3, seed=0, max_seconds=limit)) == 3
    except ds.TimeLimitError as err:
        assert "max_seconds" in str(err) and len(err.partial) < 3
    assert time.perf_counter() - start < limit + SLACK

    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ds.PartialResultWarning)
        pruned = p.prune(max_seconds=limit)
    assert "x0" in pruned
    assert time.perf_counter() - start < limit + SLACK

    start = time.perf_counter()
    got = []
    try:
        for cfg in p.enumerate(limit=5, max_seconds=limit):
            got.append(cfg)
    except ds.TimeLimitError as err:
        assert "max_seconds" in str(err)
    assert all(p.satisfied(c) for c in got)
    assert time.perf_counter() - start < limit + SLACK


def test_count_without_a_limit_refuses_a_huge_space_at_once() -> None:
    p = chain(1100, (0, 1))
    p._c()
    start = time.perf_counter()
    with pytest.raises(ds.TimeLimitError, match="raise max_seconds") as info:
        p.count()
    assert time.perf_counter() - start < ds.problem.TIME_LIMIT / 2
    est = info.value.estimate
    assert est is not None and est.low > 2**1024  # exact ints beyond float64


@pytest.mark.parametrize("bad", [0, -1, float("nan"), "5", True])
def test_max_seconds_is_checked(bad: object) -> None:
    p = chain(3, (1,))
    with pytest.raises(ValueError, match="max_seconds"):
        p.count(max_seconds=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_seconds"):
        p.enumerate(max_seconds=bad)  # type: ignore[arg-type]
