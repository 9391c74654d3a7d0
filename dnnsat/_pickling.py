"""Objects that pickle without their process-bound state (locks, caches, study handles)."""

from __future__ import annotations

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
