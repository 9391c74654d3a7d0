"""Per-trial verification of a chosen configuration against the user's real module (opt-in).

The adapters (``DnnSATSampler(verify=...)``, ``DnnSATTuner(verify=...)``) hold a :class:`Verifier` and
call it on every configuration they launch: a safety net for whatever a symbolic model cannot see.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from ._pickling import RebuiltOnUnpickle

__all__ = ["Verifier"]


class Verifier(RebuiltOnUnpickle):
    """Checks configurations of ``problem`` with ``model.disagreements(problem, config)``.

    ``model`` is typically the :func:`dnnsat.from_torch` model the problem was built on: its
    ``disagreements`` builds the module on the meta device and compares PyTorch's own params, FLOPs
    (FlopCounterMode) and validity with the problem's (one meta-device build and forward). Each
    disagreement is logged as a warning on ``logger``; ``checked``, ``disagreeing`` (configurations
    with at least one disagreement) and ``seconds`` count what was done. Thread-safe; picklable when
    ``model`` is.
    """

    _unpickled = ("_lock",)

    def __init__(self, model: Any, problem: Any, logger: logging.Logger) -> None:
        if not callable(getattr(model, "disagreements", None)):
            raise TypeError(
                "verify must be a model with disagreements(problem, config), e.g. the ds.from_torch(build, "
                f"inputs) the problem was built on; got {type(model).__name__}"
            )
        self.model = model
        self.problem = problem
        self.checked = 0
        self.disagreeing = 0
        self.seconds = 0.0
        self._log = logger
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()

    def __call__(self, config: Mapping[str, Any]) -> list[str]:
        """The disagreements on ``config`` (empty when the problem and PyTorch agree)."""
        t = time.perf_counter()
        names = self.problem.space.names
        lines = list(self.model.disagreements(self.problem, {k: v for k, v in config.items() if k in names}))
        with self._lock:
            self.checked += 1
            self.disagreeing += bool(lines)
            self.seconds += time.perf_counter() - t
        for line in lines:
            self._log.warning("dnnsat: the real module disagrees on %s: %s", dict(config), line)
        return lines
