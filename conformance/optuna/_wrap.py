"""Every built-in Optuna sampler, wrapped in DnnSATSampler, under its own public name.

``install(kind)`` replaces ``optuna.samplers.RandomSampler`` (and the other built-ins) by a proxy class:
calling it builds the real sampler and returns ``DnnSATSampler(problem, sampler)``. Optuna's tests (and
``optuna.create_study()``, whose default sampler comes from ``optuna.samplers.TPESampler``) therefore run
on the wrapper without a line of theirs changed. Three details keep the tests meaningful:

- Samplers that a sampler builds for itself (QMC, GP and CMA-ES build an independent
  ``optuna.samplers.RandomSampler``) are not wrapped again: a proxy called while another proxy is
  constructing returns the bare sampler.
- ``isinstance(s, optuna.samplers.CmaEsSampler)`` holds for a wrapped CMA-ES (the proxy's metaclass
  checks the base sampler), and the proxy subclasses the real class, so class attributes and static
  methods (``GridSampler._check_value``) stay reachable.
- The wrapper handed to the tests reads attributes it lacks from its base sampler (tests read a
  sampler's private configuration, e.g. ``sampler._rng``); sampling is DnnSATSampler's own.

``constructed`` lists the base samplers wrapped since the last ``constructed.clear()`` (the pytest
plugin attributes each test's outcome to them).
"""

from __future__ import annotations

import abc
import functools
import threading
from typing import Any

import optuna

import dnnsat as ds
from dnnsat.integrations.optuna import DnnSATSampler, _cache

from ._problems import build

__all__ = ["WRAPPED", "DelegatingSampler", "constructed", "install", "original"]

#: The built-in samplers that get wrapped (PartialFixedSampler is itself a wrapper and wraps ours).
WRAPPED = (
    "RandomSampler",
    "TPESampler",
    "CmaEsSampler",
    "NSGAIISampler",
    "NSGAIIISampler",
    "QMCSampler",
    "GPSampler",
    "GridSampler",
    "BruteForceSampler",
)

constructed: list[str] = []
_building = threading.local()
_originals: dict[str, type] = {}


class DelegatingSampler(DnnSATSampler):
    """DnnSATSampler that reads the attributes it lacks from its base sampler (for tests only)."""

    def __getattr__(self, name: str) -> Any:
        base = self.__dict__.get("_base")
        if name.startswith("__") or base is None:
            raise AttributeError(name)
        return getattr(base, name)


class _ProxyMeta(abc.ABCMeta):
    """Metaclass of the proxies: calling one wraps a new real sampler; isinstance sees through it."""

    _original: type
    _kind: str

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if getattr(_building, "active", False):
            return cls._original(*args, **kwargs)
        _building.active = True
        try:
            base = cls._original(*args, **kwargs)
        finally:
            _building.active = False
        constructed.append(cls._original.__name__)
        return DelegatingSampler(_problem(cls._kind), base)

    def __instancecheck__(cls, obj: Any) -> bool:
        if isinstance(obj, DnnSATSampler):
            obj = obj.base_sampler
        return isinstance(obj, cls._original)


@functools.cache
def _problem(kind: str) -> ds.Problem:
    return build(kind)


def original(name: str) -> type:
    """The real Optuna class behind a proxy (the class itself before ``install``)."""
    return _originals.get(name) or getattr(optuna.samplers, name)


def install(kind: str) -> None:
    """Replace the built-in samplers in ``optuna.samplers`` by wrapping proxies for problem ``kind``.

    Also computes each problem's pruned space once per process instead of once per study: it is a
    pure function of the problem, and Optuna's tests create about a thousand studies.
    """
    _problem(kind)  # fail here, not inside a test, if the problem cannot be built
    for name in WRAPPED:
        real = original(name)
        _originals[name] = real
        proxy = _ProxyMeta(name, (real,), {"__module__": real.__module__, "__qualname__": real.__qualname__})
        proxy._original, proxy._kind = real, kind
        setattr(optuna.samplers, name, proxy)
    _cache.compute_pruned_space = functools.cache(_cache.compute_pruned_space)
