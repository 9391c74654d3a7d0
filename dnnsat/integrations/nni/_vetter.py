"""What ``DnnSATTuner`` launches for a request: base-tuner proposals read out of NNI's structure and
vetted over the problem's Guard (kept, repaired, or discarded with a penalty), a repeat of a launched
configuration closed as an alias, and, after too many unusable proposals, a feasible configuration that
dnnsat samples itself."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from dnnsat.guard import Guard, VetCounts, unlaunched, vet

from ._layout import Layout
from ._ledger import Ledger

__all__ = ["TunerStats", "Vetter"]

_log = logging.getLogger("dnnsat.integrations.nni")


@dataclass
class TunerStats(VetCounts):
    """Counters of what the wrapper did (see ``DnnSATTuner.stats``): the base tuner's proposals and
    their outcomes (:class:`~dnnsat.guard.VetCounts`), then ``duplicates`` (proposals equal to an
    already launched configuration, dedup on), ``fallbacks`` (configurations sampled by dnnsat after
    ``max_attempts`` unusable proposals), ``launched`` (configurations returned to NNI), ``verified``
    (launched configurations checked against the real module, ``verify=``) and ``disagreements``
    (verified ones where the real module disagreed)."""

    duplicates: int = 0
    fallbacks: int = 0
    launched: int = 0
    verified: int = 0
    disagreements: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


class Vetter:
    """Turns base-tuner proposals into configurations to launch (flat problem configuration plus the
    experiment's extra parameters) and closes the unusable ones in the ledger.

    ``repair``: repair infeasible proposals (else reject them); ``seed``: dnnsat's own sampling.
    ``exhausted`` holds the reason once nothing more can be launched. Not thread-safe by itself: the
    tuner holds its lock.
    """

    def __init__(
        self, guard: Guard, layout: Layout, ledger: Ledger, stats: TunerStats, repair: bool, seed: int | None
    ) -> None:
        self.guard = guard
        self.layout = layout
        self.ledger = ledger
        self.stats = stats
        self.repair = repair
        self.exhausted: str | None = None
        self._rng = np.random.default_rng(seed)
        self._last_extras: dict[str, Any] = {}
        self._last_full: dict[str, Any] | None = None  # the last proposal's configuration (+ extras)

    def first_usable(
        self, ask: Callable[[int], Any], base_id: int, attempts: int, dedup: bool
    ) -> tuple[int | None, dict[str, Any]] | None:
        """Up to ``attempts`` proposals (``ask(base id)``; the first under ``base_id``, the next ones
        under synthetic ids), the last one repaired also in reject mode; then a configuration sampled
        by dnnsat (base id None). Returns (base id, configuration), or None when nothing is left."""
        parameter_id = base_id
        for attempt in range(attempts):
            full = self.vet(base_id, ask(base_id), dedup, force_repair=attempt == attempts - 1)
            if full is not None:
                return base_id, full
            base_id = self.ledger.synthetic_id()
        full = self.fallback()
        if full is None:
            return None
        self.stats.fallbacks += 1
        _log.warning(
            "DnnSAT: %d proposals in a row were repeated or unusable; parameter id %d gets a feasible "
            "configuration sampled by dnnsat (its result is not reported to the base tuner)",
            attempts,
            parameter_id,
        )
        return None, full

    def vet(self, base_id: int, raw: Any, dedup: bool, force_repair: bool = False) -> dict[str, Any] | None:
        """The configuration to launch for this proposal, or ``None`` after closing it in the base tuner
        (discarded with the penalty, or, with ``dedup``, an alias of a launched configuration)."""
        try:
            config, extras = self.layout.split(raw)
        except Exception as err:
            _log.warning("DnnSAT: proposal %s is outside the search space (%s); discarded", raw, err)
            self.ledger.discard(base_id, raw)
            self.stats.count(None)
            return None
        self._last_extras = extras
        vetted = vet(self.guard, config, repair=self.repair or force_repair)
        self.stats.count(vetted)
        if vetted.config is None:
            if vetted.outcome == "rejected":
                _log.debug("DnnSAT: rejected %s (%s)", config, ", ".join(vetted.violations))
            else:
                _log.debug("DnnSAT: proposal %s cannot be repaired; discarded", config)
            self.ledger.discard(base_id, raw)
            return None
        if vetted.outcome == "repaired":
            _log.debug("DnnSAT: repaired %s -> %s", config, vetted.config)
        full = self._last_full = {**vetted.config, **extras}
        if self.ledger.hold(base_id, raw, full, dedup):
            self.stats.duplicates += 1
            return None
        return full

    def fallback(self) -> dict[str, Any] | None:
        """A feasible configuration not launched yet, sampled by dnnsat; ``None`` (and ``exhausted``
        set) when there is none."""
        if self.layout.batch is not None:  # BatchTuner launches only the parameter sets the user listed
            self.exhausted = "every feasible parameter set of BatchTuner's search space has been launched"
            return None
        extras = self._last_extras
        limit = len(self.ledger.by_config) + 1
        is_new = lambda c: self.ledger.first({**c, **extras}) is None  # noqa: E731
        found = unlaunched(self.guard, is_new, self._rng, self._last_full, limit)
        if found is not None:
            return {**found, **extras}
        if extras and self._last_full is not None:
            # parameters the problem does not know are passed through: dnnsat cannot tell which of their
            # values are unseen, so the base tuner's last proposal runs again rather than end the experiment
            _log.warning("DnnSAT: no unlaunched configuration found; %s runs again", self._last_full)
            return self._last_full
        self.exhausted = "every feasible configuration has been launched"
        _log.info("DnnSAT: %s", self.exhausted)
        return None
