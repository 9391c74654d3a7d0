"""Four worker processes share one study (SQLite, journal file, PostgreSQL): no infeasible trial, no
error, and the pruned space is computed exactly once (study attribute counter + each worker's report).
``open_storage`` and ``storage_location`` are shared with test_optuna_lease.py (killed lock holders)."""

from __future__ import annotations

import multiprocessing as mp
import os
import uuid
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from dnnsat.integrations.optuna import DnnSATSampler, prune_count_key, suggest
from dnnsat.integrations.optuna._cache import PROBLEM_KEY
from dnnsat.zoo import synthetic_resnet_problem

WORKERS = 4
TRIALS_PER_WORKER = 8
REPO = Path(__file__).resolve().parents[1]


def open_storage(kind: str, where: str) -> Any:
    """An Optuna storage of ``kind`` ("sqlite", "journal", "postgres") at ``where`` (URL or file)."""
    if kind == "journal":
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend

        return JournalStorage(JournalFileBackend(where))
    return optuna.storages.RDBStorage(where, engine_kwargs={"pool_pre_ping": True})


def _worker(kind: str, where: str, study_name: str, seed: int, barrier: Any, out: Any) -> None:
    """One worker process: wait for the others, then optimise its share of the study."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    problem = synthetic_resnet_problem(flops_limit=1e11, params_limit=2e6)
    sampler = DnnSATSampler(problem, optuna.samplers.TPESampler(seed=seed, constant_liar=True))
    study = optuna.load_study(study_name=study_name, storage=open_storage(kind, where), sampler=sampler)
    seen_infeasible = 0

    def objective(trial: optuna.Trial) -> float:
        nonlocal seen_infeasible
        cfg = suggest(trial, problem)
        seen_infeasible += not problem.check(cfg).feasible
        return float(problem.costs(cfg)["flops"])

    barrier.wait(timeout=120)  # all four reach the first trial (and the pruning) together
    try:
        study.optimize(objective, n_trials=TRIALS_PER_WORKER, catch=())
        out.put((seed, sampler.stats.pruned_space_computed, seen_infeasible, None))
    except Exception as err:  # reported to the parent, which fails the test
        out.put((seed, sampler.stats.pruned_space_computed, seen_infeasible, repr(err)))


def _run_workers(kind: str, where: str) -> None:
    problem = synthetic_resnet_problem(flops_limit=1e11, params_limit=2e6)
    name = f"dnnsat-test-{uuid.uuid4().hex[:12]}"
    optuna.create_study(study_name=name, storage=open_storage(kind, where))
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(WORKERS)
    out = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(kind, where, name, s, barrier, out)) for s in range(WORKERS)]
    for p in procs:
        p.start()
    reports = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert [r[3] for r in reports] == [None] * WORKERS, reports
    assert sum(r[2] for r in reports) == 0  # no objective saw an infeasible config
    assert sorted(bool(r[1]) for r in reports) == [False, False, False, True]  # one worker computed it

    study = optuna.load_study(study_name=name, storage=open_storage(kind, where))
    trials = study.get_trials(deepcopy=False)
    assert len(trials) == WORKERS * TRIALS_PER_WORKER
    assert all(t.state == TrialState.COMPLETE for t in trials)
    assert all(problem.check(t.params).feasible for t in trials)
    assert all(t.constraints and max(t.constraints.values()) <= 0 for t in trials)
    attrs = study._storage.get_study_system_attrs(study._study_id)
    assert attrs[prune_count_key(problem.fingerprint())] == 1
    assert attrs[PROBLEM_KEY] == problem.fingerprint()  # the study belongs to this problem now
    names = [s.study_name for s in optuna.get_all_study_summaries(open_storage(kind, where))]
    assert name in names and not [n for n in names if n.startswith("dnnsat-lock:") and n.endswith(name)]


def storage_location(kind: str, tmp_path: Path) -> str:
    """Where ``open_storage(kind, ...)`` keeps a test's studies; skips (fails under CI) without PostgreSQL."""
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'study.db'}"
    if kind == "journal":
        return str(tmp_path / "journal.log")
    in_ci = os.environ.get("CI", "").lower() == "true"
    url = os.environ.get("DNNSAT_PG_URL")
    path = REPO / ".pg" / "url"
    if not url and path.exists():
        url = path.read_text().strip()
    if not url:
        if in_ci:
            pytest.fail("CI=true but no PostgreSQL URL: .ci/postgres.sh must run before the tests (.pg/url)")
        pytest.skip("no PostgreSQL server (run `bash .ci/postgres.sh` or set DNNSAT_PG_URL)")
    try:
        import sqlalchemy

        sqlalchemy.create_engine(url).connect().close()
    except Exception as err:
        if in_ci:
            pytest.fail(f"PostgreSQL at .pg/url does not answer: {err}")
        pytest.skip(f"PostgreSQL at .pg/url does not answer ({type(err).__name__}); rerun .ci/postgres.sh")
    return url


def test_four_processes_sqlite(tmp_path: Path) -> None:
    _run_workers("sqlite", storage_location("sqlite", tmp_path))


def test_four_processes_journal_file(tmp_path: Path) -> None:
    _run_workers("journal", storage_location("journal", tmp_path))


def test_four_processes_postgres(tmp_path: Path) -> None:
    _run_workers("postgres", storage_location("postgres", tmp_path))
