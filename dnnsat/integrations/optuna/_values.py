"""The values an Optuna distribution holds, in dnnsat's terms: ``within`` (for ``Guard``) and the
Python type of a value the distribution returns."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dnnsat.guard import Within, same_choice

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution

__all__ = ["as_distribution_value", "within"]


def within(dist: BaseDistribution) -> Within:
    """The values an Optuna distribution holds, for :meth:`dnnsat.Guard.decide` (no values: an empty
    range)."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    if isinstance(dist, CategoricalDistribution):
        return Within(choices=tuple(dist.choices))
    if isinstance(dist, IntDistribution):
        return Within(dist.low, dist.high, dist.step, log=dist.log, integer=True)
    if isinstance(dist, FloatDistribution):
        return Within(dist.low, dist.high, dist.step, log=dist.log)
    return Within()


def as_distribution_value(dist: BaseDistribution, value: Any) -> Any:
    """The (problem-domain) value in the Python type the distribution returns (int, float or the choice)."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    if isinstance(dist, CategoricalDistribution):
        return next((c for c in dist.choices if same_choice(c, value)), value)
    if isinstance(dist, IntDistribution):
        return int(value)
    if isinstance(dist, FloatDistribution):
        return float(value)
    return value
