"""Issue 12, "Done when" (second bullet): on random spaces with Python predicates (with and without
``uses=``), conditions, constrained and unconstrained Floats, numeric and string categoricals and stepped
Ints, every Problem answer agrees with brute force, and 200 wrapped Optuna and NNI trials per case are
all feasible.

Brute force: every finite configuration is checked with ``Problem.check``; for the constrained Float
``f`` the exact feasible set at each finite configuration is known in closed form
(:meth:`TrustCase.float_spans`), and a dense grid of ``f`` (plus those exact boundaries) is checked
against ``feasible_intervals``, ``nearest_feasible_value`` and ``repair``.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import dnnsat as ds
from tests._random_problems import Spans, TrustCase, all_finite_configs, random_trust_case, spans_union

SETTINGS = settings(  # seeds do not shrink: no shrink phase
    max_examples=8,
    deadline=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow],
)
SEEDS = st.integers(0, 2**32 - 1)
EDGE = 1e-6  # grid points this close to an exact boundary (relative, in the Float's scale) are not judged
FLOAT_CONSTRAINED = "needs every constrained parameter to be finite"


@dataclass
class Row:
    """One finite configuration and its brute-force verdict."""

    cfg: dict[str, Any]  # active finite values
    spans: Spans | None  # exact feasible set of ``f`` at ``cfg`` (None: no constrained Float)
    feasible: bool  # some completion passes ``check``


class Brute:
    """Brute-force answers for a :class:`TrustCase`. Distances along ``f`` are measured in its own
    scale (log for ``log=True``) relative to its range, like the tolerances of ``feasible_intervals``."""

    def __init__(self, case: TrustCase) -> None:
        self.case = case
        self.p = case.problem
        if case.float_name is not None:
            param = case.space[case.float_name]
            self.log = bool(param.log)  # type: ignore[attr-defined]
            self.low, self.high = param.bounds()
        self.rows: list[Row] = []
        for cfg in all_finite_configs(case.space):
            if case.float_name is None:
                self.rows.append(Row(cfg, None, self.p.check(case.complete(cfg)).feasible))
                continue
            spans = case.float_spans(cfg)
            widest = max(spans, key=lambda s: self.t(s[1]) - self.t(s[0]), default=None)
            ok = False  # an empty or point-sized set: either answer is right for the latter, left out
            if widest is not None and self.t(widest[1]) - self.t(widest[0]) > EDGE:
                inside = self.x((self.t(widest[0]) + self.t(widest[1])) / 2)
                ok = self.p.check(case.complete(cfg, f=inside)).feasible
            self.rows.append(Row(cfg, spans, ok))
        self.feasible = [r for r in self.rows if r.feasible]

    def t(self, x: float) -> float:
        """Position of a value of ``f`` in [0, 1] along its range, in its own scale."""
        if self.log:
            return (math.log(x) - math.log(self.low)) / (math.log(self.high) - math.log(self.low))
        return (x - self.low) / (self.high - self.low)

    def x(self, t: float) -> float:
        """The value of ``f`` at position ``t`` (inverse of :meth:`t`), clipped to the range."""
        if self.log:
            value = math.exp(math.log(self.low) + t * (math.log(self.high) - math.log(self.low)))
        else:
            value = self.low + t * (self.high - self.low)
        return min(max(value, self.low), self.high)

    def gap(self, value: float, spans: Spans | None) -> float:
        """Distance from ``value`` to ``spans`` (0 inside, inf when empty)."""
        return min((max(self.t(a) - self.t(value), self.t(value) - self.t(b), 0.0) for a, b in spans or []),
                   default=math.inf)  # fmt: skip

    def near_edge(self, value: float, spans: Spans) -> bool:
        return any(abs(self.t(value) - self.t(e)) <= EDGE for s in spans for e in s)

    def compatible(self, row: Row, given: Mapping[str, Any]) -> bool:
        """``row`` agrees with ``given``: a given parameter is active there, ``f`` inside its spans."""
        for name, value in given.items():
            if name == self.case.float_name:
                if self.gap(value, row.spans) > 0:
                    return False
            elif not self.case.space.is_active(name, row.cfg) or row.cfg.get(name, value) != value:
                return False  # (continuous values other than f are not in row.cfg: any value goes)
        return True

    def extends(self, given: Mapping[str, Any]) -> bool:
        return any(self.compatible(r, given) for r in self.feasible)

    def values(self, name: str, given: Mapping[str, Any]) -> list[Any]:
        """Values of finite ``name`` in feasible configurations agreeing with ``given``, in domain order."""
        seen = {r.cfg[name] for r in self.feasible if name in r.cfg and self.compatible(r, given)}
        return [v for v in self.case.space[name].values() if v in seen]

    def spans(self, given: Mapping[str, Any]) -> Spans:
        """Exact feasible set of ``f`` given ``given``."""
        out: Spans = []
        for r in self.feasible:
            if self.compatible(r, given):
                out = spans_union(out, r.spans or [])
        return out

    def float_feasible(self, value: float, given: Mapping[str, Any]) -> bool:
        """``given`` plus ``f=value`` completes to a configuration that ``check`` accepts (tried at every
        feasible finite completion whose exact set holds ``value`` or lies within ``EDGE`` of it)."""
        finite = {k: v for k, v in given.items() if k != "f"}
        floats = {k: v for k, v in finite.items() if k in self.case.defaults}
        return any(
            self.p.check({**self.case.complete(r.cfg, **floats), "f": value}).feasible
            for r in self.feasible
            if self.gap(value, r.spans) <= EDGE and self.compatible(r, finite)
        )

    def random_float(self, rng: np.random.Generator) -> float:
        """A random value of ``f`` at least ``EDGE`` away from every exact boundary (so that the truth
        is not a question of rounding)."""
        edges = {e for r in self.rows for s in r.spans or [] for e in s}
        while True:
            value = self.x(float(rng.random()))
            if not self.near_edge(value, [(e, e) for e in edges]):
                return value


def _random_given(case: TrustCase, rng: np.random.Generator, brute: Brute, exclude: str) -> dict[str, Any]:
    """Some values of one random finite configuration, maybe ``f`` and the unconstrained ``lr``."""
    row = brute.rows[int(rng.integers(len(brute.rows)))]
    out = {k: v for k, v in row.cfg.items() if k != exclude and rng.random() < 0.5}
    if case.float_name and exclude != "f" and rng.random() < 0.4:
        out["f"] = brute.random_float(rng)
    if rng.random() < 0.3:
        out["lr"] = float(rng.uniform(1e-4, 1e-1))
    return out


def _finite_or_refused(call: Callable[[], Any]) -> Any:
    """``call()``, or None when it refuses with the documented error for constrained continuous Floats."""
    try:
        return call()
    except ValueError as err:
        message = str(err)
        assert FLOAT_CONSTRAINED in message and " f " in message and "step" in message, message
        return None


def _key(cfg: Mapping[str, Any], case: TrustCase) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted((k, v) for k, v in cfg.items() if case.space[k].is_finite))


def _check_counting(case: TrustCase, brute: Brute) -> None:
    """count, is_empty, always_feasible, enumerate, sample: exact over the finite part."""
    p, feasible = case.problem, brute.feasible
    truth = sorted(_key(r.cfg, case) for r in feasible)
    count = _finite_or_refused(p.count)
    assert count in (None, len(feasible))
    assert p.is_empty() == (not feasible)
    whole = [case.space["f"].bounds()] if case.float_name else None
    everywhere = all(r.feasible and r.spans == whole for r in brute.rows)
    assert p.always_feasible() == everywhere
    listed = _finite_or_refused(lambda: list(p.enumerate()))
    if listed is not None:
        assert sorted(_key(c, case) for c in listed) == truth  # each feasible config exactly once
        assert all(p.check(case.complete(c)).feasible for c in listed)
    if not feasible:
        return
    n = max(60, 40 * len(feasible)) if len(feasible) <= 25 else 60
    drawn = _finite_or_refused(lambda: p.sample(n, seed=0))
    if drawn is not None:
        assert len(drawn) == n
        bad = [c for c in drawn if not p.check(c).feasible]
        assert bad == [], bad[:3]
        if len(feasible) <= 25:  # each of k configs missed by 40k uniform draws: probability < k * e^-40
            assert sorted(set(_key(c, case) for c in drawn)) == truth


def _check_prune(case: TrustCase, brute: Brute) -> None:
    """Kept values == values occurring in brute-force feasible configurations; Float narrowed to the hull."""
    p = case.problem
    if not brute.feasible:
        with pytest.raises(ds.InfeasibleSpaceError):
            p.prune()
        return
    pruned = p.prune()
    for name in case.space:
        if not case.space[name].is_finite:
            continue
        expect = brute.values(name, {})
        if not expect:
            assert name not in pruned, name  # never active in a feasible configuration
            continue
        assert list(pruned[name].values()) == expect, name
    if case.float_name:
        hull = brute.spans({})
        low, high = pruned["f"].bounds()
        assert brute.near_edge(low, [hull[0]]) and brute.near_edge(high, [hull[-1]]), ((low, high), hull)


def _check_finite_queries(case: TrustCase, brute: Brute, rng: np.random.Generator) -> None:
    """feasible_values, is_extendable, nearest_feasible_value for finite parameters, random ``given``."""
    p, space = case.problem, case.space
    finite = [n for n in space if space[n].is_finite]
    for _ in range(6):
        name = finite[int(rng.integers(len(finite)))]
        given = _random_given(case, rng, brute, exclude=name)
        expect = brute.values(name, given)
        assert p.feasible_values(name, given) == expect, (name, given)
        assert p.is_extendable(given) == brute.extends(given), given
        proposal = space[name].values()[int(rng.integers(len(space[name].values())))]
        got = p.nearest_feasible_value(name, proposal, given, rng=np.random.default_rng(0))
        if not expect:
            assert got is None, (name, proposal, given)
        elif proposal in expect:
            assert got == proposal, (name, proposal, given)
        else:
            assert got in expect, (name, proposal, given, got, expect)
            param = space[name]
            if isinstance(param, ds.Int):
                assert abs(got - proposal) == min(abs(v - proposal) for v in expect)
            elif isinstance(param, ds.Categorical) and param.numeric:
                rank = list(param.values()).index
                assert abs(rank(got) - rank(proposal)) == min(abs(rank(v) - rank(proposal)) for v in expect)


def _check_float_queries(case: TrustCase, brute: Brute, rng: np.random.Generator) -> None:
    """feasible_intervals and nearest_feasible_value of ``f`` against the exact sets and ``check``."""
    p = case.problem
    grid = [brute.x(t) for t in np.linspace(0.0, 1.0, 201)]
    for _ in range(3):
        given = _random_given(case, rng, brute, exclude="f")
        exact = brute.spans(given)
        got = p.feasible_intervals("f", given)
        assert all(brute.low <= a <= b <= brute.high for a, b in got), got
        assert all(got[i][1] < got[i + 1][0] for i in range(len(got) - 1)), got  # ascending, disjoint
        assert p.feasible_values("f", given) == ([got[0][0], got[-1][1]] if got else [])
        # inner approximation: every point of a returned interval (ends included) is feasible
        points = sorted(set(grid) | {e for s in exact + got for e in s})
        wrong = [x for x in points if brute.gap(x, got) == 0 and not brute.float_feasible(x, given)]
        assert wrong == [], ("infeasible values inside", given, got, exact, wrong[:5])
        # ... and it leaves out only what lies within EDGE of the exact boundary
        missed = [
            x
            for x in points
            if brute.gap(x, exact) == 0 and not brute.near_edge(x, exact) and brute.gap(x, got) > 0
        ]
        assert missed == [], ("feasible values left out", given, got, exact, missed[:5])
        for proposal in (brute.random_float(rng), brute.low, brute.high):
            value = p.nearest_feasible_value("f", proposal, given)
            if not exact:
                assert value is None, (proposal, given, value)
                continue
            assert value is not None and brute.float_feasible(value, given), (proposal, given, value, exact)
            if brute.gap(proposal, exact) == 0 and not brute.near_edge(proposal, exact):
                assert value == proposal, (proposal, given, value)
            distance = abs(brute.t(value) - brute.t(proposal))
            assert distance <= brute.gap(proposal, exact) + EDGE, (proposal, given, value, exact)


def _check_repair(case: TrustCase, brute: Brute, rng: np.random.Generator) -> None:
    """repair of complete and partial configurations: the result extends to a feasible configuration
    (complete: passes ``check``), keeps ``fixed`` and the config itself when feasible, and is None only
    when nothing feasible agrees with ``fixed``."""
    p = case.problem
    for i in range(4):
        row = brute.rows[int(rng.integers(len(brute.rows)))]
        config = case.complete(row.cfg, **({"f": brute.random_float(rng)} if case.float_name else {}))
        fixed = [k for k in config if rng.random() < 0.3]
        if i % 2:  # partial, as the Optuna sampler repairs a relative sample
            config = {k: v for k, v in config.items() if k in fixed or rng.random() < 0.6}
        got = p.repair(config, fixed=fixed)
        if not brute.extends({k: v for k, v in config.items() if k in fixed}):
            assert got is None, (config, fixed, got)
            continue
        assert got is not None, (config, fixed)
        assert all(got.get(k) == config[k] for k in fixed), (config, fixed, got)
        assert brute.extends(got), (config, fixed, got)
        if i % 2 == 0:
            assert p.check(got).feasible, (config, fixed, got)
            if p.check(config).feasible:
                assert got == config


@pytest.mark.parametrize("conditional_float", [False, True], ids=["floats", "conditional-float"])
@SETTINGS
@given(seed=SEEDS)
def test_finite_answers_match_brute_force(seed: int, conditional_float: bool) -> None:
    """No constrained continuous parameter: every answer is exact over the finite part."""
    case = random_trust_case(seed, constrained_float=False, conditional_float=conditional_float)
    brute = Brute(case)
    rng = np.random.default_rng(seed)
    _check_counting(case, brute)
    _check_prune(case, brute)
    _check_finite_queries(case, brute, rng)
    _check_repair(case, brute, rng)


@SETTINGS
@given(seed=SEEDS)
def test_constrained_float_answers_match_brute_force(seed: int) -> None:
    """A constrained continuous Float ``f``: finite answers exact (or the documented refusal), the
    feasible set of ``f`` an inner approximation within ``EDGE`` of the exact one."""
    case = random_trust_case(seed, constrained_float=True)
    brute = Brute(case)
    rng = np.random.default_rng(seed)
    _check_counting(case, brute)
    _check_prune(case, brute)
    _check_finite_queries(case, brute, rng)
    if brute.feasible:
        _check_float_queries(case, brute, rng)
    _check_repair(case, brute, rng)


# -- adapters: 200 wrapped trials per case, every one feasible -----------------------------------------
# name: (seed, constrained_float, conditional_float) of random_trust_case; every case has Python predicates
ADAPTER_CASES = {
    "finite": (0, False, False),  # no conditions, an unconstrained Float
    "conditional": (1, False, False),  # a conditional child, string categorical constraints
    "float": (9, True, False),  # the constrained Float f, no conditions
    "float-conditional": (14, True, False),  # f with two disjoint pieces, a conditional child
    "conditional-float": (12, True, True),  # an unconstrained Float active under a condition
}
N_TRIALS = 200


def _adapter_case(name: str) -> TrustCase:
    seed, constrained, conditional = ADAPTER_CASES[name]
    return random_trust_case(seed, constrained_float=constrained, conditional_float=conditional)


def _suggest_in_order(trial: Any, case: TrustCase, floats_first: bool) -> dict[str, Any]:
    """Suggest every active parameter, the continuous Floats first or last (parents before children)."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    from dnnsat.integrations.optuna import distributions

    space, dists = case.space, distributions(case.problem)
    order = sorted(space.conditional_order, key=lambda n: space[n].is_finite == floats_first)
    order = sorted(order, key=lambda n: bool(space[n].condition))  # children after every parent
    cfg: dict[str, Any] = {}
    for name in order:
        if not space.is_active(name, cfg):
            continue
        d = dists[name]
        if isinstance(d, IntDistribution):
            cfg[name] = trial.suggest_int(name, d.low, d.high, step=d.step, log=d.log)
        elif isinstance(d, FloatDistribution):
            cfg[name] = trial.suggest_float(name, d.low, d.high, step=d.step, log=d.log)
        else:
            assert isinstance(d, CategoricalDistribution)
            cfg[name] = trial.suggest_categorical(name, d.choices)
    return cfg


