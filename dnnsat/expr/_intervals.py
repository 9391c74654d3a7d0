"""Interval bounds: sound ``(lo, hi)`` of every node over boxes (numpy columns of boxes, or one box of
Python numbers), and the numpy dtype plan they give the vectorized evaluators."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

import numpy as np

from ._nodes import (
    _DIV_TEXT,
    _MAX_NESTING,
    INT64_SAFE,
    Expr,
    _py_ceildiv,
    _py_floordiv,
    _py_truediv,
    topological,
)

# ------------------------------------------------------------------------------------------------
# Interval bounds over a box of Python numbers (used to plan numpy dtypes)


def interval(roots: Sequence[Expr], box: Mapping[str, tuple[Any, Any]]) -> dict[int, tuple[Any, Any]]:
    """Sound bounds of every node under ``roots`` over ``box`` (Python numbers, exact for ints).

    Returns a map ``id(node) -> (lo, hi)``; booleans are bounded by ``(False/True, False/True)``.
    """
    f = compile_interval(roots, box=None, python=True)
    lo = {k: v[0] for k, v in box.items()}
    hi = {k: v[1] for k, v in box.items()}
    bounds: dict[int, tuple[Any, Any]] = {}
    f(lo, hi, bounds)
    return bounds


def _dtype_plan(
    roots: Sequence[Expr],
    box: Mapping[str, tuple[Any, Any]] | None,
    bounds: Mapping[int, tuple[Any, Any]] | None = None,
) -> set[int]:
    """Nodes of integer sort that must be evaluated in float64 because they may exceed int64
    (``bounds``: :func:`interval` of ``roots`` over ``box`` when already computed)."""
    if box is None:
        return set()
    bounds = interval(roots, box) if bounds is None else bounds
    wide: set[int] = set()
    for node in topological(roots):
        lo, hi = bounds[id(node)]
        too_big = abs(lo) > INT64_SAFE or abs(hi) > INT64_SAFE
        if node.sort == "int" and (too_big or any(id(a) in wide for a in node.args)):
            wide.add(id(node))
    return wide


def _is_float(x: Any) -> bool:
    return bool(np.asarray(x).dtype.kind == "f")


# ------------------------------------------------------------------------------------------------
# Interval evaluator (vectorized over boxes)


def _imul(alo: Any, ahi: Any, blo: Any, bhi: Any, m: Any) -> tuple[Any, Any]:
    p1, p2, p3, p4 = alo * blo, alo * bhi, ahi * blo, ahi * bhi
    return m.minimum(m.minimum(p1, p2), m.minimum(p3, p4)), m.maximum(m.maximum(p1, p2), m.maximum(p3, p4))


def _idiv(alo: Any, ahi: Any, blo: Any, bhi: Any, m: Any, div: Callable[[Any, Any], Any]) -> tuple[Any, Any]:
    """Bounds of ``div(a, b)`` for a monotone ``div`` (floor/ceil/true division; ``x/0 == 0``)."""
    if m is _PyMath:
        if blo > 0 or bhi < 0:
            qs = [div(x, y) for x in (alo, ahi) for y in (blo, bhi)]
            return min(qs), max(qs)
        if div is _py_truediv:
            return -math.inf, math.inf
        mag = max(abs(alo), abs(ahi))
        return min(-mag, 0), max(mag, 0)
    # numpy: per box
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        sign_ok = (blo > 0) | (bhi < 0)
        sb_lo = np.where(sign_ok, blo, 1)
        sb_hi = np.where(sign_ok, bhi, 1)
        qs = [div(x, y) for x in (alo, ahi) for y in (sb_lo, sb_hi)]
        qlo = np.minimum(np.minimum(qs[0], qs[1]), np.minimum(qs[2], qs[3]))
        qhi = np.maximum(np.maximum(qs[0], qs[1]), np.maximum(qs[2], qs[3]))
        if div is _vtruediv_pos:
            flo, fhi = -np.inf, np.inf
        else:
            mag = np.maximum(np.abs(alo), np.abs(ahi))
            flo, fhi = np.minimum(-mag, 0), np.maximum(mag, 0)
        return np.where(sign_ok, qlo, flo), np.where(sign_ok, qhi, fhi)


def _vfloordiv_pos(a: Any, b: Any) -> Any:
    return np.floor_divide(a, b) if not (_is_float(a) or _is_float(b)) else np.floor(np.divide(a, b))


def _vceildiv_pos(a: Any, b: Any) -> Any:
    return -_vfloordiv_pos(-a, b)


def _vtruediv_pos(a: Any, b: Any) -> Any:
    return np.true_divide(a, b)


class _PyMath:
    """The two functions the interval rules need, for Python numbers."""

    minimum = staticmethod(min)
    maximum = staticmethod(max)


def _interval_rules(python: bool) -> dict[str, Callable[..., tuple[Any, Any]]]:
    """Bounds of the ops that take more than one line: ``(alo, ahi, blo, bhi) -> (lo, hi)``."""
    m: Any = _PyMath if python else np
    fdiv = _py_floordiv if python else _vfloordiv_pos
    cdiv = _py_ceildiv if python else _vceildiv_pos
    tdiv = _py_truediv if python else _vtruediv_pos

    def b_and(x: Any, y: Any) -> Any:
        return (x and y) if python else np.logical_and(x, y)

    def b_not(x: Any) -> Any:
        return (not x) if python else np.logical_not(x)

    def eq_lo(alo: Any, ahi: Any, blo: Any, bhi: Any) -> Any:
        return b_and(b_and(alo == ahi, blo == bhi), alo == blo)

    def eq_hi(alo: Any, ahi: Any, blo: Any, bhi: Any) -> Any:
        return b_and(alo <= bhi, blo <= ahi)

    return {
        "mul": lambda alo, ahi, blo, bhi: _imul(alo, ahi, blo, bhi, m),
        "floordiv": lambda alo, ahi, blo, bhi: _idiv(alo, ahi, blo, bhi, m, fdiv),
        "ceildiv": lambda alo, ahi, blo, bhi: _idiv(alo, ahi, blo, bhi, m, cdiv),
        "truediv": lambda alo, ahi, blo, bhi: _idiv(alo, ahi, blo, bhi, m, tdiv),
        "eq": lambda alo, ahi, blo, bhi: (eq_lo(alo, ahi, blo, bhi), eq_hi(alo, ahi, blo, bhi)),
        "ne": lambda alo, ahi, blo, bhi: (b_not(eq_hi(alo, ahi, blo, bhi)), b_not(eq_lo(alo, ahi, blo, bhi))),
    }


_ONE_LINE = {  # op -> arity, for the ops whose bounds are one line of source (see _interval_text)
    **dict.fromkeys(("add", "sub", "min", "max", "lt", "le", "and", "or"), 2),
    **dict.fromkeys(("neg", "not"), 1),
    "where": 3,
}


def _interval_text(op: str, a: Sequence[tuple[str, str]], python: bool) -> tuple[str, str]:
    """Source of ``(lo, hi)`` of an op in ``_ONE_LINE`` over its arguments' ``(lo, hi)`` source.

    The single definition of these rules: the interpreters compile them into one function per op,
    :func:`compile_interval_scalar` inlines them.
    """

    def lo_min(x: str, y: str) -> str:  # Python: min(x, y) without the call (the same value, NaN too)
        return f"({y} if {y} < {x} else {x})" if python else f"np.minimum({x}, {y})"

    def hi_max(x: str, y: str) -> str:
        return f"({y} if {y} > {x} else {x})" if python else f"np.maximum({x}, {y})"

    def sel(c: str, x: str, y: str) -> str:
        return f"({x} if {c} else {y})" if python else f"np.where({c}, {x}, {y})"

    def logic(name: str, *xs: str) -> str:
        if python:
            return f"(not {xs[0]})" if name == "not" else f"({xs[0]} {name} {xs[1]})"
        return f"np.logical_{name}({', '.join(xs)})"

    (al, ah), (bl, bh) = a[0], a[-1]
    if op == "where":  # (c, x, y): x if surely c, y if surely not c, else the hull of both
        (cl, ch), (al, ah) = a[0], a[1]
        return sel(cl, al, sel(ch, lo_min(al, bl), bl)), sel(cl, ah, sel(ch, hi_max(ah, bh), bh))
    return {
        "add": (f"{al} + {bl}", f"{ah} + {bh}"),
        "sub": (f"{al} - {bh}", f"{ah} - {bl}"),
        "neg": (f"-{ah}", f"-{al}"),
        "min": (lo_min(al, bl), lo_min(ah, bh)),
        "max": (hi_max(al, bl), hi_max(ah, bh)),
        "lt": (f"{ah} < {bl}", f"{al} < {bh}"),
        "le": (f"{ah} <= {bl}", f"{al} <= {bh}"),
        "and": (logic("and", al, bl), logic("and", ah, bh)),
        "or": (logic("or", al, bl), logic("or", ah, bh)),
        "not": (logic("not", ah), logic("not", al)),
    }[op]


@functools.cache
def _interval_functions(python: bool) -> dict[str, Callable[..., tuple[Any, Any]]]:
    """Every op's bound rule as one function ``(alo, ahi, blo, bhi, ...) -> (lo, hi)``."""
    fns = _interval_rules(python)
    for op, arity in _ONE_LINE.items():
        args = [(f"a{k}l", f"a{k}h") for k in range(arity)]
        lo, hi = _interval_text(op, args, python)
        params = ", ".join(x for pair in args for x in pair)
        fns[op] = eval(f"lambda {params}: ({lo}, {hi})", {"np": np})
    return fns


