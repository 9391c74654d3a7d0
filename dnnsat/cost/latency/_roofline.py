"""The roofline every device kind shares: an op's time is the larger of its compute time (work over the
peak times its class's efficiency) and its memory time (bytes over the cache or DRAM bandwidth), plus
launch overhead; ops are summed one after the other (CPUs, mobile CPUs, accelerators) or pipelined
behind the host's dispatch (GPUs) by :func:`_combine`. See :mod:`dnnsat.cost.latency`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ...expr import Const, Expr, ExprLike, as_expr, maximum, where
from .._devices import DeviceProfile

__all__ = ["CLASS_SCALE", "MATMUL_LIKE", "class_efficiency"]

MATMUL_LIKE = frozenset(
    {"matmul", "attention", "conv", "pointwise", "grouped_conv", "aten_conv", "recurrent"}
)


# default compute efficiency of a class relative to the device's "compute" factor (when the profile has no
# factor of its own for it): assumptions for eager PyTorch kernels that are not GEMM-shaped - pooling
# windows, norms and activations run far below the FP32 peak (no FMA/tensor units, reductions).
CLASS_SCALE = {
    "attention": 0.5,
    "grouped_conv": 0.1,
    "recurrent": 0.3,
    "elementwise": 0.1,
    "norm": 0.1,
    "pool": 0.05,
}


@dataclass(frozen=True)
class _Term:
    """One kernel group: active when ``gate``; ``work`` in FLOPs, ``bytes`` moved, ``launches`` kernels."""

    gate: Expr
    cls: str
    work: Expr
    bytes: Expr
    launches: Expr


def class_efficiency(profile: DeviceProfile, op_class: str) -> float:
    """Compute efficiency of ``op_class``: the profile's own factor, else ``compute`` x ``CLASS_SCALE``."""
    eff = profile.efficiency
    return float(eff.get(op_class, eff["compute"] * CLASS_SCALE.get(op_class, 1.0)))


def _combine(terms: list[_Term], profile: DeviceProfile, dtype: str, p: Mapping[str, ExprLike]) -> Expr:
    """Total seconds of ``terms`` with parameters ``p`` (launch overhead, memory and class efficiencies)."""
    peak = profile.peak(dtype)

    def bandwidth(nbytes: Expr) -> Expr:
        if profile.cache_bytes <= 0:
            return Const(profile.memory_bandwidth)
        return where(nbytes <= profile.cache_bytes, profile.cache_bandwidth, profile.memory_bandwidth)

    launch = as_expr(p["launch_overhead_s"])
    parallel = as_expr(p.get("parallel_overhead_s", 0.0))
    if profile.kind != "gpu":  # CPUs, mobile CPUs, accelerators: one op after the other
        parts = []
        for t in terms:
            compute = t.work / (peak * as_expr(p[t.cls])) if not _zero(t.work) else Const(0.0)
            memory = t.bytes / (bandwidth(t.bytes) * as_expr(p["memory"]))
            op_time = maximum(compute, memory) + launch * t.launches
            if t.cls in MATMUL_LIKE and not _zero(parallel):
                op_time = op_time + parallel
            if t.cls == "reorder":
                op_time = op_time + as_expr(p.get("conv_overhead_s", 0.0))
            parts.append(where(t.gate, op_time, 0.0))
        return _tree_sum(parts)
    issue: Expr = Const(0.0)
    end: Expr = Const(0.0)
    for t in terms:
        compute = t.work / (peak * as_expr(p[t.cls])) if not _zero(t.work) else Const(0.0)
        kernel = maximum(compute, t.bytes / (bandwidth(t.bytes) * as_expr(p["memory"])))
        new_issue = issue + launch * t.launches
        issue = where(t.gate, new_issue, issue)
        end = where(t.gate, maximum(new_issue, end) + kernel, end)
    return maximum(issue, end)


def _tree_sum(parts: list[Expr]) -> Expr:
    """Pairwise sum (depth log n instead of n)."""
    if not parts:
        return Const(0.0)
    while len(parts) > 1:
        parts = [parts[i] + parts[i + 1] if i + 1 < len(parts) else parts[i] for i in range(0, len(parts), 2)]
    return parts[0]


def _zero(e: Expr) -> bool:
    return e.is_const and e.value == 0
