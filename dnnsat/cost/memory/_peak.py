"""The analytic peak memory of a training step or an inference forward: the replay of the network's
execution order over storages (:class:`_Model`: sizes, lifetimes, tensors saved for backward, gradients,
autocast's casts, activation checkpointing, optimizer state, the GPU's rounding and workspaces) and its
entry point :func:`memory_expressions`. The rules are described in :mod:`dnnsat.cost.memory`; the CPU
kernels' working sets come from :mod:`dnnsat.cost.memory._cpu`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...expr import Const, Expr, all_, any_, as_expr, ceildiv, maximum, minimum, substitute, sum_, where
from ...graph import Network, Node
from ...graph._catalog import CATALOG, Attrs, Mem, Sizes, prod
from ...graph._gates import _contradicts, _implies, _split_gate
from .._cpu_backend import CpuBackend, detect_cpu_backend
from ._batches import micro_batches
from ._cpu import (
    CONV_OPS,
    _as_2d,
    _flash_transpose,
    _warn_unvalidated,
    cpu_bf16_matmul_scratch,
    cpu_channels_last_depthwise_scratch,
    cpu_conv_transpose_working_sets,
    cpu_conv_working_sets,
    expanded_linear_grad,
)
from ._footprint import cublas_workspace, footprint
from ._layouts import channels_last_tensors, grad_strided, strided

__all__ = ["memory_expressions", "MEMORY_KEYS", "CUDA_BLOCK", "CUDA_SEGMENT"]

MAX_POOL_OPS = frozenset({"maxpool1d", "maxpool2d", "adaptive_maxpool1d", "adaptive_maxpool2d"})
MEMORY_KEYS = (
    "memory",
    "memory_weights",
    "memory_gradients",
    "memory_optimizer",
    "memory_activations",
    "memory_transient",
    "memory_input",
    "memory_overhead",
)

# c10/cuda/CUDACachingAllocator.cpp: ``kMinBlockSize = 512`` (every allocation is rounded up to a
# multiple of 512 bytes) and ``kRoundLarge = 2097152`` / ``kSmallBuffer = 2097152`` (segments are
# requested from cudaMalloc in 2 MiB multiples; small blocks share 2 MiB segments).
CUDA_BLOCK = 512
CUDA_SEGMENT = 2 * 1024 * 1024
_FIXED = {"f32": 4, "i64": 8, "bool": 1}
_STATE = {"sgd": 0, "momentum": 1, "adam": 2, "adamw": 2}
_END = 1 << 30  # "until the end of the step"


@dataclass
class _Root:
    """One storage: its producer (time), gate, size and the moments it is used/saved."""

    birth: int
    gate: Expr
    size: Expr  # bytes, ungated
    grad: bool  # requires grad
    uses: list[tuple[int, Expr]]
    savers: list[tuple[int, Expr]]
    grad_uses: list[tuple[int, Expr, bool]]  # (time, cond, aliased: the gradient costs nothing there)


def _loss_inputs(net: Network, loss: int) -> set[int]:
    """The tensors tensor ``loss`` (the training loop's loss input) is computed from, itself included:
    the backward differentiates only these (an auxiliary head's output, a branch whose result is
    dropped, get no gradient; their parameters no ``.grad`` and no optimizer state)."""
    reach = {loss}
    for node in reversed(net.nodes):
        if node.output in reach:
            reach.update(node.inputs)
            reach.update(t for _, t in node.cases)
    return reach


def _largest_rest(info: Any) -> tuple[Expr, ...]:
    """Elements of an op's parameters as (the largest tensor, the rest), or all as one tensor."""
    largest = info.mem.largest_param
    if largest is None:
        return (info.params,)
    rest = info.params - largest
    return (largest,) if rest.is_const and rest.value == 0 else (largest, rest)


def _balanced_max(terms: Sequence[Expr]) -> Expr:
    items = [t for t in terms]
    if not items:
        return Const(0)
    while len(items) > 1:
        items = [
            maximum(items[i], items[i + 1]) if i + 1 < len(items) else items[i]
            for i in range(0, len(items), 2)
        ]
    return items[0]


# ops whose output keeps the layout of their first input (TensorIterator)


class _Model:
    def __init__(self, net: Network, budget: Any, device: Any) -> None:
        self.net = net
        self.train = budget.mode == "train"
        self.act = budget.act_bytes
        self.pbytes = budget.param_bytes
        self.mixed = budget.dtype == "mixed"
        self.steps = budget.accumulation_steps if self.train else 1
        self.checkpoint = budget.checkpoint
        self.accumulated: Expr = Const(0)  # gradients accumulated by earlier micro-batches
        self.optimizer = budget.optimizer or "sgd"
        self.gpu = device is not None and getattr(device, "kind", "cpu") == "gpu"
        self.device = device
        self.dtype = budget.dtype
        # the CPU kernels the model follows: a CPU profile's, else this machine's (detected)
        self.backend: CpuBackend | None = None
        if not self.gpu:
            self.backend = device.cpu_backend() if hasattr(device, "cpu_backend") else detect_cpu_backend()
        self.conv_sets: dict[int, tuple[Expr, Expr, Expr]] = {}
        self.cl: set[int] | None = None  # channels-last tensors (:meth:`channels_last`)

    # -- sizes ---------------------------------------------------------------------------------------
    def rounded(self, nbytes: Expr) -> Expr:
        return ceildiv(nbytes, CUDA_BLOCK) * CUDA_BLOCK if self.gpu else nbytes

    def sizes(self, items: Sizes, act: int | None = None) -> Expr:
        """Bytes of ``((elements, kind), ...)``, each tensor rounded like the allocator (``act``: bytes
        per activation element, default the budget's)."""
        total: Expr = Const(0)
        for n, kind in items:
            if kind == "mask":  # a dropout mask: the input's dtype on the CPU, bool on CUDA (see Mem)
                kind = "bool" if self.gpu else "act"
            b = (act or self.act) if kind == "act" else self.pbytes if kind == "param" else _FIXED[kind]
            total = total + self.rounded(n * b)
        return total

    # -- storages ------------------------------------------------------------------------------------
    def build(self) -> None:
        net = self.net
        alias: dict[int, list[tuple[Expr, int]]] = {}
        needs_grad: dict[int, bool] = {}
        self.roots: dict[int, _Root] = {}
        self.persistent: list[tuple[Expr, Expr]] = []  # (gate, bytes) of network inputs
        self.alloc_nodes: list[Node] = []
        self.outputs = net.outputs or [net.last]
        reach = self.reach = _loss_inputs(net, self.outputs[0].index)
        self.autocast()
        self.checkpoint_blocks()
        for node in net.nodes:
            out = node.output
            t = net.tensors[out]
            if node.info is None:  # select: aliases the case taken
                alias[out], taken = [], Const(False)
                for cond, ti in node.cases:
                    eff = cond & ~taken
                    taken = taken | cond
                    alias[out] += [(eff & c, r) for c, r in alias[ti]]
                needs_grad[out] = any(needs_grad[ti] for _, ti in node.cases)
                continue
            mem = self.mem(node)
            ins = node.inputs
            if node.op == "input":
                alias[out] = []
                # mixed precision: the batch stays fp32, autocast casts it in the first op
                nbytes = 8 if t.dtype == "int64" else 4 if self.mixed else self.act
                self.persistent.append((node.gate, self.rounded(t.numel * nbytes)))
                needs_grad[out] = False
                continue
            if node.op == "parameter":
                alias[out], needs_grad[out] = [], True
                continue
            if node.op == "constant" and node.attrs.buffer:  # module state, counted with the weights
                alias[out], needs_grad[out] = [], False
                continue
            needs_grad[out] = (
                any(needs_grad[i] for i in ins)
                or not (node.info.params.is_const and node.info.params.value == 0)
                or "shared" in node.attrs
            )
            # a traced model's transpose back is a view in training too: the kernel wrote its output in
            # the layout of a query that is itself a transposed view (``empty_like``), and its backward
            # copies nothing
            flash = not self.gpu and (net.permute_views or not self.train) and _flash_transpose(net, node)
            if mem.view or (mem.eval_view and not self.train) or flash:
                alias[out] = alias[ins[0]]
                continue
            alias[out] = [(Const(True), out)]
            size = self.rounded(t.numel * self.tensor_bytes(out))
            # a tensor the loss is not computed from (an auxiliary head's) gets no gradient
            self.roots[out] = _Root(node.index, node.gate, size, needs_grad[out] and out in reach, [], [], [])
            self.alloc_nodes.append(node)
        self.cat_nodes: list[Node] = []  # training: concats, whose input gradients are views
        for node in net.nodes:
            if node.info is None and node.same_shape:
                # a repeat block's input stays alive until the block's output is selected, as the
                # argument of a block's ``forward`` in Python and in ``dnnsat.torch.GraphModule`` (which
                # checks the shapes there); allocator traces of the zoo transformer's eval forward
                for c, r in alias[node.cases[-1][1]]:
                    self.roots[r].uses.append((node.index, c & node.gate))
            if node.info is None or node.op in ("input", "parameter"):
                continue
            mem = self.mem(node)
            if node.output not in self.roots:  # a view
                continue
            # add's backward hands its output gradient to both inputs: the input produced first keeps
            # that storage alive (no allocation at the add), the other input's gradient is the same one;
            # under autocast an input of another dtype than the output gets a cast copy of it
            same = [i for i in node.inputs if self.half[i] == self.half[node.output]]
            keeper = min((i for i in same if needs_grad[i]), default=None) if mem.grad_alias else None
            gate = _split_gate(node.gate)
            for i in node.inputs:
                for c, r in alias[i]:
                    if _contradicts(gate, c):  # e.g. "block i skipped" inside block i + 1
                        continue
                    self.roots[r].uses.append((node.index, c & node.gate))
                    if node.output not in reach:  # not differentiated: hands no gradient back
                        continue
                    if not mem.grad_alias or i == keeper or i not in same:
                        view = i == keeper or node.op == "concat"  # concat: see _cat_slices
                        self.roots[r].grad_uses.append((node.index, c & node.gate, view))
            if node.op == "concat" and self.train:
                self.cat_nodes.append(node)
            if self.train:
                for s in mem.saves:
                    if s in self.saved_copies.get(node.index, ()):  # autocast keeps its cast copy instead
                        continue
                    tensor = node.output if s == "out" else node.inputs[int(s[2:])]
                    for c, r in alias[tensor]:
                        if _contradicts(gate, c):
                            continue
                        if node.index in self.block_of:  # checkpointed: saved only when recomputed
                            self.recomputed[self.block_of[node.index]].append((node.index, c & node.gate, r))
                        else:
                            self.roots[r].savers.append((node.index, c & node.gate))
        for ti, k, cond in net.held:  # a local variable of a traced forward holds it (Network.held)
            for c, r in alias[ti]:
                self.roots[r].uses.append((k, c & cond))
        for first, x, cond in self.blocks:  # a checkpoint keeps its input until the block's backward
            for c, r in alias[x]:
                self.roots[r].savers.append((first, c & cond))
        for t in self.outputs:  # kept by the training loop; the loss is taken on the first
            for c, r in alias[t.index]:
                self.roots[r].uses.append((_END, c))
                if t is self.outputs[0]:
                    self.roots[r].grad_uses.append((_END, c, False))
        self.alias = alias
        self.needs_grad = needs_grad
        self.shared = self.shared_grads()
        # ops whose parameters get gradients (and optimizer state): those the loss is computed from, and
        # the owners of parameters such an op shares
        self.trained = {n.index for n in net.ops() if n.output in reach} | {o for o, _, _ in self.shared}

    def input_grad(self, node: Any) -> bool:
        """Whether some input of ``node`` needs a gradient."""
        return any(self.needs_grad[i] for i in node.inputs)

    def _implied(self, root: _Root, cond: Expr) -> bool:
        return _implies(_split_gate(root.gate), _split_gate(cond))

    # -- timeline ------------------------------------------------------------------------------------
    def forward_and_backward(self) -> tuple[list[Expr], list[Expr], Expr, Expr]:
        """(forward candidates, backward candidates, saved at the end of the forward, output bytes)."""
        order = [n.index for n in self.alloc_nodes]
        fwd_prefix: list[tuple[int, Expr]] = []  # (from time, bytes) alive for every forward k >= time
        bwd_saved: list[tuple[int, Expr]] = []  # (saver time, bytes) alive for every backward k >= time
        spans: dict[int, list[Expr]] = {k: [] for k in order}
        gspans: dict[int, list[Expr]] = {k: [] for k in order}
        through: dict[int, list[Expr]] = {k: [] for k in order}  # gspans[k] that outlive k's backward
        second: dict[int, list[Expr]] = {k: [] for k in order}
        end_alive: list[Expr] = []  # outputs
        for root in self.roots.values():
            uses = sorted(root.uses, key=lambda u: u[0])
            last = uses[-1][0] if uses else root.birth
            # suffix "used at or after" conditions
            suffix: list[Expr] = [Const(False)] * (len(uses) + 1)
            for i in range(len(uses) - 1, -1, -1):
                suffix[i] = Const(True) if self._implied(root, uses[i][1]) else uses[i][1] | suffix[i + 1]
            saved_any: Expr = Const(False)
            uncond = False
            for t, c in sorted(root.savers, key=lambda s: s[0]):
                if uncond:
                    break
                attributed = c & ~saved_any
                if self._implied(root, c):
                    attributed, uncond = ~saved_any, True
                saved_any = Const(True) if uncond else saved_any | c
                bwd_saved.append((t, where(root.gate & attributed, root.size, 0)))
            if uncond:
                fwd_prefix.append((root.birth + 1, where(root.gate, root.size, 0)))
            else:
                if not (saved_any.is_const and not saved_any.value):
                    fwd_prefix.append((last + 1, where(root.gate & saved_any, root.size, 0)))
            j = 0
            for k in order:
                if k <= root.birth:
                    continue
                if k > last:
                    break
                while uses[j][0] < k:
                    j += 1
                if not uncond:
                    spans[k].append(where(root.gate & (saved_any | suffix[j]), root.size, 0))
            if last == _END:
                end_alive.append(where(root.gate, root.size, 0))
            if self.train and root.grad and root.grad_uses:
                self._grad_spans(root, order, gspans, second, through)
        self._cat_slices(order, gspans, through)
        fwd, bwd = [], []
        prefix_events = sorted(fwd_prefix, key=lambda e: e[0])
        extras: dict[int, Expr] = {}  # tensors an op keeps for backward besides its inputs/output
        for node in self.alloc_nodes:
            kept = self.kept_extra(node)
            if not (kept.is_const and kept.value == 0):
                extras[node.index] = where(node.gate, kept, 0)
        recomputed = self.recomputed_saved(extras)
        # forward
        running: Expr = Const(0)
        self.cached: Expr = Const(0)  # autocast's weight copies no backward keeps, until autocast exits
        pi = 0
        for node in self.alloc_nodes:
            k = node.index
            while pi < len(prefix_events) and prefix_events[pi][0] <= k:
                running = running + prefix_events[pi][1]
                pi += 1
            here = self.roots[node.output].size + self.working_sets(node)[0] + self.kept_extra(node)
            here = here + self.mixed_sets(node)[0] + self.cached_weights(node)
            fwd.append(running + self.cached + self.accumulated + sum_(spans[k]) + where(node.gate, here, 0))
            if k in extras:
                running = running + extras[k]
            cached = self.cached_weights(node)
            if not (cached.is_const and cached.value == 0):
                self.cached = self.cached + where(node.gate, cached, 0)
        while pi < len(prefix_events):
            running = running + prefix_events[pi][1]
            pi += 1
        saved_end = running
        if not self.train:
            return fwd, [], Const(0), sum_(end_alive)
        # backward: saved by ops not yet differentiated + parameter gradients so far
        saved_at: dict[int, list[Expr]] = {}
        for t, b in bwd_saved:
            saved_at.setdefault(t, []).append(b)
        for k, b in extras.items():
            saved_at.setdefault(k, []).append(b)
        # what is still saved when the backward reaches op k: the tensors saved by ops up to k, as a
        # prefix sum in execution order (no subtraction, so interval bounds over boxes stay tight)
        ops = self.net.ops()
        indices = {op.index for op in ops}
        unreleased: dict[int, Expr] = {}
        saved: Expr = sum_(b for t, bs in saved_at.items() if t not in indices for b in bs)
        released: dict[int, Expr] = {}  # still saved once the backward of op k is done
        for op in ops:
            released[op.index] = saved
            saved = unreleased[op.index] = saved + sum_(saved_at.get(op.index, []))
        grads = self.accumulated
        end = sum_(end_alive) + self.loss_scalars()  # outputs (referenced by the loop) and the loss
        shared = self.shared
        for op in reversed(ops):
            k = op.index
            # under autocast an op whose weights are cast computes their gradients in 16 bits; they
            # become fp32 parameter gradients after its backward (ToCopyBackward)
            own = 2 if self.casts_weights(op) else None
            if k in gspans and self.roots[op.output].grad:
                bw = self.backward_set(op)
                mine = where(op.gate, self.param_grad_bytes(op, own), 0) + sum_(
                    b for _, user, b in shared if user == k
                )
                held = sum_(b for owner, user, b in shared if owner <= k < user)
                live = unreleased[k] + recomputed.get(k, Const(0)) + grads + held + mine + sum_(gspans[k])
                live = live + sum_(second[k])
                bwd.append(live + end + where(op.gate, bw, 0))
                if own is not None:  # ToCopyBackward: the fp32 gradients while the 16-bit ones live
                    fp32 = where(op.gate, self.param_grad_bytes(op), 0)
                    bwd.append(released[k] + grads + held + mine + fp32 + sum_(through[k]) + end)
            if self.steps == 1 and k in self.trained:
                grads = grads + where(op.gate, self.param_grad_bytes(op), 0)
        return fwd, bwd, saved_end, sum_(end_alive)

    def _grad_spans(
        self,
        root: _Root,
        order: list[int],
        gspans: dict[int, list[Expr]],
        second: dict[int, list[Expr]],
        through: dict[int, list[Expr]],
    ) -> None:
        """The gradient of ``root`` lives from its last consumer's backward to its producer's (``through``:
        after each backward but its producer's)."""
        uses = sorted(root.grad_uses, key=lambda u: u[0])
        suffix: list[Expr] = [Const(False)] * (len(uses) + 1)
        for i in range(len(uses) - 1, -1, -1):
            suffix[i] = Const(True) if self._implied(root, uses[i][1]) else uses[i][1] | suffix[i + 1]
        j = 0
        for k in order:
            if k < root.birth or k > uses[-1][0]:
                continue
            while j < len(uses) and (uses[j][0] < k or (uses[j][0] == k and uses[j][2])):
                j += 1
            if j == len(uses):
                continue
            gspans[k].append(where(root.gate & suffix[j], root.size, 0))
            if k != root.birth:
                through[k].append(gspans[k][-1])
            if uses[j][0] == k and j + 1 < len(uses):  # a later consumer's gradient is there already
                second[k].append(where(uses[j][1] & suffix[j + 1], root.size, 0))

    def _cat_slices(self, order: list[int], *spans: dict[int, list[Expr]]) -> None:
        """``torch.cat``'s backward hands each input a slice (a view) of the output gradient, so that
        whole gradient lives until the last slice is released: at the input's next gradient
        contribution (summed out of place) or at its producer's backward. The inputs' own gradient
        spans count the slices still held; this adds the rest of the storage (allocator traces of a
        UNet's decoder, torch 2.13)."""
        for node in self.cat_nodes:
            cat = self.roots[node.output]
            if not cat.grad:
                continue
            slices: list[tuple[int, Expr]] = []  # (released at the backward of, bytes)
            for i in node.inputs:
                for c, r in self.alias[i]:
                    root = self.roots[r]
                    if root.grad:
                        below = [t for t, _, _ in root.grad_uses if t < node.index]
                        slices.append((max(below) if below else root.birth, where(c, root.size, 0)))
            if not slices:
                continue
            first = min(t for t, _ in slices)
            for k in order:
                if first <= k < node.index:
                    held = sum_(b for t, b in slices if t <= k)
                    for lists in spans:
                        lists[k].append(where(node.gate, cat.size - held, 0))

    def working_sets(self, node: Node) -> tuple[Expr, Expr, Expr]:
        """Transient bytes of ``node``: (forward, backward, backward when no input needs a gradient).
        Convolutions follow the CPU backend's kernels (:func:`cpu_conv_working_sets`); on a GPU the
        CPU kernels' buffers give way to the cuDNN workspace (see :meth:`expressions`)."""
        mem = node.info.mem  # type: ignore[union-attr]
        if self.gpu and mem.cpu_kernels:
            return Const(0), Const(0), Const(0)
        sets = self._kernel_sets(node)
        if node.op == "layernorm" and strided(self.net, node.inputs[0]):
            # ``native_layer_norm`` and its backward make a contiguous copy of a strided input
            # (allocator traces of a ViT's transposed patch embeddings, torch 2.13)
            copy = self.net.tensors[node.inputs[0]].numel * self.tensor_bytes(node.inputs[0])
            sets = (sets[0] + copy, sets[1] + copy, sets[2] + copy)
        if (
            node.op == "conv2d"
            and self.train
            and self.backend is not None
            and node.inputs[0] in self.channels_last()
        ):
            x = self.net.tensors[node.inputs[0]].shape
            extra = cpu_channels_last_depthwise_scratch(x, node.attrs, self.backend)
            sets = (sets[0], sets[1] + extra, sets[2] + extra)
        if (
            node.op in CONV_OPS
            and self.backend is not None
            and grad_strided(self.net, self.consumers, node.output)
        ):
            # the CPU convolution's backward makes a contiguous copy of its output gradient, a strided
            # view when the output is transposed (``conv(x).flatten(2).transpose(1, 2)``, a ViT's patch
            # embedding; allocator traces, torch 2.13)
            copy = self.net.tensors[node.output].numel * self.tensor_bytes(node.output)
            sets = (sets[0], sets[1] + copy, sets[2] + copy)
        return sets

    def channels_last(self) -> set[int]:
        """The channels-last tensors of the network (:func:`channels_last_tensors`), computed once."""
        if self.cl is None:
            self.cl = channels_last_tensors(self.net)
        return self.cl

    def _kernel_sets(self, node: Node) -> tuple[Expr, Expr, Expr]:
        """:meth:`working_sets` as the kernels see contiguous inputs."""
        mem = self.mem(node)
        if node.op in CONV_OPS and self.backend is not None:
            if node.index not in self.conv_sets:
                x, y = self.net.tensors[node.inputs[0]].shape, self.net.tensors[node.output].shape
                a = node.attrs
                if mem.eval_workspace:
                    # padding="same" with an odd total padding: the kernels run on the padded copy
                    # (catalog: ``_conv_mem``) with the symmetric part of the padding; the backward
                    # computes the copy's gradient, then slices the input's out of it
                    k, d = a.kernel_size, a.dilation
                    odd = [di * (ki - 1) - di * (ki - 1) // 2 * 2 for ki, di in zip(k, d)]
                    x_pad = (*x[:2], *(si + oi for si, oi in zip(x[2:], odd)))
                    a = Attrs({**a, "padding": tuple(di * (ki - 1) // 2 for ki, di in zip(k, d))})
                    sets = cpu_conv_working_sets(x_pad, y, a, self.backend, self.dtype, self.act)
                    grown = (prod(x_pad) - prod(x)) * self.act
                    copy = Const(0) if self.train else self.sizes(mem.eval_workspace)
                    sets = (sets[0] + copy, sets[1] + grown, sets[2])
                else:
                    sets = cpu_conv_working_sets(x, y, a, self.backend, self.dtype, self.act)
                self.conv_sets[node.index] = sets
            return self.conv_sets[node.index]
        if (
            node.op in ("conv_transpose1d", "conv_transpose2d", "conv_transpose3d")
            and self.backend is not None
        ):
            x, y = self.net.tensors[node.inputs[0]].shape, self.net.tensors[node.output].shape
            return cpu_conv_transpose_working_sets(*_as_2d(x, y, node.attrs), self.backend, self.act)
        fwd = mem.workspace
        if not self.train and mem.eval_workspace is not None:
            fwd = mem.eval_workspace
            if mem.eval_workspace_avx2 is not None and self.backend is not None and not self.backend.avx512:
                fwd = mem.eval_workspace_avx2  # oneDNN's kernels without AVX-512 (e.g. RNN weight padding)
        if not self.train and self.gpu and node.op in MAX_POOL_OPS:
            # CUDA dispatches max pooling to ``max_pool*_with_indices`` under no_grad too (the CPU has
            # an index-free kernel): the int64 indices live with the output until the op returns
            # (seen in the aten op log of a FakeTensorMode CUDA forward, benchmarks/fake_memory.py)
            fwd = (*fwd, *mem.extra)
        b = self.tensor_bytes(node.output)
        frozen = mem.backward if mem.backward_frozen is None else mem.backward_frozen
        return self.sizes(fwd, b), self.sizes(mem.backward, b), self.sizes(frozen, b)

    def kept_extra(self, node: Node) -> Expr:
        """Bytes ``node`` keeps for backward besides its inputs and output (training only): the catalog's
        ``extra`` and, in mixed precision, the 16-bit copies of its weights when autocast runs it in
        16 bits and the cast copies of the inputs it saves, released by the op's backward."""
        if not self.train:
            return Const(0)
        kept = self.sizes(self.mem(node).extra, self.tensor_bytes(node.output))
        if self.keeps_weights(node):
            kept = kept + self.param_grad_bytes(node, 2)
        saved = self.saved_copies.get(node.index, ())
        return kept + sum_(n * b for s, b, n, _ in self.casts.get(node.index, ()) if s in saved)

    def keeps_weights(self, node: Node) -> bool:
        """Whether the backward of ``node`` keeps autocast's 16-bit copies of its weights (``addmm``
        keeps ``mat2`` only to compute the input gradient)."""
        input_grad = self.input_grad(node) or not CATALOG[node.op].autocast.input_grad_weights
        return self.casts_weights(node) and input_grad

    def cached_weights(self, node: Node) -> Expr:
        """Bytes of the 16-bit weight copies of ``node`` that autocast caches until it exits (the end of
        the forward and the loss; it caches casts of leaves that require grad, under ``no_grad`` too)
        and no backward keeps."""
        if not self.casts_weights(node) or (self.train and self.keeps_weights(node)):
            return Const(0)
        return self.param_grad_bytes(node, 2)

    def casts_weights(self, node: Node) -> bool:
        """Mixed precision and an op autocast runs in 16 bits: it runs on 16-bit copies of its weights."""
        return self.mixed and CATALOG[node.op].autocast.policy(self.gpu) == "lower"

    # -- mixed precision: torch.autocast -------------------------------------------------------------
    def mem(self, node: Node) -> Mem:
        """The catalog's memory rule of ``node``: its ``half`` variant where a CPU kernel gets a 16-bit
        first input (:class:`~dnnsat.graph._catalog.Mem`)."""
        mem = node.info.mem  # type: ignore[union-attr]
        if mem.half is not None and not self.gpu and node.inputs and self.tensor_bytes(node.inputs[0]) == 2:
            return mem.half
        return mem

    def tensor_bytes(self, index: int) -> int:
        """Bytes per element of tensor ``index`` (int64 8, bool 1; mixed precision: 2 for 16-bit, else 4)."""
        dtype = self.net.tensors[index].dtype
        if dtype != "float32":
            return 8 if dtype == "int64" else 1
        return (2 if self.half[index] else 4) if self.mixed else self.act

    def autocast(self) -> None:
        """Mixed precision: every tensor's dtype and the casts autocast makes, by each op's
        :class:`~dnnsat.graph._catalog.Autocast` policy for the device (CPU: bfloat16, CUDA: float16).

        ``lower`` ops cast their fp32 floating inputs to 16 bits, ``fp32`` ops their 16-bit inputs to
        fp32, ``promote`` ops their 16-bit inputs to fp32 when another one is fp32; what the op saves
        for backward is then the copy (``saved_copies``), else the copy is a forward transient. An op
        autocast does not list (``keep``) computes in its inputs' promoted type (an fp16 activation plus
        an fp32 parameter is fp32); on the CPU, TensorIterator copies its 16-bit operands to fp32
        first (measured: ``add`` of a bfloat16 activation and an fp32 tensor allocates an fp32 copy of
        the activation), on CUDA the kernel casts as it reads. Network inputs, parameters and the
        outputs of ops without a floating input (embedding lookups) are fp32.
        """
        net = self.net
        self.half: dict[int, bool] = {}
        self.consumers: dict[int, list[Node]] = {}  # tensor -> the ops that read it
        for node in net.ops():
            for i in node.inputs:
                self.consumers.setdefault(i, []).append(node)
        # node -> (input, bytes of one copy, copies, an autocast cast: else TensorIterator's)
        self.casts: dict[int, list[tuple[str, Expr, int, bool]]] = {}
        self.saved_copies: dict[int, set[str]] = {}  # node -> inputs whose cast copies it saves
        for node in net.nodes:
            out = node.output
            if node.info is None:  # select: a branch's tensor
                self.half[out] = all(self.half[t] for _, t in node.cases)
                continue
            floats = [(p, i) for p, i in enumerate(node.inputs) if net.tensors[i].dtype == "float32"]
            rule = CATALOG[node.op].autocast
            policy = rule.policy(self.gpu) if self.mixed and node.op != "parameter" else "keep"
            if policy in ("lower", "fp32"):
                half = policy == "lower"
            else:  # the widest floating input; fp32 without one
                half = bool(floats) and all(self.half[i] for _, i in floats)
            self.half[out] = half
            nbytes, n = (2, rule.casts) if half else (4, 1)
            if policy == "keep" and self.gpu:
                continue
            casts = [
                (f"in{p}", self.rounded(net.tensors[i].numel * nbytes), n, policy != "keep")
                for p, i in floats
                if self.half[i] != half
            ]
            if node.op in ("add", "sub", "mul"):  # an int64 or bool operand: TensorIterator's copy on the CPU
                casts += [
                    (f"in{p}", self.rounded(net.tensors[i].numel * self.tensor_bytes(out)), 1, False)
                    for p, i in enumerate(node.inputs)
                    if net.tensors[i].dtype != net.tensors[out].dtype
                ]
            if casts:
                self.casts[node.index] = casts
                saves = set(self.mem(node).saves) if self.train else set()
                self.saved_copies[node.index] = {s for s, _, _, cast in casts if cast and s in saves}

    # -- activation checkpointing --------------------------------------------------------------------
    def checkpoint_blocks(self) -> None:
        """``Budget(checkpoint=True)``: every outermost ``repeat`` block runs under
        ``torch.utils.checkpoint`` (non-reentrant). Its forward saves nothing but the block's input
        (``blocks``: first node, input tensor, the block's gate); when the backward reaches the block
        it recomputes the block's forward, whose saved tensors (``recomputed``) then live until their
        op's backward, as without checkpointing. ``block_of``: node -> block."""
        self.blocks: list[tuple[int, int, Expr]] = []
        self.block_of: dict[int, int] = {}
        self.recomputed: list[list[tuple[int, Expr, int]]] = []  # per block: (saver, condition, root)
        if not (self.train and self.checkpoint):
            return
        net = self.net
        found: list[tuple[frozenset[int], int, Expr]] = []
        for node in net.nodes:
            if node.op != "select" or not node.same_shape:
                continue
            (cond, y), (_, x) = node.cases
            members: set[int] = set()
            stack = [net.producer[y]]
            while stack:  # the body: what y depends on, back to the block's input
                i = stack.pop()
                if i > net.producer[x] and i not in members:
                    members.add(i)
                    stack.extend(net.producer[t] for t in net.nodes[i].inputs)
            found.append((frozenset(members), x, cond & node.gate))
        for body, x, cond in found:
            if body and not any(body < other for other, _, _ in found):  # outermost blocks
                self.block_of.update((i, len(self.blocks)) for i in body)
                self.blocks.append((min(body), x, cond))
                self.recomputed.append([])

    def recomputed_saved(self, extras: dict[int, Expr]) -> dict[int, Expr]:
        """Bytes a checkpointed block has saved again when the backward reaches op ``k`` of it: what its
        recomputed forward saves up to ``k`` (each storage once, at its first saver) and the ``extras``
        of its ops up to ``k`` (removed from ``extras``: they are not kept by the first forward)."""
        out: dict[int, Expr] = {}
        for b, savers in enumerate(self.recomputed):
            first: dict[int, tuple[int, Expr]] = {}
            for t, c, r in sorted(savers, key=lambda s: s[0]):
                first.setdefault(r, (t, c))
            at: dict[int, list[Expr]] = {}
            for r, (t, c) in first.items():
                at.setdefault(t, []).append(where(self.roots[r].gate & c, self.roots[r].size, 0))
            running: Expr = Const(0)
            for k in sorted(i for i, blk in self.block_of.items() if blk == b):
                running = out[k] = running + sum_(at.get(k, [])) + extras.pop(k, Const(0))
        return out

    def backward_set(self, op: Node) -> Expr:
        """Bytes of ``op``'s backward working set: without the input gradient when its input needs none,
        plus the mixed-precision casts' (:meth:`mixed_sets`)."""
        _, bw, bw_frozen = self.working_sets(op)
        _, mixed_bw, mixed_frozen = self.mixed_sets(op)
        if not self.input_grad(op):
            bw, mixed_bw = bw_frozen, mixed_frozen
        total = maximum(bw + mixed_bw, 0) if self.mixed else bw
        root = self.roots.get(op.output)
        if self.mem(op).releases_grad and self.input_grad(op) and root is not None and root.grad_uses:
            owned = any_(c for _, c, _ in root.grad_uses)  # its own gradient storage
            total = total - where(owned, root.size, 0)
        return total + self.strided_grad_copy(op)

    def strided_grad_copy(self, op: Node) -> Expr:
        """A convolution whose output only a ``concat`` reads (DenseNet's new features, a U-Net's skip)
        gets its gradient as a slice of the concat's, strided unless the dimensions before the concat's
        are all 1; its backward copies it contiguous first (allocator traces, this CPU: the output's
        bytes, ``tests/test_memory_concat_grad.py``)."""
        users = self.consumers.get(op.output, [])
        root = self.roots.get(op.output)
        if not op.op.startswith("conv") or root is None:
            return Const(0)
        shape = self.net.tensors[op.output].shape
        alone = [  # the concat is the only active reader (of a merged network's gated ones)
            u.gate & (prod(shape[: u.attrs.dim]) > 1) & all_(~v.gate for v in users if v is not u)
            for u in users
            if u.op == "concat" and users.count(u) == 1
        ]
        return where(any_(alone), root.size, 0) if alone else Const(0)

    def mixed_sets(self, node: Node) -> tuple[Expr, Expr, Expr]:
        """Transient bytes of ``node`` under mixed precision (or with an int64 / bool operand of an
        elementwise op), as :meth:`working_sets`: the cast copies it makes in the forward and does not
        save (alive with its output; an input cast several times, by attention's projections, is freed
        after each) and, on a CPU with oneDNN
        bfloat16 kernels, the scratchpads of its bfloat16 matmuls (:func:`cpu_bf16_matmul_scratch`).
        In the backward the op computes the gradient of its saved 16-bit copy, which is cast to the fp32
        input's gradient once the op has released that copy: the sweep counts the fp32 gradient at the
        op, so the backward entry is negative by the 16-bit gradient's size (the caller clamps the sum
        with the op's working set at 0)."""
        if not self.mixed and node.index not in self.casts:  # (fp32: TensorIterator's copies of int64/bool)
            return Const(0), Const(0), Const(0)
        saved = self.saved_copies.get(node.index, ())
        casts = self.casts.get(node.index, ())
        fwd = sum_(b for s, b, _, _ in casts if s not in saved)  # unsaved copies: one at a time
        if node.op == "attention":
            # the projections' input copy is freed before the output projection: it never meets the
            # output (the working set's q, k, v are there either way; allocator traces, torch 2.13)
            fwd = maximum(fwd - self.roots[node.output].size, 0)
        grads = [s for s in saved if self.needs_grad[node.inputs[int(s[2:])]]]
        slack = sum_(b for s, b, _, _ in casts if s in grads)
        if self.backend is None or not self.backend.bf16 or node.op not in ("linear", "attention"):
            return fwd, -slack, Const(0)
        x = self.net.tensors[node.inputs[0]].shape
        rows, k = prod(x[:-1]), x[-1]
        if node.op == "linear":
            n = node.attrs.out_features
        else:  # attention: the widest projection (q or out: model width and heads * head_dim)
            own = node.attrs.get("head_dim")
            n = k if own is None else maximum(k, node.attrs.heads * own)
        expanded = None
        if node.op == "linear":
            expanded = expanded_linear_grad(self.net, node, self.consumers.get(node.output, []))
        mm_fwd, mm_data, mm_weight = cpu_bf16_matmul_scratch(rows, k, n, expanded)
        return fwd + mm_fwd, maximum(mm_data, mm_weight) - slack, mm_weight

    def loss_scalars(self) -> Expr:
        """The loss and cross-entropy's total weight: two fp32 scalars alive until the step ends."""
        return 2 * self.rounded(Const(4))

    def shared_grads(self) -> list[tuple[int, int, Expr]]:
        """``(owner, user, bytes)`` per op using parameters of an earlier op (``Network.share``): the
        user's gradient of them lives from its backward to the owner's (the first op at the owner's
        module path), where autograd adds it to the owner's and the sum becomes ``.grad``."""
        out = []
        for node in self.net.nodes:
            if "shared" not in node.attrs or node.output not in self.reach:
                continue
            paths = {path for _, path, _ in node.attrs.shared_names}
            owner = min(
                (n.index for n in self.net.nodes[: node.index] if n.label.partition(" ")[2] in paths),
                default=node.index,
            )
            b = as_expr(node.attrs.shared) * self.pbytes
            out.append((owner, node.index, where(node.gate, self.rounded(b) if self.gpu else b, 0)))
        return out

    def param_grad_bytes(self, node: Any, nbytes: int | None = None) -> Expr:
        """Bytes of the parameters (or their gradients) of ``node``: on a GPU the largest tensor and the
        rest (biases) are rounded to allocator blocks separately."""
        p = node.info.params
        if p.is_const and p.value == 0:
            return Const(0)
        b = self.pbytes if nbytes is None else nbytes
        if not self.gpu:
            return p * b
        return sum_(self.rounded(t * b) for t in _largest_rest(node.info))

    # -- totals --------------------------------------------------------------------------------------
    def expressions(self) -> dict[str, Expr]:
        self.build()
        net = self.net
        ops = net.ops()
        buffers = sum_(
            where(n.gate, self.sizes(n.info.mem.buffers), 0) for n in ops if n.info and n.info.mem.buffers
        )
        weights = sum_(where(n.gate, self.param_grad_bytes(n), 0) for n in ops) + buffers
        inputs = sum_(where(g, b, 0) for g, b in self.persistent)
        trained = [n for n in ops if n.index in self.trained]
        if self.steps > 1:  # later micro-batches run with every gradient accumulated so far
            self.accumulated = sum_(where(n.gate, self.param_grad_bytes(n), 0) for n in trained)
        fwd, bwd, saved_end, outputs = self.forward_and_backward()
        overhead: Expr = Const(0)
        optimizer: Expr = Const(0)
        if self.train:
            state_bytes = 4 if self.mixed else self.pbytes
            optimizer = _STATE[self.optimizer] * sum_(
                where(n.gate, self.param_grad_bytes(n, state_bytes), 0) for n in trained
            )
            out_t = self.outputs[0]
            n_classes = out_t.shape[-1]
            rows = prod(out_t.shape[:-1])
            targets = self.rounded(8 * rows)
            inputs = inputs + targets
            logp = self.rounded(4 * rows * n_classes)  # fp32 log-softmax kept for backward
            # autocast runs the loss in fp32 (cross_entropy_loss / log_softmax): 16-bit logits are
            # copied to fp32 for the log-softmax
            logits32 = logp if self.half[out_t.index] else Const(0)
            loss = outputs + logp + self.accumulated + self.loss_scalars()
            fwd.append(saved_end + self.cached + logits32 + loss)
            bwd.append(saved_end + 2 * logp + loss)
            grads = sum_(where(n.gate, self.param_grad_bytes(n), 0) for n in trained)
            opt_tmp = self.optimizer_transient(trained)
            fb = _balanced_max(fwd + bwd)
            step = grads + opt_tmp + outputs + self.loss_scalars()
            alloc_peak = weights + optimizer + inputs + maximum(fb, step)
            activations = saved_end + logp
        else:
            fb = _balanced_max(fwd)
            alloc_peak = weights + inputs + fb
            grads = Const(0)
            activations = fb
        memory = alloc_peak
        if self.gpu:
            workspace = _balanced_max(
                [
                    where(n.gate, self.rounded(net.tensors[n.output].numel * self.act), 0)
                    for n in ops
                    if n.op.startswith("conv")
                ]
            )
            reserved = alloc_peak + workspace + cublas_workspace(net, self.device)
            memory = footprint(net, self.device) + ceildiv(reserved, CUDA_SEGMENT) * CUDA_SEGMENT
            overhead = memory - alloc_peak
        rest = memory - weights - optimizer - inputs - overhead
        act = minimum(activations, rest)
        rest = rest - act
        grad = minimum(grads, rest)
        return {
            "memory": memory,
            "memory_weights": weights,
            "memory_gradients": grad,
            "memory_optimizer": optimizer,
            "memory_activations": act,
            "memory_transient": rest - grad,
            "memory_input": inputs,
            "memory_overhead": overhead,
        }

    def optimizer_transient(self, ops: list[Any]) -> Expr:
        if self.optimizer not in ("adam", "adamw"):
            return Const(0)
        b = 4 if self.mixed else self.pbytes
        if self.gpu:  # foreach: sqrt of every exp_avg_sq at once
            return sum_(where(n.gate, self.param_grad_bytes(n, b), 0) for n in ops)
        # the CPU's single-tensor loop (``torch/optim/adam.py``, ``_single_tensor_adam``): per parameter
        # ``denom = (exp_avg_sq.sqrt() / c).add_(eps)`` holds the sqrt and the quotient, while the
        # previous parameter's ``denom`` lives until the assignment (allocator traces, torch 2.13: a
        # GRU's w_ih, w_hh); parameters in the order the ops register them
        last: Expr = Const(0)  # elements of the previous parameter tensor
        peaks = []
        for n in ops:
            if not n.info or (n.info.params.is_const and n.info.params.value == 0):
                continue
            tensors = n.info.mem.param_tensors or _largest_rest(n.info)
            prev, here = last, []
            for t in tensors:
                here.append(2 * t + prev)
                prev = t
            peaks.append(where(n.gate, _balanced_max(here), 0))
            last = where(n.gate, tensors[-1], last)
        return _balanced_max(peaks) * b


def memory_expressions(net: Network, budget: Any, device: Any = None) -> dict[str, Expr]:
    """Peak memory (bytes) of ``net`` under ``budget`` on ``device``, with its components.

    ``budget``: a :class:`~dnnsat.cost.Budget` (``mode``, ``optimizer``, ``dtype``, ``act_bytes``,
    ``param_bytes``); ``device``: ``None`` or a device profile with ``kind`` (``"gpu"``/``"cpu"``)
    and ``context_bytes``. Returns :data:`MEMORY_KEYS`; the components sum exactly to ``memory``.
    """
    model = _Model(net, budget, device)
    exprs = model.expressions()
    _warn_unvalidated(net, model)
    if budget.train and budget.accumulation_steps > 1:
        micro = micro_batches(net, budget.accumulation_steps)
        exprs = {name: substitute(e, micro) for name, e in exprs.items()}
    return exprs