def compile_interval(
    roots: Sequence[Expr], box: Mapping[str, tuple[Any, Any]] | None = None, python: bool = False
) -> Callable[..., tuple[tuple[Any, Any], ...]]:
    """A function ``(lo, hi) -> tuple of (lo, hi)`` giving sound bounds of each root over boxes.

    ``lo`` and ``hi`` map variable names to arrays (one entry per box) or scalars. Bounds are exact
    at the corners for monotone terms and sound always: every value at a point in the box lies inside.
    Booleans are bounded by ``(definitely true, possibly true)``. ``box`` (global variable bounds;
    every box evaluated must lie within it) selects float64 for nodes that may leave int64 and the
    cheaper exact form of ``where(c, x, 0)`` where ``x`` keeps one sign. ``python=True`` evaluates
    Python numbers exactly and takes a third argument, a dict that receives the bounds of every node
    (``id -> (lo, hi)``).
    """
    if python:
        return _interval_interpreter(roots)
    bounds = interval(roots, box) if box is not None else None
    wide = _dtype_plan(roots, box, bounds)
    signs = _gate_signs(roots, bounds, wide) if bounds is not None else None
    ns: dict[str, Any] = {"np": np, "_rules": _interval_rules(python=False), "_w": _as_float64}
    ns.update(_fdiv=_vfloordiv_pos, _cdiv=_vceildiv_pos, _tdiv=_vtruediv_pos)
    src = _interval_source(roots, python=False, wide=wide, signs=signs)
    exec(compile(src, "<dnnsat.expr interval>", "exec"), ns)
    return ns["_f"]  # type: ignore[no-any-return]


