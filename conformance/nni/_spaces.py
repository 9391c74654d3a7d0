"""The search spaces and problems of the NNI conformance run.

``SEARCH_SPACES`` plays the part of ``test/ut/sdk/assets/search_space.json`` in NNI's repository (read by
``test/ut/sdk/test_builtin_tuners.py``; the file is not in the NNI wheel, so this is our own set): one
entry per NNI ``_type``, named so that the name starts with the type (NNI's tests select supported,
ignored and failing types by that prefix), plus the edge cases NNI's test names (``*_equal``: a one-value
range; ``quniform_clip*``: bounds that are not multiples of ``q``) and a nested choice.

Every space is run with two problems over its parameters (:func:`make_problem`):

* ``holds``: constraints that hold on the whole space (``problem.always_feasible()`` is True), so the
  wrapped tuner must behave exactly as the bare one;
* ``binds``: constraints that remove part of every parameter's range, so proposals need repair.

The normal family (``normal``, ``qnormal``, ``lognormal``, ``qlognormal``) is unbounded: a dnnsat
``Space`` cannot hold it, so such a key is a pass-through parameter the problem does not know, next to a
small problem parameter ``z`` that carries the constraint.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import dnnsat as ds

SEARCH_SPACES: dict[str, dict[str, Any]] = {
    "choice_str": {"_type": "choice", "_value": ["cat", "dog", "elephant", "cow", "sheep", "panda"]},
    "choice_num": {"_type": "choice", "_value": [10, 20, 30, 40, 50, 60]},
    "choice_mixed": {"_type": "choice", "_value": [0.3, "cat", 1, "dog", 2.5]},
    "choice_nested": {
        "_type": "choice",
        "_value": [
            {"_name": "A", "x": {"_type": "choice", "_value": ["a", "b", "c"]}},
            {"_name": "B", "y": {"_type": "randint", "_value": [0, 8]}},
            {"_name": "C"},
        ],
    },
    "choice_nested_float": {
        "_type": "choice",
        "_value": [
            {"_name": "A", "x": {"_type": "choice", "_value": [1, 2, 3]}},
            {"_name": "B", "y": {"_type": "uniform", "_value": [0, 1]}},
        ],
    },
    "randint": {"_type": "randint", "_value": [-3, 7]},
    "uniform": {"_type": "uniform", "_value": [-1.5, 2.5]},
    "uniform_equal": {"_type": "uniform", "_value": [1.0, 1.0]},
    "quniform": {"_type": "quniform", "_value": [2, 40, 2]},
    "quniform_clip": {"_type": "quniform", "_value": [1, 10, 4]},
    "quniform_clip_2": {"_type": "quniform", "_value": [-1.5, 3.7, 1.0]},
    "loguniform": {"_type": "loguniform", "_value": [1e-4, 1e-1]},
    "loguniform_equal": {"_type": "loguniform", "_value": [0.01, 0.01]},
    "qloguniform": {"_type": "qloguniform", "_value": [1, 1000, 1]},
    "qloguniform_2": {"_type": "qloguniform", "_value": [8, 512, 8]},
    "qloguniform_equal": {"_type": "qloguniform", "_value": [4, 4, 1]},
    "normal": {"_type": "normal", "_value": [0, 1]},
    "qnormal": {"_type": "qnormal", "_value": [10, 3, 2]},
    "lognormal": {"_type": "lognormal", "_value": [0, 1]},
    "qlognormal": {"_type": "qlognormal", "_value": [2, 0.5, 1]},
}

NORMAL_FAMILY = ("normal", "qnormal", "lognormal", "qlognormal")
COMPANION = "z"  # the problem parameter next to a space with only unbounded keys
COMPANION_SPEC = {"_type": "randint", "_value": [0, 5]}
KINDS = ("holds", "binds")

# the single-key spaces whose one parameter has one value: nothing can bind without emptying the space
ONE_VALUE = ("uniform_equal", "loguniform_equal", "qloguniform_equal")


def _is_normal(spec: Mapping[str, Any]) -> bool:
    return spec.get("_type") in NORMAL_FAMILY


def with_companion(search_space: Mapping[str, Any]) -> dict[str, Any]:
    """The space to test: ``search_space`` plus ``z`` when none of its keys can be a problem parameter."""
    space = dict(search_space)
    if all(_is_normal(s) for s in space.values()):
        space[COMPANION] = COMPANION_SPEC
    return space


def _numeric(values: list[Any]) -> bool:
    return all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


def _constraint(space: ds.Space, name: str, kind: str) -> Any | None:
    """One constraint on ``name``: always true (``holds``) or true on about 60 % of its range (``binds``);
    ``None`` for ``binds`` on a one-value parameter. A ``binds`` constraint holds at the parameter's first
    value, the value an inactive (nested-choice) parameter takes inside formulas, so it binds only where
    the parameter is active."""
    p = space[name]
    x = getattr(space.vars, name)
    if p.is_finite:
        values = list(p.values())
        if not _numeric(values):
            first, last = values[0], values[-1]
            return (x == first) | (x != first) if kind == "holds" else x != last
        if kind == "holds":
            return x >= min(values)
        if len(values) == 1:
            return None
        return x <= max(values[0], sorted(values)[(len(values) * 3) // 5])
    assert isinstance(p, ds.Float)
    if kind == "holds":
        return x >= p.low
    if p.low == p.high:
        return None
    cut = (
        math.exp(math.log(p.low) + 0.6 * math.log(p.high / p.low))
        if p.log
        else p.low + 0.6 * (p.high - p.low)
    )
    return x <= cut


def make_problem(search_space: Mapping[str, Any], kind: str) -> ds.Problem | None:
    """The ``holds`` or ``binds`` problem over the bounded keys of ``search_space`` (after
    :func:`with_companion`); ``None`` when ``binds`` has nothing to bind (one-value parameters only)."""
    bounded = {k: s for k, s in search_space.items() if not _is_normal(s)}
    space = ds.Space.from_nni(bounded)
    problem = ds.Problem(space)
    added = 0
    floats = 0
    for name in space.names:
        if not space[name].is_finite:
            if space[name].condition:
                continue  # dnnsat refuses a constrained conditional Float ("give the Float a step")
            floats += 1
            if kind == "binds" and floats > 1:
                continue  # dnnsat: with two violated continuous Floats repair fails (reported): bind one
        c = _constraint(space, name, kind)
        if c is not None:
            problem.require(c, name=f"{kind}_{name}")
            added += 1
    return problem if added else None
