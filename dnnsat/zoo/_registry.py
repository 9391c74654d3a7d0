"""Registry of ready-made model problems: ``name -> ZooModel`` (a callable factory of Problems)."""

from __future__ import annotations

from typing import Any

from ._entry import REGISTRY, ZooModel, register
from ._models import cnn, gpt, mlp, mobilenetv2, resnet, transformer  # noqa: F401 - populate the registry
from ._nasbench import nasbench201, nats_sss  # noqa: F401 - populate the registry

__all__ = ["ZooModel", "REGISTRY", "register", "get", "problem_from_spec"]


def get(name: str) -> ZooModel:
    """The zoo model called ``name`` (``"zoo:"`` prefix allowed)."""
    key = name.removeprefix("zoo:")
    if key not in REGISTRY:
        raise KeyError(f"unknown zoo model {key!r}; available: {sorted(REGISTRY)}")
    return REGISTRY[key]


def problem_from_spec(spec: str, budget: str | Any = None, **options: Any) -> Any:
    """``problem_from_spec("zoo:gpt", "params=125M,flops=4G")`` -> Problem (CLI: ``zoo:NAME --budget``)."""
    from ..cost import Budget

    if isinstance(budget, str):
        budget = Budget.parse(budget)
    return get(spec)(budget=budget, **options)