def _as_float64(x: Any) -> Any:
    return np.asarray(x, dtype=np.float64)


def _interval_interpreter(
    roots: Sequence[Expr], python: bool = True
) -> Callable[..., tuple[tuple[Any, Any], ...]]:
    """Bounds over one box of Python numbers (``python``; else over numpy columns of boxes), node by
    node without generated code, optionally recording every node's."""
    order = topological(roots)
    rules = _interval_functions(python)
    plan = [(id(node), node.op, node.payload, tuple(id(a) for a in node.args)) for node in order]
    root_ids = [id(r) for r in roots]

    def evaluate(lo: Mapping[str, Any], hi: Mapping[str, Any], out: dict[int, Any] | None = None) -> Any:
        b: dict[int, tuple[Any, Any]] = {} if out is None else out
        for nid, op, payload, arg_ids in plan:
            if op == "var":
                b[nid] = (lo[payload[0]], hi[payload[0]])
            elif op == "const":
                b[nid] = (payload, payload)
            else:
                flat: list[Any] = []
                for aid in arg_ids:
                    flat.extend(b[aid])
                b[nid] = rules[op](*flat)
        return tuple(b[r] for r in root_ids)

    return evaluate


def compile_interval_scalar(roots: Sequence[Expr]) -> Callable[..., tuple[tuple[Any, Any], ...]]:
    """Like :func:`compile_interval` for one box of Python numbers (exact ints): generated code with
    every rule inlined, many times faster than the numpy evaluator on a handful of boxes."""
    ns: dict[str, Any] = {"_rules": _interval_rules(python=True)}
    exec(compile(_interval_source(roots, python=True), "<dnnsat.expr interval scalar>", "exec"), ns)
    return ns["_f"]  # type: ignore[no-any-return]


