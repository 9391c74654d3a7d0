"""The pruning lock of a distributed study is a lease: a worker killed with SIGKILL while holding it (mid
computation, or before it wrote anything on the lock) is replaced within seconds, on SQLite, a journal file
and PostgreSQL; a live holder is waited for up to ``prune_timeout``; and a study refuses a worker whose
Problem differs from the study's (``ProblemMismatchError``) unless it opts in.

The killed workers are real processes started from this module (``python -m tests.test_optuna_lease MODE
KIND WHERE STUDY``): ``stalled`` is a real DnnSATSampler worker whose pruning never ends (its problem's
predicate sleeps when ``DNNSAT_TEST_STALL`` is set; the fingerprint is the same as the survivors'),
``bare-lock`` creates the lock study and nothing else, ``worker`` runs two trials and prints a JSON report.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.study import StudyDirection
from optuna.trial import TrialState

import dnnsat as ds
from dnnsat.integrations.optuna import DnnSATSampler, prune_count_key, suggest
from dnnsat.integrations.optuna._cache import (
    LEASE_SECONDS,
    PROBLEM_KEY,
    ProblemMismatchError,
    load_or_compute_pruned_space,
    lock_study_name,
)
from tests.test_optuna_distributed import open_storage, storage_location

REPO = Path(__file__).resolve().parents[1]
KINDS = ["sqlite", "journal", "postgres"]
STALL_ENV = "DNNSAT_TEST_STALL"
TAKEOVER_BOUND = 15.0  # seconds from a holder's death to a survivor's first trial
BUDGET, TIGHT_BUDGET = 8192, 2048


def stall_if_asked(config: Mapping[str, Any]) -> bool:
    """Always satisfied; never returns in a process started with DNNSAT_TEST_STALL=1 (a hanging pruning)."""
    if os.environ.get(STALL_ENV):
        time.sleep(3600)
    return True


def lease_problem(budget: int = BUDGET) -> ds.Problem:
    """A small problem (192 configurations, pruned in well under a second) whose predicate can stall."""
    space = ds.Space({"w": ds.Int(16, 256, step=16), "d": ds.Int(1, 4), "b": ds.Categorical([16, 32, 64])})
    v = space.vars
    problem = ds.Problem(space).require(v.b * v.w * v.d <= budget, name="budget")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ds.OpaqueConstraintWarning)
        return problem.require(stall_if_asked, name="stall", uses=["w"])


# -- child processes ----------------------------------------------------------------------------------
def _child(mode: str, kind: str, where: str, study_name: str, budget: int = BUDGET) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = open_storage(kind, where)
    if mode == "bare-lock":  # dies (is killed) after creating the lock, before writing anything on it
        study = optuna.load_study(study_name=study_name, storage=storage)
        storage.create_new_study([StudyDirection.MINIMIZE], lock_study_name(study, 0))
        time.sleep(3600)
    problem = lease_problem(budget)
    sampler = DnnSATSampler(problem, optuna.samplers.RandomSampler(seed=os.getpid()))
    study = optuna.load_study(study_name=study_name, storage=storage, sampler=sampler)
    report: dict[str, Any] = {"first_trial": None, "infeasible": 0, "error": None}

    def objective(trial: optuna.Trial) -> float:
        report["first_trial"] = report["first_trial"] or time.time()
        cfg = suggest(trial, problem)
        report["infeasible"] += not problem.check(cfg).feasible
        return float(cfg["w"] * cfg["d"])

    try:
        study.optimize(objective, n_trials=2, catch=())
    except Exception as err:  # reported to the test
        report["error"] = f"{type(err).__name__}: {err}"
    report["computed"] = sampler.stats.pruned_space_computed
    print(json.dumps(report), flush=True)


def _spawn(
    mode: str, kind: str, where: str, study_name: str, *, budget: int = BUDGET
) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env.pop(STALL_ENV, None)
    if mode == "stalled":
        env[STALL_ENV] = "1"
    args = [sys.executable, "-m", "tests.test_optuna_lease", mode, kind, where, study_name, str(budget)]
    return subprocess.Popen(
        args, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _report(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0 and out.strip(), err
    return {**json.loads(out.strip().splitlines()[-1]), "log": err}


@contextmanager
def _killed_at_exit(proc: subprocess.Popen[str]) -> Iterator[subprocess.Popen[str]]:
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=60)


def _kill(proc: subprocess.Popen[str], *, reap: bool) -> float:
    """SIGKILL ``proc``; reaped now, or left a zombie until the test ends. Returns the wall time of death."""
    os.kill(proc.pid, signal.SIGKILL)
    died = time.time()
    if reap:
        proc.wait(timeout=60)
    return died


def _wait_for(
    what: str, condition: Callable[[], Any], proc: subprocess.Popen[str], limit: float = 120
) -> Any:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        assert proc.poll() is None, f"child exited before {what}: {proc.communicate()[1]}"
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _lock_attrs(storage: Any, study: optuna.Study, generation: int = 0) -> dict[str, Any] | None:
    try:
        return dict(
            storage.get_study_system_attrs(storage.get_study_id_from_name(lock_study_name(study, generation)))
        )
    except KeyError:
        return None


def _locks_left(storage: Any, study: optuna.Study) -> list[str]:
    prefix = f"dnnsat-lock:{study._study_id}:"
    return [s.study_name for s in optuna.get_all_study_summaries(storage) if s.study_name.startswith(prefix)]


def _new_study(kind: str, tmp_path: Path) -> tuple[str, Any, optuna.Study]:
    where = storage_location(kind, tmp_path)
    storage = open_storage(kind, where)
    study = optuna.create_study(study_name=f"lease-{uuid.uuid4().hex[:12]}", storage=storage)
    return where, storage, study


def _stalled_holder(kind: str, where: str, storage: Any, study: optuna.Study) -> subprocess.Popen[str]:
    """A real worker holding the lock, heartbeating, stuck in its pruning (waits for two beats)."""
    proc = _spawn("stalled", kind, where, study.study_name)

    def beating() -> bool:
        attrs = _lock_attrs(storage, study) or {}
        return attrs.get("dnnsat:holder", {}).get("pid") == proc.pid and attrs.get("dnnsat:beat", 0) >= 2

    _wait_for("the stalled worker to hold the lock and heartbeat", beating, proc)
    return proc


def _first_trial_in_process(storage: Any, study: optuna.Study) -> tuple[float, bool]:
    """Run two trials here; returns (seconds until the first objective call, whether we pruned)."""
    problem = lease_problem()
    sampler = DnnSATSampler(problem, optuna.samplers.RandomSampler(seed=0))
    local = optuna.load_study(study_name=study.study_name, storage=storage, sampler=sampler)
    start, first = time.monotonic(), []

    def objective(trial: optuna.Trial) -> float:
        first.append(time.monotonic() - start)
        assert problem.check(suggest(trial, problem)).feasible
        return 0.0

    local.optimize(objective, n_trials=2, catch=())
    return first[0], bool(sampler.stats.pruned_space_computed)


def _prune_count(storage: Any, study: optuna.Study) -> int:
    return int(
        storage.get_study_system_attrs(study._study_id)[prune_count_key(lease_problem().fingerprint())]
    )


# -- a holder killed with SIGKILL -----------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_a_worker_killed_mid_computation_is_replaced_by_one_waiting_worker(kind: str, tmp_path: Path) -> None:
    where, storage, study = _new_study(kind, tmp_path)
    with _killed_at_exit(_stalled_holder(kind, where, storage, study)) as holder:
        survivors = [_spawn("worker", kind, where, study.study_name) for _ in range(2)]
        # both survivors have started their first trial, i.e. they wait on the live lock
        _wait_for("the survivors to wait", lambda: len(study.get_trials(deepcopy=False)) == 3, holder)
        time.sleep(1.0)
        assert all(p.poll() is None for p in survivors)  # a live, heartbeating holder is waited for
        died = _kill(holder, reap=False)  # a zombie until the test ends: its pid still exists
        reports = [_report(p) for p in survivors]
    assert [r["error"] for r in reports] == [None, None]
    assert sorted(r["computed"] for r in reports) == [False, True]  # the takeover is atomic
    if sys.platform == "linux":  # decided by the pid probe (a zombie is dead), not by the lease
        assert any(f"process {holder.pid} on this machine, is gone" in r["log"] for r in reports)
    assert all(0 < r["first_trial"] - died < TAKEOVER_BOUND for r in reports), (died, reports)
    assert sum(r["infeasible"] for r in reports) == 0
    assert _prune_count(storage, study) == 1  # the killed worker died before storing: it never counted
    assert _locks_left(storage, study) == []
    states = sorted(t.state.name for t in study.get_trials(deepcopy=False))
    assert states == ["COMPLETE"] * 4 + ["RUNNING"]  # the killed worker's trial is never finished


@pytest.mark.parametrize("kind", KINDS)
def test_a_worker_killed_before_writing_on_its_lock_is_replaced_after_the_lease(
    kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    where, storage, study = _new_study(kind, tmp_path)
    with _killed_at_exit(_spawn("bare-lock", kind, where, study.study_name)) as holder:
        _wait_for("the lock study", lambda: _lock_attrs(storage, study) is not None, holder)
        _kill(holder, reap=True)
    assert _lock_attrs(storage, study) == {}  # no identity, no heartbeat: only the lease can end it
    with caplog.at_level(logging.WARNING, "dnnsat.integrations.optuna"):
        first, computed = _first_trial_in_process(storage, study)
    assert LEASE_SECONDS <= first < TAKEOVER_BOUND and computed
    assert "no holder identity for" in caplog.text
    assert _prune_count(storage, study) == 1
    assert _locks_left(storage, study) == []


def test_a_killed_and_reaped_holder_on_this_machine_is_replaced_without_waiting_for_its_lease(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    where, storage, study = _new_study("sqlite", tmp_path)
    with _killed_at_exit(_stalled_holder("sqlite", where, storage, study)) as holder:
        _kill(holder, reap=True)
    with caplog.at_level(logging.WARNING, "dnnsat.integrations.optuna"):
        first, computed = _first_trial_in_process(storage, study)
    assert computed and first < TAKEOVER_BOUND
    assert f"process {holder.pid} on this machine, is gone; taking over" in caplog.text  # not the lease
    assert _prune_count(storage, study) == 1
    assert _locks_left(storage, study) == []


# -- live holders, other machines, failures -------------------------------------------------------------
def test_a_live_holder_is_waited_for_until_prune_timeout(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    where, storage, study = _new_study("sqlite", tmp_path)
    timeout = LEASE_SECONDS + 2  # longer than a lease: the heartbeat, not the lease, keeps the holder
    with _killed_at_exit(_stalled_holder("sqlite", where, storage, study)):
        with caplog.at_level(logging.WARNING, "dnnsat.integrations.optuna"):
            t0 = time.monotonic()
            pruned = load_or_compute_pruned_space(study, lease_problem(), timeout)
            waited = time.monotonic() - t0
        assert pruned.computed and timeout <= waited < timeout + TAKEOVER_BOUND
        assert "prune_timeout" in caplog.text and "taking over" not in caplog.text
        assert _locks_left(storage, study) == []  # the record exists: the live holder's lock is useless
    assert _prune_count(storage, study) == 1


def test_a_holder_on_another_machine_whose_heartbeat_stopped_expires_after_its_lease(
    caplog: pytest.LogCaptureFixture,
) -> None:
    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(storage=storage, study_name="s")
    lock = storage.create_new_study([StudyDirection.MINIMIZE], lock_study_name(study))
    # no process 2**31 - 1 exists here, but the holder runs on another machine: only its lease can end it
    holder: dict[str, Any] = {
        "machine": "elsewhere/pid:[1]",
        "pid": 2**31 - 1,
        "created": 0.0,
        "token": "t",
        "lease": 1.0,
    }
    storage.set_study_system_attr(lock, "dnnsat:holder", holder)
    storage.set_study_system_attr(lock, "dnnsat:beat", 7)
    with caplog.at_level(logging.WARNING, "dnnsat.integrations.optuna"):
        t0 = time.monotonic()
        pruned = load_or_compute_pruned_space(study, lease_problem(), timeout=60)
        waited = time.monotonic() - t0
    assert pruned.computed and 1.0 <= waited < 10
    assert "no heartbeat for" in caplog.text
    assert _locks_left(storage, study) == []
    assert not [t for t in threading.enumerate() if t.name == "dnnsat-heartbeat"]  # ours has stopped


def test_a_holder_that_fails_releases_the_lock_at_once_and_does_not_claim_the_study() -> None:
    problem = ds.Problem(ds.Space({"w": ds.Int(1, 8)}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ds.OpaqueConstraintWarning)
        problem.require(_raise, name="broken", uses=["w"])
    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(storage=storage)
    with pytest.raises(ZeroDivisionError):
        load_or_compute_pruned_space(study, problem)
    assert _locks_left(storage, study) == []  # a waiter takes over at once
    assert PROBLEM_KEY not in storage.get_study_system_attrs(study._study_id)
    assert load_or_compute_pruned_space(study, lease_problem()).computed  # a fixed problem is welcome


def _raise(config: Mapping[str, Any]) -> bool:
    return 1 / 0 > 0


def test_locks_left_behind_next_to_a_record_are_removed_by_the_next_worker() -> None:
    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(storage=storage)
    problem = lease_problem()
    assert load_or_compute_pruned_space(study, problem).computed
    for generation in (0, 1):  # a holder (and its successor) killed after storing, before cleaning up
        storage.create_new_study([StudyDirection.MINIMIZE], lock_study_name(study, generation))
    assert len(_locks_left(storage, study)) == 2
    assert not load_or_compute_pruned_space(study, problem).computed
    assert _locks_left(storage, study) == []


@pytest.mark.parametrize("timeout", [-1, float("nan"), "600", True])
def test_a_bad_prune_timeout_is_refused(timeout: Any) -> None:
    study = optuna.create_study()
    with pytest.raises(ValueError, match="prune_timeout must be seconds >= 0"):
        load_or_compute_pruned_space(study, lease_problem(), timeout)


# -- one problem per study --------------------------------------------------------------------------------
def test_a_worker_with_another_problem_is_refused_before_any_trial(tmp_path: Path) -> None:
    """Issue 12 §6: a loose and a tight worker on one study mixed silently (trials broke the tight budget)."""
    _, storage, study = _new_study("sqlite", tmp_path)
    loose, tight = lease_problem(BUDGET), lease_problem(TIGHT_BUDGET)
    first = DnnSATSampler(loose, optuna.samplers.RandomSampler(seed=0))
    optuna.load_study(study_name=study.study_name, storage=storage, sampler=first).optimize(
        lambda t: len(suggest(t, loose)), n_trials=3
    )
    second = DnnSATSampler(tight, optuna.samplers.RandomSampler(seed=1))
    with pytest.raises(ProblemMismatchError) as err:
        second.prepare(optuna.load_study(study_name=study.study_name, storage=storage, sampler=second))
    message = str(err.value)
    assert loose.fingerprint() in message and tight.fingerprint() in message
    assert "allow_problem_change=True" in message and study.study_name in message
    assert (err.value.recorded, err.value.fingerprint) == (loose.fingerprint(), tight.fingerprint())
    assert isinstance(err.value, ValueError)
    assert len(study.get_trials(deepcopy=False)) == 3  # nothing ran for the tight problem


def test_allow_problem_change_switches_the_study_on_purpose() -> None:
    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(storage=storage)
    loose, tight = lease_problem(BUDGET), lease_problem(TIGHT_BUDGET)
    first = load_or_compute_pruned_space(study, loose)
    switched = load_or_compute_pruned_space(study, tight, allow_problem_change=True)
    assert first.computed and switched.computed and max(switched.values["w"]) < max(first.values["w"])
    attrs = storage.get_study_system_attrs(study._study_id)
    assert attrs[PROBLEM_KEY] == tight.fingerprint()
    with pytest.raises(ProblemMismatchError):  # the study now belongs to the tight problem
        load_or_compute_pruned_space(study, loose)
    back = load_or_compute_pruned_space(study, loose, allow_problem_change=True)
    assert not back.computed  # switching back reuses the loose record
    attrs = storage.get_study_system_attrs(study._study_id)
    assert attrs[PROBLEM_KEY] == loose.fingerprint() and attrs[prune_count_key(loose.fingerprint())] == 1


def test_a_sampler_that_opts_in_switches_the_study_and_samples_for_its_problem() -> None:
    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(storage=storage)
    loose, tight = lease_problem(BUDGET), lease_problem(TIGHT_BUDGET)
    for problem, n in ((loose, 3), (tight, 8)):
        sampler = DnnSATSampler(problem, optuna.samplers.RandomSampler(seed=n), allow_problem_change=True)
        worker = optuna.load_study(study_name=study.study_name, storage=storage, sampler=sampler)
        worker.optimize(functools.partial(_suggest_all, problem=problem), n_trials=n)
    assert storage.get_study_system_attrs(study._study_id)[PROBLEM_KEY] == tight.fingerprint()
    assert all(tight.check(t.params).feasible for t in study.get_trials(deepcopy=False)[3:])


def _suggest_all(trial: optuna.Trial, problem: ds.Problem) -> float:
    return float(len(suggest(trial, problem)))


def test_an_empty_problem_does_not_claim_the_study() -> None:
    study = optuna.create_study()
    empty = load_or_compute_pruned_space(study, lease_problem(budget=0))
    assert empty.empty and empty.computed
    assert not load_or_compute_pruned_space(study, lease_problem(budget=0)).computed  # its record is reused
    relaxed = load_or_compute_pruned_space(study, lease_problem())  # no allow_problem_change needed
    assert relaxed.computed and not relaxed.empty
    assert (
        study._storage.get_study_system_attrs(study._study_id)[PROBLEM_KEY] == lease_problem().fingerprint()
    )


def test_two_workers_with_different_problems_starting_together_one_is_refused(tmp_path: Path) -> None:
    where, storage, study = _new_study("sqlite", tmp_path)
    procs = [_spawn("worker", "sqlite", where, study.study_name, budget=b) for b in (BUDGET, TIGHT_BUDGET)]
    reports = [_report(p) for p in procs]
    errors = [r["error"] for r in reports]
    assert sorted(e is None for e in errors) == [False, True], errors
    assert next(e for e in errors if e).startswith("ProblemMismatchError: study")
    winner = lease_problem(BUDGET if errors[0] is None else TIGHT_BUDGET)
    assert storage.get_study_system_attrs(study._study_id)[PROBLEM_KEY] == winner.fingerprint()
    trials = [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]
    assert len(trials) == 2 and all(winner.check(t.params).feasible for t in trials)
    # issue 32: the refused worker's trial ends FAIL with the reason (it stayed RUNNING forever)
    states = sorted(t.state.name for t in study.get_trials(deepcopy=False))
    assert states == ["COMPLETE", "COMPLETE", "FAIL"]
    refused = next(t for t in study.get_trials(deepcopy=False) if t.state == TrialState.FAIL)
    assert refused.system_attrs["dnnsat:refused"].startswith("ProblemMismatchError: study")


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
