"""Guard (``Problem.guard()``): every answer checked by brute force on small random problems."""

from __future__ import annotations

import math
import pickle
import threading
from typing import Any

import numpy as np
import pytest

import dnnsat as ds
from dnnsat.guard import Guard, Within
from dnnsat.space import Categorical
from tests._random_problems import brute_feasible, random_problem

SEEDS = range(8)


def _extends(feasible: list[dict[str, Any]], partial: dict[str, Any]) -> bool:
    return any(all(c.get(k) == v for k, v in partial.items()) for c in feasible)


def _finite_order(p: ds.Problem) -> list[str]:
    return [n for n in p.space.conditional_order if p.space[n].is_finite]


def _prefixes(p: ds.Problem, rng: np.random.Generator, n: int) -> list[dict[str, Any]]:
    """Random partial configurations along the space's order (some infeasible)."""
    out = []
    order = _finite_order(p)
    for _ in range(n):
        cfg: dict[str, Any] = {}
        for name in order[: int(rng.integers(0, len(order)))]:
            if p.space.is_active(name, cfg):
                vals = p.space[name].values()
                cfg[name] = vals[int(rng.integers(len(vals)))]
        out.append(cfg)
    return out


@pytest.mark.parametrize("conditional", [False, True])
@pytest.mark.parametrize("seed", SEEDS)
def test_propose_keeps_exactly_the_extendable_values_else_the_nearest(seed: int, conditional: bool) -> None:
    p = random_problem(seed, conditional)
    feasible = brute_feasible(p)
    if not feasible:
        pytest.skip("empty problem")
    g = p.guard(seed=seed)
    rng = np.random.default_rng(seed)
    for given in _prefixes(p, rng, 12):
        if not _extends(feasible, given):
            continue
        name = next((n for n in _finite_order(p) if n not in given and p.space.is_active(n, given)), None)
        if name is None:
            continue
        param = p.space[name]
        ok = [v for v in param.values() if _extends(feasible, {**given, name: v})]
        for value in param.values():
            d = g.decide(name, value, given, key=3)
            if value in ok:
                assert d.outcome == "kept" and d.value == value
                continue
            assert d.outcome == "repaired" and d.value in ok
            if isinstance(param, Categorical) and not param.numeric:
                continue
            if isinstance(param, Categorical):
                ranks = sorted(param.values())
                assert abs(ranks.index(d.value) - ranks.index(value)) == min(
                    abs(ranks.index(v) - ranks.index(value)) for v in ok
                )
            else:
                assert abs(d.value - value) == min(abs(v - value) for v in ok)


@pytest.mark.parametrize("conditional", [False, True])
@pytest.mark.parametrize("seed", SEEDS)
def test_is_extendable_complete_and_feasible_values_match_brute_force(seed: int, conditional: bool) -> None:
    p = random_problem(seed, conditional)
    feasible = brute_feasible(p)
    if not feasible:
        pytest.skip("empty problem")
    g = p.guard()
    rng = np.random.default_rng(100 + seed)
    for given in _prefixes(p, rng, 15):
        want = _extends(feasible, given)
        assert g.is_extendable(given) is want
        done = g.complete(given)
        assert (done is not None) is want
        if done is not None:
            assert p.check(done).feasible and all(done[k] == v for k, v in given.items())
        open_ = [n for n in _finite_order(p) if n not in given and p.space.is_active(n, given)]
        if open_ and not conditional:
            assert list(g.feasible_values(open_[0], given)) == p.feasible_values(open_[0], given)


@pytest.mark.parametrize("conditional", [False, True])
@pytest.mark.parametrize("seed", SEEDS)
def test_repair_of_complete_configurations_is_problem_repair(seed: int, conditional: bool) -> None:
    p = random_problem(seed, conditional)
    if not brute_feasible(p):
        pytest.skip("empty problem")
    g = p.guard()
    rng = np.random.default_rng(200 + seed)
    for given in _prefixes(p, rng, 40):
        cfg = g.complete({}) or {}
        cfg = {**cfg, **given}
        cfg = {k: v for k, v in cfg.items() if p.space.is_active(k, cfg)}
        for name in _finite_order(p):  # conditional children that became active
            if name not in cfg and p.space.is_active(name, cfg):
                cfg[name] = p.space[name].values()[0]
        assert g.repair(cfg) == p.repair(cfg)


