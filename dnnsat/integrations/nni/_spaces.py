"""The experiment's NNI search space against the problem's: checking that it carries the problem's
domains, and the pruned space the base tuner gets, written in the experiment's own ``_type``s."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from dnnsat import Problem, Space

__all__ = ["BatchLayout", "base_space", "batch_layout", "check_space", "config_key", "plain", "same_domain"]

_log = logging.getLogger("dnnsat.integrations.nni")


def plain(x: Any) -> Any:
    """Numpy scalars (Evolution and GP return them) -> Python scalars, recursively."""
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, Mapping):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [plain(v) for v in x]
    return x


def _describe(param: Any) -> str:
    if param.is_finite:
        vals = list(param.values())
        shown = vals if len(vals) <= 8 else [*vals[:3], "...", *vals[-2:]]
        return f"{len(vals)} values {shown}"
    return f"Float({param.low}, {param.high}, log={param.log})"


def same_domain(a: Any, b: Any) -> bool:
    if a.is_finite != b.is_finite:
        return False
    if a.is_finite:
        va, vb = list(a.values()), list(b.values())
        return len(va) == len(vb) and all(
            x == y
            if isinstance(x, str | bool) or isinstance(y, str | bool) or x is None or y is None
            else math.isclose(float(x), float(y), rel_tol=1e-9, abs_tol=1e-12)
            for x, y in zip(va, vb)
        )
    return (
        math.isclose(a.low, b.low, rel_tol=1e-9)
        and math.isclose(a.high, b.high, rel_tol=1e-9)
        and bool(a.log) == bool(b.log)
    )


def check_space(problem: Problem, space: Mapping[str, Any]) -> list[str]:
    """The top-level keys of ``space`` that belong to the problem; raises ``ValueError`` naming the
    parameter when ``space`` does not carry the problem's domains."""
    expected = problem.space.to_nni()
    problem_keys = [k for k in space if k in expected]
    missing = [k for k in expected if k not in space]
    if missing:
        raise ValueError(
            f"NNI search space lacks problem parameter(s) {missing}; the problem's space is "
            f"{json.dumps(expected)}"
        )
    # both sides read by the same NNI reader, so names agree also where the problem's own names differ
    # from NNI's (a child active under several values of its parent is one key in several branches)
    try:
        got = Space.from_nni({k: space[k] for k in problem_keys})
    except Exception as err:
        raise ValueError(f"NNI search space cannot be read for the problem's parameters: {err}") from err
    read = Space.from_nni(expected)
    for name in read.names:
        want = problem.space[name] if name in problem.space else read[name]
        if name not in got.names:
            raise ValueError(f"NNI search space: problem parameter {name!r} is missing")
        if not same_domain(got[name], want):
            raise ValueError(
                f"NNI search space: parameter {name!r} has {_describe(got[name])}, "
                f"but the problem's domain has {_describe(want)}"
            )
        if (got[name].condition or None) != (read[name].condition or None):
            raise ValueError(
                f"NNI search space: parameter {name!r} is active under {got[name].condition}, "
                f"but in the problem under {read[name].condition}"
            )
    for name in got.names:
        if name not in read.names:
            raise ValueError(f"NNI search space: parameter {name!r} is not in the problem's space")
    extras = [k for k in space if k not in expected]
    if extras:
        _log.info("NNI parameters %s are not in the problem; passed through unchecked", extras)
    return problem_keys


def base_space(
    problem: Problem, pruned: Space, space: Mapping[str, Any], problem_keys: list[str]
) -> tuple[dict[str, Any], list[str]]:
    """The experiment's space with the problem's entries replaced by their pruned form, each written in
    the experiment's own ``_type`` where that expresses the pruned domain exactly (a narrowed
    ``qloguniform`` stays log-scaled for the base tuner), else in dnnsat's NNI form; and the top-level
    keys that belong to the problem."""
    nni_pruned = pruned.to_nni()
    problem_keys = problem_keys + [k for k in nni_pruned if k not in problem_keys]
    out: dict[str, Any] = {}
    for k in space:
        if k in problem_keys:
            if k in nni_pruned:
                out[k] = _in_own_form(problem, pruned, k, space[k], nni_pruned[k])
        else:
            out[k] = space[k]
    for k in nni_pruned:  # a pruned space may restructure conditional parameters
        out.setdefault(k, nni_pruned[k])
    return out, problem_keys


