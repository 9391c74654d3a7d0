"""The two problems the Optuna sampler suite runs under (built in every process, spawned ones too).

Optuna's sampler tests name their parameters ``x``, ``y``, ``z`` (most tests) and ``a`` ... ``g``
(the reproducibility tests); other names pass through the wrapper untouched. Both problems give
those names domains that hold every value the tests suggest for them, so a difference from the bare
sampler can only come from a constraint:

- ``always``: one constraint that holds on the whole space (``problem.always_feasible()`` is True):
  the wrapper must behave exactly like the bare sampler.
- ``binding``: constraints that cut into the ranges the tests use without emptying them: a gap in
  ``x`` (``0.18 < x < 1`` is infeasible: Optuna's ``suggest_float("x", 0.1, 0.2)`` hits it), couplings
  ``y - x <= 5`` and ``x + z <= 1.5`` (two-parameter and relative samples), a three-way sum over
  continuous ``a, b, c``, and finite couplings (an Int with a numeric Categorical, two Ints).
"""

from __future__ import annotations

import dnnsat as ds

__all__ = ["PROBLEMS", "build"]

PROBLEMS = ("always", "binding")


def _space(kind: str) -> ds.Space:
    # x, y, z: every range the tests suggest lies in [-100, 100] (floats, ints, logs, steps);
    # a ... g: the reproducibility tests' 1 ... 9 (float, log float, stepped float, ints, categorical).
    wide, nine = ds.Float(-100.0, 100.0), ds.Float(1.0, 9.0)
    if kind == "binding":  # one constrained continuous Float (x); the other floats on grids
        params = {"x": wide, "y": ds.Float(-100.0, 100.0, step=0.5), "z": ds.Float(-100.0, 100.0, step=0.5)}
        params |= {n: ds.Float(1.0, 9.0, step=0.25) for n in "abc"}
    else:
        params = {**{n: wide for n in "xyz"}, **{n: nine for n in "abc"}}
    return ds.Space({**params, **{n: ds.Int(1, 9) for n in "def"}, "g": ds.Categorical(list(range(1, 10)))})


def build(kind: str) -> ds.Problem:
    """The ``always`` or the ``binding`` problem (see the module docstring)."""
    if kind not in PROBLEMS:
        raise ValueError(f"problem must be one of {PROBLEMS}, got {kind!r}")
    space = _space(kind)
    v = space.vars
    p = ds.Problem(space)
    if kind == "always":
        p.require(v.x + v.y + v.z + v.a + v.b + v.c <= 327, name="sum")
        p.require(v.d + v.e + v.f + v.g <= 36, name="finite_sum")
        return p
    p.require((v.x <= 0.18) | (v.x >= 1), name="x_gap")
    p.require(v.y * v.g <= 25, name="y_cap")
    p.require(v.z * v.d >= -0.5, name="z_floor")
    p.require(v.a * v.g <= 30, name="a_times_g")
    p.require(v.b * v.d <= 30, name="b_times_d")
    p.require(v.c * v.f <= 40, name="c_times_f")
    p.require(v.d + v.g <= 12, name="d_plus_g")
    p.require(v.e * v.f <= 40, name="e_times_f")
    return p
