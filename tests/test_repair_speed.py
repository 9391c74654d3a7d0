"""Speed paths that must not change answers: ``Problem.repair``'s check of every point near a witness
(the same repairs as the branch and bound alone, ties included), ``Problem.count`` keeping
``Problem.sample``'s decomposition (the same draws), and the engine's evaluators compiled on first use."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import dnnsat.problem._count as C
import dnnsat.problem._repair as P
from dnnsat import Categorical, Int, Problem, Space
from dnnsat.solver import _engine
from tests._random_problems import all_configs, random_problem


def _problem() -> Problem:
    space = Space({"w": Int(1, 200), "d": Int(1, 40), "act": Categorical(["relu", "gelu"]), "k": Int(1, 9)})
    v = space.vars
    return Problem(space).require(v.w * v.w * v.d + 3 * v.k * v.w <= 900_000, "budget")


@pytest.mark.parametrize("seed", range(40))
def test_repair_is_the_same_with_and_without_the_witness_shortcut(seed: int, monkeypatch: Any) -> None:
    p = random_problem(seed)
    infeasible = [c for c in all_configs(p.space) if not p.check(c).feasible]
    rng = np.random.default_rng(seed)
    configs = [infeasible[int(i)] for i in rng.integers(len(infeasible), size=4)] if infeasible else []
    answered = _recording(monkeypatch)
    fast = [p.repair(c) for c in configs]
    monkeypatch.setattr(P, "_unique_nearest", lambda *args: None)  # Engine.minimize decides alone
    slow = [random_problem(seed).repair(c) for c in configs]
    assert fast == slow
    assert len(answered) <= sum(r is not None for r in fast)  # one call per repair at most


def _recording(monkeypatch: Any) -> list[bool]:
    """Whether each call of the witness shortcut answered (else Engine.minimize decided)."""
    answered: list[bool] = []
    shortcut = P._unique_nearest

    def recorded(*args: Any) -> Any:
        out = shortcut(*args)
        answered.append(out is not None)
        return out

    monkeypatch.setattr(P, "_unique_nearest", recorded)
    return answered


def test_the_witness_shortcut_answers_repairs_with_one_nearest_point(monkeypatch: Any) -> None:
    rng = np.random.default_rng(0)
    configs = [
        {
            "w": int(rng.integers(150, 201)),
            "d": int(rng.integers(20, 41)),
            "act": "gelu",
            "k": int(rng.integers(1, 10)),
        }
        for _ in range(12)
    ]
    answered = _recording(monkeypatch)
    fast = [_problem().repair(c) for c in configs]
    assert answered and all(answered)
    monkeypatch.setattr(P, "_unique_nearest", lambda *args: None)
    assert fast == [_problem().repair(c) for c in configs]
    assert all(f is not None and _problem().check(f).feasible and f["act"] == "gelu" for f in fast)


def test_a_tie_is_left_to_the_search(monkeypatch: Any) -> None:
    space = Space({"x": Int(0, 4), "y": Int(0, 3)})
    v = space.vars
    p = Problem(space).require((v.x - 2) * (v.x - 2) >= 1, "not two")
    answered = _recording(monkeypatch)
    assert p.repair({"x": 2, "y": 1}) == {"x": 1, "y": 1}  # x=1 and x=3 are as near: lower half first
    assert answered == [False]


def test_count_keeps_the_sample_decomposition(monkeypatch: Any) -> None:
    p, fresh = _problem(), _problem()
    assert p.count() == fresh.count()
    assert set(p._c().pools) == {C.SAMPLE_BOXES}
    boxes = p._c().engine.stats["boxes"]
    assert p.sample(6, seed=2) == fresh.sample(6, seed=2)
    assert p._c().engine.stats["boxes"] == boxes  # drawn from the kept pool
    # a decomposition cut short: count goes on with the boxes it left undecided
    monkeypatch.setattr(C, "SAMPLE_BOXES", 40)
    q = _problem()
    assert q.count() == fresh.count()
    lo, hi, undecided = q._c().pools[40]
    assert undecided.any() and not lo.flags.writeable
    assert q.sample(6, seed=2, max_boxes=40) == _problem().sample(6, seed=2, max_boxes=40)


def test_count_on_an_infeasible_problem_keeps_an_empty_pool() -> None:
    p = _problem().require(_problem().space.vars.w >= 1000, "impossible")
    assert p.count() == 0
    lo, _, _ = p._c().pools[C.SAMPLE_BOXES]
    assert len(lo) == 0


def test_engine_compiles_each_evaluator_on_first_use() -> None:
    engine = _problem()._c().engine
    kinds = set(_engine._COMPILERS)
    assert not kinds & set(engine._shared)  # nothing compiled when the engine is built
    lo, hi = engine.domain.root()
    engine.bounds(lo, hi, None)  # one box: Python numbers
    assert kinds & set(engine._shared) == {"interval_scalar"}
    engine.bounds(np.repeat(lo, _engine.FEW + 1, axis=0), np.repeat(hi, _engine.FEW + 1, axis=0), None)
    assert kinds & set(engine._shared) == {"interval_scalar", "interval"}
    engine.warm()
    assert kinds <= set(engine._shared)


def test_points_per_call_follows_the_arrays_alive_at_once() -> None:
    p = _problem()
    engine = p._c().engine
    order = _engine.topological(engine._open_exprs)
    live = _engine._live_arrays(order)
    assert 1 <= live < len(order)
    assert engine.points_per_call == max(
        _engine.FEW + 1, min(_engine.POINTS_PER_STEP, _engine.POINT_NODES // live)
    )
    idx, _ = engine.domain.points(*engine.domain.root())
    whole = engine.feasible_points(idx)
    engine.points_per_call = 100  # chunks of another size: the same answers
    assert np.array_equal(engine.feasible_points(idx), whole)


@pytest.mark.parametrize("seed", range(3))
def test_count_cut_short_matches_the_whole_count(seed: int, monkeypatch: Any) -> None:
    whole = random_problem(seed, conditional=True).count()
    monkeypatch.setattr(C, "SAMPLE_BOXES", 3)
    assert random_problem(seed, conditional=True).count() == whole
