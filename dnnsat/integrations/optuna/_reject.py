"""``reject_infeasible``: an objective decorator for trials whose parameters are fixed in advance."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import optuna

    from dnnsat import Problem

__all__ = ["reject_infeasible", "infeasibility"]

F = TypeVar("F", bound=Callable[..., Any])


def infeasibility(problem: Problem, config: dict[str, Any]) -> str | None:
    """Why a (partial) config of problem parameters cannot be completed feasibly, or None if it can."""
    space = problem.space
    order = list(space.conditional_order)
    missing = [k for k in order if k not in config and space.is_active(k, config)]
    if not missing:
        verdict = problem.check(config)
        if verdict.feasible:
            return None
        names = [getattr(v, "name", str(v)) for v in verdict.violations]
        return f"{config} violates {', '.join(names) or 'the constraints'}"
    if problem.is_extendable(config):  # exact, continuous parameters included
        return None
    return f"{config} cannot be completed to a feasible configuration"


def reject_infeasible(problem: Problem, *, record_constraints: bool = True) -> Callable[[F], F]:
    """Decorate an objective ``f(trial, ...)`` so infeasible fixed parameters never reach its body.

    Before the body runs, the parameters already fixed in the trial (``study.enqueue_trial``, an
    ``ask(fixed_distributions)``/``suggest`` made before the call) are checked against the problem. If
    they cannot be completed to a feasible configuration, the remaining problem parameters are
    suggested (so the trial holds a complete configuration), its constraint values are recorded with
    ``trial.set_constraint`` and ``optuna.TrialPruned`` is raised; the reason is stored in the user
    attribute ``dnnsat:rejected``.
    """

    def decorate(objective: F) -> F:
        @functools.wraps(objective)
        def wrapper(trial: optuna.trial.BaseTrial, *args: Any, **kwargs: Any) -> Any:
            _reject_if_infeasible(problem, trial, record_constraints)
            return objective(trial, *args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


def _known_params(problem: Problem, trial: optuna.trial.BaseTrial) -> dict[str, Any]:
    space = problem.space
    names = set(space.names)
    raw: dict[str, Any] = {}
    raw.update(_fixed_params(trial))
    raw.update(trial.params)
    out: dict[str, Any] = {}
    for k, v in raw.items():
        if k in names:
            param = space[k]
            try:
                out[k] = param.decode(param.encode(v)) if param.is_finite else float(param.encode(v))
            except Exception:
                out[k] = v  # outside the domain: the check below reports it
    return out


def _fixed_params(trial: optuna.trial.BaseTrial) -> dict[str, Any]:
    """Parameters fixed before the trial started (``enqueue_trial``): the ``fixed_params`` system attr."""
    storage = getattr(trial, "storage", None)
    trial_id = getattr(trial, "_trial_id", None)
    if storage is None or trial_id is None:  # FixedTrial / FrozenTrial: nothing is fixed in advance
        return {}
    return dict(storage.get_trial_system_attrs(trial_id).get("fixed_params") or {})


def _reject_if_infeasible(problem: Problem, trial: optuna.trial.BaseTrial, record: bool) -> None:
    import optuna

    from ._suggest import suggest

    config = _known_params(problem, trial)
    try:
        reason = infeasibility(problem, config)
    except Exception as err:  # a value outside the domain
        reason = f"{config} is outside the search space: {err}"
    if reason is None:
        return
    if record:
        try:
            full = {**config, **suggest(trial, problem.space)}
            existing = trial.constraints if hasattr(trial, "constraints") else {}
            for key, value in problem.constraint_values(full).items():
                if key not in existing:
                    trial.set_constraint(key, float(value))
        except Exception:
            pass  # the configuration is outside the domain: nothing exact to record
    trial.set_user_attr("dnnsat:rejected", reason)
    raise optuna.TrialPruned(f"dnnsat: infeasible configuration: {reason}")
