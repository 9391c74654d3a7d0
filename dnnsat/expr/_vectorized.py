"""The vectorized evaluator, :func:`compile_vectorized`: numpy code over columns of assignments."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ._gated_peaks import gated_peaks
from ._intervals import _dtype_plan, _is_float
from ._nodes import _COMPARE, _INFIX, Expr, topological

# ------------------------------------------------------------------------------------------------
# Vectorized evaluator


def _codegen(
    roots: Sequence[Expr],
    emit: Callable[[Expr, list[str], str, set[str]], list[str]],
    header: str,
    computed: Mapping[int, Sequence[Expr]] | None = None,
) -> str:
    """One line per node; each node's array is deleted after its last reader (a batch of points then
    holds few arrays at once: memory traffic dominated when every one lived to the end). ``emit``
    gets the node, its inputs' names, its own name and the inputs it reads last (a root is never).
    Nodes in ``computed`` are emitted from the inputs given there instead of their arguments (``emit``
    computes them some other way)."""
    computed = computed or {}

    def inputs(node: Expr) -> Sequence[Expr]:
        return computed.get(id(node), node.args)

    order = topological(roots, inputs)
    last_use = {id(a): i for i, node in enumerate(order) for a in inputs(node)}
    keep = {id(r) for r in roots}
    names: dict[int, str] = {}
    lines = [header]
    for i, node in enumerate(order):
        out = f"t{i}"
        names[id(node)] = out
        dead = sorted({names[id(a)] for a in inputs(node) if last_use[id(a)] == i and id(a) not in keep})
        lines.extend(
            "    " + line for line in emit(node, [names[id(a)] for a in inputs(node)], out, set(dead))
        )
        if dead:
            lines.append(f"    del {', '.join(dead)}")
    lines.append(f"    return ({', '.join(names[id(r)] for r in roots)},)")
    return "\n".join(lines)


_COUNT_MAX = 127  # the largest count summed in int8
_ONE = [("const", 1), ("const", 0)]  # the branches of where(c, 1, 0)


def _counts(roots: Sequence[Expr]) -> dict[int, tuple[int, list[Expr]]]:
    """Integer sums that count conditions, ``k + where(c_1, 1, 0) + ... <= 127`` (``k >= 0`` the sum of
    their constants), by id: ``(k, [c_1, ...])``. Only the outermost count of a sum (whose readers are
    not counts themselves); :func:`_vcount` adds the conditions as bytes."""
    part: dict[int, tuple[int, list[Expr]]] = {}
    for node in topological(roots):
        if node.op == "const" and node.sort == "int" and node.payload >= 0:
            part[id(node)] = (node.payload, [])
        elif node.op == "where" and node.sort == "int" and [(a.op, a.payload) for a in node.args[1:]] == _ONE:
            part[id(node)] = (0, [node.args[0]])
        elif node.op == "add" and node.sort == "int" and all(id(a) in part for a in node.args):
            (ka, ca), (kb, cb) = (part[id(a)] for a in node.args)
            if ka + kb + len(ca) + len(cb) <= _COUNT_MAX:
                part[id(node)] = (ka + kb, ca + cb)
    inner = {id(a) for node in topological(roots) if id(node) in part for a in node.args}
    return {key: kc for key, kc in part.items() if kc[1] and key not in inner}


def _vcount(start: int, *conds: Any) -> Any:
    """``start`` plus the number of ``conds`` that hold, as ``int64`` (summed in ``int8``: one byte
    per point and condition; ``start + len(conds) <= 127``)."""
    acc = np.asarray(conds[0]).view(np.int8) + start
    for c in conds[1:]:
        acc = acc + np.asarray(c).view(np.int8)
    return acc.astype(np.int64)


def _emit_vector(wide: set[int]) -> Callable[[Expr, list[str], str], list[str]]:
    """Numpy source of one node (``a``: its arguments' names, ``out``: its own)."""

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


def _dtype(node: Expr, wide: set[int]) -> str:
    """The dtype of ``node``'s values in the generated code."""
    if node.sort == "bool":
        return "bool"
    return "float64" if node.sort == "real" or id(node) in wide else "int64"


def _in_place(node: Expr, a: list[str], out: str, reusable: set[str]) -> list[str] | None:
    """``node`` computed into the array of an argument it reads last (``reusable``: those arrays, of
    ``node``'s dtype and shape, that no one else holds), or None: ``x *= y`` saves allocating and
    first touching a fresh array."""
    op = node.op
    if op == "where" and node.args[2].op == "const" and node.args[2].payload == 0 and node.sort != "bool":
        op, a = "mul", [a[1], a[0]]  # emitted as a multiply (see _emit_vector)
    if op not in ("add", "sub", "mul"):
        return None
    for x, y in ((a[0], a[1]), (a[1], a[0])):
        if x in reusable:
            return [f"{x} {_INFIX[op]}= {y}", f"{out} = {x}"]
        if op == "sub":
            break
    return None


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
    roots: Sequence[Expr], box: Mapping[str, tuple[Any, Any]] | None = None, in_place: bool = False
) -> Callable[[Mapping[str, Any]], tuple[Any, ...]]:
    """A function ``columns -> tuple of arrays`` evaluating ``roots`` on many assignments at once.

    ``columns`` maps variable names to equally long arrays (or scalars, broadcast). Integer nodes are
    evaluated in ``int64``; when ``box`` (variable bounds) shows a node may exceed ``2**62`` in
    magnitude, it and its integer ancestors use ``float64`` instead. ``in_place``: every column is a
    1-d array of one length (no scalars), so intermediate arrays are reused in place.
    """
    return _compile_vectorized(roots, box, gated=True, in_place=in_place)


def _compile_vectorized(
    roots: Sequence[Expr], box: Mapping[str, tuple[Any, Any]] | None, gated: bool, in_place: bool = False
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
    counts = {key: kc for key, kc in _counts(roots).items() if key not in factored}
    owned: dict[str, str] = {}  # arrays the generated code made (not a caller's column): their dtype

    def emit_or_call(node: Expr, a: list[str], out: str, last: set[str]) -> list[str]:
        if id(node) in factored:
            return [f"{out} = _peaks[{id(node)}](env)"]
        dtype = _dtype(node, wide)
        lines = None
        if id(node) in counts:
            lines = [f"{out} = _vcount({', '.join([str(counts[id(node)][0]), *a])})"]
        elif in_place:
            lines = _in_place(node, a, out, {x for x in last if owned.get(x) == dtype})
        if lines is not None or node.op in ("add", "sub", "mul", "neg", "min", "max", "where"):
            owned[out] = dtype  # a fresh array (the arguments are not all constants: they fold)
        return emit(node, a, out) if lines is None else lines

    inputs: dict[int, Sequence[Expr]] = {key: () for key in factored}
    inputs.update((key, conds) for key, (_, conds) in counts.items())
    src = _codegen(roots, emit_or_call, "def _f(env):", computed=inputs)
    ns: dict[str, Any] = {
        "np": np,
        "_vfloordiv": _vfloordiv,
        "_vtruediv": _vtruediv,
        "_vcount": _vcount,
        "_peaks": factored,
    }
    exec(compile(src, "<dnnsat.expr vectorized>", "exec"), ns)
    return ns["_f"]  # type: ignore[no-any-return]
