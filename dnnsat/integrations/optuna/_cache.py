"""The pruned search space of a Problem, computed once per study and shared through the study's storage.

The record lives in the study's system attributes under ``dnnsat:pruned:<fingerprint>`` so that every
worker of a distributed study (RDB or journal storage) reuses it; ``dnnsat:prune_count:<fingerprint>``
counts how many times it was computed (1 in a healthy study). ``dnnsat:problem`` holds the fingerprint of
the study's Problem, the first one whose (non-empty) pruned space the study got: a worker with another
Problem is refused (:class:`ProblemMismatchError`) unless it opts in with ``allow_problem_change=True``.

Exactly one worker computes the record. The workers race to create a lock study (study names are unique
in every Optuna storage, so ``create_new_study`` is an atomic test-and-set); the winner writes its identity
on the lock (host, pid namespace, pid, creation time, a random token, its lease), renews the lease with a
heartbeat thread (``dnnsat:beat``, every ``HEARTBEAT_SECONDS``) while it computes, stores the record and
deletes the lock. The others poll for the record and watch the lock: the holder is dead when it runs on
this machine and its pid is gone (or a zombie), or when its heartbeat has not moved for its lease
(``LEASE_SECONDS``, measured on the watcher's own clock, so clocks of different hosts need not agree; a
lock without identity gets the same grace). A dead holder's lock is taken over by creating the lock of the
next *generation* (``dnnsat-lock:<study id>:<generation>:<study name>``), again an atomic create, so one
waiter wins. ``timeout`` (the sampler's ``prune_timeout``) bounds the wait for a live, heartbeating holder;
after it the waiter computes the record itself. Every worker that returns a record deletes leftover locks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import itertools
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna
    from optuna.storages import BaseStorage

    from dnnsat import Problem
    from dnnsat.guard import Guard

__all__ = [
    "HEARTBEAT_SECONDS",
    "LEASE_SECONDS",
    "PROBLEM_KEY",
    "ProblemMismatchError",
    "PrunedSpace",
    "check_prune_timeout",
    "load_or_compute_pruned_space",
    "lock_study_name",
    "prune_count_key",
    "pruned_space_key",
]

_logger = logging.getLogger("dnnsat.integrations.optuna")

_RECORD_VERSION = 1
_POLL_SECONDS = 0.2
#: Seconds between two renewals of the lock holder's lease.
HEARTBEAT_SECONDS = 1.0
#: A holder whose heartbeat has not moved for this long (a few missed beats) is considered dead.
LEASE_SECONDS = 5.0
#: Study system attribute holding the fingerprint of the study's Problem.
PROBLEM_KEY = "dnnsat:problem"
_HOLDER_KEY = "dnnsat:holder"  # on a lock study: the identity of the worker holding it
_BEAT_KEY = "dnnsat:beat"  # on a lock study: heartbeat counter
_LOCK_PREFIX = "dnnsat-lock:"


class ProblemMismatchError(ValueError):
    """A worker's Problem differs from the one recorded on the study (``recorded`` vs ``fingerprint``)."""

    def __init__(self, study_name: str, recorded: str, fingerprint: str) -> None:
        self.recorded = recorded
        self.fingerprint = fingerprint
        super().__init__(
            f"study {study_name!r} belongs to the problem with fingerprint {recorded}, but this worker's "
            f"problem has fingerprint {fingerprint} (another search space or other constraints). All "
            "workers of a study must share one Problem: use the same Problem everywhere, create a new "
            "study for the new one, or pass allow_problem_change=True (DnnSATSampler(..., "
            "allow_problem_change=True)) to switch this study to the new problem on purpose (its earlier "
            "trials were sampled for the old one)."
        )


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

    def guard(self, problem: Problem, seed: int, enumerate_limit: int, cache_size: int) -> Guard:
        """A :class:`~dnnsat.Guard` over ``problem`` that starts from this record's domains and witnesses."""
        from dnnsat.guard import Guard

        return Guard(
            problem,
            seed=seed,
            domains=self.values,
            witnesses=self.witnesses,
            enumerate_limit=enumerate_limit,
            cache_size=cache_size,
        )

    def raise_if_empty(self) -> None:
        """Raise ``InfeasibleSpaceError`` (with the conflicting constraints) when nothing is feasible."""
        if self.empty:
            from dnnsat import InfeasibleSpaceError

            core = ", ".join(self.core) or "(no core available)"
            raise InfeasibleSpaceError(
                f"no configuration of the search space satisfies the constraints; conflicting: {core}",
                self.core,
            )

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
        from dnnsat.guard import sampled_witnesses

        # feasible configs that let the sampler confirm most proposals with one vectorized check
        witnesses = sampled_witnesses(problem, n_witnesses)
    seconds = time.perf_counter() - t0
    return PrunedSpace(
        fingerprint, values, bounds, seconds=seconds, computed_by=who, computed=True, witnesses=witnesses
    )


