"""A model's costs on a Problem: ``Problem(space, model=, budget=)`` builds the symbolic network over the
space and adds its costs, validity rules and the budget's limits (:func:`attach`); the cost models
themselves live in :mod:`dnnsat.cost`."""

from __future__ import annotations

import logging
import warnings
from typing import Any

from ..cost import Budget, ReservedMemory, build_network, cost_expressions
from ..cost._attach import _last_batch_checks
from ..expr import interval
from ..graph import Network
from ._results import OpaqueConstraintWarning

__all__ = ["attach"]

log = logging.getLogger("dnnsat.cost")  # the logger attach() has always used


def _box(space: Any) -> dict[str, tuple[Any, Any]]:
    return {name: space[name].bounds() for name in space}


def _values(space: Any) -> dict[str, Any]:
    """Encoded values of the finite parameters (``{name: array}``)."""
    return {name: space[name].encoded() for name in space if space[name].is_finite}


def attach(problem: Any, model: Any, budget: Budget | None) -> Network | None:
    """Build ``model`` over ``problem.space``, add its costs, validity rules and the budget's limits.

    Validity rules are named ``"<op>#<position>: <rule>"``; budget limits are named after the cost
    (``"params"``, ``"flops"``, ...). A rule that fails for every configuration of an always-active op,
    and a ``repeat`` body that changes the shape wherever it runs, raise
    :class:`~dnnsat.graph.GraphError` here, naming the op (or repeat block), its position and the rule.
    """
    budget = budget if budget is not None else Budget()
    if not isinstance(budget, Budget):
        raise TypeError(f"budget must be a dnnsat Budget, got {type(budget).__name__}")
    if model is None:
        if budget.limits():
            raise ValueError("a Budget needs a model (Problem(space, model=build, budget=...))")
        return None
    space = problem.space
    net = build_network(model, space)
    train = budget.train
    box = _box(space)
    net.check_always_false(box, train=train, values=_values(space))
    problem.network = net
    exprs = cost_expressions(net, budget)
    for name, e in exprs.items():
        problem.add_cost(name, e)
    rules = net.checks(train) + _last_batch_checks(net, budget)  # (the latter re-reads net.checks)
    checks = [(name, e) for name, e in rules if not (e.is_const and e.value)]
    if checks:
        bounds = interval([e for _, e in checks], box)
        kept = [(name, e) for name, e in checks if not bounds[id(e)][0]]  # drop rules true everywhere
        log.debug(
            "attach: %d validity rules, %d provably true everywhere", len(checks), len(checks) - len(kept)
        )
        for name, e in kept:
            problem.require(e, name=name)
    for name, limit in budget.limits().items():
        problem.require(exprs[name] <= limit, name=name)
    if budget.gpu_utilization is not None:  # a lower limit
        problem.require(exprs["gpu_utilization"] >= budget.gpu_utilization, name="gpu_utilization")
    _require_reserved(problem, net, budget)
    return net


def _require_reserved(problem: Any, net: Network, budget: Budget) -> None:
    """On a GPU with a memory limit: the per-configuration check of the simulated reserved peak plus the
    footprint (constraint ``"memory_reserved"``, :class:`~dnnsat.cost.ReservedMemory`, also
    ``problem.gpu_memory``), next to the symbolic ``memory`` lower bound that prunes ranges. Not with
    ``Budget(simulate=False)``, for
    activation checkpointing or gradient accumulation (no allocation sequence yet: the symbolic bound
    alone decides), nor when the sequence reads a continuous parameter (predicates cannot)."""
    device = budget.device_profile
    if budget.memory is None or device is None or device.kind != "gpu" or not budget.simulate:
        return
    if budget.train and (budget.checkpoint or budget.accumulation_steps > 1):
        log.info("attach: no allocator simulation with checkpoint/accumulation_steps: symbolic memory only")
        return
    checker = ReservedMemory(net, budget, problem.space)
    continuous = [n for n in checker.uses if not problem.space[n].is_finite]
    if continuous:
        log.warning(
            "attach: the allocation sequence reads the continuous parameter(s) %s: the GPU memory budget "
            "is checked on the symbolic lower bound only (give them a step to simulate the allocator)",
            continuous,
        )
        return
    with warnings.catch_warnings():  # by design: the simulation is checked per configuration
        warnings.simplefilter("ignore", OpaqueConstraintWarning)
        problem.require(checker, name="memory_reserved", uses=checker.uses)
    problem.gpu_memory = checker
