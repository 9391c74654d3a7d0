"""The vectorized evaluator, :func:`compile_vectorized`: numpy code over columns of assignments."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

import numpy as np

from ._gated_peaks import gated_peaks
from ._intervals import _dtype_plan, _is_float
from ._nodes import _COMPARE, _INFIX, Expr, topological

# ------------------------------------------------------------------------------------------------
# Vectorized evaluator


def _codegen(
    roots: Sequence[Expr],
    emit: Callable[[Expr, list[str], str], list[str]],
    header: str,
    computed: AbstractSet[int] = frozenset(),
) -> str:
    """One line per node; each node's array is deleted after its last reader (a batch of points then
    holds few arrays at once: memory traffic dominated when every one lived to the end). Nodes in
    ``computed`` are emitted without their arguments (``emit`` computes them some other way)."""

    def inputs(node: Expr) -> Sequence[Expr]:
        return () if id(node) in computed else node.args

    order = topological(roots, inputs)
    last_use = {id(a): i for i, node in enumerate(order) for a in inputs(node)}
    keep = {id(r) for r in roots}
    names: dict[int, str] = {}
    lines = [header]
    for i, node in enumerate(order):
        out = f"t{i}"
        names[id(node)] = out
        lines.extend("    " + line for line in emit(node, [names[id(a)] for a in inputs(node)], out))
        dead = sorted({names[id(a)] for a in inputs(node) if last_use[id(a)] == i and id(a) not in keep})
        if dead:
            lines.append(f"    del {', '.join(dead)}")
    lines.append(f"    return ({', '.join(names[id(r)] for r in roots)},)")
    return "\n".join(lines)


def _emit_vector(wide: set[int]) -> Callable[[Expr, list[str], str], list[str]]:
    def emit(node: Expr, a: list[str], out: str) -> list[str]:
        op = node.op
        if op == "var":
            cast = "np.float64" if id(node) in wide or node.sort == "real" else "np.int64"
            if node.sort == "bool":
                cast = "np.bool_"
            return [f"{out} = np.asarray(env[{node.name!r}], dtype={cast})"]
        if op == "const":
            v = float(node.payload) if id(node) in wide else node.payload
            return [f"{out} = {v!r}"]
        if op in ("add", "sub", "mul"):
            if id(node) in wide:
                return [f"{out} = np.asarray({a[0]}, dtype=np.float64) {_INFIX[op]} {a[1]}"]
            return [f"{out} = {a[0]} {_INFIX[op]} {a[1]}"]
        if op in _COMPARE:
            return [f"{out} = {a[0]} {_INFIX[op]} {a[1]}"]
        if op == "neg":
            return [f"{out} = -{a[0]}"]
        if op == "floordiv":
            d = node.args[1]
            if (
                d.op == "const"
                and d.payload > 0
                and d.payload & (d.payload - 1) == 0
                and id(node) not in wide
            ):
                return [f"{out} = {a[0]} >> {d.payload.bit_length() - 1}"]  # floor division by 2**k
            return [f"{out} = _vfloordiv({a[0]}, {a[1]})"]
        if op == "ceildiv":
            return [f"{out} = -_vfloordiv(-{a[0]}, {a[1]})"]
        if op == "truediv":
            return [f"{out} = _vtruediv({a[0]}, {a[1]})"]
        if op == "min":
            return [f"{out} = np.minimum({a[0]}, {a[1]})"]
        if op == "max":
            return [f"{out} = np.maximum({a[0]}, {a[1]})"]
        if op == "and":
            return [f"{out} = np.logical_and({a[0]}, {a[1]})"]
        if op == "or":
            return [f"{out} = np.logical_or({a[0]}, {a[1]})"]
        if op == "not":
            return [f"{out} = np.logical_not({a[0]})"]
        if op == "where":
            if node.args[2].op == "const" and node.args[2].payload == 0 and node.sort != "bool":
                return [f"{out} = {a[1]} * {a[0]}"]  # where(c, x, 0): a multiply is twice as fast
            return [f"{out} = np.where({a[0]}, {a[1]}, {a[2]})"]
        raise AssertionError(op)

    return emit


def _vfloordiv(a: Any, b: Any) -> Any:
    if np.ndim(b) == 0:
        if b == 0:
            return np.zeros_like(np.asarray(a)) if np.ndim(a) else 0
        return np.floor(a / b) if isinstance(a, float | np.floating) or _is_float(a) else a // b
    with np.errstate(divide="ignore", invalid="ignore"):
        safe = np.where(b == 0, 1, b)
        q = np.floor(np.divide(a, safe)) if _is_float(a) or _is_float(b) else np.floor_divide(a, safe)
        return np.where(b == 0, 0, q)


def _vtruediv(a: Any, b: Any) -> Any:
    with np.errstate(divide="ignore", invalid="ignore"):
        if np.ndim(b) == 0:
            return a / b if b != 0 else np.zeros_like(np.asarray(a, dtype=np.float64))
        safe = np.where(b == 0, 1.0, b)
        return np.where(b == 0, 0.0, np.true_divide(a, safe))


def compile_vectorized(
    roots: Sequence[Expr], box: Mapping[str, tuple[Any, Any]] | None = None
) -> Callable[[Mapping[str, Any]], tuple[Any, ...]]:
    """A function ``columns -> tuple of arrays`` evaluating ``roots`` on many assignments at once.

    ``columns`` maps variable names to equally long arrays (or scalars, broadcast). Integer nodes are
    evaluated in ``int64``; when ``box`` (variable bounds) shows a node may exceed ``2**62`` in
    magnitude, it and its integer ancestors use ``float64`` instead.
    """
    return _compile_vectorized(roots, box, gated=True)


def _compile_vectorized(
    roots: Sequence[Expr], box: Mapping[str, tuple[Any, Any]] | None, gated: bool
) -> Callable[[Mapping[str, Any]], tuple[Any, ...]]:
    """:func:`compile_vectorized`; ``gated``: memory peaks whose gates read few variables are
    evaluated as matrix products (:mod:`dnnsat.expr._gated_peaks`; needs ``box``)."""
    wide = _dtype_plan(roots, box)
    factored: dict[int, Any] = {}
    if gated and box is not None:
        factored = gated_peaks(
            roots,
            box,
            wide,
            lambda sizes: _compile_vectorized(sizes, box, gated=False),
            lambda node: _compile_vectorized([node], box, gated=False),
        )
    emit = _emit_vector(wide)

    def emit_or_call(node: Expr, a: list[str], out: str) -> list[str]:
        return [f"{out} = _peaks[{id(node)}](env)"] if id(node) in factored else emit(node, a, out)

    src = _codegen(roots, emit_or_call, "def _f(env):", computed=factored.keys())
    ns: dict[str, Any] = {"np": np, "_vfloordiv": _vfloordiv, "_vtruediv": _vtruediv, "_peaks": factored}
    exec(compile(src, "<dnnsat.expr vectorized>", "exec"), ns)
    return ns["_f"]  # type: ignore[no-any-return]
