"""The symbolic network builder: tensors whose shapes are expressions over the space's variables.

A :class:`Network` records operator applications (catalog entries, see :mod:`dnnsat.graph._catalog`)
in execution order. Each node carries a *gate*: the condition under which it runs (``repeat`` depth
choices and ``choose`` branches). A gated node's costs are ``where(gate, cost, 0)`` and its validity
rules become ``~gate | rule``. Structural mistakes (wrong ranks, missing attributes) raise
:class:`GraphError` at once; a rule that can never hold on an always-active node raises at build time too.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..expr import (
    Const,
    Expr,
    ExprLike,
    all_,
    any_,
    compile_scalar,
    compile_vectorized,
    interval,
    sum_,
    where,
)
from ._args import _int_expr
from ._catalog import Attrs, Check, Shape, eq
from ._core import _Built
from ._gates import _absorb
from ._ops_attention import _AttentionOps
from ._ops_conv import _ConvOps
from ._ops_elementwise import _ElementwiseOps
from ._ops_layout import _LayoutOps
from ._ops_linear import _LinearOps
from ._ops_pool import _PoolOps
from ._ops_recurrent import _RecurrentOps
from ._tensor import Concrete, GraphError, Node, Tensor

__all__ = ["Network"]

log = logging.getLogger("dnnsat.graph")


class Network(_ConvOps, _LinearOps, _AttentionOps, _RecurrentOps, _ElementwiseOps, _PoolOps, _LayoutOps):
    """Builder of a symbolic network. Methods add operators and return the output :class:`Tensor`.

    >>> net = Network()
    >>> x = net.input((v.batch_size, 3, v.res, v.res))
    >>> x = net.relu(net.batchnorm(net.conv2d(x, v.width, v.kernel, padding="same")))
    """

    # -- sources ----------------------------------------------------------------------------------
    def output(self, *tensors: Tensor) -> Network:
        """Mark the network outputs; returns the network (so ``build`` can ``return net.output(x)``)."""
        self.outputs = [self._check_tensor(t, "output") for t in tensors]
        return self

    # -- control: depth choices -------------------------------------------------------------------
    def repeat(
        self, n: ExprLike, max: int, body: Callable[[int, Tensor], Tensor], x: Tensor | None = None
    ) -> Tensor:
        """Apply ``body(i, x)`` for ``i < n`` (``n`` symbolic, at most ``max``): a depth choice.

        Block ``i`` runs only when ``n > i``: its costs are selected with ``where(n > i, ...)`` and
        its output must keep the input shape (a validity rule, ``"repeat#k: block i keeps the shape"``;
        a body that changes the shape wherever it runs is a :class:`GraphError`, here when the shapes
        are constants, else when the Problem is built). ``0 <= n <= max`` are validity rules too.
        Returns the last block's output.
        """
        label = f"repeat#{len(self.nodes)}"
        depth = _int_expr(n, "n", label, low=0)
        if isinstance(max, bool) or not isinstance(max, int) or max < 0:
            raise GraphError(f"{label}: max must be a non-negative int, got {max!r}")
        if depth.is_const and depth.value > max:
            raise GraphError(f"{label}: n must be <= max={max}, got {depth.value}")
        x = self.last if x is None else self._check_tensor(x, label)
        outer = self._gate
        for rule, ok in ((f"depth at most max={max}", depth <= max), ("depth is non-negative", depth >= 0)):
            self.extra_checks.append((label, Check(rule, (~outer) | ok)))
        for i in range(max):
            cond = depth > i
            if cond.is_const and not cond.value:
                break
            y = self._gated(cond, lambda i=i, x=x: body(i, x))  # type: ignore[misc]
            y = self._check_tensor(y, f"{label} block {i}")
            if y.ndim != x.ndim:
                raise GraphError(f"{label}: block {i} changes the rank from {x.ndim} to {y.ndim}")
            same = all_(eq(p, q) for p, q in zip(y.shape, x.shape))
            active = outer & cond
            block = _RepeatBlock(label, i, active, same, x.shape, y.shape)
            if same.is_const and not same.value and not (active.is_const and not active.value):
                raise GraphError(block.message(""))
            self.extra_checks.append((label, Check(f"block {i} keeps the shape", (~active) | same)))
            self.repeat_blocks.append(block)
            x = self._select([(cond, y), (Const(True), x)], same_shape=True, label=label) if y is not x else x
        return x

    # -- summaries --------------------------------------------------------------------------------
    def ops(self) -> list[Node]:
        """Catalog operator nodes (no selects), in execution order."""
        return [n for n in self.nodes if n.info is not None]

    def checks(self, train: bool = True) -> list[tuple[str, Expr]]:
        """Gated validity rules ``(name, expr)``, named ``"<op>#<pos>: <rule>"``.

        The same rule of several operators (e.g. one per repeated block) becomes one constraint
        ``~(gate_1 | gate_2 | ...) | rule`` named after the first of them; :attr:`check_sources` maps
        each name to all the operators it covers.
        """
        groups: dict[tuple[str, int], tuple[str, Expr, list[Expr], list[str]]] = {}
        for node in self.ops():
            assert node.info is not None
            for c in node.info.checks:
                if c.train_only and not train:
                    continue
                key = (c.rule, id(c.expr))
                if key not in groups:
                    groups[key] = (f"{node.label}: {c.rule}", c.expr, [], [])
                groups[key][2].append(node.gate)
                groups[key][3].append(node.label)
        out: list[tuple[str, Expr]] = []
        self.check_sources = {}
        for name, rule, gates, labels in groups.values():
            gate = any_(_absorb(list(dict.fromkeys(gates))))  # distinct, minimal gates, in order
            out.append((name, (~gate) | rule))
            self.check_sources[name] = labels
        out.extend((f"{label}: {c.rule}", c.expr) for label, c in self.extra_checks)
        return out

    def valid(self, train: bool = True) -> Expr:
        """One boolean expression: every validity rule holds."""
        return all_(e for _, e in self.checks(train))

    def total(self, what: str, ops: Iterable[str] | None = None) -> Expr:
        """Sum over active ops of ``what``: ``params``, ``macs``, ``flops``, ``ops``, ``saved``, ``io``."""
        if what == "flops" and ops is None:
            return 2 * self.total("macs")
        keep = set(ops) if ops is not None else None
        by_gate: dict[int, tuple[Expr, list[Expr]]] = {}  # ops sharing a gate share one where()
        for node in self.ops():
            if keep is not None and node.op not in keep:
                continue
            value = self._node_value(node, what)
            if value.is_const and value.value == 0:
                continue
            by_gate.setdefault(id(node.gate), (node.gate, []))[1].append(value)
        return sum_(where(gate, sum_(values), 0) for gate, values in by_gate.values())

    def _node_value(self, node: Node, what: str) -> Expr:
        info = node.info
        assert info is not None
        if what == "io":
            if info.io is not None:
                return info.io
            ins = sum_(self.tensors[i].numel for i in node.inputs)
            return ins + self.tensors[node.output].numel + info.params
        if what == "flops":
            return info.flops
        return getattr(info, what)  # type: ignore[no-any-return]

    def costs(self) -> dict[str, Expr]:
        """Symbolic totals: ``params``, ``macs``, ``flops`` (2/MAC), ``ops``, ``saved``, ``io`` (elements)."""
        return {k: self.total(k) for k in ("params", "macs", "flops", "ops", "saved", "io")}

    def check_always_false(
        self,
        box: Mapping[str, tuple[Any, Any]],
        train: bool = True,
        values: Mapping[str, Any] | None = None,
    ) -> None:
        """Raise :class:`GraphError` for a network no configuration of the space can make valid.

        Two kinds of mistakes: a rule of an always-active op that fails on every config of ``box``
        (``{name: (low, high)}``; sound interval bounds, so a network with a valid configuration is
        never rejected), and a ``repeat`` body that changes the shape wherever it runs. The latter is
        decided exactly by enumerating the encoded ``values`` (``{name: array}`` of finite
        parameters) of the variables it reads when they are at most ``2**18`` combinations, else by
        interval bounds.
        """
        for block in self.repeat_blocks:
            if block.changes_shape(box, values or {}):
                raise GraphError(block.message(" in every configuration of the space where it runs"))
        items = [
            (f"{n.label}: {c.rule}", c.expr)
            for n in self.ops()
            if n.info
            for c in n.info.checks
            if not (c.train_only and not train) and n.gate.is_const and n.gate.value
        ]
        items = [(name, e) for name, e in items if e.variables() <= set(box)]
        if not items:
            return
        bounds = interval([e for _, e in items], box)
        for name, e in items:
            if not bounds[id(e)][1]:
                raise GraphError(f"{name}: this rule fails for every configuration of the space ({e})")

    # -- concrete evaluation ----------------------------------------------------------------------
    def _evaluator(self) -> _Built:
        if self._built is None:
            roots: list[Expr] = []
            layout: list[tuple[str, Any]] = []

            def add(kind: str, key: Any, e: Expr) -> None:
                roots.append(e)
                layout.append((kind, key))

            for node in self.nodes:
                add("gate", node.index, node.gate)
                for name, value in node.attrs.items():
                    if isinstance(value, Expr):
                        add("attr", (node.index, name, None), value)
                    elif isinstance(value, tuple) and value and all(isinstance(v, Expr) for v in value):
                        for j, v in enumerate(value):
                            add("attr", (node.index, name, j), v)
                for j, (cond, _) in enumerate(node.cases):
                    add("case", (node.index, j), cond)
            for t in self.tensors:
                for j, d in enumerate(t.shape):
                    add("dim", (t.index, j), d)
            self._built = _Built(compile_scalar(roots), layout)
        return self._built

    def concretize(self, env: Mapping[str, Any]) -> Concrete:
        """Evaluate gates, attributes, branch choices and shapes at one encoded assignment ``env``."""
        built = self._evaluator()
        values = built.fn(env)
        gates: dict[int, bool] = {}
        attrs: dict[int, dict[str, Any]] = {n.index: dict(n.attrs) for n in self.nodes}
        cases: dict[int, list[bool]] = {}
        shapes: dict[int, list[int]] = {t.index: [0] * t.ndim for t in self.tensors}
        for (kind, key), val in zip(built.layout, values):
            if kind == "gate":
                gates[key] = bool(val)
            elif kind == "attr":
                idx, name, j = key
                if j is None:
                    attrs[idx][name] = val
                else:
                    cur = attrs[idx][name]
                    attrs[idx][name] = (*cur[:j], val, *cur[j + 1 :])
            elif kind == "case":
                cases.setdefault(key[0], []).append(bool(val))
            else:
                shapes[key[0]][key[1]] = val
        return Concrete(
            self,
            gates,
            {k: Attrs(v) for k, v in attrs.items()},
            cases,
            {k: tuple(v) for k, v in shapes.items()},
        )

    def summary(self) -> str:
        """One line per operator: label, gate, output shape."""
        lines = []
        for n in self.nodes:
            gate = "" if n.gate.is_const else f"  [if {n.gate}]"
            shape = ", ".join(str(d) for d in self.tensors[n.output].shape)
            lines.append(f"{n.label:<24} ({shape}){gate}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Network({self.name!r}, {len(self.ops())} ops, {len(self.inputs)} inputs)"


_ENUMERATE_LIMIT = 1 << 18  # combinations enumerated exactly by check_always_false


@dataclass(frozen=True, eq=False)
class _RepeatBlock:
    """Block ``index`` of a ``repeat``: it runs when ``active``; ``same``: its output keeps the shape."""

    label: str
    index: int
    active: Expr
    same: Expr
    before: Shape
    after: Shape

    def message(self, where_: str) -> str:
        def text(shape: Shape) -> str:
            return "(" + ", ".join(str(d) for d in shape) + ")"

        return (
            f"{self.label}: block {self.index} changes the shape {text(self.before)} -> {text(self.after)}"
            f"{where_}; a repeated body must return a tensor of its input's shape (change the shape "
            f"before or after the repeat)"
        )

    def changes_shape(self, box: Mapping[str, tuple[Any, Any]], values: Mapping[str, Any]) -> bool:
        """True when the block can run but keeps the shape in no configuration where it runs."""
        names = sorted(self.active.variables() | self.same.variables())
        if all(n in values for n in names) and math.prod(len(values[n]) for n in names) <= _ENUMERATE_LIMIT:
            grids = np.meshgrid(*(np.asarray(values[n]) for n in names), indexing="ij")
            cols = {n: g.ravel() for n, g in zip(names, grids)}
            active, same = compile_vectorized([self.active, self.same], box)(cols)
            return bool(np.any(active)) and not bool(np.any(np.logical_and(active, same)))
        if not set(names) <= set(box):
            return False
        bounds = interval([self.active, self.same], box)
        return bool(bounds[id(self.active)][1]) and not bounds[id(self.same)][1]
