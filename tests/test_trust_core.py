"""Issue 12 (trust) in the core: predicates, continuous Floats, threads, pickling, bad input, limits.

Each test is a reproduction from the issue or a brute-force comparison; all fail on the code before it.
"""

from __future__ import annotations

import itertools
import math
import pickle
import threading

import numpy as np
import pytest

import dnnsat as ds
from dnnsat.solver._engine import OpaqueLimitError
from dnnsat.zoo import synthetic_resnet_problem

pytestmark = pytest.mark.filterwarnings("ignore::dnnsat.OpaqueConstraintWarning")


def at_most_64(c: dict) -> bool:  # module level: picklable
    return c["w"] <= 64


def lr_problem() -> ds.Problem:
    s = ds.Space({"w": ds.Int(16, 512, step=16), "lr": ds.Float(1e-5, 1.0, log=True)})
    return ds.Problem(s).require(s.vars.lr * s.vars.w <= 1.0, name="lrw")


# -- 2. opaque predicates see every parameter they may read ------------------------------------------------
def test_predicate_counts_and_samples_are_exact() -> None:
    s = ds.Space({"w": ds.Int(16, 512, step=16), "d": ds.Int(1, 4)})
    p = ds.Problem(s).require(lambda c: c["w"] <= 64, name="opaque")
    assert p.count() == 16  # w in {16, 32, 48, 64} x d in 1..4; was 128
    samples = p.sample(50, seed=0)
    assert all(p.check(c).feasible for c in samples)
    assert {c["w"] for c in samples} == {16, 32, 48, 64}
    assert p.feasible_values("w") == [16, 32, 48, 64]
    assert p.prune()["w"].values() == (16, 32, 48, 64)


def test_predicate_uses_narrows_the_search_and_guards_reads() -> None:
    s = ds.Space({"w": ds.Int(16, 512, step=16), "d": ds.Int(1, 4), "e": ds.Int(1, 3)})
    p = ds.Problem(s).require(lambda c: c["w"] * c["d"] <= 64, name="wd", uses=["w", "d"])
    brute = sum(w * d <= 64 for w, d, _ in itertools.product(s["w"].values(), range(1, 5), range(1, 4)))
    assert p.count() == brute
    bad = ds.Problem(s).require(lambda c: c["e"] <= 2, name="sneaky", uses=["w"])
    with pytest.raises(ds.SpaceError, match="'sneaky' reads 'e', which is not in its uses"):
        bad.count()
    with pytest.raises(ds.SpaceError, match="not parameters of the space"):
        ds.Problem(s).require(at_most_64, uses=["nope"])


def test_predicate_reading_a_float_is_an_error_not_a_guess() -> None:
    s = ds.Space({"w": ds.Int(16, 64, step=16), "lr": ds.Float(0.1, 1.0)})
    p = ds.Problem(s).require(lambda c: c["lr"] * c["w"] <= 10, name="lrw")
    assert p.check({"w": 16, "lr": 0.5}).feasible  # a full configuration is exact
    with pytest.raises(ds.SpaceError, match="reads the continuous parameter 'lr'"):
        p.count()
    with pytest.raises(ds.SpaceError, match="cannot read the continuous parameter"):
        ds.Problem(s).require(at_most_64, uses=["lr"])


def test_predicate_over_a_huge_space_refuses_with_advice() -> None:
    p = ds.zoo.synthetic_resnet_problem()
    p.require(lambda c: c["k"] == 3, name="k3")
    with pytest.raises(OpaqueLimitError, match="uses="):
        p.count(max_seconds=None)  # (by default the predicted time refuses first)


# -- 3. continuous parameters in constraints ---------------------------------------------------------------
def test_float_intervals_match_the_exact_boundary() -> None:
    p = lr_problem()
    for w in (16, 64, 512):
        (lo, hi), *rest = p.feasible_intervals("lr", {"w": w})
        assert not rest and lo == 1e-5
        assert hi <= 1.0 / w and math.isclose(hi, 1.0 / w, rel_tol=1e-6)
        assert p.check({"w": w, "lr": hi}).feasible
    (lo, hi), *rest = p.feasible_intervals("lr")  # w free: the smallest w decides
    assert not rest and math.isclose(hi, 1.0 / 16, rel_tol=1e-6)
    s = ds.Space({"x": ds.Float(-3.0, 3.0)})
    band = ds.Problem(s).require((s.vars.x * s.vars.x >= 1) & (s.vars.x <= 2))
    spans = band.feasible_intervals("x")
    assert len(spans) == 2
    assert spans[0][0] == -3.0 and math.isclose(spans[0][1], -1.0, abs_tol=1e-6)
    assert math.isclose(spans[1][0], 1.0, abs_tol=1e-6) and math.isclose(spans[1][1], 2.0, abs_tol=1e-6)
    for x in np.linspace(-3, 3, 601):
        inside = any(a <= x <= b for a, b in spans)
        feasible = bool(band.check({"x": float(x)}).feasible)
        assert not inside or feasible  # inner approximation: never an infeasible value
        assert inside or not feasible or min(abs(abs(x) - 1), abs(x - 2)) < 1e-6


