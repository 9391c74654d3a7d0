"""The allocation sequence of a step (:class:`AllocationPlan`, :func:`allocation_plan`), built from the
analytic peak's liveness (:mod:`dnnsat.cost.memory._peak`) and replayed per configuration through the
caching allocator's simulation (:mod:`dnnsat.cost.memory._allocator`) by
:class:`~dnnsat.cost.memory.ReservedMemory`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ...expr import Const, Expr, any_, where
from ...graph import Network, Node
from ...graph._catalog import prod
from ._footprint import cublas_workspace
from ._peak import _END, _STATE, _largest_rest, _Model

__all__ = ["AllocationPlan", "allocation_plan"]


class AllocationPlan:
    """The ordered tensor allocations and frees of a training step (or inference pass) as expressions,
    built once from the memory model's liveness (:func:`allocation_plan`) and replayed per
    configuration through a :class:`~dnnsat.cost.memory.CachingAllocator`.

    Each instruction is ``(slot, size, cond)``: ``slot >= 0`` allocates ``size`` bytes (an index into
    :attr:`exprs`) as tensor ``slot`` where ``cond`` (an index, -1: always) holds; ``slot < 0`` frees
    tensor ``~slot`` if it is allocated. ``prologue`` runs once (weights, buffers, inputs), then the
    step runs ``steps`` times, as a loop reaches its steady state: ``first`` is the first step (with
    what only it does, e.g. the optimizer state that ``optimizer.step()`` creates lazily), ``later``
    the others. A free of a tensor that cannot be allocated at that point is not recorded.
    """

    def __init__(self, steps: int = 2) -> None:
        self.exprs: list[Expr] = []
        self._index: dict[int, int] = {}
        self.prologue: list[tuple[int, int, int]] = []
        self.first: list[tuple[int, int, int]] = []
        self.later: list[tuple[int, int, int]] = []
        self.steps = steps
        self.slots = 0
        self._live: set[int] = set()  # slots an instruction so far may have allocated and not freed
        self._evaluate: Callable[[Any], tuple[Any, ...]] | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_evaluate"] = None  # generated code is rebuilt on first use
        return state

    def slot(self) -> int:
        self.slots += 1
        return self.slots - 1

    def ref(self, e: Expr) -> int:
        """The index of ``e`` in :attr:`exprs` (added once)."""
        i = self._index.get(id(e))
        if i is None:
            i = self._index[id(e)] = len(self.exprs)
            self.exprs.append(e)
        return i

    def alloc(self, slot: int, size: Expr, cond: Expr, *, into: str = "step", first: bool = False) -> None:
        """Allocate ``size`` bytes as tensor ``slot`` where ``cond`` holds, in the ``prologue`` or the
        ``step`` (``first``: only in the first step)."""
        if (size.is_const and size.value <= 0) or (cond.is_const and not cond.value):
            return
        ins = (slot, self.ref(size), -1 if cond.is_const else self.ref(cond))
        if into == "prologue":
            self.prologue.append(ins)
            return
        self.first.append(ins)
        if not first:
            self.later.append(ins)
        self._live.add(slot)

    def free(self, slot: int, cond: Expr | None = None) -> None:
        """Free tensor ``slot`` (where ``cond`` holds) in the step."""
        if slot not in self._live or (cond is not None and cond.is_const and not cond.value):
            return
        always = cond is None or cond.is_const
        ins = (~slot, -1, -1 if cond is None or always else self.ref(cond))
        self.first.append(ins)
        self.later.append(ins)
        if always:
            self._live.discard(slot)

    def variables(self) -> frozenset[str]:
        """The space variables the sequence depends on."""
        out: set[str] = set()
        for e in self.exprs:
            out |= e.variables()
        return frozenset(out)

    def values(self, env: Any) -> tuple[Any, ...]:
        """The value of every expression of the plan (:attr:`exprs`) at the encoded configuration ``env``."""
        if self._evaluate is None:
            from ...expr import compile_scalar

            self._evaluate = compile_scalar(self.exprs) if self.exprs else (lambda env: ())
        return self._evaluate(env)

    def replay(self, vals: Sequence[Any], allocator: Any) -> int | None:
        """Run the sequence with the expression values ``vals`` (:meth:`values`) through ``allocator``
        (``malloc`` -> address or ``None``, ``free(address)``). Returns the size (bytes) of the request
        that ran out of memory, else ``None``."""
        where_is = [-1] * self.slots  # slot -> address of its block (-1: not allocated)
        malloc, free = allocator.malloc, allocator.free
        for run in range(self.steps + 1):
            for slot, size, cond in self.prologue if run == 0 else self.first if run == 1 else self.later:
                if cond >= 0 and not vals[cond]:
                    continue
                if slot >= 0:
                    nbytes = int(vals[size])
                    if nbytes > 0:
                        addr = malloc(nbytes)
                        if addr is None:
                            return nbytes
                        where_is[slot] = addr
                else:
                    addr = where_is[~slot]
                    if addr >= 0:
                        where_is[~slot] = -1
                        free(addr)
        return None


def allocation_plan(net: Network, budget: Any, device: Any = None, steps: int = 2) -> AllocationPlan:
    """The allocation sequence of ``steps`` training steps (or inference passes) of ``net`` under
    ``budget`` on ``device``, following the liveness rules of :func:`memory_expressions` (module
    docstring): sizes are the model's (512-byte blocks on a GPU), each tensor allocated when its op
    runs and freed at its last use (forward), at the backward of the op that saved it, or when the step
    ends. The order within a step: forward (per op: output, tensors kept for backward, working set,
    then the working set and the inputs it was the last user of are freed), loss (fp32 log-softmax,
    two scalars), backward (loss: two output-sized gradients; per op in reverse: its inputs'
    gradients, its parameter gradients, a second gradient contribution, its working set; then the
    output's gradient, the tensors only it kept), ``optimizer.step()`` (first step: the state it
    creates, per parameter tensor; CUDA foreach Adam/AdamW: one temporary per parameter tensor, all at
    once), then the outputs and the loss are released; the next step's ``zero_grad`` frees the
    gradients. A GPU adds a cuDNN workspace the size of each convolution's output to its forward and
    backward and PyTorch's cuBLAS workspace to the prologue (as :func:`memory_expressions`). Not for
    ``checkpoint`` or ``accumulation_steps > 1`` (``ValueError``)."""
    if budget.train and (budget.checkpoint or budget.accumulation_steps > 1):
        raise ValueError(
            "allocation_plan: activation checkpointing and gradient accumulation have no allocation "
            "sequence yet; their memory is the analytic peak (memory_expressions)"
        )
    return _plan(_Model(net, budget, device), steps)


def _plan(self: _Model, steps: int) -> AllocationPlan:
    """:func:`allocation_plan` over the model ``self`` (its liveness, sizes and working sets)."""
    self.build()
    net = self.net
    plan = AllocationPlan(steps)
    ops = net.ops()
    true = Const(True)

    def params(node: Node, nbytes: int | None = None) -> list[Expr]:
        """Parameter tensors of ``node`` (the largest, the rest), in bytes."""
        p = node.info.params  # type: ignore[union-attr]
        if p.is_const and p.value == 0:
            return []
        b = self.pbytes if nbytes is None else nbytes
        return [t * b for t in _largest_rest(node.info)]

    # prologue: weights and buffers (module construction), the batch and the targets
    param_slots: list[tuple[Node, list[tuple[int, Expr]]]] = []
    for n in ops:
        tensors = [(plan.slot(), e) for e in params(n)]
        for s, e in tensors:
            plan.alloc(s, e, n.gate, into="prologue")
        if tensors:
            param_slots.append((n, tensors))
        if n.info is not None and n.info.mem.buffers:
            plan.alloc(plan.slot(), self.sizes(n.info.mem.buffers), n.gate, into="prologue")
    for gate, size in self.persistent:
        plan.alloc(plan.slot(), size, gate, into="prologue")
    out_t = self.outputs[0]
    rows, n_classes = prod(out_t.shape[:-1]), out_t.shape[-1]
    if self.train:
        plan.alloc(plan.slot(), self.rounded(8 * rows), true, into="prologue")
    if self.gpu:  # cuBLAS's workspace, allocated at the first GEMM and kept
        plan.alloc(plan.slot(), cublas_workspace(net, self.device), true, into="prologue")

    grad_slots = {n.index: [plan.slot() for _ in tensors] for n, tensors in param_slots}

    order = [n.index for n in self.alloc_nodes]
    position = {k: i for i, k in enumerate(order)}
    out_slot = {k: plan.slot() for k in order}
    grad_slot = {r: plan.slot() for r in self.roots}
    fwd_free: dict[int, list[tuple[int, Expr]]] = {}
    bwd_free: dict[int, list[tuple[int, Expr]]] = {}
    grad_start: dict[int, list[tuple[int, Expr]]] = {}  # backward point -> (root, condition)
    second: dict[int, list[Expr]] = {}
    end_slots: list[int] = []
    for r, root in self.roots.items():
        gate = root.gate
        uses = sorted(root.uses, key=lambda u: u[0])
        ends = [c for t, c in uses if t == _END]
        at_end = any_(ends) if ends else Const(False)
        if ends:
            end_slots.append(out_slot[r])
        saved: Expr = Const(False)
        for t, c in sorted(root.savers, key=lambda s: s[0]):
            bwd_free.setdefault(t, []).append((out_slot[r], gate & c & ~saved & ~at_end))
            saved = saved | c
        later: Expr = Const(False)
        for t, c in reversed(uses):
            if t != _END:
                fwd_free.setdefault(t, []).append((out_slot[r], gate & c & ~later & ~saved))
            later = later | c
        fwd_free.setdefault(root.birth, []).append((out_slot[r], gate & ~later & ~saved))
        if not (self.train and root.grad and root.grad_uses):
            continue
        points: dict[int, list[Expr]] = {}
        for t, c, aliased in root.grad_uses:
            if t == _END:
                p = _END
            else:
                i = position[t] - 1 if aliased else position[t]
                if i < 0 or order[i] < root.birth:
                    continue
                p = order[i]
            points.setdefault(p, []).append(c)
        later = Const(False)
        for p in sorted(points, reverse=True):
            here = any_(points[p])
            grad_start.setdefault(p, []).append((r, gate & here & ~later))
            later = later | here
        gu = sorted(root.grad_uses, key=lambda u: u[0])
        for j, (t, c, aliased) in enumerate(gu):
            if t == _END or aliased or (j and gu[j - 1][0] == t):
                continue
            rest = any_(u[1] for u in gu[j + 1 :]) if j + 1 < len(gu) else Const(False)
            if not (rest.is_const and not rest.value):
                second.setdefault(t, []).append(where(gate & c & rest, root.size, 0))

    def workspace(node: Node) -> Expr:
        """cuDNN's workspace of a convolution on a GPU (the size of its output, as the analytic peak)."""
        if self.gpu and node.op.startswith("conv"):
            return self.rounded(net.tensors[node.output].numel * self.act)
        return Const(0)

    # forward
    kept_slot: dict[int, int] = {}
    cached_slots: list[int] = []
    for node in net.nodes:
        k = node.index
        if k in out_slot:
            g = node.gate
            plan.alloc(out_slot[k], self.roots[node.output].size, g)
            kept = self.kept_extra(node)
            if not (kept.is_const and kept.value == 0):
                kept_slot[k] = plan.slot()
                plan.alloc(kept_slot[k], kept, g)
            cached = self.cached_weights(node)
            if not (cached.is_const and cached.value == 0):
                cached_slots.append(plan.slot())
                plan.alloc(cached_slots[-1], cached, g)
            tmp = plan.slot()
            plan.alloc(tmp, self.working_sets(node)[0] + self.mixed_sets(node)[0] + workspace(node), g)
            plan.free(tmp)
        for s, c in fwd_free.get(k, ()):
            plan.free(s, c)

    if self.train:
        # loss: cross-entropy in fp32 over the (first) output
        logp = self.rounded(4 * rows * n_classes)
        logits32, logp_slot, g1, g2 = plan.slot(), plan.slot(), plan.slot(), plan.slot()
        if self.half[out_t.index]:
            plan.alloc(logits32, logp, true)
        plan.alloc(logp_slot, logp, true)
        plan.free(logits32)
        scalars = [plan.slot(), plan.slot()]
        for s in scalars:
            plan.alloc(s, self.rounded(Const(4)), true)
        for s in cached_slots:  # autocast exits: its weight cache is released
            plan.free(s)
        # backward of the loss: two output-sized gradients, then the output's gradient
        plan.alloc(g1, logp, true)
        plan.alloc(g2, logp, true)
        plan.free(logp_slot)
        plan.free(g1)
        for r, c in grad_start.get(_END, ()):
            plan.alloc(grad_slot[r], self.roots[r].size, c)
        plan.free(g2)
        for op in reversed(ops):
            k = op.index
            # parameter gradients; under autocast 16-bit ones first, made fp32 once the backward is done
            half = [(plan.slot(), b) for b in params(op, 2)] if self.casts_weights(op) else []
            for s, b in half or zip(grad_slots.get(k, ()), params(op)):
                plan.alloc(s, b, op.gate)
            if k in out_slot and self.roots[op.output].grad:
                g = op.gate
                for r, c in grad_start.get(k, ()):
                    plan.alloc(grad_slot[r], self.roots[r].size, c)
                extra = [plan.slot() for _ in second.get(k, ())]
                for s, e in zip(extra, second.get(k, ())):
                    plan.alloc(s, e, true)
                bw = self.backward_set(op)
                tmp = plan.slot()
                plan.alloc(tmp, bw + workspace(op), g)
                plan.free(tmp)
                for s in extra:
                    plan.free(s)
                plan.free(grad_slot[op.output])
            for s, c in bwd_free.get(k, ()):
                plan.free(s, c)
            if k in kept_slot:
                plan.free(kept_slot[k])
            if half:  # ToCopyBackward
                for s, b in zip(grad_slots.get(k, ()), params(op)):
                    plan.alloc(s, b, op.gate)
                for s, _ in half:
                    plan.free(s)
        # optimizer.step()
        state = _STATE[self.optimizer]  # tensors optimizer.step() creates per parameter, once
        state_bytes = 4 if self.mixed else self.pbytes
        for n, _ in param_slots:
            for e in params(n, state_bytes):
                for _ in range(state):
                    plan.alloc(plan.slot(), e, n.gate, into="step", first=True)
        if self.gpu and self.optimizer in ("adam", "adamw"):  # _foreach_sqrt of every exp_avg_sq
            temps = []
            for n, _ in param_slots:
                for e in params(n, state_bytes):
                    temps.append(plan.slot())
                    plan.alloc(temps[-1], e, n.gate)
            for s in temps:
                plan.free(s)
        for s in scalars:
            plan.free(s)
    for s in end_slots:
        plan.free(s)
    for s in (*out_slot.values(), *grad_slot.values(), *kept_slot.values()):  # nothing outlives the step
        plan.free(s)
    for slots in grad_slots.values():  # the next step's zero_grad(set_to_none=True)
        for s in slots:
            plan.free(s)
    return plan
