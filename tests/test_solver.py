"""Every solver answer equals brute force on random small problems (<= 10**4 configs)."""

from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np
import pytest

import dnnsat as ds
from tests._random_problems import all_configs, brute_feasible, random_problem

SEEDS = list(range(25))
FINITE = lambda p: [n for n in p.space if p.space[n].is_finite]  # noqa: E731


def _key(c: dict) -> tuple:
    return tuple(sorted((k, v) for k, v in c.items() if k != "lr"))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("conditional", [False, True])
def test_prune_count_enumerate_match_brute_force(seed: int, conditional: bool) -> None:
    p = random_problem(seed, conditional)
    feas = brute_feasible(p)
    assert p.count() == len(feas)
    assert p.is_empty() == (not feas)
    if not feas:
        with pytest.raises(ds.InfeasibleSpaceError):
            p.prune()
        core = p.unsat_core()
        assert core
        return
    got = list(p.enumerate())
    assert sorted(map(_key, got)) == sorted(map(_key, feas))
    assert got == list(p.enumerate())  # deterministic order
    assert list(p.enumerate(limit=3)) == got[:3]
    pruned = p.prune()
    for name in FINITE(p):
        expect = {c[name] for c in feas if name in c}
        if p.space[name].condition and not expect:
            continue
        if expect:
            assert set(pruned[name].values()) == expect, name
    assert p.unsat_core() == []
    est = p.estimate_count()
    assert est.low <= len(feas) <= est.high


@pytest.mark.parametrize("seed", SEEDS)
def test_feasible_values_match_brute_force(seed: int) -> None:
    p = random_problem(seed, conditional=seed % 3 == 0)
    feas = brute_feasible(p)
    rng = np.random.default_rng(seed)
    names = FINITE(p)
    configs = list(all_configs(p.space))
    for _ in range(5):
        cfg = configs[int(rng.integers(len(configs)))]
        target = names[int(rng.integers(len(names)))]
        given_names = [n for n in cfg if n not in (target, "lr") and rng.random() < 0.5]
        given = {n: cfg[n] for n in given_names}
        expect = {c[target] for c in feas if target in c and all(c.get(n) == given[n] for n in given)}
        got = p.feasible_values(target, given)
        if p.space[target].condition:
            assert set(got) >= expect
        else:
            assert set(got) == expect, (target, given)


def _distance(p: ds.Problem, a: dict, b: dict) -> tuple[int, float]:
    changed, dist = 0, 0.0
    for n in FINITE(p):
        if n in a and a.get(n) != b.get(n):
            changed += 1
            vals = [p.space[n].encode(x) for x in p.space[n].values()]
            enc = sorted(vals)
            ia = enc.index(p.space[n].encode(a[n]))
            ib = enc.index(p.space[n].encode(b[n])) if n in b else 0
            dist += abs(ia - ib) / max(len(enc) - 1, 1)
    return changed, dist


@pytest.mark.parametrize("seed", SEEDS)
def test_repair_and_explain_match_brute_force(seed: int) -> None:
    p = random_problem(seed)
    feas = brute_feasible(p)
    infeasible = [c for c in all_configs(p.space) if not p.check(c).feasible]
    rng = np.random.default_rng(seed)
    for cfg in [infeasible[int(i)] for i in rng.integers(len(infeasible), size=3)] if infeasible else []:
        fixed = p.repair(cfg)
        if not feas:
            assert fixed is None
            continue
        assert fixed is not None and p.check(fixed).feasible
        best = min(_distance(p, cfg, c) for c in feas)
        got = _distance(p, cfg, fixed)
        assert got[0] == best[0]
        assert got[1] == pytest.approx(best[1])
        expl = p.explain(cfg)
        assert expl is not None and expl.constraints
        core = {k: v for k, v in expl.core.items()}
        extends = lambda part: any(all(c.get(k) == v for k, v in part.items()) for c in feas)  # noqa: E731
        assert not extends(core)
        for k in core:
            assert extends({a: b for a, b in core.items() if a != k}), k
    if feas:
        assert p.explain(feas[0]) is None
        assert p.repair(feas[0]) == {n: feas[0][n] for n in p.space if n in feas[0]}


@pytest.mark.parametrize("seed", SEEDS[:20])
def test_maximize_minimize_match_brute_force(seed: int) -> None:
    p = random_problem(seed)
    feas = brute_feasible(p)
    cost = next(iter(p.cost_exprs))
    opt_max, opt_min = p.maximize(cost), p.minimize(cost)
    if not feas:
        assert opt_max is None and opt_min is None
        return
    values = [p.costs(c)[cost] for c in feas]
    assert opt_max is not None and opt_min is not None
    assert opt_max.value == max(values) and opt_min.value == min(values)
    assert p.check(opt_max.config).feasible and p.costs(opt_max.config)[cost] == max(values)


