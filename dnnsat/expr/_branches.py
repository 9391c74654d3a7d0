"""Guarded locals for the scalar evaluator's point forms: which locals are computed under the condition
of the ``where`` branch that reads them (:func:`guards`), the order of the statements (:func:`schedule`)
and where a branch reassigns a local (:func:`reassigns`)."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet

from ._nodes import Expr

_GUARD_DEPTH = 8  # most nested conditions a local is computed under (Python allows 20 blocks)


def guards(
    roots: Sequence[Expr],
    order: list[Expr],
    args_of: Callable[[Expr], Sequence[Expr]],
    stored: AbstractSet[int],
) -> tuple[dict[int, tuple[int, ...]], dict[int, tuple[int, ...]]]:
    """Per node, the stored conditions (ids, outermost first) that hold whenever its value is read,
    and per ``where``, those of its taken branch:
    a node read only by the taken branch of ``where(c, a, b)`` (``a``) is computed under ``if c:``,
    and under ``if g:`` for each stored conjunct ``g`` of ``c`` (so nodes read under ``g & h1`` and
    ``g & h2`` are computed under ``if g:``)."""
    position = {id(n): i for i, n in enumerate(order)}
    conjuncts: dict[int, tuple[int, ...]] = {}

    def conditions(c: Expr) -> tuple[int, ...]:
        """The stored nodes of the ``and`` tree of ``c`` (``c`` included), earliest first."""
        if id(c) not in conjuncts:
            found, stack = [], [c]
            while stack:
                x = stack.pop()
                if id(x) in stored:
                    found.append(id(x))
                if x.op == "and":
                    stack += x.args
            conjuncts[id(c)] = tuple(sorted(set(found), key=position.__getitem__))
        return conjuncts[id(c)]

    seen: dict[int, list[tuple[int, ...]]] = {id(r): [()] for r in roots}
    guards: dict[int, tuple[int, ...]] = {}
    branch: dict[int, tuple[int, ...]] = {}
    for node in reversed(order):
        reads = seen.pop(id(node), [()])
        guard = reads[0]
        for g in reads[1:]:
            k = 0
            while k < min(len(g), len(guard)) and g[k] == guard[k]:
                k += 1
            guard = guard[:k]
        guards[id(node)] = guard
        args = args_of(node)
        for k, x in enumerate(args):
            g = guard
            if node.op == "where" and k == 1:
                g = branch[id(node)] = (*guard, *(c for c in conditions(args[0]) if c not in guard))[
                    :_GUARD_DEPTH
                ]
            seen.setdefault(id(x), []).append(g)
    return guards, branch


def schedule(
    order: list[Expr],
    needs: Callable[[Expr], Sequence[Expr]],
    guards: Mapping[int, tuple[int, ...]],
    stored: AbstractSet[int],
) -> list[Expr]:
    """``order`` re-sorted so that each local is computed after what it ``needs`` and locals under the
    same conditions follow each other (one ``if`` block): the earliest ready local next, but the open
    block's locals first."""
    position = {id(n): i for i, n in enumerate(order)}
    waiting: dict[int, int] = {}
    users: dict[int, list[Expr]] = {}
    for node in order:
        deps = {id(x): x for x in needs(node)}
        waiting[id(node)] = len(deps)
        for key in deps:
            users.setdefault(key, []).append(node)
    free = [n for n in order if not waiting[id(n)]]  # inlined nodes and constants: no statement
    ready: list[tuple[int, Expr]] = []  # stored nodes, earliest first
    by_guard: dict[tuple[int, ...], list[tuple[int, Expr]]] = {}
    out: list[Expr] = []
    current: tuple[int, ...] = ()

    def release(node: Expr) -> None:
        if id(node) in stored:
            item = (position[id(node)], node)
            heapq.heappush(ready, item)
            heapq.heappush(by_guard.setdefault(guards[id(node)], []), item)
        else:
            free.append(node)

    pending, free = free, []
    for node in pending:
        release(node)
    done: set[int] = set()
    while True:
        if free:
            node = free.pop()
        else:
            while ready and id(ready[0][1]) in done:
                heapq.heappop(ready)
            if not ready:
                break
            block = by_guard.get(current)
            while block and id(block[0][1]) in done:
                heapq.heappop(block)
            node = heapq.heappop(block)[1] if block else heapq.heappop(ready)[1]
            current = guards[id(node)]
        done.add(id(node))
        out.append(node)
        for user in users.get(id(node), ()):
            waiting[id(user)] -= 1
            if not waiting[id(user)]:
                release(user)
    return out


def reassigns(node: Expr, stored: AbstractSet[int], last: Mapping[int, int], at: Mapping[int, int]) -> bool:
    """Whether ``where(c, a, b)`` can assign ``a`` to ``b``'s local under ``if c:``: both stored, and
    nothing reads ``b`` after it."""
    c, _, b = node.args
    return (
        id(node) in stored
        and id(c) in stored
        and id(b) in stored
        and last[id(b)] == at[id(node)]
        and b.op != "var"
    )
