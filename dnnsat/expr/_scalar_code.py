"""The scalar evaluator's code generator: Python source of one function over one assignment."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ._branches import guards, reassigns, schedule
from ._nodes import _DIV_TEXT, _INFIX, _MAX_NESTING, Expr, topological

if TYPE_CHECKING:
    from ._point_forms import Peak


# ------------------------------------------------------------------------------------------------
# Scalar evaluator (code generation)


_NARY = ("min", "max")  # trees of these become one builtin call


def _scalar_text(node: Expr, a: list[str]) -> str:
    """Python source of ``node`` given its arguments' source ``a`` (min, max and a division by a
    non-constant read an argument twice; the others read each once)."""
    op = node.op
    if op in ("add", "sub", "mul", "lt", "le", "eq", "ne"):
        return f"{a[0]} {_INFIX[op]} {a[1]}"
    if op == "neg":
        return f"-{a[0]}"
    if op in _DIV_TEXT:
        text = _DIV_TEXT[op][0].format(x=a[0], c=a[1])
        return (
            text if _nonzero_const(node.args[1]) else f"{text} if {a[1]} else {0.0 if op == 'truediv' else 0}"
        )
    if op in _NARY:
        return f"{a[0]} if {a[0]} {'<=' if op == 'min' else '>='} {a[1]} else {a[1]}"
    if op in ("and", "or"):
        return f"{a[0]} {op} {a[1]}"
    if op == "not":
        return f"not {a[0]}"
    if op == "where":
        return f"{a[1]} if {a[0]} else {a[2]}"  # lazy: the branch not taken is not evaluated
    raise AssertionError(op)


def _nonzero_const(e: Expr) -> bool:
    return e.op == "const" and e.payload != 0


def _nary_leaves(node: Expr, uses: Mapping[int, int]) -> list[Expr]:
    """Operands of the tree of ``node.op`` nodes under ``node`` whose inner nodes have no other use."""
    out, stack = [], [node]
    while stack:
        x = stack.pop()
        if x.op == node.op and (x is node or uses[id(x)] == 1):
            stack.extend(reversed(x.args))
        else:
            out.append(x)
    return out


def scalar_function(
    roots: Sequence[Expr], peaks: Mapping[int, Peak], point_forms: bool
) -> Callable[[Mapping[str, Any]], tuple[Any, ...]]:
    """The code of :func:`~dnnsat.expr.compile_scalar` for ``roots`` already rewritten: ``peaks``
    (by node id) are evaluated as :class:`~dnnsat.expr._point_forms.Peak`, and ``point_forms`` adds
    the guarded locals and reassigned branches (``compile_scalar(roots, point_forms=False)`` is
    ``scalar_function(roots, {}, False)``)."""
    order = topological(roots, lambda n: peaks[id(n)].leaves if id(n) in peaks else n.args)
    uses: dict[int, int] = {id(n): 0 for n in order}
    for r in roots:
        uses[id(r)] += 2  # returned: always stored
    nary: dict[int, list[Expr]] = {}
    for node in order:
        for x in peaks[id(node)].leaves if id(node) in peaks else node.args:
            uses[id(x)] += 1
    for node in order:
        if id(node) in peaks:
            continue
        if node.op in _NARY and len(leaves := _nary_leaves(node, uses)) > 2:
            nary[id(node)] = leaves
        elif node.op in _NARY or node.op in _DIV_TEXT and not _nonzero_const(node.args[1]):
            for x in node.args:
                uses[id(x)] += 2  # read twice by the template: store it

    def args_of(n: Expr) -> Sequence[Expr]:
        return peaks[id(n)].leaves if id(n) in peaks else nary.get(id(n), n.args)

    stored: set[int] = set()  # nodes computed into a local (the others are inlined into their user)
    depth: dict[int, int] = {}
    for node in order:
        d = 1 + max((depth[id(x)] for x in args_of(node)), default=0)
        if node.op != "const" and (uses[id(node)] != 1 or d >= _MAX_NESTING):
            stored.add(id(node))
        depth[id(node)] = 0 if id(node) in stored or node.op == "const" else d
    guarded, branch = (
        guards(roots, order, args_of, stored) if point_forms else ({id(n): () for n in order}, {})
    )
    byid = {id(n): n for n in order}
    order = schedule(order, lambda n: [*args_of(n), *(byid[c] for c in guarded[id(n)])], guarded, stored)
    at = {id(n): i for i, n in enumerate(order)}  # the statement that evaluates a node
    for node in reversed(order):
        for x in args_of(node):
            if id(x) not in stored:
                at[id(x)] = at[id(node)]
    last = {id(r): len(order) for r in roots}  # the last statement that reads a node
    for node in order:
        for x in args_of(node):
            last[id(x)] = max(last.get(id(x), 0), at[id(node)])
    ref: dict[int, str] = {}
    ns: dict[str, Any] = {}
    body: list[tuple[tuple[int, ...], str]] = []  # (guard, statement)
    for i, node in enumerate(order):
        if node.op == "const":
            ref[id(node)] = repr(node.payload)
            continue
        args = args_of(node)
        if node.op == "var":
            text = f"env[{node.name!r}]"
        elif id(node) in peaks:
            ns[f"_pk{i}"] = peaks[id(node)]
            text = f"_pk{i}(env, ({''.join(ref[id(x)] + ', ' for x in args)}))"
        elif id(node) in nary:
            text = f"{node.op}({', '.join(ref[id(x)] for x in args)})"
        elif node.op == "where" and point_forms and reassigns(node, stored, last, at):
            # ``a if c else b`` as ``if c: b = a`` where b is not read after this
            c, a, b = args
            ref[id(node)] = ref[id(b)]
            guard = branch[id(node)] if id(c) in branch[id(node)] else (*guarded[id(node)], id(c))
            body.append((guard, f"{ref[id(b)]} = {ref[id(a)]}"))
            continue
        else:
            text = _scalar_text(node, [ref[id(x)] for x in args])
        if id(node) in stored:
            body.append((guarded[id(node)], f"t{i} = {text}"))
            ref[id(node)] = f"t{i}"
        else:
            ref[id(node)] = f"({text})"
    lines = ["def _f(env):"]
    open_: tuple[int, ...] = ()
    for guard, statement in body:
        common = 0
        while common < min(len(open_), len(guard)) and open_[common] == guard[common]:
            common += 1
        for level in range(common, len(guard)):
            lines.append(f"{'    ' * (level + 1)}if {ref[guard[level]]}:")
        open_ = guard
        lines.append(f"{'    ' * (len(guard) + 1)}{statement}")
    lines.append(f"    return ({', '.join(ref[id(r)] for r in roots)},)")
    exec(compile("\n".join(lines), "<dnnsat.expr scalar>", "exec"), ns)
    return ns["_f"]  # type: ignore[no-any-return]