@pytest.mark.parametrize("seed", SEEDS)
def test_repair_with_ties_in_order_takes_the_first_closest_single_change(seed: int) -> None:
    full = random_problem(seed)
    finite = ds.Space({n: full.space[n] for n in _finite_order(full)})  # the one-change path: no Floats
    p = ds.Problem(finite)
    for c in full.constraints:
        p.require(c.expr, name=c.name)
    g = p.guard()
    order = _finite_order(p)
    rng = np.random.default_rng(300 + seed)
    for _ in range(30):
        cfg = {n: p.space[n].values()[int(rng.integers(len(p.space[n].values())))] for n in order}
        if p.check(cfg).feasible:
            continue
        singles = []  # (distance over the domain's length, position in the space's order, value index)
        for pos, name in enumerate(order):
            vals = list(p.space[name].values())
            for j, v in enumerate(vals):
                if v != cfg[name] and p.check({**cfg, name: v}).feasible:
                    singles.append((abs(j - vals.index(cfg[name])) / len(vals), pos, j, {**cfg, name: v}))
        got = g.repair(cfg, ties="order")
        if singles:
            assert got == min(singles, key=lambda s: s[:3])[3]
        else:
            assert got == p.repair(cfg)


def test_repairs_that_change_two_parameters_are_problem_repair() -> None:
    """Two-change repairs found by one vectorized check equal ``problem.repair``'s; ties and
    three-change cases go to its search."""
    two_change = 0
    for seed in range(12):
        full = random_problem(seed)
        numeric = {n: full.space[n] for n in _finite_order(full) if full.space[n].labels is None}
        p = ds.Problem(ds.Space(numeric))  # ordered finite parameters only: the two-change path
        for c in full.constraints:
            if c.expr is not None and c.expr.variables() <= set(numeric):
                p.require(c.expr, name=c.name)
        g = p.guard()
        rng = np.random.default_rng(400 + seed)
        for _ in range(30):
            cfg = {n: p.space[n].values()[int(rng.integers(len(p.space[n].values())))] for n in numeric}
            if not p.check(cfg).feasible:
                assert g.repair(cfg) == p.repair(cfg)
        two_change += g.stats.two_change_repairs
    assert two_change > 0


def test_repair_keeps_names_and_stays_within() -> None:
    space = ds.Space({"a": ds.Int(1, 10), "b": ds.Int(1, 10)})
    p = ds.Problem(space).require(space.vars.a + space.vars.b <= 8)
    g = p.guard()
    assert g.repair({"a": 7, "b": 7}, keep=["a"]) == {"a": 7, "b": 1}
    fixed = g.repair({"a": 7, "b": 7}, within={"b": Within(1, 3, 1, integer=True)}, keep=["a"])
    assert fixed == {"a": 7, "b": 1}
    assert g.repair({"a": 9, "b": 9}, keep=["a", "b"]) is None
    assert g.repair({"a": 2}) == {"a": 2}  # a partial configuration stays partial
    assert g.stats.repairs >= 2


def _float_problem() -> ds.Problem:
    space = ds.Space({"x": ds.Float(0.1, 2.0), "n": ds.Int(1, 10), "c": ds.Categorical(["p", "q", "r"])})
    v = space.vars
    p = ds.Problem(space)
    p.require(v.x * v.n <= 6, name="xn")
    p.require((v.x <= 0.5) | (v.x >= 1.2), name="gap")
    return p


