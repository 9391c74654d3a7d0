"""The latency model's entry points: :func:`latency_expressions` (inference latency and training step
time on a device profile) and :func:`latency_model` (the same with the profile's factors as variables,
for :func:`~dnnsat.cost.fit_device`). See :mod:`dnnsat.cost.latency`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...expr import Expr, ExprLike, Var
from ...graph import Network
from .._devices import DeviceProfile, get_device
from ._kinds import _Mapping
from ._roofline import _combine, _zero, class_efficiency
from ._terms import _forward_terms, _train_terms

__all__ = ["DEFAULT_DEVICE", "LatencyModel", "latency_expressions", "latency_model"]

DEFAULT_DEVICE = "cpu"  # profile used when no device is given


def _element_bytes(budget: Any) -> tuple[int, int, str]:
    """(activation bytes, parameter bytes, dtype) per element from a Budget (or float32)."""
    if budget is None:
        return 4, 4, "float32"
    act = getattr(budget, "act_bytes", None) or budget.dtype_bytes
    par = getattr(budget, "param_bytes", None) or budget.dtype_bytes
    return int(act), int(par), str(budget.dtype)


@dataclass
class LatencyModel:
    """The inference latency of a network with the profile's factors as variables (for fitting).

    ``expr`` (seconds) has the network's variables plus ``__launch_overhead_s``, ``__eff_memory`` and
    ``__eff_<class>`` for each op class in ``classes`` (and ``__parallel_overhead_s`` when ``parallel``:
    the profile models the thread-pool cost of GEMM-like ops); :meth:`parameter_env` maps fitted values
    (``{"launch_overhead_s": s, "memory": e, "conv": e, ...}``) to those variables.
    """

    expr: Expr
    classes: tuple[str, ...]
    parallel: bool = False

    @staticmethod
    def parameter_env(values: Mapping[str, Any]) -> dict[str, Any]:
        """Expression variables of fitted ``values`` (numbers, or arrays: one value per evaluated row)."""
        seconds = ("launch_overhead_s", "parallel_overhead_s")
        return {
            ("__" if k in seconds else "__eff_") + k: (v if getattr(v, "ndim", 0) else float(v))
            for k, v in values.items()
        }


def latency_model(net: Network, budget: Any, device: str | DeviceProfile) -> LatencyModel:
    """Inference latency of ``net``, launch overhead and efficiencies as variables (:class:`LatencyModel`)."""
    profile = get_device(device)
    act, par, dtype = _element_bytes(budget)
    terms = _forward_terms(net, act, par, train=False, block=_Mapping.of(profile, dtype))
    classes = tuple(sorted({t.cls for t in terms if not _zero(t.work)}))
    p: dict[str, ExprLike] = {c: Var(f"__eff_{c}", "real") for c in {t.cls for t in terms}}
    p["memory"] = Var("__eff_memory", "real")
    p["launch_overhead_s"] = Var("__launch_overhead_s", "real")
    parallel = profile.parallel_overhead_s > 0
    if parallel:
        p["parallel_overhead_s"] = Var("__parallel_overhead_s", "real")
    p["conv_overhead_s"] = profile.conv_overhead_s
    return LatencyModel(_combine(terms, profile, dtype, p), classes, parallel)


def latency_expressions(
    net: Network, budget: Any = None, device: str | DeviceProfile | None = None
) -> dict[str, Expr]:
    """``{"latency", "train_step_time"}`` in seconds for ``net`` (whole batch as built) on ``device``.

    ``latency``: eval-mode inference forward; ``train_step_time``: forward + backward + optimizer step
    (``budget.optimizer``, SGD when None). ``device``: a catalog name, profile path or
    :class:`DeviceProfile`; ``None`` uses the generic ``"cpu"`` profile. ``budget`` sets the dtype.
    """
    profile = get_device(device if device is not None else DEFAULT_DEVICE)
    act, par, dtype = _element_bytes(budget)
    fwd = _forward_terms(net, act, par, train=False, block=_Mapping.of(profile, dtype))
    train = _train_terms(net, act, par, getattr(budget, "optimizer", None), _Mapping.of(profile, dtype))
    classes = {t.cls for t in fwd + train}
    p: dict[str, ExprLike] = {c: class_efficiency(profile, c) for c in classes}
    p["memory"] = profile.efficiency["memory"]
    p["launch_overhead_s"] = profile.launch_overhead_s
    p["parallel_overhead_s"] = profile.parallel_overhead_s
    p["conv_overhead_s"] = profile.conv_overhead_s
    return {
        "latency": _combine(fwd, profile, dtype, p),
        "train_step_time": _combine(train, profile, dtype, p),
    }
