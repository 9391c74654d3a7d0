"""The experiment's search space as ``DnnSATTuner`` sees it: which NNI keys belong to the problem,
the space the base tuner gets (pruned, or BatchTuner's feasible parameter sets), and configurations
converted between the problem's flat form and those NNI structures."""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Mapping
from typing import Any

from dnnsat import Problem
from dnnsat.space import config_from_nni, config_to_nni

from ._load import adapt_space
from ._spaces import BatchLayout, base_space, batch_layout, check_space, config_key, plain

__all__ = ["Layout"]

_log = logging.getLogger("dnnsat.integrations.nni")


def _is_batch_tuner(base: Any) -> bool:
    from nni.algorithms.hpo.batch_tuner import BatchTuner

    return isinstance(base, BatchTuner)


class Layout:
    """The search spaces of one tuner: ``nni_space`` (the experiment's), ``base_space`` (what the base
    tuner got), ``pruned`` (the dnnsat ``Space`` whose NNI form the base tuner got), ``batch``
    (BatchTuner's layout) and ``problem_keys`` (top-level NNI keys that belong to the problem)."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        self.nni_space: dict[str, Any] | None = None
        self.base_space: dict[str, Any] | None = None
        self.pruned: Any = None
        self.batch: BatchLayout | None = None
        self.problem_keys: list[str] = []

    def update(
        self, space: dict[str, Any], base: Any, guard: Any, dedup: bool | None
    ) -> tuple[bool | None, str | None]:
        """Check the experiment's ``space`` and derive the base tuner's (see
        ``DnnSATTuner.update_search_space``). Returns (effective dedup: ``dedup`` or, when None, on
        while a constraint can bind; None: unchanged, the reason the experiment gets no trials or None).
        """
        problem = self.problem
        self.batch = None
        if _is_batch_tuner(base):
            return self._update_batch(space, dedup)
        self.problem_keys = check_space(problem, space)
        self.nni_space = space
        if problem.is_empty():
            return None, _empty_reason(problem)
        passthrough = bool(problem.always_feasible())
        if passthrough:  # the base tuner sees the experiment as is
            self.pruned = problem.space
            spec = space
            _log.info("DnnSAT: no constraint can bind; %s gets the search space as is", type(base).__name__)
        else:
            self.pruned = guard.pruned
            spec, self.problem_keys = base_space(problem, self.pruned, space, self.problem_keys)
        self.base_space = adapt_space(base, spec)
        _log.info(
            "DnnSAT: pruned search space given to %s: %s",
            type(base).__name__,
            json.dumps(self.base_space, default=repr),
        )
        return (dedup if dedup is not None else not passthrough), None

    def _update_batch(self, space: Mapping[str, Any], dedup: bool | None) -> tuple[bool, str | None]:
        """BatchTuner: every value of the one ``choice`` is a parameter set; keep the feasible ones."""
        problem = self.problem
        self.problem_keys = list(problem.space.to_nni())
        self.nni_space = dict(space)
        self.pruned = problem.space
        dedup = dedup if dedup is not None else not problem.always_feasible()
        read = functools.partial(self.split, layout=problem.space)
        self.batch, self.base_space = batch_layout(problem, space, read, dedup)
        empty = None if self.base_space is not None else "none of BatchTuner's parameter sets is feasible"
        return dedup, empty

    def split(self, raw: Any, layout: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
        """NNI parameters -> (problem config in the problem's value types, extra top-level parameters).

        ``layout`` is the space whose NNI form produced ``raw`` (default: the space the base tuner got);
        raises ``SpaceError`` when ``raw`` is outside it.
        """
        if self.batch is not None and not isinstance(raw, Mapping):
            raw = {self.batch.key: raw}  # BatchTuner: a value that is not a dict is that key's value
        if not isinstance(raw, Mapping):
            raise TypeError(f"expected a dict of parameters, got {type(raw).__name__}")
        layout = self.pruned if layout is None else layout
        values = plain(raw)
        config = dict(self.problem.space.validate(config_from_nni(layout, values)))
        return config, {k: v for k, v in values.items() if k not in self.problem_keys}

    def imported(self, trial: Mapping[str, Any]) -> tuple[dict[str, Any], Any] | None:
        """A finished trial given to ``import_data`` -> (its flat config + extras, its parameters in the
        base tuner's space); None when they are outside the experiment's space or infeasible."""
        try:
            config, extras = self.split(trial["parameter"], layout=self.problem.space)
            feasible = self.problem.check(config).feasible
        except Exception as err:
            _log.debug("DnnSAT: imported trial %s not in the space: %s", trial, err)
            return None
        if not feasible:
            return None
        full = {**config, **extras}
        return full, (trial["parameter"] if self.batch is not None else self.to_base(full))

    def to_experiment(self, full: Mapping[str, Any]) -> Any:
        """A flat config (+ extras) -> parameters in the structure of the experiment's search space
        (BatchTuner: the parameter set as written in the search space)."""
        if self.batch is not None:
            return self.batch.written[config_key(full)]
        space = self.problem.space
        extras = {k: v for k, v in full.items() if k not in space}
        nested = config_to_nni(space, {k: v for k, v in full.items() if k in space})
        assert self.nni_space is not None
        both = {**extras, **nested}
        out = {k: both[k] for k in self.nni_space if k in both}
        out.update({k: v for k, v in extras.items() if k not in out})  # e.g. PBT's checkpoint directories
        return plain(out)

    def to_base(self, full: Mapping[str, Any]) -> dict[str, Any]:
        """A flat config (+ extras) -> parameters in the structure of the base tuner's (pruned) space."""
        names = self.problem.space.names
        nested = config_to_nni(self.pruned, {k: v for k, v in full.items() if k in names})
        nested.update({k: v for k, v in full.items() if k not in names})
        return plain(nested)  # type: ignore[no-any-return]


def _empty_reason(problem: Problem) -> str:
    try:
        core = list(problem.unsat_core())
    except Exception:  # the reason is a courtesy; never fail on it
        core = []
    reason = "the feasible space is empty: no configuration satisfies the constraints"
    return reason + (f" {core}" if core else "")