def _plain(value: Any) -> Any:
    """Numpy scalars to Python scalars (JSON-serialisable, comparable with Optuna's values)."""
    item = getattr(value, "item", None)
    return item() if callable(item) else value


def lock_study_name(study: optuna.Study, generation: int = 0) -> str:
    """Name of the lock study of ``study``; generation ``g + 1`` takes over from a dead holder of ``g``."""
    return f"{_LOCK_PREFIX}{study._study_id}:{generation}:{study.study_name}"[:500]


@dataclass(frozen=True)
class _Holder:
    """Identity of a lock holder, written on the lock study right after creating it.

    ``machine`` (host name and pid namespace) decides whether ``pid`` can be probed from here;
    ``created`` (wall clock, seconds) is informational only; ``lease`` is how long watchers wait for a beat.
    """

    machine: str
    pid: int
    created: float
    token: str
    lease: float

    @classmethod
    def me(cls) -> _Holder:
        return cls(_machine(), os.getpid(), time.time(), uuid.uuid4().hex, LEASE_SECONDS)

    @classmethod
    def from_record(cls, record: Any) -> _Holder | None:
        try:
            return cls(
                str(record["machine"]),
                int(record["pid"]),
                float(record["created"]),
                str(record["token"]),
                float(record["lease"]),
            )
        except (KeyError, TypeError, ValueError):
            return None

    def is_dead_here(self) -> bool:
        """True when the holder runs on this machine and its process no longer exists."""
        return self.machine == _machine() and not _process_alive(self.pid)


