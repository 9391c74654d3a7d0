"""What ``DnnSATSampler`` knows about each running Optuna trial: its enqueued parameters and grid
(read once from the trial's system attributes), the relative sample or grid point decided before the
objective asks for it, and the seconds spent in the wrapper and in the base sampler."""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from optuna.storages import BaseStorage
    from optuna.trial import FrozenTrial

__all__ = ["REFUSED_ATTR", "TrialBook", "TrialState", "fail_refused_trial"]

_logger = logging.getLogger("dnnsat.integrations.optuna")

#: Trial system attribute holding why the sampler refused the trial: ``"<error type>: <message>"``.
REFUSED_ATTR = "dnnsat:refused"
#: Set (True) as well on a trial refused because the problem's feasible space is empty.
INFEASIBLE_SPACE_ATTR = "dnnsat:infeasible_space"


def fail_refused_trial(storage: BaseStorage, trial: FrozenTrial, err: BaseException) -> None:
    """Mark a trial the sampler refuses before its objective runs FAIL, with the reason.

    Optuna has created the trial (RUNNING) before ``before_trial`` raises, and nobody else ends it: not
    ``study.optimize`` (the error leaves it before the objective) and not an ask-and-tell loop (``ask``
    raises, so it holds no trial to tell). The reason goes to the system attribute ``dnnsat:refused``
    (and ``dnnsat:infeasible_space`` for an empty feasible space). Failing to mark the trial (e.g. the
    storage is what broke) is logged and never hides ``err``, which the caller re-raises.
    """
    from optuna.trial import TrialState as OptunaState

    from dnnsat import InfeasibleSpaceError

    try:
        storage.set_trial_system_attr(trial._trial_id, REFUSED_ATTR, f"{type(err).__name__}: {err}")
        if isinstance(err, InfeasibleSpaceError):
            storage.set_trial_system_attr(trial._trial_id, INFEASIBLE_SPACE_ATTR, True)
        storage.set_trial_state_values(trial._trial_id, OptunaState.FAIL)
    except Exception:
        _logger.warning("could not mark the refused trial %d FAIL", trial.number, exc_info=True)


@dataclass
class TrialState:
    """What the wrapper remembers about one running trial (a trial is driven by one thread)."""

    #: enqueued problem parameters (``fixed_params``) and the GridSampler grid (None: not a grid trial),
    #: read from the trial's system attributes once, at the first sampling call
    attrs: tuple[dict[str, Any], dict[str, list[Any]] | None] | None = None
    #: the (repaired) relative sample or grid point, decided before the objective asks for it
    pending: dict[str, Any] = field(default_factory=dict)
    is_grid: bool = False
    wrapper_s: float = 0.0
    base_s: float = 0.0


class TrialBook(dict[int, TrialState]):
    """Trial id -> :class:`TrialState` of the running trials; ``names``: the problem's parameters.
    Thread-safe: entries are created and removed under one lock."""

    def __init__(self, names: Collection[str]) -> None:
        super().__init__()
        self._names = names
        self._lock = threading.Lock()

    def state(self, trial: FrozenTrial) -> TrialState:
        st = self.get(trial._trial_id)
        if st is None:
            with self._lock:
                st = self.setdefault(trial._trial_id, TrialState())
        return st

    def release(self, trial: FrozenTrial) -> TrialState | None:
        """Forget a finished trial; its state (None if it never sampled)."""
        with self._lock:
            return self.pop(trial._trial_id, None)

    def attrs(self, trial: FrozenTrial) -> tuple[dict[str, Any], dict[str, list[Any]] | None]:
        """(enqueued fixed problem params, GridSampler grid) of a trial: one storage read per trial."""
        st = self.state(trial)
        if st.attrs is None:
            attrs = dict(trial.system_attrs)
            fixed = {k: v for k, v in (attrs.get("fixed_params") or {}).items() if k in self._names}
            grid = attrs.get("search_space") if "grid_id" in attrs else None
            st.attrs = (fixed, grid if isinstance(grid, dict) else None)
        return st.attrs

    def given(self, trial: FrozenTrial, exclude: str | None = None) -> dict[str, Any]:
        """Problem parameters already decided in this trial: pending relative, enqueued, suggested."""
        fixed = self.attrs(trial)[0]
        given: dict[str, Any] = {}
        for source in (self.state(trial).pending, fixed, trial.params):
            for k, v in source.items():
                if k != exclude and k in self._names:
                    given[k] = v
        return given

    def charge(self, trial: FrozenTrial, base: float, total: float) -> None:
        """Add ``total`` seconds of a sampler call, ``base`` of them in the base sampler."""
        st = self.state(trial)
        st.wrapper_s += max(0.0, total - base)
        st.base_s += base

    def running_points(self) -> dict[int, dict[str, Any]]:
        """Trial id -> the grid point (or relative sample) each running trial evaluates."""
        with self._lock:
            return {tid: st.pending for tid, st in self.items() if st.pending}