def _by_constant(node: Expr) -> bool:
    """A product with a constant or a division by a nonzero constant (its bounds: two values, sorted).
    A true division only by ``|c| >= 1``: no overflow, which :func:`_idiv` would have silenced."""
    if node.op == "mul":
        return any(a.op == "const" for a in node.args)
    d = node.args[1] if node.op in _DIV_TEXT else None
    return (
        d is not None and d.op == "const" and d.payload != 0 and (node.op != "truediv" or abs(d.payload) >= 1)
    )


def _reads_once(node: Expr) -> bool:
    """Whether the Python bounds of ``node`` read each bound of each argument at most once, so a
    single-use argument can be written inline (min, max and where read some twice)."""
    return node.op not in ("min", "max", "where")


def _gate_signs(
    roots: Sequence[Expr], bounds: Mapping[int, tuple[Any, Any]], wide: AbstractSet[int]
) -> dict[int, int]:
    """The integer ``where(c, x, 0)`` nodes (a tensor alive or not) whose ``x`` keeps one sign over
    the whole domain (``bounds``: :func:`interval` over it): ``id -> 1`` (``x >= 0``) or ``-1``.

    Over any box inside the domain their bounds then take one ``np.where`` (or product) each, equal
    to the general rule's: with ``x >= 0`` it is ``[where(cl, xl, 0), where(cl | ch, xh, 0)]``.
    """
    out = {}
    for node in topological(roots):
        if node.op != "where" or node.sort != "int" or id(node) in wide:
            continue
        x, y = node.args[1], node.args[2]
        if y.op != "const" or type(y.payload) is not int or y.payload != 0 or x.sort != "int":
            continue
        lo, hi = bounds[id(x)]
        if lo >= 0 or hi <= 0:
            out[id(node)] = 1 if lo >= 0 else -1
    return out


