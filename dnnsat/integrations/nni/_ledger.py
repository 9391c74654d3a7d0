"""What ``DnnSATTuner`` owes the base tuner: its ids, results and penalties, and the configurations
launched so far (for dedup).

Every proposal the base tuner makes is closed exactly once under its own id: a launched one with the
trial's result, an alias (a repeat) with the first trial's result, a discarded one under a synthetic
id (negative; NNI's own ids are >= 0) with a penalty. A result is reported before ``trial_end``, as
TPE's liar bookkeeping requires.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._spaces import config_key

__all__ = ["Launched", "Ledger", "scalar"]

_log = logging.getLogger("dnnsat.integrations.nni")


def scalar(value: Any) -> float | None:
    """The scalar metric of an NNI result (a number or a dict with ``"default"``), or ``None``."""
    if isinstance(value, Mapping):
        value = value.get("default")
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        return None
    v = float(value)
    return v if math.isfinite(v) else None


@dataclass
class Launched:
    """One configuration handed to NNI as a trial (or imported as a finished one)."""

    real_id: int | None
    base_id: int | None = None  # the base tuner's id of the proposal (None: sampled by dnnsat, imported)
    value: Any = None
    has_value: bool = False
    ended: bool = False


class Ledger:
    """The base tuner's open proposals, the launched configurations and the real results seen.

    ``penalty``: the explicit penalty (None: adaptive, see :meth:`penalty`); ``optimize_mode``:
    ``"maximize"`` or ``"minimize"``. Not thread-safe by itself: the tuner holds its lock.
    """

    def __init__(self, base: Any, penalty: float | None, optimize_mode: str) -> None:
        self.base = base
        self.explicit_penalty = penalty
        self.optimize_mode = optimize_mode
        self.trials: dict[int, Launched] = {}  # NNI parameter id -> launched trial
        self.by_config: dict[str, Launched] = {}  # config key -> first launched (or imported) trial
        self.raw: dict[int, Any] = {}  # open base id -> parameters as the base tuner returned them
        self._next_synthetic = -1
        self.reals: list[float] = []  # real scalar results seen
        self._worst_penalty: float | None = None

    def synthetic_id(self) -> int:
        """A fresh id for the next proposal of the same request (NNI's are >= 0)."""
        self._next_synthetic -= 1
        return self._next_synthetic + 1

    def first(self, full: Mapping[str, Any]) -> Launched | None:
        """The first trial launched (or imported) with this configuration (+ extras)."""
        return self.by_config.get(config_key(full))

    def hold(self, base_id: int, raw: Any, full: Mapping[str, Any], dedup: bool) -> bool:
        """Keep the parameters ``raw`` of a proposal to launch as ``full``; True when, with ``dedup``,
        it repeats a launched configuration: then it is an alias, closed at once with that trial's
        result, or as failed while that trial still runs (the tuner asks the base tuner again, and
        tuners such as Evolution hold a population slot per open proposal: waiting would drain them)."""
        launched = self.first(full) if dedup else None
        self.raw[base_id] = raw
        if launched is None:
            return False
        self.close(base_id, launched.value if launched.has_value else None)
        return True

    def launch(self, parameter_id: int, base_id: int | None, full: Mapping[str, Any]) -> None:
        launched = Launched(parameter_id, base_id)
        self.trials[parameter_id] = launched
        self.by_config.setdefault(config_key(full), launched)

    def imported(self, full: Mapping[str, Any], trial: Mapping[str, Any]) -> None:
        """A finished trial given to ``import_data``: launched, with its result."""
        value = trial.get("value")
        self.by_config.setdefault(config_key(full), Launched(None, None, value, "value" in trial, True))
        self._seen(value)

    def penalty(self) -> float | None:
        """The result of a discarded proposal: the explicit one, else worse than every real result by
        their spread (at least 1, or ``|worst|``) and never better than an earlier penalty; None before
        the first real result."""
        if self.explicit_penalty is not None:
            return self.explicit_penalty
        if not self.reals:
            return None
        lo, hi = min(self.reals), max(self.reals)
        spread = hi - lo
        if spread <= 0:
            spread = max(1.0, abs(lo))
        maximize = self.optimize_mode == "maximize"
        p = lo - spread if maximize else hi + spread
        if self._worst_penalty is not None:
            p = min(p, self._worst_penalty) if maximize else max(p, self._worst_penalty)
        self._worst_penalty = p
        return p

    def discard(self, base_id: int, raw: Any) -> None:
        """Close a proposal that is not launched with the penalty (failed, without one yet)."""
        self.raw[base_id] = raw
        self.close(base_id, self.penalty())

    def close(self, base_id: int, value: Any) -> None:
        """Report ``value`` (``None``: failed, no result) for a base id, then end it (result first: TPE)."""
        raw = self.raw.pop(base_id, None)
        if value is not None:
            self.base.receive_trial_result(base_id, raw, value)
        self.base.trial_end(base_id, value is not None)

    def result(self, parameter_id: int, value: Any, **kwargs: Any) -> None:
        """A trial's final result: kept for aliases, passed to the base tuner under the proposal's id."""
        launched = self.trials.get(parameter_id)
        if launched is None:
            _log.info("DnnSAT: result for unknown parameter id %s ignored", parameter_id)
            return
        launched.value, launched.has_value = value, True
        self._seen(value)
        if launched.base_id is not None and not launched.ended:
            raw = self.raw.get(launched.base_id)
            self.base.receive_trial_result(launched.base_id, raw, value, **kwargs)

    def end(self, parameter_id: int, success: bool, **kwargs: Any) -> None:
        """End the trial in the base tuner (once)."""
        launched = self.trials.get(parameter_id)
        if launched is None or launched.ended:
            return
        launched.ended = True
        if launched.base_id is not None:
            self.raw.pop(launched.base_id, None)
            self.base.trial_end(launched.base_id, success, **kwargs)

    def _seen(self, value: Any) -> None:
        v = scalar(value)
        if v is not None:
            self.reals.append(v)
