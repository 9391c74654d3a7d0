"""The "synthetic ResNet" reference problem, built from raw expressions (no network graph).

A ResNet-like space of four stages: widths ``w0..w3``, depths ``d0..d3``, batch ``b``, resolution ``r``
and kernel ``k``; stage ``i`` works at resolution ``r // 2**i``. With ``c_0 = w0``, ``c_i = w_{i-1}``::

    flops  = 2·b·r²·3·w0·k² + Σ_i [2·b·s_i²·c_i·w_i·k² + Σ_{j=1..4} where(d_i ≥ j, 4·b·s_i²·w_i²·k², 0)]
    params = 3·w0·k² + Σ_i [c_i·w_i·k² + Σ_{j=1..4} where(d_i ≥ j, 2·w_i²·k², 0)] + 1000·w3

with ``s_i = r // 2**i``. Default limits: ``flops <= 2e12`` and ``params <= 20e6`` (about 5.5 % feasible).
"""

from __future__ import annotations

from ..expr import Expr, sum_, where
from ..problem import Problem
from ..space import Categorical, Int, Space

__all__ = ["synthetic_resnet_problem", "synthetic_resnet_space"]


def synthetic_resnet_space() -> Space:
    """``w0..w3`` in 16..512 step 16, ``d0..d3`` in 1..4, ``b`` in 16..1024 (powers of two),
    ``r`` in 32..224 step 32, ``k`` in {3, 5, 7}: about 3.95e10 configurations."""
    params: dict[str, Int | Categorical] = {f"w{i}": Int(16, 512, step=16) for i in range(4)}
    params.update({f"d{i}": Int(1, 4) for i in range(4)})
    params["b"] = Categorical([16, 32, 64, 128, 256, 512, 1024])
    params["r"] = Int(32, 224, step=32)
    params["k"] = Categorical([3, 5, 7])
    return Space(params)


def synthetic_resnet_costs(space: Space) -> tuple[Expr, Expr]:
    """(forward FLOPs, parameter count) of the synthetic ResNet, as the module docstring defines them."""
    v = space.vars
    b, r, k = v.b, v.r, v.k
    k2 = k * k
    w = [v[f"w{i}"] for i in range(4)]
    d = [v[f"d{i}"] for i in range(4)]
    flops_terms: list[Expr] = [2 * b * r * r * 3 * w[0] * k2]
    params_terms: list[Expr] = [3 * w[0] * k2]
    for i in range(4):
        s = r // (2**i)
        c = w[0] if i == 0 else w[i - 1]
        flops_terms.append(2 * b * s * s * c * w[i] * k2)
        params_terms.append(c * w[i] * k2)
        for j in range(1, 5):
            flops_terms.append(where(d[i] >= j, 4 * b * s * s * w[i] * w[i] * k2, 0))
            params_terms.append(where(d[i] >= j, 2 * w[i] * w[i] * k2, 0))
    params_terms.append(1000 * w[3])
    return sum_(flops_terms), sum_(params_terms)


def synthetic_resnet_problem(flops_limit: float = 2e12, params_limit: float = 20e6) -> Problem:
    """The reference problem: ``flops <= flops_limit`` and ``params <= params_limit`` (about 5.5 %
    of configurations are feasible with the defaults). FLOPs count 2 per multiply-add."""
    space = synthetic_resnet_space()
    flops, params = synthetic_resnet_costs(space)
    p = Problem(space)
    p.add_cost("flops", flops)
    p.add_cost("params", params)
    p.require(flops <= flops_limit, name="flops")
    p.require(params <= params_limit, name="params")
    return p
