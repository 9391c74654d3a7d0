"""The pruned search space of a Problem, computed once per study and shared through the study's storage.

The record lives in the study's system attributes under ``dnnsat:pruned:<fingerprint>`` so that every
worker of a distributed study (RDB or journal storage) reuses it. Exactly one worker computes it: the
workers race to create a short-lived lock study (study names are unique in every Optuna storage, so
``create_new_study`` is an atomic test-and-set); the winner computes and stores the record and deletes
the lock study, the others poll for the record. ``dnnsat:prune_count:<fingerprint>`` counts how many
times the record was computed (1 in a healthy study).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import socket
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna

    from dnnsat import Problem

__all__ = ["PrunedSpace", "load_or_compute_pruned_space", "pruned_space_key", "prune_count_key"]

_logger = logging.getLogger("dnnsat.integrations.optuna")

_RECORD_VERSION = 1
_POLL_SECONDS = 0.05


def pruned_space_key(fingerprint: str) -> str:
    """Study system-attribute key of the cached pruned space."""
    return f"dnnsat:pruned:{fingerprint}"


def prune_count_key(fingerprint: str) -> str:
    """Study system-attribute key counting how often the pruned space was computed."""
    return f"dnnsat:prune_count:{fingerprint}"


@dataclass(frozen=True)
class PrunedSpace:
    """Per-parameter feasible domains of a Problem (values that occur in some feasible config).

    ``values[name]`` lists the feasible user values of a finite parameter (in the space's order);
    ``bounds[name]`` gives ``(low, high)`` of a continuous parameter. ``empty`` is True when no
    configuration is feasible; ``core`` then names conflicting constraints (``problem.unsat_core()``).
    ``computed`` tells whether this process computed the record (False: loaded from the study).
    """

    fingerprint: str
    values: dict[str, list[Any]] = field(default_factory=dict)
    bounds: dict[str, tuple[float, float]] = field(default_factory=dict)
    empty: bool = False
    core: list[str] = field(default_factory=list)
    seconds: float = 0.0
    computed_by: str = ""
    computed: bool = False
    witnesses: list[dict[str, Any]] = field(default_factory=list)

    def to_record(self) -> dict[str, Any]:
        """A JSON-serialisable record for the study's system attributes."""
        return {
            "version": _RECORD_VERSION,
            "values": {k: list(v) for k, v in self.values.items()},
            "bounds": {k: [lo, hi] for k, (lo, hi) in self.bounds.items()},
            "empty": self.empty,
            "core": list(self.core),
            "seconds": self.seconds,
            "computed_by": self.computed_by,
            "witnesses": [dict(w) for w in self.witnesses],
        }

    @classmethod
    def from_record(cls, fingerprint: str, record: dict[str, Any]) -> PrunedSpace:
        return cls(
            fingerprint=fingerprint,
            values={k: list(v) for k, v in record.get("values", {}).items()},
            bounds={k: (float(b[0]), float(b[1])) for k, b in record.get("bounds", {}).items()},
            empty=bool(record.get("empty", False)),
            core=[str(c) for c in record.get("core", [])],
            seconds=float(record.get("seconds", 0.0)),
            computed_by=str(record.get("computed_by", "")),
            computed=False,
            witnesses=[dict(w) for w in record.get("witnesses", [])],
        )


def compute_pruned_space(problem: Problem, n_witnesses: int = 64) -> PrunedSpace:
    """Run the solver: emptiness (with its unsat core) and the pruned per-parameter domains."""
    t0 = time.perf_counter()
    fingerprint = problem.fingerprint()
    who = f"{socket.gethostname()}:{os.getpid()}"
    if problem.is_empty():
        core = list(problem.unsat_core())
        return PrunedSpace(
            fingerprint, empty=True, core=core, seconds=time.perf_counter() - t0, computed_by=who
        )
    pruned = problem.prune()
    values: dict[str, list[Any]] = {}
    bounds: dict[str, tuple[float, float]] = {}
    for name in problem.space.names:
        if name not in pruned:  # a conditional parameter that is never active in a feasible config
            values[name] = []
            continue
        param = pruned[name]
        if param.is_finite:
            values[name] = [_plain(v) for v in param.values()]
        else:
            lo, hi = param.bounds()
            bounds[name] = (float(lo), float(hi))
    witnesses: list[dict[str, Any]] = []
    if not any(problem.space[n].condition for n in problem.space.names):
        try:  # feasible configs that let the sampler confirm most proposals with one vectorized check
            witnesses = [{k: _plain(v) for k, v in c.items()} for c in problem.sample(n_witnesses, seed=0)]
        except Exception:  # pragma: no cover - sampling is an optimisation only
            _logger.debug("could not sample witness configurations", exc_info=True)
    seconds = time.perf_counter() - t0
    return PrunedSpace(
        fingerprint, values, bounds, seconds=seconds, computed_by=who, computed=True, witnesses=witnesses
    )


def _plain(value: Any) -> Any:
    """Numpy scalars to Python scalars (JSON-serialisable, comparable with Optuna's values)."""
    item = getattr(value, "item", None)
    return item() if callable(item) else value


def load_or_compute_pruned_space(
    study: optuna.Study, problem: Problem, timeout: float = 600.0
) -> PrunedSpace:
    """The study's cached pruned space, computing and storing it when no worker has done so yet.

    Waits up to ``timeout`` seconds for another worker that holds the lock; after that it computes
    the record itself (correctness never depends on the lock, only the "once").
    """
    from optuna.exceptions import DuplicatedStudyError
    from optuna.study import StudyDirection

    storage = study._storage
    study_id = study._study_id
    fingerprint = problem.fingerprint()
    key = pruned_space_key(fingerprint)

    def cached() -> PrunedSpace | None:
        record = storage.get_study_system_attrs(study_id).get(key)
        if isinstance(record, dict) and record.get("version") == _RECORD_VERSION:
            return PrunedSpace.from_record(fingerprint, record)
        return None

    found = cached()
    if found is not None:
        return found
    lock_name = f"dnnsat-lock:{study_id}:{fingerprint}:{study.study_name}"[:500]
    deadline = time.monotonic() + timeout
    while True:
        try:
            lock_id = storage.create_new_study([StudyDirection.MINIMIZE], lock_name)
        except DuplicatedStudyError:
            # Another worker computes it: wait for its record (or for the lock to vanish).
            while time.monotonic() < deadline:
                time.sleep(_POLL_SECONDS)
                found = cached()
                if found is not None:
                    return found
                try:
                    held_id = storage.get_study_id_from_name(lock_name)
                except KeyError:
                    break  # the holder gave up without a record: try to take the lock ourselves
                since = storage.get_study_system_attrs(held_id).get("dnnsat:lock_time")
                if isinstance(since, float) and time.time() - since > timeout:
                    _logger.warning("breaking the stale lock study %r (holder died?)", lock_name)
                    with contextlib.suppress(Exception):
                        storage.delete_study(held_id)
                    break
            else:
                _logger.warning(
                    "waited %.0f s for another worker to prune the space (lock study %r); computing it here",
                    timeout,
                    lock_name,
                )
                return _compute_and_store(storage, study_id, problem, key, fingerprint)
            continue
        try:
            storage.set_study_system_attr(lock_id, "dnnsat:lock_time", time.time())
            found = cached()  # double-checked: a worker may have finished between our check and the lock
            if found is not None:
                return found
            return _compute_and_store(storage, study_id, problem, key, fingerprint)
        finally:
            try:
                storage.delete_study(lock_id)
            except Exception:  # pragma: no cover - best effort clean-up
                _logger.warning("could not delete the lock study %r", lock_name, exc_info=True)


def _compute_and_store(
    storage: Any, study_id: int, problem: Problem, key: str, fingerprint: str
) -> PrunedSpace:
    result = compute_pruned_space(problem)
    count_key = prune_count_key(fingerprint)
    count = storage.get_study_system_attrs(study_id).get(count_key, 0)
    storage.set_study_system_attr(study_id, key, result.to_record())
    storage.set_study_system_attr(study_id, count_key, int(count) + 1)
    kept = sum(len(v) for v in result.values.values())
    _logger.info(
        "pruned space computed in %.3f s by %s (empty=%s, %d finite values kept)",
        result.seconds,
        result.computed_by,
        result.empty,
        kept,
    )
    return dataclasses.replace(result, computed=True)