def _machine() -> str:
    """This host's name and pid namespace: pids are only comparable within one such pair."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    return f"{socket.gethostname()}/{namespace}"


def _process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists here and is not a zombie (killed, but not yet reaped by its parent)."""
    if os.name != "posix":
        return True  # no signal-0 probe (os.kill would terminate the process): rely on the lease
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, owned by another user
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[-1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")


class _Heartbeat:
    """While entered: the identity of this worker on the lock study, renewed every ``HEARTBEAT_SECONDS``."""

    def __init__(self, storage: BaseStorage, lock_id: int) -> None:
        self._storage = storage
        self._lock_id = lock_id
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dnnsat-heartbeat", daemon=True)

    def __enter__(self) -> _Heartbeat:
        self._write(_HOLDER_KEY, dataclasses.asdict(_Holder.me()))
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        for beat in itertools.count(1):
            if self._stop.wait(HEARTBEAT_SECONDS):
                return
            self._write(_BEAT_KEY, beat)

    def _write(self, key: str, value: Any) -> None:
        try:
            self._storage.set_study_system_attr(self._lock_id, key, value)
        except Exception:  # the lock may be gone (cleaned up once the record exists); watchers use the lease
            _logger.debug("could not write %s on lock study %d", key, self._lock_id, exc_info=True)


class _Verdict(enum.Enum):
    LIVE = "live"
    DEAD = "dead"
    GONE = "gone"


class _Watch:
    """A waiter's view of one lock: live while its heartbeat moves, dead when its holder is known gone."""

    def __init__(self) -> None:
        self._state: tuple[Any, ...] | None = None
        self._since = 0.0
        self.reason = ""

    def judge(self, storage: BaseStorage, name: str) -> _Verdict:
        try:
            lock_id = storage.get_study_id_from_name(name)
            attrs = storage.get_study_system_attrs(lock_id)
        except KeyError:
            return _Verdict.GONE
        holder = _Holder.from_record(attrs.get(_HOLDER_KEY))
        if holder is not None and holder.is_dead_here():
            self.reason = f"its holder, process {holder.pid} on this machine, is gone"
            return _Verdict.DEAD
        now = time.monotonic()
        state = (lock_id, holder and holder.token, attrs.get(_BEAT_KEY))
        if state != self._state:
            self._state, self._since = state, now
            return _Verdict.LIVE
        lease = holder.lease if holder is not None else LEASE_SECONDS
        if now - self._since > lease:
            what = "no heartbeat" if holder is not None else "no holder identity"
            self.reason = f"{what} for {now - self._since:.1f} s (lease {lease:g} s)"
            return _Verdict.DEAD
        return _Verdict.LIVE


def _study_id_or_none(storage: BaseStorage, name: str) -> int | None:
    try:
        return storage.get_study_id_from_name(name)
    except KeyError:
        return None


def _remove_locks(storage: BaseStorage, study: optuna.Study, generation: int = 0) -> None:
    """Delete the study's lock studies 0 to ``generation`` and later ones up to the first missing one.

    Called once the record exists, when every lock is useless (a late worker may still create one).
    """
    for g in itertools.count():
        lock_id = _study_id_or_none(storage, lock_study_name(study, g))
        if lock_id is None:
            if g >= generation:
                return
            continue
        with contextlib.suppress(Exception):  # another worker may be deleting it too
            storage.delete_study(lock_id)


def check_prune_timeout(timeout: Any) -> None:
    """Raise ``ValueError`` unless ``timeout`` (the sampler's ``prune_timeout``) is seconds >= 0."""
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout >= 0:  # (NaN too)
        raise ValueError(f"prune_timeout must be seconds >= 0 (math.inf: no limit), got {timeout!r}")


def load_or_compute_pruned_space(
    study: optuna.Study, problem: Problem, timeout: float = 600.0, *, allow_problem_change: bool = False
) -> PrunedSpace:
    """The study's cached pruned space, computing and storing it when no worker has done so yet.

    ``timeout`` (seconds, the sampler's ``prune_timeout``) bounds the wait for another worker that is
    computing the record and is alive (heartbeating); after it, this worker computes the record itself
    (correctness never depends on the lock, only the "once"). A dead holder is replaced within about a
    second when it ran on this machine, within ``LEASE_SECONDS`` otherwise.

    Raises :class:`ProblemMismatchError` when the study was started with another Problem, unless
    ``allow_problem_change`` is True: then the study switches to this worker's Problem.
    """
    from optuna.exceptions import DuplicatedStudyError
    from optuna.study import StudyDirection

    check_prune_timeout(timeout)
    storage = study._storage
    fingerprint = problem.fingerprint()

    def check(attrs: dict[str, Any]) -> str | None:
        """The recorded fingerprint; raises when it is another problem's and no change is allowed."""
        recorded = attrs.get(PROBLEM_KEY)
        if recorded is not None and recorded != fingerprint and not allow_problem_change:
            raise ProblemMismatchError(study.study_name, str(recorded), fingerprint)
        return recorded

    def poll() -> PrunedSpace | None:
        attrs = storage.get_study_system_attrs(study._study_id)
        return _record(attrs, fingerprint) if check(attrs) == fingerprint else None

    def compute() -> PrunedSpace:
        """Under the study-wide lock: the record, computed if missing; a feasible problem claims the study."""
        attrs = storage.get_study_system_attrs(study._study_id)
        recorded = check(attrs)
        result = _record(attrs, fingerprint) or _compute_and_store(
            storage, study._study_id, problem, fingerprint
        )
        if recorded != fingerprint and not result.empty:
            if recorded is not None:
                _logger.warning(
                    "study %r switches from problem %s to %s (allow_problem_change=True)",
                    study.study_name,
                    recorded,
                    fingerprint,
                )
            storage.set_study_system_attr(study._study_id, PROBLEM_KEY, fingerprint)
        return result

    found = poll()
    if found is not None:
        _remove_locks(storage, study)
        return found
    deadline = time.monotonic() + timeout
    generation = 0
    watch = _Watch()
    while True:
        name = lock_study_name(study, generation)
        try:
            lock_id = storage.create_new_study([StudyDirection.MINIMIZE], name)
        except DuplicatedStudyError:
            pass
        else:
            try:
                with _Heartbeat(storage, lock_id):
                    result = compute()
            except BaseException:
                with contextlib.suppress(Exception):  # let a waiter take over at once
                    storage.delete_study(lock_id)
                raise
            _remove_locks(storage, study, generation)
            return result
        found = poll()
        if found is not None:
            _remove_locks(storage, study, generation)
            return found
        if _study_id_or_none(storage, lock_study_name(study, generation + 1)) is not None:
            generation += 1  # a holder of this generation died and another worker took over
            continue
        verdict = watch.judge(storage, name)
        if verdict is _Verdict.DEAD:
            _logger.warning("lock study %r: %s; taking over", name, watch.reason)
            generation += 1
            continue
        if verdict is _Verdict.GONE:
            continue  # released without a record (its holder failed): try to take it
        if time.monotonic() >= deadline:
            _logger.warning(
                "waited %.0f s (prune_timeout) for the live worker holding %r to prune the space; "
                "computing it here",
                timeout,
                name,
            )
            result = compute()
            _remove_locks(storage, study, generation)
            return result
        time.sleep(_POLL_SECONDS)


def _record(attrs: dict[str, Any], fingerprint: str) -> PrunedSpace | None:
    """The stored record of ``fingerprint`` in a study's system attributes, if any."""
    record = attrs.get(pruned_space_key(fingerprint))
    if isinstance(record, dict) and record.get("version") == _RECORD_VERSION:
        return PrunedSpace.from_record(fingerprint, record)
    return None


def _compute_and_store(
    storage: BaseStorage, study_id: int, problem: Problem, fingerprint: str
) -> PrunedSpace:
    result = compute_pruned_space(problem)
    count_key = prune_count_key(fingerprint)
    count = storage.get_study_system_attrs(study_id).get(count_key, 0)
    storage.set_study_system_attr(study_id, pruned_space_key(fingerprint), result.to_record())
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
