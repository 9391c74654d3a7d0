"""Issue 32: every refusal of ``DnnSATSampler`` before a trial's objective runs leaves no trial RUNNING.

Optuna creates a trial (RUNNING) and then calls the sampler's ``before_trial``; when that raises, neither
``study.optimize`` nor an ask-and-tell loop ends the trial. Each refusal path below, on real studies in a
SQLite file and a journal file (the problem mismatch on PostgreSQL too), must leave the trial FAIL with the
reason in its system attribute ``dnnsat:refused`` and re-raise the error as before.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import FrozenTrial, TrialState

import dnnsat as ds
from dnnsat.integrations.optuna import REFUSED_ATTR, DnnSATSampler, ProblemMismatchError, suggest
from tests.test_optuna_distributed import open_storage, storage_location
from tests.test_optuna_lease import BUDGET, TIGHT_BUDGET, lease_problem

KINDS = ["sqlite", "journal"]


class _BrokenBeforeTrial(optuna.samplers.RandomSampler):
    """A user's base sampler whose ``before_trial`` fails (e.g. it cannot reach its own service)."""

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        raise ConnectionError("the base sampler's model server is down")


def _predicate_problem(error: BaseException) -> ds.Problem:
    """The lease problem plus a Python predicate that raises ``error`` while the space is pruned."""

    def broken(config: Mapping[str, Any]) -> bool:
        raise error

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ds.OpaqueConstraintWarning)
        return lease_problem().require(broken, name="broken", uses=["w"])


def _sampler(problem: ds.Problem, base: optuna.samplers.BaseSampler | None = None) -> DnnSATSampler:
    return DnnSATSampler(problem, base or optuna.samplers.RandomSampler(seed=0))


def _switching(problem: ds.Problem) -> DnnSATSampler:
    """A worker that may switch the study to its problem, so that its own pruning runs (and fails)."""
    return DnnSATSampler(problem, optuna.samplers.RandomSampler(seed=0), allow_problem_change=True)


# path -> (what the refused worker runs, the error it raises, the error's name in dnnsat:refused)
PATHS: dict[str, tuple[Callable[[], DnnSATSampler], type[BaseException], str]] = {
    "problem-mismatch": (
        lambda: _sampler(lease_problem(TIGHT_BUDGET)),
        ProblemMismatchError,
        "ProblemMismatchError: study",
    ),
    "empty-space": (lambda: _switching(lease_problem(0)), ds.InfeasibleSpaceError, "InfeasibleSpaceError"),
    "predicate-error": (
        lambda: _switching(_predicate_problem(ZeroDivisionError("bug in a predicate"))),
        ZeroDivisionError,
        "ZeroDivisionError: bug in a predicate",
    ),
    "ctrl-c-while-pruning": (
        lambda: _switching(_predicate_problem(KeyboardInterrupt())),
        KeyboardInterrupt,
        "KeyboardInterrupt",
    ),
    "base-sampler-error": (
        lambda: _sampler(lease_problem(), _BrokenBeforeTrial(seed=0)),
        ConnectionError,
        "ConnectionError: the base sampler's model server is down",
    ),
}


def _study_with_two_trials(kind: str, tmp_path: Path) -> tuple[Any, str]:
    """A study on ``kind`` storage with two COMPLETE trials of the lease problem (which it belongs to)."""
    storage = open_storage(kind, storage_location(kind, tmp_path))
    problem = lease_problem(BUDGET)
    study = optuna.create_study(storage=storage, sampler=_sampler(problem))
    study.optimize(lambda t: float(len(suggest(t, problem))), n_trials=2)
    return storage, study.study_name


def _assert_refused(storage: Any, name: str, reason: str) -> FrozenTrial:
    """No trial RUNNING; the two first trials COMPLETE, the refused one FAIL with ``reason`` recorded."""
    trials = optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.COMPLETE, TrialState.FAIL]
    refused = trials[-1]
    assert refused.system_attrs[REFUSED_ATTR].startswith(reason), refused.system_attrs
    assert refused.params == {}  # the objective never ran
    return refused


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("kind", KINDS)
def test_a_refusal_in_optimize_fails_its_trial(kind: str, path: str, tmp_path: Path) -> None:
    storage, name = _study_with_two_trials(kind, tmp_path)
    make, error, reason = PATHS[path]
    study = optuna.load_study(study_name=name, storage=storage, sampler=make())
    calls: list[int] = []
    with pytest.raises(error):
        study.optimize(lambda t: calls.append(1) or 0.0, n_trials=3)
    assert calls == []
    refused = _assert_refused(storage, name, reason)
    if path == "empty-space":
        assert "budget" in refused.system_attrs[REFUSED_ATTR]  # the conflicting constraint is named
        assert refused.system_attrs["dnnsat:infeasible_space"] is True


@pytest.mark.parametrize("path", ["problem-mismatch", "empty-space", "base-sampler-error"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_refusal_in_ask_fails_its_trial(kind: str, path: str, tmp_path: Path) -> None:
    """``study.ask()`` raises, so the caller holds no trial it could tell: the sampler ends it."""
    storage, name = _study_with_two_trials(kind, tmp_path)
    make, error, reason = PATHS[path]
    study = optuna.load_study(study_name=name, storage=storage, sampler=make())
    with pytest.raises(error):
        study.ask()
    _assert_refused(storage, name, reason)


def test_the_problem_mismatch_fails_its_trial_on_postgres(tmp_path: Path) -> None:
    storage, name = _study_with_two_trials("postgres", tmp_path)
    study = optuna.load_study(study_name=name, storage=storage, sampler=PATHS["problem-mismatch"][0]())
    with pytest.raises(ProblemMismatchError):
        study.optimize(lambda t: 0.0, n_trials=3)
    refused = _assert_refused(storage, name, "ProblemMismatchError: study")
    assert lease_problem(TIGHT_BUDGET).fingerprint() in refused.system_attrs[REFUSED_ATTR]


def test_an_enqueued_trial_popped_by_a_refused_worker_is_failed_not_left_running(tmp_path: Path) -> None:
    storage, name = _study_with_two_trials("sqlite", tmp_path)
    study = optuna.load_study(study_name=name, storage=storage, sampler=PATHS["problem-mismatch"][0]())
    study.enqueue_trial({"w": 16, "d": 1, "b": 16})
    with pytest.raises(ProblemMismatchError):
        study.optimize(lambda t: 0.0, n_trials=1)
    refused = _assert_refused(storage, name, "ProblemMismatchError")
    assert refused.system_attrs["fixed_params"] == {"w": 16, "d": 1, "b": 16}


@pytest.mark.parametrize("timeout", [-1, math.nan, "600", True])
def test_a_bad_prune_timeout_is_refused_by_the_constructor(timeout: Any) -> None:
    """Refused before any trial exists (it used to be raised by the first trial's before_trial)."""
    with pytest.raises(ValueError, match="prune_timeout must be seconds >= 0"):
        DnnSATSampler(lease_problem(), prune_timeout=timeout)