def _in_own_form(problem: Problem, pruned: Space, name: str, spec: Any, pruned_spec: Any) -> Any:
    """``spec`` narrowed to the pruned domain of ``name`` in its own ``_type``, or ``pruned_spec``."""
    t, v = spec.get("_type"), spec.get("_value")
    if name not in pruned or not isinstance(v, list) or any(isinstance(c, Mapping) for c in v):
        return pruned_spec  # nested choices: the pruned space's own structure
    domain = pruned[name]
    if same_domain(domain, problem.space[name]):
        return spec
    values = list(domain.values()) if domain.is_finite else []
    if t == "choice":
        new: list[Any] = [c for c in v if any(type(c) is type(x) and c == x for x in values)]
    elif t in ("uniform", "loguniform", "randint", "quniform", "qloguniform"):
        lo, hi = (min(values), max(values)) if domain.is_finite else (domain.low, domain.high)  # type: ignore[attr-defined]
        new = [lo, hi + 1] if t == "randint" else [lo, hi, *v[2:]]
    else:
        return pruned_spec
    candidate = {"_type": t, "_value": plain(new)}
    try:
        same = same_domain(Space.from_nni({name: candidate})[name], domain)
    except Exception:  # e.g. a narrowed range NNI cannot state
        same = False
    return candidate if same else pruned_spec


def config_key(config: Mapping[str, Any]) -> str:
    """A hashable key of a configuration (with extras), equal for equal values of any numeric type."""
    return json.dumps(plain(dict(config)), sort_keys=True, default=repr)


@dataclass
class BatchLayout:
    """BatchTuner's layout: one ``choice`` key whose values are whole parameter sets. NNI hands the chosen
    value to the trial as it is; a value that is not a dict is the value of that key (``{key: value}``)."""

    key: str
    written: dict[str, Any]  # config key -> the value as written in the search space


def batch_layout(
    problem: Problem,
    space: Mapping[str, Any],
    read: Callable[[Any], tuple[dict[str, Any], dict[str, Any]]],
    dedup: bool,
) -> tuple[BatchLayout, dict[str, Any] | None]:
    """BatchTuner's layout and the space it gets: the feasible parameter sets (None: none is).

    ``read`` maps a parameter set to (problem config, extra parameters); with ``dedup`` a set that
    repeats an earlier one is dropped.
    """
    spec = next(iter(space.values())) if len(space) == 1 else None
    if (
        not isinstance(spec, Mapping)
        or spec.get("_type") != "choice"
        or not isinstance(spec.get("_value"), list)
    ):
        raise ValueError(
            "BatchTuner's search space is one 'choice' key whose values are parameter sets, e.g. "
            "{'combined': {'_type': 'choice', '_value': [{'lr': 0.1, 'batch_size': 32}, ...]}}; "
            f"got {json.dumps(dict(space), default=repr)[:300]}"
        )
    key = next(iter(space))
    layout = BatchLayout(key, {})
    kept: list[Any] = []
    dropped: list[int] = []
    for i, written in enumerate(spec["_value"]):
        try:
            config, extras = read(written if isinstance(written, Mapping) else {key: written})
        except Exception as err:
            raise ValueError(
                f"BatchTuner: parameter set {i} of {key!r} ({written!r}) does not fit the problem's "
                f"space: {err}"
            ) from None
        k = config_key({**config, **extras})
        if dedup and k in layout.written:
            continue
        if problem.check(config).feasible:
            layout.written[k] = written
            kept.append(written)
        else:
            dropped.append(i)
    if dropped:
        _log.warning(
            "DnnSAT: BatchTuner: dropped %d of %d parameter sets that violate the constraints: %s",
            len(dropped),
            len(spec["_value"]),
            dropped,
        )
    return layout, ({key: {**spec, "_value": kept}} if kept else None)
