"""Optuna distributions of a dnnsat Space and a one-call ``suggest`` for objectives."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._sampler import DnnSATSampler

if TYPE_CHECKING:
    import optuna
    from optuna.distributions import BaseDistribution

    from dnnsat import Problem, Space
    from dnnsat.space import Param

__all__ = ["distribution", "distributions", "suggest"]


def _as_space(space_or_problem: Space | Problem) -> Space:
    from dnnsat import Space

    if isinstance(space_or_problem, Space):
        return space_or_problem
    return space_or_problem.space


def distribution(param: Param) -> BaseDistribution:
    """The Optuna distribution of one parameter (same domain; conditions are not representable)."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    from dnnsat.space import Categorical, Float, Int

    if isinstance(param, Int):
        return IntDistribution(int(param.low), int(param.high), log=param.log, step=int(param.step))
    if isinstance(param, Float):
        step = None if param.step is None else float(param.step)
        return FloatDistribution(float(param.low), float(param.high), log=param.log, step=step)
    if isinstance(param, Categorical):
        return CategoricalDistribution(list(param.choices))
    raise TypeError(f"no Optuna distribution for {type(param).__name__}")


def distributions(space_or_problem: Space | Problem) -> dict[str, BaseDistribution]:
    """``{name: distribution}`` for every parameter (e.g. for ``study.ask(fixed_distributions=...)``)."""
    space = _as_space(space_or_problem)
    return {name: distribution(space[name]) for name in space.names}


def suggest(trial: optuna.trial.BaseTrial, space_or_problem: Space | Problem) -> dict[str, Any]:
    """Suggest every active parameter of the space; returns the configuration (inactive ones omitted).

    Parents are suggested before their conditional children (``space.conditional_order``); each
    parameter uses the distribution of :func:`distribution`, so categorical choices never change
    between trials. When the study's sampler is a ``DnnSATSampler(verify=...)``, the configuration is
    checked against the real module before it is returned (``DnnSATSampler.verify``).
    """
    space = _as_space(space_or_problem)
    config: dict[str, Any] = {}
    for name in space.conditional_order:
        if not space.is_active(name, config):
            continue
        dist = distribution(space[name])
        config[name] = _suggest_public(trial, name, dist)
    sampler = getattr(getattr(trial, "study", None), "sampler", None)
    if isinstance(sampler, DnnSATSampler):
        sampler.verify(trial, config)
    return config


def _suggest_public(trial: optuna.trial.BaseTrial, name: str, dist: BaseDistribution) -> Any:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    if isinstance(dist, IntDistribution):
        return trial.suggest_int(name, dist.low, dist.high, step=dist.step, log=dist.log)
    if isinstance(dist, FloatDistribution):
        return trial.suggest_float(name, dist.low, dist.high, step=dist.step, log=dist.log)
    if isinstance(dist, CategoricalDistribution):
        return trial.suggest_categorical(name, dist.choices)
    raise TypeError(f"unsupported distribution {dist!r}")