def test_float_values_are_honoured_in_forward_checking() -> None:
    p = lr_problem()
    assert p.feasible_values("w", {"lr": 0.02}) == [16, 32, 48]  # was every w: lr was ignored
    assert not p.is_extendable({"lr": 0.07}) and p.is_extendable({"lr": 0.06})
    assert p.nearest_feasible_value("w", 512, {"lr": 0.02}) == 48
    assert p.nearest_feasible_value("lr", 1e-3, {"w": 64}) == 1e-3  # feasible: unchanged
    moved = p.nearest_feasible_value("lr", 0.5, {"w": 64})
    assert p.check({"w": 64, "lr": moved}).feasible and math.isclose(moved, 1 / 64, rel_tol=1e-6)
    s = ds.Space({"w": ds.Int(16, 512, step=16), "lr": ds.Float(0.5, 1.0)})
    none_fit = ds.Problem(s).require(s.vars.lr * s.vars.w <= 1.0)
    assert none_fit.nearest_feasible_value("lr", 0.7, {"w": 16}) is None


def test_repair_handles_constrained_floats() -> None:
    p = lr_problem()
    fixed_w = p.repair({"w": 512, "lr": 0.5}, fixed=["w"])
    assert fixed_w is not None and fixed_w["w"] == 512 and p.check(fixed_w).feasible
    fixed_lr = p.repair({"w": 512, "lr": 0.02}, fixed=["lr"])
    assert fixed_lr == {"w": 48, "lr": 0.02}
    any_change = p.repair({"w": 512, "lr": 0.5})
    assert any_change is not None and p.check(any_change).feasible
    assert sum(any_change[k] != v for k, v in {"w": 512, "lr": 0.5}.items()) == 1
    assert p.repair({"w": 512, "lr": 0.5}, fixed=["w", "lr"]) is None


def test_prune_narrows_a_constrained_float() -> None:
    s = ds.Space({"x": ds.Float(0.1, 0.2)})
    p = ds.Problem(s).require(s.vars.x <= 0.18)
    low, high = p.prune()["x"].bounds()
    assert low == 0.1 and 0.18 - 1e-9 <= high <= 0.18
    assert p.feasible_values("x") == [0.1, high]


# -- thread safety (issue 19: Z3 from two threads crashed the interpreter) ---------------------------------
def test_problem_queries_from_many_threads_agree_with_one() -> None:
    p = lr_problem()  # an unpinned Float sends every box to Z3
    queries = [({"lr": lr}, None) for lr in (0.001, 0.01, 0.02, 0.05, 0.07)] + [({}, None)]
    expected = [p.feasible_values("w", g) for g, _ in queries]
    errors: list[BaseException] = []
    results: list[list[list[int]]] = []

    def work() -> None:
        try:
            for _ in range(3):
                results.append([p.feasible_values("w", g) for g, _ in queries])
                p.is_empty()
                p.prune()
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert all(r == expected for r in results)


# -- 4. bad input ------------------------------------------------------------------------------------------
def test_check_batch_validates_domains() -> None:
    s = ds.Space({"w": ds.Int(16, 512, step=16), "lr": ds.Float(0.1, 0.2)})
    p = ds.Problem(s).require(s.vars.w * s.vars.lr <= 50)
    for col, bad in (([16, 17], 17), ([16, 16.5], 16.5), ([16, 528], 528)):
        with pytest.raises(ds.SpaceError, match=f"column 'w' row 1 holds {bad}"):
            p.check_batch({"w": col, "lr": [0.1, 0.1]})
    with pytest.raises(ds.SpaceError, match="column 'lr' row 0"):
        p.check_batch({"w": [16], "lr": [0.3]})
    assert p.check_batch({"w": [16, 17], "lr": [0.1, 0.1]}, validate=False).tolist() == [True, True]


def test_enumerate_rejects_a_negative_limit() -> None:
    p = lr_problem()
    q = ds.Problem(ds.Space({"w": ds.Int(1, 4)}))
    with pytest.raises(ValueError, match="limit must be None or an integer >= 0"):
        q.enumerate(limit=-1)
    assert list(q.enumerate(limit=0)) == [] and len(list(q.enumerate(limit=2))) == 2
    assert p.is_extendable({"w": 16})