def _interval_source(
    roots: Sequence[Expr],
    python: bool,
    wide: AbstractSet[int] = frozenset(),
    signs: Mapping[int, int] | None = None,
) -> str:
    """Source of ``_f(lo, hi)``: the bounds of ``roots``, one or two lines per stored node.

    The rules are those of :func:`_interval_rules` and :func:`_interval_text` (one-line rules inlined)
    and give the same values: a product with a constant computes the two distinct corner products of
    :func:`_imul` (it computes each twice) and a division by a nonzero constant the two distinct
    quotients of :func:`_idiv`, whose fallback for a divisor range holding 0 cannot apply. Python: a
    node with one use that reads each bound once is written inline (as :func:`compile_scalar` does).
    numpy: variables are cast like the interpreter casts them, the arguments of a ``wide`` node to
    float64, and each node's arrays are deleted after their last reader (memory traffic, not the
    operations, dominated a batch of 2048 boxes when every node's arrays lived to the end: 2-3x);
    ``signs`` (:func:`_gate_signs`) picks the one-``np.where`` bounds of a gated tensor size (the
    general rule's nested ``np.where`` with a scalar was 2-3x slower and most of a memory peak's time).
    """
    order = topological(roots)
    root_ids = {id(r) for r in roots}
    stored = set(root_ids)
    uses: dict[int, int] = {}
    for node in order:
        for a in node.args:
            uses[id(a)] = uses.get(id(a), 0) + 1
            if not (python and _reads_once(node)):
                stored.add(id(a))
    last_use = {id(a): i for i, node in enumerate(order) for a in node.args}
    names: dict[int, tuple[str, str]] = {}
    depth: dict[int, int] = {}
    lines = ["def _f(lo, hi):"]
    for i, node in enumerate(order):
        op = node.op
        if op == "const":
            v = float(node.payload) if id(node) in wide else node.payload
            names[id(node)], depth[id(node)] = (repr(v),) * 2, 0
            continue
        lo, hi = f"l{i}", f"h{i}"
        args = [names[id(a)] for a in node.args]
        if id(node) in wide:
            for k, (al, ah) in enumerate(args):
                lines.append(f"    w{i}_{k}l, w{i}_{k}h = _w({al}), _w({ah})")
            args = [(f"w{i}_{k}l", f"w{i}_{k}h") for k in range(len(args))]
        text: tuple[str, ...]  # (lo, hi) sources, or one source of the pair
        if op == "var":
            if python:
                text = (f"lo[{node.name!r}]", f"hi[{node.name!r}]")
            else:
                dt = "np.float64" if (id(node) in wide or node.sort == "real") else "np.int64"
                dt = "np.bool_" if node.sort == "bool" else dt
                text = (
                    f"np.asarray(lo[{node.name!r}], dtype={dt})",
                    f"np.asarray(hi[{node.name!r}], dtype={dt})",
                )
        elif signs and id(node) in signs:  # where(c, x, 0), x of one sign (see _gate_signs)
            (cl, ch), (xl, xh) = args[0], args[1]
            either = f"({cl} | {ch})"
            low, high = (cl, either) if signs[id(node)] > 0 else (either, cl)
            if node.args[1].op == "const":
                text = (f"np.where({low}, {xl}, 0)", f"np.where({high}, {xh}, 0)")
            else:  # an int64 array times a condition: the same values, 2x faster than np.where
                text = (f"{xl} * {low}", f"{xh} * {high}")
        elif op in _ONE_LINE:
            text = _interval_text(op, args, python)
        elif _by_constant(node):  # c * [xl, xh], [xl, xh] // c: two values (_imul, _idiv: each twice)
            if op == "mul":
                (c, _), (xl, xh) = args if node.args[0].op == "const" else args[::-1]
                lines.append(f"    {lo}, {hi} = {c} * {xl}, {c} * {xh}")
            else:
                template = _DIV_TEXT[op][0 if python else 1]
                (xl, xh), (c, _) = args
                lines.append(f"    {lo}, {hi} = {template.format(x=xl, c=c)}, {template.format(x=xh, c=c)}")
            stored.add(id(node))
            text = tuple(_interval_text(m, [(lo, lo), (hi, hi)], python)[0] for m in ("min", "max"))
        else:  # one call returning both bounds: stored
            text = (f"_rules[{op!r}]({', '.join(x for pair in args for x in pair)})",)
        d = 1 + max((depth[id(a)] for a in node.args), default=0)
        if len(text) == 2 and id(node) not in stored and uses.get(id(node)) == 1 and d < _MAX_NESTING:
            names[id(node)], depth[id(node)] = (f"({text[0]})", f"({text[1]})"), d
            continue
        lines.append(f"    {lo}, {hi} = {', '.join(text)}")
        names[id(node)], depth[id(node)] = (lo, hi), 0
        if not python:  # free what no later node reads: a batch of boxes then holds few arrays at once
            dead = {
                x
                for a in node.args
                if a.op != "const" and last_use[id(a)] == i and id(a) not in root_ids
                for x in names[id(a)]
            }
            dead |= (
                {f"w{i}_{k}{b}" for k in range(len(node.args)) for b in "lh"} if id(node) in wide else set()
            )
            if dead:
                lines.append(f"    del {', '.join(sorted(dead))}")
    lines.append(f"    return ({', '.join(f'({names[id(r)][0]}, {names[id(r)][1]})' for r in roots)},)")
    return "\n".join(lines)
