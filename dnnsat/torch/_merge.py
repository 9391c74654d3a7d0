"""Merge: the regions' networks as one network, each op gated by the regions it runs in."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..expr import Expr, all_
from ..graph import Check, GraphError, Network, Tensor
from ._errors import TraceError
from ._regions import _Gates, _Region


def _key(v: Any) -> Any:
    if isinstance(v, Expr):
        return ("e", id(v))
    if isinstance(v, tuple | list):
        return ("t", tuple(_key(x) for x in v))
    if isinstance(v, dict):
        return ("d", tuple((k, _key(x)) for k, x in sorted(v.items())))
    return ("v", type(v).__name__, v)


def _slot(label: str, slots: Mapping[str, str]) -> str:
    """The slot (see :func:`_slots`) of the module path in an op's label (a parameter's: its module's)."""
    where = label.split(" ", 1)[1] if " " in label else ""
    head, rest = where, ""
    while head and head not in slots:
        head, _, last = head.rpartition("/")
        rest = f"{last}/{rest}" if rest else last
    return f"{slots.get(head, head)}/{rest}" if rest else slots.get(head, head)


def _merge(regions: list[_Region], gates: _Gates, cache: dict[Any, Any]) -> Network:
    """One network for all regions, its ops in an order that keeps every region's execution order
    (so liveness, hence memory, is the region's own). Ops are matched by (op, module, attributes,
    occurrence), their inputs selected by region where the regions feed them different tensors (a
    ``choose``); when no order keeps every region's (or ranks mismatch), ops are matched with their
    inputs too (no selects), and as a last resort ordered by their data dependencies only."""
    valid = [r for r in regions if r.net is not None]
    if not valid:
        errors = sorted({r.error for r in regions})
        raise GraphError(f"from_torch: the model raises on every configuration: {'; '.join(errors[:5])}")
    for positional, ordered in ((True, True), (False, True)):
        try:
            return _merge_with(regions, gates, cache, positional, ordered)
        except (_Cycle, GraphError):
            continue
    return _merge_with(regions, gates, cache, positional=False, ordered=False)


class _Cycle(Exception):
    """Ops matched across regions depend on each other in different orders."""


def _merge_with(
    regions: list[_Region], gates: _Gates, cache: dict[Any, Any], positional: bool, ordered: bool
) -> Network:
    first: dict[Any, tuple[_Region, int]] = {}
    members: dict[Any, set[int]] = {}
    feeds: dict[Any, list[dict[Any, set[int]]]] = {}  # key -> per input: input key -> regions
    after: dict[Any, set[Any]] = {}  # key -> keys that come first (its inputs; ``ordered``: its predecessor)
    appearance: dict[Any, tuple[int, int]] = {}
    rules: dict[tuple[Any, str, int], tuple[Check, set[int]]] = {}
    outputs: list[list[Any]] = []
    at: dict[int, dict[Any, int]] = {}  # region -> key -> its node there
    held: dict[tuple[Any, Any], set[int]] = {}  # (tensor's producer, last node held) -> regions
    ids: dict[Any, int] = {}  # keys are interned to ints (a key names its inputs by their ints)
    for k, r in enumerate(regions):
        if r.net is None:
            continue
        keys: dict[int, Any] = {}
        seen: dict[Any, int] = {}  # identical ops (k and v projections) are told apart by occurrence
        prev = None
        for node in r.net.nodes:
            where = _slot(node.label, r.slots)
            inputs = tuple(keys[r.net.producer[t]] for t in node.inputs)
            # positional: ops are matched without their inputs, but not across regions that produce
            # the inputs in another order (the memory model reads production order off them)
            produced = tuple(sorted(range(len(inputs)), key=lambda j: (node.inputs[j], j)))
            base = (node.op, where, _key(dict(node.attrs)), produced, () if positional else inputs)
            seen[base] = seen.get(base, 0) + 1
            key = ids.setdefault((*base, seen[base]), len(ids))
            keys[node.index] = key
            at.setdefault(k, {})[key] = node.index
            if key not in first:
                first[key], members[key], appearance[key] = (r, node.index), set(), (k, node.index)
                feeds[key] = [{} for _ in inputs]
                after[key] = set()
            members[key].add(k)
            for j, ik in enumerate(inputs):
                feeds[key][j].setdefault(ik, set()).add(k)
                after[key].add(ik)
            if ordered and prev is not None:
                after[key].add(prev)
            prev = key
            for c in r.binds.get(node.index, []):
                rules.setdefault((key, c.rule, id(c.expr)), (c, set()))[1].add(k)
        outputs.append([keys[r.net.producer[t]] for t in r.outputs])
        for ti, h in r.held.items():
            held.setdefault((keys[r.net.producer[ti]], keys[h]), set()).add(k)
    order = _topological(after, appearance)
    net = Network("from_torch", infer_cache=cache)
    net.permute_views = True
    made: dict[Any, Tensor] = {}
    names: dict[Any, str] = {}
    # a select is made as soon as its last case exists, so that tensor indices follow production
    # order (the memory model takes the input produced first as the one keeping an add's gradient)
    selects: dict[Any, Tensor] = {}
    waiting: dict[Any, list[tuple[Any, dict[Any, set[int]]]]] = {}
    position = {key: i for i, key in enumerate(order)}
    for by_input in (b for key in order for b in feeds[key] if len(b) > 1):
        sid = _select_id(by_input)
        last = max(by_input, key=position.__getitem__)
        if sid not in {s for s, _ in waiting.get(last, [])}:
            waiting.setdefault(last, []).append((sid, by_input))
    for key in order:
        r, index = first[key]
        assert r.net is not None
        node = r.net.nodes[index]
        gate = gates.of(frozenset(members[key]), exact=False)
        where = node.label.split(" ", 1)[1] if " " in node.label else ""
        name = names[key] = f"{node.op}#{len(net.nodes)} {where}".rstrip()

        def add(node: Any = node, key: Any = key, name: str = name) -> Tensor:
            ins = [selects[_select_id(b)] if len(b) > 1 else made[next(iter(b))] for b in feeds[key]]
            return net.apply(node.op, ins, name=name, **node.attrs)

        t = net._gated(gate, add)
        if node.op == "input":
            net.inputs.append(t)
        made[key] = t
        for sid, by_input in waiting.get(key, []):
            regions_in = frozenset(k for m in by_input.values() for k in m)

            def pick(b: dict[Any, set[int]] = by_input) -> Tensor:
                return _pick(net, gates, made, b)

            selects[sid] = net._gated(gates.of(regions_in, exact=False), pick)
    if positional and not _same_keepers(net, regions, order, first, members, made, at):
        raise _Cycle
    for (key, until), where_ in held.items():
        cond = gates.of(frozenset(where_), exact=False)
        net.held.append((made[key].index, net.producer[made[until].index], cond))
    by_rule: dict[tuple[Any, str], list[Expr]] = {}  # a rule of one op, one form per set of regions
    for (key, what, _), (c, where_) in rules.items():
        by_rule.setdefault((key, what), []).append(~gates.of(frozenset(where_), exact=False) | c.expr)
    for (key, what), forms in by_rule.items():
        net.extra_checks.append((names[key], Check(what, all_(forms))))
    arity = {len(o) for o in outputs}
    if len(arity) != 1:
        raise TraceError(f"forward returns different numbers of tensors in different configurations: {arity}")
    valid = [k for k, r in enumerate(regions) if r.net is not None]
    outs = []
    for j in range(arity.pop()):
        by_key: dict[Any, set[int]] = {}
        for k, o in zip(valid, outputs):
            by_key.setdefault(o[j], set()).add(k)
        outs.append(_pick(net, gates, made, by_key))
    for k, r in enumerate(regions):
        if r.net is None:
            rule = Check(f"the model raises {r.error}", ~gates.of(frozenset([k]), exact=True))
            net.extra_checks.append((f"from_torch#{k}", rule))
    return net.output(*outs)


