"""Shared state of the per-trial objects (Guard, adapters): pickling without process-bound state,
and counters and warnings that threads share."""

from __future__ import annotations

import logging
import threading
from typing import Any


class RebuiltOnUnpickle:
    """Pickles without the attributes named in ``_unpickled``; :meth:`_reset` rebuilds them (also the
    place that creates them in ``__init__``)."""

    _unpickled: tuple[str, ...] = ()

    def _reset(self) -> None:
        raise NotImplementedError

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in self._unpickled}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()


class SharedCounters:
    """``self.stats`` counters and once-only warnings, shared by threads under ``self._lock``; a
    repeated warning goes to debug. ``_log``: the logger of the subclass's module."""

    _log: logging.Logger
    _lock: threading.Lock | threading.RLock
    _warned: set[str]
    stats: Any

    def _bump(self, **deltas: float) -> None:
        """Add to counters of ``stats``."""
        with self._lock:
            for name, delta in deltas.items():
                setattr(self.stats, name, getattr(self.stats, name) + delta)

    def _warn_once(self, key: str, message: str) -> None:
        with self._lock:
            first = key not in self._warned
            self._warned.add(key)
        (self._log.warning if first else self._log.debug)(message)