def _score(cfg: Mapping[str, Any]) -> float:
    """A deterministic objective that pulls towards large values (and so towards the limits)."""
    return float(sum(math.log1p(v) for v in cfg.values() if isinstance(v, int | float) and v >= 0))


def _matrix(*axes: list[str], fast: set[tuple[str, ...]]) -> list[Any]:
    """Every combination of ``axes`` after the case name; the ``fast`` ones run by default, the rest
    with ``-m slow`` (200 trials each)."""
    combos = [(case,) + rest for case in ADAPTER_CASES for rest in itertools.product(*axes)]
    return [pytest.param(*c, marks=() if c[1:] in fast else pytest.mark.slow) for c in combos]


@pytest.mark.parametrize(
    ("case_name", "base", "order"),
    _matrix(
        ["Random", "TPE"],
        ["finite-first", "float-first"],
        fast={("Random", "finite-first"), ("TPE", "float-first")},
    ),
)
def test_optuna_trials_all_feasible(case_name: str, base: str, order: str) -> None:
    optuna = pytest.importorskip("optuna")
    from dnnsat.integrations.optuna import DnnSATSampler

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    case = _adapter_case(case_name)
    base_sampler = getattr(optuna.samplers, f"{base}Sampler")(seed=0)
    study = optuna.create_study(direction="maximize", sampler=DnnSATSampler(case.problem, base_sampler))
    seen: list[dict[str, Any]] = []

    def objective(trial: Any) -> float:
        cfg = _suggest_in_order(trial, case, floats_first=order == "float-first")
        seen.append(cfg)
        return _score(cfg)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        study.optimize(objective, n_trials=N_TRIALS)
    assert len(seen) == N_TRIALS
    bad = [(c, case.problem.check(c).violations) for c in seen if not case.problem.check(c).feasible]
    assert bad == [], f"{len(bad)} of {N_TRIALS} trials infeasible, e.g. {bad[:2]}"


@pytest.mark.parametrize(("case_name", "base"), _matrix(["TPE", "Random"], fast={("TPE",)}))
def test_nni_trials_all_feasible(case_name: str, base: str) -> None:
    pytest.importorskip("nni")
    from dnnsat.integrations.nni import DnnSATTuner
    from dnnsat.space import config_from_nni

    case = _adapter_case(case_name)
    args = {"optimize_mode": "maximize", "seed": 1} if base == "TPE" else {"seed": 1}
    tuner = DnnSATTuner(case.problem, base, args, seed=0)
    tuner.update_search_space(case.space.to_nni())
    configs = []
    for pid in range(N_TRIALS):  # like NNI's dispatcher, one trial in flight
        params = tuner.generate_parameters(pid)
        configs.append(config_from_nni(case.space, params))
        tuner.receive_trial_result(pid, params, _score(configs[-1]))
        tuner.trial_end(pid, True)
    bad = [(c, case.problem.check(c).violations) for c in configs if not case.problem.check(c).feasible]
    assert bad == [], f"{len(bad)} of {N_TRIALS} configurations infeasible, e.g. {bad[:2]}"