def test_continuous_float_is_forward_checked() -> None:
    p = _float_problem()
    g = p.guard()
    assert g.propose("x", 0.3, {"n": 4}) == 0.3
    moved = g.decide("x", 0.8, {"n": 4})
    assert moved.outcome == "repaired" and p.is_extendable({"n": 4, "x": moved.value})
    assert moved.value == pytest.approx(0.5, abs=1e-3)  # the nearest end of [0.1, 0.5] | [1.2, 1.5]
    assert g.propose("x", 1.9, {"n": 4}) == pytest.approx(1.5, abs=1e-3)
    on_grid = g.propose("x", 0.8, {"n": 4}, within=Within(0.0, 2.0, step=0.25))
    assert on_grid in (0.5, 1.25)
    assert g.propose("x", 0.8, {"n": 4}, within=Within(choices=(1.9, 0.2))) == 0.2
    assert g.decide("x", 0.8, {"n": 4}, within=Within(choices=(1.9,))).outcome == "dead_end"
    assert g.stats.float_repaired >= 2 and g.stats.dead_ends == 1
    repaired = g.repair({"x": 0.8, "n": 9, "c": "p"})
    assert repaired is not None and p.check(repaired).feasible
    assert g.redraw_floats({"x": 0.3, "n": 4, "c": "q"}, 5, np.random.default_rng(0))


def test_unordered_choice_is_seeded_and_keyed() -> None:
    space = ds.Space({"op": ds.Categorical(["a", "b", "c", "d", "e"]), "w": ds.Int(1, 4)})
    v = space.vars
    p = ds.Problem(space).require((v.op != "a") | (v.w <= 1))
    picks = {p.guard(seed=1).propose("op", "a", {"w": 3}, key=k) for k in range(20)}
    assert len(picks) > 1 and "a" not in picks
    assert [p.guard(seed=1).propose("op", "a", {"w": 3}, key=k) for k in range(20)] == [
        p.guard(seed=1).propose("op", "a", {"w": 3}, key=k) for k in range(20)
    ]


def test_unchecked_inactive_and_unrepresentable() -> None:
    p = random_problem(0, conditional=True)
    g = p.guard()
    assert g.decide("extra", 4, {"mode": "a"}).outcome == "unchecked"
    name = _finite_order(p)[0]
    if not (isinstance(p.space[name], Categorical) and not p.space[name].numeric):
        assert g.decide(name, 1, {}, within=Within(choices=("zzz",))).outcome == "unchecked"


def test_pickle_and_threads_give_the_same_answers() -> None:
    p = random_problem(3)
    g = p.guard(seed=5)
    rng = np.random.default_rng(0)
    queries = []
    for given in _prefixes(p, rng, 30):
        name = next((n for n in _finite_order(p) if n not in given), None)
        if name is not None:
            vals = p.space[name].values()
            queries.append((name, vals[int(rng.integers(len(vals)))], given))
    serial = [g.propose(*q, key=i) for i, q in enumerate(queries)]
    clone = pickle.loads(pickle.dumps(g))
    assert [clone.propose(*q, key=i) for i, q in enumerate(queries)] == serial
    results: dict[int, list[Any]] = {}

    def work(t: int) -> None:
        fresh = p.guard(seed=5)
        results[t] = [fresh.propose(*q, key=i) for i, q in enumerate(queries)]

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r == serial for r in results.values())


def test_within() -> None:
    w = Within(1, 9, 2, integer=True)
    assert w.contains(3) and not w.contains(4) and not w.contains(11) and not w.contains(True)
    f = Within(0.0, 1.0, step=0.25)
    assert f.contains(0.5) and not f.contains(0.3)
    assert f.candidates([(0.3, 0.6)], 0.9, log=False) == [0.5]
    assert Within(choices=(1, "a")).contains(1.0) and not Within(choices=(1,)).contains(True)
    c = Within(0.1, 10.0).candidates([(0.1, 0.2), (5.0, 10.0)], 1.0, log=True)
    assert c[0] == 0.2 and math.isclose(c[-1], 7.5)
    assert Within.of(ds.Int(1, 5)).contains(5) and Within.of(ds.Categorical(["x"])).contains("x")


def test_guard_is_exported_by_problem() -> None:
    assert isinstance(random_problem(1).guard(), Guard)


@pytest.mark.parametrize("seed", SEEDS)
def test_satisfied_is_check_feasible(seed: int) -> None:
    from tests._random_problems import all_configs

    p = random_problem(seed, conditional=seed % 2 == 1)
    p.require(lambda c: c.get("x0", 0) != 2, name="opaque")  # a Python predicate too
    for cfg in all_configs(p.space):
        assert p.satisfied(cfg) is p.check(cfg).feasible
