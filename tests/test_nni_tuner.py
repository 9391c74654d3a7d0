"""DnnSATTuner driven through NNI's tuner API (update_search_space, generate_parameters,
receive_trial_result, trial_end) with NNI 3.0's real built-in tuners."""

from __future__ import annotations

import logging
import math
from typing import Any

import pytest

pytest.importorskip("nni")

import nni  # noqa: E402

import dnnsat as ds  # noqa: E402
from benchmarks.nni_overhead import ARGS  # noqa: E402  (the tuner arguments the benchmark uses)
from dnnsat.integrations.nni import DnnSATClassArgsValidator, DnnSATTuner, load_problem  # noqa: E402
from dnnsat.space import config_from_nni  # noqa: E402
from dnnsat.zoo import synthetic_resnet_problem  # noqa: E402

TIGHT = {"flops_limit": 1e11, "params_limit": 2e6}


def _score(cfg: dict[str, Any]) -> float:
    """A deterministic metric for driving the tuners (bigger last stage and batch score higher)."""
    return math.log(cfg.get("w3", 16) * cfg.get("b", 16)) - 0.1 * cfg.get("k", 3)


def drive(
    tuner: DnnSATTuner, problem: Any, n: int, concurrency: int = 2, space: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Ask for ``n`` configurations like NNI's dispatcher; report results with ``concurrency`` in flight."""
    tuner.update_search_space(space if space is not None else problem.space.to_nni())
    out: list[dict[str, Any]] = []
    running: list[tuple[int, dict[str, Any]]] = []
    for pid in range(n):
        try:
            params = tuner.generate_parameters(pid)
        except nni.NoMoreTrialError:
            break
        out.append(params)
        running.append((pid, params))
        if len(running) >= concurrency:
            rid, rp = running.pop(0)
            tuner.receive_trial_result(rid, rp, _score(rp))
            tuner.trial_end(rid, True)
    for rid, rp in running:
        tuner.receive_trial_result(rid, rp, _score(rp))
        tuner.trial_end(rid, True)
    return out


def assert_all_feasible(problem: Any, configs: list[dict[str, Any]]) -> None:
    bad = [c for c in configs if not problem.check(config_from_nni(problem.space, c)).feasible]
    assert bad == [], f"{len(bad)} infeasible configurations, e.g. {bad[:2]}"


def small_problem() -> ds.Problem:
    """a, b in 1..6 with a * b <= 6: 14 feasible configurations out of 36."""
    space = ds.Space({"a": ds.Int(1, 6), "b": ds.Int(1, 6)})
    p = ds.Problem(space)
    p.require(space.vars.a * space.vars.b <= 6, name="area")
    return p


def empty_problem() -> ds.Problem:
    return synthetic_resnet_problem(flops_limit=1.0, params_limit=2e6)


# The acceptance matrix: every wrapped tuner, 200 configurations, both limit settings, both modes.
# The default run keeps one cheap cell per tuner (GP: slow, ~0.3 s per proposal); `-m slow` runs the rest.
FAST = {
    ("TPE", "default", "reject"),
    ("Random", "default", "reject"),
    ("Anneal", "default", "reject"),
    ("Evolution", "default", "reject"),
    ("GridSearch", "default", "reject"),
    ("Evolution", "tight", "reject"),
}
# GP in reject mode at the tight limits (0.2 % feasible) is left out: every rejected proposal becomes a GP
# observation, and 60 configurations took over 600 s here. Use repair mode with GP (README, NNI section).
MATRIX = [
    pytest.param(name, limits, mode, marks=() if (name, limits, mode) in FAST else pytest.mark.slow)
    for name in ARGS
    for limits in ("default", "tight")
    for mode in ("repair", "reject")
    if (name, limits, mode) != ("GP", "tight", "reject")
]


@pytest.mark.parametrize(("name", "limits", "mode"), MATRIX)
def test_200_configs_all_feasible(name: str, limits: str, mode: str) -> None:
    if name == "Anneal":
        pytest.importorskip("hyperopt")
    problem = synthetic_resnet_problem(**(TIGHT if limits == "tight" else {}))
    tuner = DnnSATTuner(problem, name, dict(ARGS[name]), mode=mode, seed=0)
    n = 200
    configs = drive(tuner, problem, n)
    assert len(configs) == n
    assert_all_feasible(problem, configs)
    assert len({tuple(sorted(c.items())) for c in configs}) == n  # no configuration launched twice
    s = tuner.stats
    assert s.launched == n
    assert s.proposals >= n
    # every proposal was feasible, repaired or rejected; every launch is new or sampled by dnnsat
    assert s.proposals == s.feasible + s.repaired + s.rejected
    assert s.launched == s.feasible + s.repaired - s.duplicates + s.fallbacks
    if mode == "repair":
        assert s.rejected == 0
    # every value has the problem's type: ints stay ints (NNI's quniform returns floats)
    assert all(type(c["w0"]) is int and type(c["b"]) is int for c in configs)


def test_base_tuner_gets_pruned_space() -> None:
    problem = synthetic_resnet_problem(**TIGHT)
    tuner = DnnSATTuner(problem, "TPE", {"optimize_mode": "maximize"})
    tuner.update_search_space(problem.space.to_nni())
    pruned = problem.prune().to_nni()
    assert tuner._base_space == pruned
    assert pruned != problem.space.to_nni()  # tight limits do shrink the box (w0 <= 256)
    # TPE formatted exactly that space
    assert {k[0] for k in tuner.base.space} == set(pruned)  # type: ignore[attr-defined]


def test_space_mismatch_names_the_parameter() -> None:
    problem = synthetic_resnet_problem()
    space = problem.space.to_nni()
    bad = dict(space, w2={"_type": "quniform", "_value": [16, 256, 16]})
    with pytest.raises(ValueError, match=r"'w2'.*16 values.*32 values"):
        DnnSATTuner(problem, "Random").update_search_space(bad)
    missing = {k: v for k, v in space.items() if k != "k"}
    with pytest.raises(ValueError, match=r"lacks problem parameter\(s\) \['k'\]"):
        DnnSATTuner(problem, "Random").update_search_space(missing)
    unbounded = dict(space, r={"_type": "normal", "_value": [128, 10]})
    with pytest.raises(ValueError, match="'r'"):
        DnnSATTuner(problem, "Random").update_search_space(unbounded)


def test_hand_written_equivalent_space_is_accepted() -> None:
    """The same domains written differently (choice lists, randint's excluded bound) are accepted."""
    problem = synthetic_resnet_problem(**TIGHT)
    space = problem.space.to_nni()
    space["w0"] = {"_type": "choice", "_value": list(range(16, 513, 16))}
    space["d1"] = {"_type": "choice", "_value": [1, 2, 3, 4]}
    space["k"] = {"_type": "randint", "_value": [3, 8]}  # 3..7: not the problem's {3, 5, 7}
    with pytest.raises(ValueError, match="'k'"):
        DnnSATTuner(problem, "Random").update_search_space(space)
    space["k"] = {"_type": "choice", "_value": [3, 5, 7]}
    configs = drive(DnnSATTuner(problem, "Random", {"seed": 3}), problem, 20, space=space)
    assert len(configs) == 20
    assert_all_feasible(problem, configs)


def test_extra_parameters_pass_through() -> None:
    problem = small_problem()
    space = {**problem.space.to_nni(), "optimizer": {"_type": "choice", "_value": ["sgd", "adam"]}}
    tuner = DnnSATTuner(problem, "TPE", {"seed": 0})
    configs = drive(tuner, problem, 10, space=space)
    assert configs and all(c["optimizer"] in ("sgd", "adam") for c in configs)
    assert all(c["a"] * c["b"] <= 6 for c in configs)
    assert tuner._base_space is not None and tuner._base_space["optimizer"] == space["optimizer"]


class Recording:
    """Mixin for a real NNI tuner class that logs the calls it receives (instrumentation, not a mock)."""

    events: list[tuple[str, int, Any]]

    def receive_trial_result(self, parameter_id: int, parameters: Any, value: Any, **kwargs: Any) -> None:
        self.events.append(("result", parameter_id, value))
        super().receive_trial_result(parameter_id, parameters, value, **kwargs)  # type: ignore[misc]

    def trial_end(self, parameter_id: int, success: bool, **kwargs: Any) -> None:
        self.events.append(("end", parameter_id, success))
        super().trial_end(parameter_id, success, **kwargs)  # type: ignore[misc]


def recording(cls: type) -> type:
    def init(self: Any, **kwargs: Any) -> None:
        cls.__init__(self, **kwargs)  # type: ignore[misc]
        self.events = []

    return type(f"Recording{cls.__name__}", (Recording, cls), {"__init__": init})


def check_events(events: list[tuple[str, int, Any]], real: list[float], optimize_mode: str) -> list[float]:
    """Every base id ends exactly once, after its result (if any); returns the penalties: the results
    that are not one of the ``real`` metric values, each worse than every real result before it."""
    results = {i: (k, v) for k, (kind, i, v) in enumerate(events) if kind == "result"}
    ends: dict[int, int] = {}
    for k, (kind, i, _) in enumerate(events):
        if kind == "end":
            assert i not in ends, f"base id {i} ended twice"
            ends[i] = k
    assert set(results) <= set(ends), "a result without trial_end"
    assert all(results[i][0] < ends[i] for i in results), "trial_end before the result"
    penalties = []
    seen_real: list[float] = []  # a penalty must be worse than every real result reported before it
    for _, v in sorted(results.values()):
        if any(math.isclose(v, r) for r in real):
            seen_real.append(v)
            continue
        penalties.append(v)
        if seen_real:
            assert v < min(seen_real) if optimize_mode == "maximize" else v > max(seen_real)
    return penalties


@pytest.mark.parametrize("optimize_mode", ["maximize", "minimize"])
@pytest.mark.parametrize("base", ["TPE", "Evolution"])
def test_rejected_proposals_get_a_penalty_before_trial_end(base: str, optimize_mode: str) -> None:
    """Rejected proposals are closed under synthetic (negative) ids: result first, then trial_end
    (TPE raises KeyError otherwise), with a finite penalty worse than every real result."""
    from nni.algorithms.hpo.evolution_tuner import EvolutionTuner
    from nni.algorithms.hpo.tpe_tuner import TpeTuner

    problem = synthetic_resnet_problem(**TIGHT)
    cls = recording(TpeTuner if base == "TPE" else EvolutionTuner)
    args = {"optimize_mode": optimize_mode, **({"seed": 2} if base == "TPE" else {"population_size": 8})}
    tuner = DnnSATTuner(problem, cls, args, mode="reject")
    assert tuner.optimize_mode == optimize_mode
    configs = drive(tuner, problem, 15)
    assert_all_feasible(problem, configs)
    events = tuner.base.events  # type: ignore[attr-defined]
    penalties = check_events(events, [_score(c) for c in configs], optimize_mode)
    assert tuner.stats.rejected > 0 and penalties
    assert all(math.isfinite(p) for p in penalties)
    # before the first real result there is no scale: those proposals end as failed, without a result
    first = next(k for k, (kind, _, _) in enumerate(events) if kind == "result")
    assert not any(kind == "end" and ok for kind, _, ok in events[:first])
    if base == "TPE":
        assert tuner.base._running_params == {}  # type: ignore[attr-defined]


def test_explicit_penalty() -> None:
    from nni.algorithms.hpo.tpe_tuner import TpeTuner

    problem = synthetic_resnet_problem(**TIGHT)
    tuner = DnnSATTuner(
        problem, recording(TpeTuner), {"optimize_mode": "minimize"}, mode="reject", penalty=1e3
    )
    configs = drive(tuner, problem, 10)
    penalties = check_events(tuner.base.events, [_score(c) for c in configs], "minimize")  # type: ignore[attr-defined]
    assert penalties and set(penalties) == {1e3}
    assert len(penalties) == tuner.stats.rejected


def test_adaptive_penalty_is_worse_than_every_result() -> None:
    problem = small_problem()
    for mode, first, second in (("maximize", -0.5, -1.5), ("minimize", 2.5, 3.5)):
        tuner = DnnSATTuner(problem, "TPE", {"optimize_mode": mode})
        ledger = tuner._ledger
        assert ledger.penalty() is None  # nothing known yet: closed as a failed trial
        ledger.reals += [0.5, 1.0, 1.5]  # spread 1: one spread beyond the worst result
        assert ledger.penalty() == pytest.approx(first)
        ledger.reals.append(0.0 if mode == "maximize" else 2.0)  # spread 1.5, worst moves
        assert ledger.penalty() == pytest.approx(second)


def test_grid_search_exhausts_the_feasible_set() -> None:
    problem = small_problem()
    for mode in ("reject", "repair"):
        tuner = DnnSATTuner(problem, "GridSearch", mode=mode)
        configs = drive(tuner, problem, 100)
        assert len(configs) == problem.count() == 14
        assert {(c["a"], c["b"]) for c in configs} == {
            (a, b) for a in range(1, 7) for b in range(1, 7) if a * b <= 6
        }
        with pytest.raises(nni.NoMoreTrialError):
            tuner.generate_parameters(1000)


def test_random_repeats_end_with_no_more_trials() -> None:
    """Random in repair mode keeps proposing configurations that repair onto launched ones: after
    max_attempts repeats dnnsat samples the rest itself, then reports exhaustion."""
    problem = small_problem()
    tuner = DnnSATTuner(problem, "Random", {"seed": 0}, mode="repair", max_attempts=3)
    configs = drive(tuner, problem, 100)
    assert len(configs) == 14
    assert_all_feasible(problem, configs)
    assert tuner.stats.duplicates > 0 and tuner.stats.fallbacks > 0
    with pytest.raises(nni.NoMoreTrialError):
        tuner.generate_parameters(100)


def test_empty_feasible_space(caplog: pytest.LogCaptureFixture) -> None:
    problem = empty_problem()
    tuner = DnnSATTuner(problem, "TPE")
    with caplog.at_level(logging.ERROR, logger="dnnsat.integrations.nni"):
        tuner.update_search_space(problem.space.to_nni())
    assert "feasible space is empty" in caplog.text and "flops" in caplog.text
    with pytest.raises(nni.NoMoreTrialError, match="empty"):
        tuner.generate_parameters(0)
    assert tuner.generate_multiple_parameters([0, 1, 2]) == []


def test_repeats_are_not_launched_again() -> None:
    """In repair mode a proposal repaired onto a running trial is closed as failed at once (not held open:
    the wrapper asks the base tuner again, and Evolution would run out of population); one repaired onto a
    finished trial gets that trial's result at once, result first, then trial_end."""
    from nni.algorithms.hpo.tpe_tuner import TpeTuner

    problem = small_problem()
    tuner = DnnSATTuner(problem, recording(TpeTuner), {"optimize_mode": "maximize", "seed": 5}, mode="repair")
    tuner.update_search_space(problem.space.to_nni())
    launched = [tuner.generate_parameters(i) for i in range(14)]  # all 14 feasible, none ended yet
    assert len({(c["a"], c["b"]) for c in launched}) == 14
    tpe: Any = tuner.base
    assert len(tpe._running_params) == 14  # only the launched trials' proposals are open
    assert tuner.stats.duplicates > 0
    assert all(kind == "end" and not ok for kind, _, ok in tpe.events)  # repeats closed as failed
    values = {float(c["a"] + c["b"]) for c in launched}
    for i, c in enumerate(launched):
        tuner.receive_trial_result(i, c, float(c["a"] + c["b"]))
        tuner.trial_end(i, True)
    assert tpe._running_params == {}
    before = len(tpe.events)
    with pytest.raises(nni.NoMoreTrialError):
        tuner.generate_parameters(99)  # every proposal now repeats a finished trial
    late = tpe.events[before:]
    assert late and all(v in values for kind, _, v in late if kind == "result")
    check_events(tpe.events, sorted(values), "maximize")


def test_import_data_skips_infeasible_and_counts_as_launched() -> None:
    problem = small_problem()
    tuner = DnnSATTuner(problem, "TPE", {"optimize_mode": "maximize"}, mode="reject")
    tuner.update_search_space(problem.space.to_nni())
    feasible = [{"a": a, "b": b} for a in range(1, 7) for b in range(1, 7) if a * b <= 6]
    data = [{"parameter": c, "value": 1.0} for c in feasible[:-1]]
    data += [{"parameter": {"a": 6, "b": 6}, "value": 0.0}, {"parameter": {"a": 2.0, "b": 3.0}, "value": 2}]
    tuner.import_data(data)
    tpe: Any = tuner.base
    assert len(tpe._history[("a",)]) == 14  # 13 + the float-typed (2, 3) again; (6, 6) skipped
    assert tuner.generate_parameters(0) == feasible[-1]  # the only one not imported
    with pytest.raises(nni.NoMoreTrialError):
        tuner.generate_parameters(1)


def test_conditional_space_round_trips_nested_choices() -> None:
    space = ds.Space.from_nni(
        {
            "act": {
                "_type": "choice",
                "_value": [{"_name": "relu"}, {"_name": "gelu", "k": {"_type": "randint", "_value": [1, 5]}}],
            },
            "w": {"_type": "quniform", "_value": [16, 128, 16]},
        }
    )
    v = space.vars
    problem = ds.Problem(space)
    problem.require(v.w * v.act__gelu__k <= 128, name="cost")  # vacuous while act__gelu__k is inactive
    for base in ("TPE", "Random", "Evolution"):
        tuner = DnnSATTuner(problem, base, mode="repair", seed=0)
        configs = drive(tuner, problem, 30)
        assert configs and all(isinstance(c["act"], dict) and "_name" in c["act"] for c in configs)
        assert_all_feasible(problem, configs)
        gelu = [c for c in configs if c["act"]["_name"] == "gelu"]
        assert all(c["w"] * c["act"]["k"] <= 128 for c in gelu)


def test_dict_metrics_pass_through() -> None:
    problem = small_problem()
    tuner = DnnSATTuner(problem, "TPE", {"optimize_mode": "maximize"})
    tuner.update_search_space(problem.space.to_nni())
    c = tuner.generate_parameters(0)
    tuner.receive_trial_result(0, c, {"default": 0.7, "loss": 0.3})
    tuner.trial_end(0, True)
    assert tuner._ledger.reals == [0.7]
    assert tuner.base._history[("a",)][0].loss == -0.7  # type: ignore[attr-defined]


def test_problem_and_base_tuner_resolution() -> None:
    tuner = DnnSATTuner(
        "dnnsat.zoo:synthetic_resnet_problem",
        "nni.algorithms.hpo.random_tuner.RandomTuner",
        problem_args=TIGHT,
    )
    assert tuner.problem.space.names[0] == "w0" and type(tuner.base).__name__ == "RandomTuner"
    from nni.algorithms.hpo.tpe_tuner import TpeTuner

    assert isinstance(DnnSATTuner(small_problem(), TpeTuner, {"seed": 1}).base, TpeTuner)
    assert isinstance(DnnSATTuner(small_problem(), "tpe").base, TpeTuner)  # NNI names are case-insensitive
    assert load_problem(small_problem).space.names == ["a", "b"]
    with pytest.raises(ValueError, match="unknown base_tuner 'NoSuchTuner'.*TPE"):
        DnnSATTuner(small_problem(), "NoSuchTuner")
    with pytest.raises(ValueError, match="advisor"):
        DnnSATTuner(small_problem(), "Hyperband")
    with pytest.raises(ValueError, match="itself"):
        DnnSATTuner(small_problem(), DnnSATTuner)
    with pytest.raises(ValueError, match="no attribute 'nope'"):
        DnnSATTuner("dnnsat.zoo:nope")
    with pytest.raises(TypeError, match="dnnsat.Problem"):
        DnnSATTuner("dnnsat.zoo:synthetic_resnet_space")
    with pytest.raises(ValueError, match="mode"):
        DnnSATTuner(small_problem(), mode="fix")


def test_class_args_validator() -> None:
    v = DnnSATClassArgsValidator()
    v.validate_class_args(
        problem="dnnsat.zoo:synthetic_resnet_problem",
        problem_args=TIGHT,
        base_tuner="TPE",
        base_args={"optimize_mode": "maximize"},
        mode="reject",
        penalty=-1,
        dedup=False,
    )
    for bad in (
        {},
        {"problem": "x:y", "mode": "fix"},
        {"problem": "x:y", "colour": 1},
        {"problem": "x:y", "max_attempts": True},
    ):
        with pytest.raises(ValueError):
            v.validate_class_args(**bad)


# -- issue 32: no refusal leaves a parameter id or a base-tuner proposal open ------------------------------
def assert_nothing_open(tuner: DnnSATTuner) -> None:
    """Every parameter id in the ledger ended, no proposal held, none open in TPE's liar bookkeeping."""
    ledger = tuner._ledger
    assert [pid for pid, t in ledger.trials.items() if not t.ended] == []
    assert ledger.raw == {}
    assert getattr(tuner.base, "_running_params", {}) == {}


def test_a_space_mismatch_launches_nothing() -> None:
    problem = small_problem()
    tuner = DnnSATTuner(problem, "TPE", {"seed": 0})
    bad = dict(problem.space.to_nni(), b={"_type": "randint", "_value": [1, 9]})
    with pytest.raises(ValueError, match="'b'"):
        tuner.update_search_space(bad)
    with pytest.raises(RuntimeError, match="update_search_space"):
        tuner.generate_parameters(0)
    assert tuner._base_space is None and tuner.stats.proposals == tuner.stats.launched == 0
    assert_nothing_open(tuner)


def test_an_empty_space_launches_nothing() -> None:
    problem = empty_problem()
    tuner = DnnSATTuner(problem, "TPE", {"seed": 0})
    tuner.update_search_space(problem.space.to_nni())
    with pytest.raises(nni.NoMoreTrialError, match="empty"):
        tuner.generate_parameters(0)
    assert tuner.generate_multiple_parameters([1, 2]) == []
    assert tuner.stats.proposals == tuner.stats.launched == 0 and tuner._ledger.trials == {}
    assert_nothing_open(tuner)


def test_exhaustion_leaves_every_proposal_closed() -> None:
    problem = small_problem()
    tuner = DnnSATTuner(problem, "TPE", {"seed": 3}, mode="reject", max_attempts=3)
    configs = drive(tuner, problem, 100)
    assert len(configs) == 14
    with pytest.raises(nni.NoMoreTrialError):
        tuner.generate_parameters(100)
    assert tuner.stats.proposals > tuner.stats.launched == 14
    assert_nothing_open(tuner)


class _CrashingVerify:
    """A ``verify=`` model whose check crashes (e.g. the user's module cannot be built)."""

    def disagreements(self, problem: ds.Problem, config: dict[str, Any]) -> list[str]:
        raise OSError("cannot build the module")


def test_a_crashing_verify_leaves_no_parameter_id_open() -> None:
    """Before issue 32 the parameter id was recorded as launched (never ended: NNI never got it) and
    TPE kept the proposal running for ever."""
    problem = small_problem()
    tuner = DnnSATTuner(problem, "TPE", {"seed": 0}, verify=_CrashingVerify())
    tuner.update_search_space(problem.space.to_nni())
    with pytest.raises(OSError, match="cannot build"):
        tuner.generate_parameters(0)
    assert tuner._ledger.trials == {} and tuner._ledger.by_config == {}
    assert tuner.stats.launched == tuner.stats.verified == 0
    assert_nothing_open(tuner)