def test_sample_is_uniform() -> None:
    for seed in range(60):
        p = random_problem(seed)
        feas = brute_feasible(p)
        if 20 <= len(feas) <= 60:
            break
    n = 200 * len(feas)
    samples = p.sample(n, seed=1)
    assert all(p.check(c).feasible for c in samples)
    counts = Counter(_key(c) for c in samples)
    assert set(counts) == {_key(c) for c in feas}
    expected = n / len(feas)
    chi2 = sum((counts[_key(c)] - expected) ** 2 / expected for c in feas)
    # chi-square critical value at p = 0.001 for len(feas) - 1 degrees of freedom (Wilson-Hilferty)
    k = len(feas) - 1
    crit = k * (1 - 2 / (9 * k) + 3.09 * math.sqrt(2 / (9 * k))) ** 3
    assert chi2 < crit
    assert p.sample(5, seed=3) == p.sample(5, seed=3)


def test_unsat_core_is_minimal() -> None:
    space = ds.Space({"a": ds.Int(1, 10), "b": ds.Int(1, 10), "c": ds.Int(1, 10)})
    v = space.vars
    p = ds.Problem(space)
    p.require(v.a + v.b >= 15, name="big").require(v.c <= 5, name="c_small").require(v.a <= 3, name="a_small")
    assert p.is_empty()
    assert p.unsat_core() == ["big", "a_small"]
    with pytest.raises(ds.InfeasibleSpaceError, match="big, a_small"):
        p.prune()


def test_brute_force_helper_covers_every_config() -> None:
    p = random_problem(0)
    finite = FINITE(p)
    total = math.prod(len(p.space[n].values()) for n in finite)
    assert len(list(all_configs(p.space))) == total == p.space.size()
    assert list(itertools.islice(all_configs(p.space), 1))


@pytest.mark.parametrize("seed", SEEDS[:12])
def test_few_boxes_in_python_agree_with_numpy(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Up to ``FEW`` boxes/points are evaluated one by one in generated Python code: same answers as
    the numpy evaluators on random boxes and points."""
    from dnnsat.solver import _engine

    engine = random_problem(seed, conditional=seed % 2 == 1)._c().engine
    rng = np.random.default_rng(seed)
    sizes = engine.domain.sizes
    for m in (1, 3, _engine.FEW):
        a, b = rng.integers(0, sizes, size=(2, m, len(sizes)))
        lo, hi = np.minimum(a, b), np.maximum(a, b)
        mask = rng.random(len(engine.constraints)) < 0.7
        few = engine.bounds(lo, hi, None), engine.bounds(lo, hi, mask), engine.feasible_points(lo, mask)
        monkeypatch.setattr(_engine, "FEW", 0)
        many = engine.bounds(lo, hi, None), engine.bounds(lo, hi, mask), engine.feasible_points(lo, mask)
        monkeypatch.undo()
        for x, y in zip(few, many):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_constraints_true_on_the_whole_domain_are_not_evaluated() -> None:
    space = ds.Space({"a": ds.Int(1, 10), "b": ds.Int(1, 10)})
    v = space.vars
    p = ds.Problem(space).require(v.a * v.b <= 100, name="roomy").require(v.a + v.b >= 15, name="big")
    engine = p._c().engine
    assert [engine.constraints[i] for i in engine._open] == [p.constraints[1].expr]
    assert p.count() == sum(a + b >= 15 for a in range(1, 11) for b in range(1, 11))
    assert not p.check({"a": 2, "b": 3}).feasible and p.check({"a": 9, "b": 9}).feasible


@pytest.mark.parametrize("seed", SEEDS[:10])
def test_small_enumeration_limit_matches_brute_force(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Large constraints (a memory peak) enumerate only small boxes and split the rest further
    (``ENUM_WORK``); forced down to 16 points here, every answer still equals brute force."""
    from dnnsat.solver import _engine

    monkeypatch.setattr(_engine, "ENUM_WORK", 1)
    assert random_problem(seed)._c().engine.enum_limit == 16
    test_prune_count_enumerate_match_brute_force(seed, conditional=seed % 2 == 1)
    test_feasible_values_match_brute_force(seed)
    test_repair_and_explain_match_brute_force(seed)
