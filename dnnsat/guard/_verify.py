"""Per-trial verification of a chosen configuration against the user's real module (opt-in).

The adapters (``DnnSATSampler(verify=...)``, ``DnnSATTuner(verify=...)``) hold a :class:`Verifier` and
call it on every configuration they launch: a safety net for whatever a symbolic model cannot see.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

__all__ = ["Verifier"]


class Verifier:
    """Checks configurations of ``problem`` with ``model.disagreements(problem, config)``.

    ``model`` is typically the :func:`dnnsat.from_torch` model the problem was built on: its
    ``disagreements`` builds the module on the meta device and compares PyTorch's own params, FLOPs
    (FlopCounterMode) and validity with the problem's (one meta-device build and forward). Each
    disagreement is logged as a warning on ``logger``; the adapters count them in their stats.
    Stateless (thread-safe); picklable when ``model`` is.
    """

    def __init__(self, model: Any, problem: Any, logger: logging.Logger) -> None:
        if not callable(getattr(model, "disagreements", None)):
            raise TypeError(
                "verify must be a model with disagreements(problem, config), e.g. the ds.from_torch(build, "
                f"inputs) the problem was built on; got {type(model).__name__}"
            )
        self.model = model
        self.problem = problem
        self._log = logger

    def __call__(self, config: Mapping[str, Any]) -> list[str]:
        """The disagreements on ``config`` (empty when the problem and PyTorch agree)."""
        names = self.problem.space.names
        lines = list(self.model.disagreements(self.problem, {k: v for k, v in config.items() if k in names}))
        for line in lines:
            self._log.warning("dnnsat: the real module disagrees on %s: %s", dict(config), line)
        return lines
