"""The scalar evaluator, :func:`compile_scalar`: point forms (:mod:`._point_forms`) then code generation
(:mod:`._scalar_code`)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ._nodes import Expr
from ._point_forms import peaks as find_peaks
from ._point_forms import point_conditions, split_names
from ._scalar_code import scalar_function


def compile_scalar(
    roots: Sequence[Expr], point_forms: bool = True, box: Mapping[str, tuple[Any, Any]] | None = None
) -> Callable[[Mapping[str, Any]], tuple[Any, ...]]:
    """A function ``env -> tuple of values`` (one per root) over one assignment of Python numbers.

    Integer arithmetic is exact (Python ints); categorical labels must already be encoded. Nodes with
    a single use are inlined into their user (so a :func:`where` evaluates only the branch it takes),
    trees of :func:`minimum`/:func:`maximum` become one ``min``/``max`` call, and every other node is
    computed once into a local.

    ``point_forms`` (the same values, bit for bit, in less work; interval bounds are not affected):
    conditions on one expression become at most two intervals of it, integer ``x - x`` and ``x == x``
    fold (integer-sort values are integers), a large integer maximum of sums (a memory peak) is one
    numpy sweep (``dnnsat.expr._point_forms.Peak``), a local read only under ``where(c, ...)``'s taken
    branch is computed under ``if c:``, and ``where(c, a, b)`` whose ``b`` is read by nothing after it becomes
    ``if c: b = a`` (the latency model's chains ``where(gate, t + k, t)``).

    ``box`` (with point forms; ``{name: (lo, hi)}`` of every variable, and the function is then only
    called with values inside it, Python ints for integer variables, as ``Problem`` does): conditions
    constant over the box are folded, integer terms and divisions by constants take exact cheaper
    forms (``k*x - x -> (k-1)*x``, ``(2*x) / c -> x / (c/2)``, ...; see
    ``dnnsat.expr._point_forms.point_conditions``), and a few structural choices (labelled categoricals)
    each get a variant compiled with the choice fixed (:func:`split`).
    """
    if point_forms and box and (names := split_names(roots, box)):
        return split(roots, box, names)
    if point_forms:
        roots = point_conditions(roots, box)
    peaks = find_peaks(roots) if point_forms else {}
    return scalar_function(roots, peaks, point_forms)


def split(
    roots: Sequence[Expr], box: Mapping[str, tuple[Any, Any]], names: Sequence[str]
) -> Callable[[Mapping[str, Any]], tuple[Any, ...]]:
    """``compile_scalar(roots, box=box)`` as one variant per choice of the categoricals ``names``
    (encoded as their index), each compiled with that choice fixed (its conditions folded)."""
    variants: dict[Any, Callable[[Mapping[str, Any]], tuple[Any, ...]]] = {}
    for combo in itertools.product(*(range(int(box[n][0]), int(box[n][1]) + 1) for n in names)):
        fixed = {**box, **{n: (v, v) for n, v in zip(names, combo)}}
        variants[combo if len(names) > 1 else combo[0]] = compile_scalar(roots, box=fixed)
    if len(names) == 1:
        (name,) = names
        return lambda env: variants[env[name]](env)
    return lambda env: variants[tuple(env[n] for n in names)](env)