def test_maximize_a_parameter_no_constraint_uses() -> None:
    s = ds.Space({"a": ds.Int(1, 8), "b": ds.Int(1, 5), "c": ds.Categorical([3, 7, 2])})
    p = ds.Problem(s).require(s.vars.a <= 3)
    best = p.maximize("b")
    assert best is not None and best.value == 5 and p.check(best.config).feasible
    both = p.maximize(s.vars.a * s.vars.c)
    assert both is not None and both.value == 21
    assert p.minimize("c", given={"a": 2}).value == 2  # type: ignore[union-attr]


# -- 7. exact counting has a time limit ----------------------------------------------------------------------
def test_count_honours_max_seconds() -> None:
    p = ds.zoo.synthetic_resnet_problem()
    with pytest.raises(TimeoutError, match="estimate_count"):
        p.count(max_seconds=0.5)


def test_always_feasible() -> None:
    s = ds.Space({"w": ds.Int(16, 64, step=16), "d": ds.Int(1, 4)})
    v = s.vars
    assert ds.Problem(s).require(v.w * v.d <= 256).always_feasible()  # proved by bounds
    assert ds.Problem(s).require(ds.where(v.d > 2, v.w, 0) <= 64).always_feasible()
    assert not ds.Problem(s).require(v.w * v.d <= 255).always_feasible()


# -- 6. pickling ---------------------------------------------------------------------------------------------
def test_problem_pickles_and_answers_the_same() -> None:
    s = ds.Space({"w": ds.Int(16, 512, step=16), "d": ds.Int(1, 4)})
    p = ds.Problem(s).require(s.vars.w * s.vars.d <= 128, name="wd").require(at_most_64, name="small")
    q = pickle.loads(pickle.dumps(p))
    assert q.fingerprint() == p.fingerprint()
    brute = sum(w * d <= 128 and w <= 64 for w in s["w"].values() for d in range(1, 5))
    assert q.count() == p.count() == brute == 12
    assert q.sample(5, seed=3) == p.sample(5, seed=3)
    lam = ds.Problem(s).require(lambda c: True, name="anon")
    with pytest.raises(TypeError, match="'anon' is a Python predicate that cannot be pickled"):
        pickle.dumps(lam)


def test_zoo_problem_with_a_memory_budget_pickles() -> None:
    p = ds.zoo.resnet(budget=ds.Budget(memory="2GiB"))
    q = pickle.loads(pickle.dumps(p))
    cfg = p.sample(1, seed=0)[0]
    assert q.costs(cfg) == p.costs(cfg)


def test_check_batch_validates_integer_columns_exactly() -> None:
    """The fast check of integer columns (range, then a table or a remainder) refuses what the other does."""
    s = ds.Space(
        {
            "k": ds.Categorical([3, 5, 7]),
            "b": ds.Categorical([16, 64, 1024]),
            "big": ds.Int(0, 10**8, step=1000),
            "d": ds.Int(1, 4),
        }
    )
    p = ds.Problem(s).require(s.vars.k * s.vars.d <= 28)
    good = {"k": [3, 7], "b": [16, 1024], "big": [0, 10**8], "d": [1, 4]}
    assert p.check_batch(good).tolist() == [True, True]
    assert p.check_batch({k: np.asarray(v, dtype=np.uint32) for k, v in good.items()}).tolist() == [
        True,
        True,
    ]
    for name, bad in (("k", 4), ("b", 32), ("big", 1500), ("d", 5), ("d", 0)):
        cols = {k: list(v) for k, v in good.items()}
        cols[name][1] = bad
        with pytest.raises(ds.SpaceError, match=f"column '{name}' row 1 holds {bad}"):
            p.check_batch({k: np.asarray(v) for k, v in cols.items()})


def test_first_check_compiles_only_the_point_evaluator() -> None:
    """``check`` builds neither the solver engine nor the vectorized evaluator (a deep network's first
    check waited seconds for them); each is built on first use, and answers agree."""
    p = synthetic_resnet_problem()
    cfg = {
        "w0": 64,
        "w1": 64,
        "w2": 128,
        "w3": 256,
        "d0": 2,
        "d1": 2,
        "d2": 2,
        "d3": 2,
        "b": 32,
        "r": 224,
        "k": 3,
    }
    assert p.check(cfg).feasible
    assert not p._c()._lazy  # nothing but the scalar evaluator so far
    assert p.check_batch({k: [v] for k, v in cfg.items()}).tolist() == [True]
    assert set(p._c()._lazy) == {"vector"}
    assert 64 in p.feasible_values("w0", {k: v for k, v in cfg.items() if k != "w0"})
    assert set(p._c()._lazy) == {"vector", "engine"}
