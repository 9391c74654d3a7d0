"""The two problems the Optuna sampler suite runs under (built in every process, spawned ones too).

Optuna's sampler tests name their parameters ``x``, ``y``, ``z`` (most tests) and ``a`` ... ``g``
(reproducibility and brute-force tests); other names pass through the wrapper untouched.

- ``always``: constraints that hold on the whole space (``problem.always_feasible()`` is True), over
  continuous domains that hold every value the tests suggest for these names: the wrapper must behave
  exactly like the bare sampler.
- ``binding``: constraints that cut into the ranges the tests use without emptying most of them: a
  gap ``0.18 < x < 1`` in the continuous ``x`` (Optuna's ``suggest_float("x", 0.1, 0.2)`` hits it),
  caps on ``y`` and ``z`` coupled with the categorical ``g``, and sums and products that bind the
  reproducibility tests' ``a`` ... ``g`` (1 ... 9 each). Its other floats lie on integer grids: the
  engine decides one constrained continuous Float quickly, several of them slowly (reported to the
  core), and a grid also exercises the snapping of continuous proposals onto the problem's domain.
"""

from __future__ import annotations

import dnnsat as ds

__all__ = ["PROBLEMS", "build"]

PROBLEMS = ("always", "binding")


def _space(kind: str) -> ds.Space:
    # Every range the tests suggest for these names lies in [-100, 100] (floats, ints, logs, steps;
    # g: the reproducibility tests' categorical 1 ... 9). The binding problem keeps one continuous
    # Float (x, constrained) and puts the other floats on integer grids. ``always`` leaves out ``a``:
    # test_brute_force suggests NaN for it, which no Float domain holds.
    step = 1.0 if kind == "binding" else None
    floats = {n: ds.Float(-100.0, 100.0, step=None if n == "x" else step) for n in "xyzabc"}
    if kind == "always":
        del floats["a"]
    ints = {n: ds.Int(-100, 100) for n in "def"}
    return ds.Space({**floats, **ints, "g": ds.Categorical(list(range(1, 10)))})


def build(kind: str) -> ds.Problem:
    """The ``always`` or the ``binding`` problem (see the module docstring)."""
    if kind not in PROBLEMS:
        raise ValueError(f"problem must be one of {PROBLEMS}, got {kind!r}")
    space = _space(kind)
    v = space.vars
    p = ds.Problem(space)
    if kind == "always":
        p.require(v.x + v.y + v.z + v.b + v.c <= 501, name="sum")
        p.require(v.d + v.e + v.f + v.g <= 310, name="finite_sum")
        return p
    p.require((v.x <= 0.18) | (v.x >= 1), name="x_gap")  # the one constrained continuous Float
    p.require(v.y * v.g <= 25, name="y_cap")  # y <= 25 (with g = 1), g <= 25 / y
    p.require(v.z + 0.5 * v.g >= 0, name="z_floor")  # z >= -0.5 (with g = 1)
    p.require(v.a * v.g <= 30, name="a_times_g")
    p.require(v.b + v.c <= 12, name="b_plus_c")
    p.require(v.d + v.e + v.f <= 15, name="def_sum")
    p.require(v.d + v.g <= 12, name="d_plus_g")
    return p