def _same_keepers(
    net: Network,
    regions: list[_Region],
    order: list[Any],
    first: dict[Any, tuple[_Region, int]],
    members: dict[Any, set[int]],
    made: dict[Any, Tensor],
    at: dict[int, dict[Any, int]],
) -> bool:
    """Whether every op with several inputs sees them in each region's production order (the memory
    model reads production order off tensor indices, e.g. which input of an ``add`` keeps its output
    gradient): a select made after one of its cases may reorder them."""
    for key in order:
        r, index = first[key]
        assert r.net is not None
        if len(r.net.nodes[index].inputs) < 2:
            continue
        ins = net.nodes[net.producer[made[key].index]].inputs
        merged = sorted(range(len(ins)), key=lambda j: (ins[j], j))
        for k in members[key]:
            net_k = regions[k].net
            assert net_k is not None
            own = net_k.nodes[at[k][key]].inputs
            if [own[j] for j in merged] != sorted(own):
                return False
    return True


def _select_id(by_input: dict[Any, set[int]]) -> Any:
    return tuple(sorted(((k, tuple(sorted(m))) for k, m in by_input.items()), key=repr))


def _pick(net: Network, gates: _Gates, made: dict[Any, Tensor], by_key: dict[Any, set[int]]) -> Tensor:
    """The tensor of ``by_key`` (key -> regions where it is the one) for each region: a select."""
    if len(by_key) == 1:
        return made[next(iter(by_key))]
    cases = [(gates.of(frozenset(m), exact=False), made[k]) for k, m in by_key.items()]
    return net._select(cases, label="from_torch")


def _topological(after: dict[Any, set[Any]], appearance: dict[Any, tuple[int, int]]) -> list[Any]:
    """Keys in dependency order, earliest appearance first; :class:`_Cycle` when there is none."""
    import heapq

    waiting = {k: len(v) for k, v in after.items()}
    users: dict[Any, list[Any]] = {}
    for k, v in after.items():
        for i in v:
            users.setdefault(i, []).append(k)
    ready = [(appearance[k], n, k) for n, k in enumerate(after) if not waiting[k]]
    heapq.heapify(ready)
    rank = {k: n for n, k in enumerate(after)}
    order = []
    while ready:
        _, _, k = heapq.heappop(ready)
        order.append(k)
        for u in users.get(k, []):
            waiting[u] -= 1
            if not waiting[u]:
                heapq.heappush(ready, (appearance[u], rank[u], u))
    if len(order) != len(after):
        raise _Cycle
    return order
