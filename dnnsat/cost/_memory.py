"""Analytic peak memory of a training step or an inference forward (DNNMem style), symbolic.

The model replays the network's execution order over *storages* (views and branch selects alias
their input), with the liveness PyTorch gives them, and takes the peak over every moment:

* forward (op ``k``): tensors kept for backward so far (per op: :class:`~dnnsat.graph._catalog.Mem`
  ``saves``/``extra``), every other tensor from its producer to its last consumer (network outputs
  to the end of the step), the output of ``k`` and its forward working set;
* the loss: cross-entropy over the last dimension of the (first) output, int64 class targets; its
  fp32 log-softmax is kept for backward and its backward holds two output-sized gradients;
* backward (reverse order): tensors saved by ops not yet differentiated, the parameter gradients
  accumulated so far, the gradient of every activation from its last consumer's backward to its
  producer's (residuals keep theirs alive), a second contribution being added, the op's backward
  working set;
* ``optimizer.step()``: all parameter gradients, the outputs (still referenced by the loop) and the
  optimizer's temporaries: on the CPU torch runs the for-loop implementation, Adam/AdamW allocate
  ``sqrt(exp_avg_sq)`` and its quotient for one parameter at a time (2 x the largest parameter
  tensor); on CUDA the foreach implementation allocates ``_foreach_sqrt`` of all of them at once
  (1 x all parameters); SGD (with or without momentum) updates in place
  (``torch/optim/adam.py: _single_tensor_adam / _multi_tensor_adam``, ``torch/optim/sgd.py``).

Always live: weights (+ BatchNorm running statistics; mixed precision: the fp16 copies autocast makes
of matmul-like ops' weights are kept for backward like activations),
optimizer state (SGD 0, momentum 1x, Adam/AdamW 2x the parameters; fp32 for mixed precision) and
the input batch (+ targets). A GPU device adds the CUDA context, rounds every tensor to the caching
allocator's 512-byte blocks, replaces the CPU convolution buffers by one cuDNN workspace the size of
the largest convolution output (an estimate, not validated on a GPU here) and rounds the peak up to
2 MiB segments.

CPU convolution buffers depend on the kernels PyTorch runs, which depend on the CPU:
:func:`cpu_conv_working_sets` follows the :class:`~dnnsat.cost.CpuBackend` of a CPU device profile,
or, without a device, the one detected on this machine (oneDNN's ISA within ``ONEDNN_MAX_CPU_ISA``).

Components are a breakdown of the peak, filled in this order: weights, optimizer, input, overhead,
activations (kept for backward at the end of the forward; inference: the largest live set),
gradients (all parameter gradients), and ``memory_transient``, the rest, so that they sum exactly to
``memory``. Everything is in bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..expr import Const, Expr, all_, any_, ceildiv, maximum, minimum, sum_, where
from ..graph import Network, Node
from ..graph._catalog import Attrs, Shape, Sizes, prod
from ..graph._network import _implies, _split_gate
from ._devices import CpuBackend, detect_cpu_backend

__all__ = ["memory_expressions", "cpu_conv_working_sets", "MEMORY_KEYS", "CONV_OPS"]

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


def _contradicts(gate: tuple[frozenset[int], dict[int, Any]], cond: Expr) -> bool:
    """Whether ``cond`` has a conjunct ``not (i < n)`` while the (split) gate implies ``j < n``, j >= i."""
    stack = [cond]
    while stack:
        e = stack.pop()
        if e.op == "and":
            stack.extend(e.args)
        elif e.op == "not" and e.args[0].op == "lt" and e.args[0].args[0].is_const:
            i, n = e.args[0].args[0].value, e.args[0].args[1]
            if gate[1].get(id(n), i - 1) >= i:
                return True
    return False


# -- CPU convolutions: working sets by backend -----------------------------------------------------
# Read off allocator traces (torch.profiler, profile_memory=True; torch 2.13, one intra-op thread) of
# conv2d forward, backward-data and backward-weights passes over channels 1-40, kernels 1/3/5, strides,
# dilation, groups and batches 1-16, natively on AVX-512 (oneDNN avx512_core_bf16) and with
# ONEDNN_MAX_CPU_ISA=AVX2 (and SSE41, AVX512_CORE for the ISA classes). Elements unless noted.

CONV_OPS = ("conv1d", "conv2d")
_STRIDED_BWD_DATA_SCRATCH = 36888  # bytes: fixed buffer of the strided backward-data pass
_HALF = {"mixed": "bf16", "bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "fp16": "fp16"}


def _multiple(c: Expr, n: int) -> Expr:
    return ceildiv(c, n) * n == c


_Sets = tuple[Expr, Expr, Expr]


def _choose(cond: Expr, then: Callable[[], _Sets], other: Callable[[], _Sets]) -> _Sets:
    """``where(cond, then(), other())`` element-wise, building only the branch a constant ``cond`` takes."""
    if cond.is_const:
        return then() if cond.value else other()
    t, o = then(), other()
    return where(cond, t[0], o[0]), where(cond, t[1], o[1]), where(cond, t[2], o[2])


def cpu_conv_working_sets(
    x: Shape, y: Shape, a: Attrs, backend: CpuBackend, dtype: str, nbytes: int
) -> tuple[Expr, Expr, Expr]:
    """Transient bytes of a CPU ``conv{1,2}d`` in ``dtype`` (a Budget dtype; ``"mixed"`` is bfloat16
    autocast) on ``backend``: (forward, besides the output; backward, besides the output, input and
    weight gradients; backward when the input needs no gradient). ``nbytes``: bytes per element.

    Which kernels run (``aten/src/ATen/native/Convolution.cpp: use_mkldnn``): fp32 runs oneDNN unless
    the conv is an unstrided undilated 1x1 with a batch < 16 or has groups 1, a kernel <= 3, batch 1
    and <= 20480 input elements; bfloat16/float16 run oneDNN where it has kernels for the dtype
    (:attr:`CpuBackend.bf16`), else PyTorch's im2col kernels (``slow_conv2d``: columns of the whole
    batch; dilated: of one sample; grouped: one group at a time, then ``torch.cat``; a bias gradient
    summed over an fp32 copy of the output gradient).

    oneDNN with ``B``-channel blocks (16 with AVX-512, 8 with AVX2): the forward reorders the input
    (channels padded to ``B``) and the weight, and computes into a padded output converted back; a
    first-layer conv (kernel > 1x1, fewer than ``B`` input channels) reads the plain input. Backward
    data: the output gradient, the weight and the input gradient in blocked layouts; strided convs
    (grouped ones with more than ``B`` channels per group) take a plain path: a fixed 36 KB buffer,
    then two input-gradient-sized copies. Backward weights: the output gradient and the input in
    blocked layouts; AVX-512 runs its AVX2 kernel for 4 to 15 input channels and its first-layer kernel
    for 1-3 (AVX2: for 3); 16-bit kernels add an fp32 accumulator and transposed copies of one sample.
    Where a kernel is missing (AVX2 with dilation, groups whose channels do not fill 8-blocks, ISAs
    before AVX2) oneDNN runs an im2col GEMM (columns of one sample and group; backward weights: 4
    weight-sized accumulators). Depthwise convs block the channels. Bias reorders (< 2 blocks) are
    left out.
    """
    b, cin, sp = x[0], x[1], x[2:]
    k, s, d, g, cout = a.kernel_size, a.stride, a.dilation, a.groups, a.out_channels
    k2, sp_in, out_sp = prod(k), prod(sp), prod(y[2:])
    cg, og = cin // g, cout // g
    w = cout * cg * k2
    gi = b * cin * sp_in
    out = b * cout * out_sp
    one = all_(ki == 1 for ki in k)
    strided = any_(si > 1 for si in s)
    dilated = any_(di > 1 for di in d)
    half = _HALF.get(dtype)
    if half is not None:
        onednn: Expr = Const(getattr(backend, half))
    elif nbytes == 4:
        small = (g == 1) & any_(ki <= 3 for ki in k) & (b == 1) & (b * cin * sp_in <= 20480)
        onednn = ~((one & ~strided & ~dilated & (b < 16)) | small)
    else:  # float64 and 8-bit types: PyTorch's kernels
        onednn = Const(False)
    if isinstance(a.padding, str):
        top = (k[0] - 1) * d[0] // 2 if a.padding == "same" else Const(0)
        no_pad = Const(a.padding == "valid") | one
    else:
        top, no_pad = a.padding[0], all_(p == 0 for p in a.padding)

    # PyTorch's im2col kernels
    cols = where(one & ~strided & no_pad, 0, where(dilated, 1, b) * cg * k2 * out_sp)
    go32 = where(dilated, 0, 2 * out) if half is not None and a.bias else Const(0)  # 2 units each

    def own_single() -> _Sets:
        return cols, maximum(cols, go32 - w), maximum(cols, go32 - w)

    def own_groups() -> _Sets:
        in_g = b * cg * sp_in
        slices = b * og * out_sp + in_g + maximum(cols, go32 // g - w // g)
        return maximum(in_g + cols, out), maximum(slices, gi + w), maximum(slices, w)

    col = cg * k2 * out_sp
    gemm = (maximum(col + 32, out), maximum(col + 32, gi) - w, maximum(col + 4 * w + 64, w))
    big = 16 if backend.avx512 else 8

    def pad(c: Expr, n: int = big) -> Expr:
        return ceildiv(c, n) * n

    def subsampled(n: int = big) -> Expr:
        """A strided 1x1 conv first subsamples one input sample (+ 32 elements)."""
        return where(one & strided, pad(cin, n) * out_sp + 32, 0)

    def blocked_weights(n: int, first: Expr) -> Expr:
        """Backward weights with ``n``-channel blocks (``first``: the plain input is read)."""
        wg = pad(cout, n) * where(first, cin, pad(cin, n)) * k2
        scratch = subsampled(n)
        if half is not None:  # 16-bit kernels (not 1x1): fp32 accumulator, transposed input and gradient
            rows = (sp[0] + 2 * top) * prod(sp[1:])
            tr = 2 * wg + where(first, 0, pad(cin, n) * rows) + pad(cout, n) * (out_sp + 2) + 4290
            scratch = where(one, scratch, tr)
        copies = b * pad(cout, n) * out_sp + where(first, 0, b * pad(cin, n) * sp_in) + scratch
        return maximum(copies + wg, wg + w) - w

    # strided (groups 1, or more than B channels per group): plain output gradient, a fixed buffer,
    # then two input-gradient-sized copies
    scratch_data = _STRIDED_BWD_DATA_SCRATCH // nbytes
    strided_data = maximum(out + cout * pad(cg) * k2 + gi + scratch_data, 3 * gi) - gi - w

    def plain() -> _Sets:
        """oneDNN, groups 1."""
        first = ~one & (cin < big)
        out_pad, in_pad = b * pad(cout) * out_sp, b * pad(cin) * sp_in
        w_fwd = pad(cout) * where(first, cin, pad(cin)) * k2
        fwd = maximum(subsampled() + where(first, 0, in_pad) + w_fwd + out_pad - out, out_pad)
        data = maximum(out_pad + pad(cout) * pad(cin) * k2 + in_pad, in_pad + gi) - gi - w
        if half is not None:
            weights = blocked_weights(big, first)
        elif backend.avx512:
            weights = where(
                ~one & (cin >= 4) & (cin < 16),
                where(dilated, gemm[2], blocked_weights(8, Const(False))),
                blocked_weights(16, ~one & (cin <= 3)),
            )
        else:
            weights = where(dilated, gemm[2], blocked_weights(8, ~one & (cin == 3)))
        return fwd, where(strided, strided_data, data), weights

    def depthwise() -> _Sets:
        """oneDNN, one channel per group: the channels are blocked."""
        c_in, c_out, c_w = b * pad(cin) * sp_in, b * pad(cin) * out_sp, pad(cin) * k2
        return (
            maximum(c_in + c_w + c_out - out, c_out),
            maximum(c_out + c_w + c_in, c_in + gi) - gi - w,
            maximum(c_out + c_in + c_w, c_w + w) - w,
        )

    def grouped() -> _Sets:
        """oneDNN, other groups: plain layouts where the channels per group fill 8-blocks, else GEMM
        (AVX-512: in backward weights only)."""
        in_blocks = _multiple(cg, 8) & _multiple(og, 8)
        gemm_fwd = Const(False) if backend.avx512 else ~in_blocks
        return (
            where(gemm_fwd, gemm[0], maximum(gi + w, out)),
            where(strided & (cg > big), strided_data, where(gemm_fwd, gemm[1], maximum(out, gi - w))),
            where(in_blocks, maximum(out + gi, w), gemm[2]),
        )

    def dnn() -> _Sets:
        if backend.isa in ("sse41", "avx"):  # no blocked kernels before AVX2
            fwd, data, weights = gemm
        else:
            is_dw = (g == cin) & (cout == cin)
            fwd, data, weights = _choose(g == 1, plain, lambda: _choose(is_dw, depthwise, grouped))
        return fwd, maximum(data, weights), weights

    sets = _choose(onednn, dnn, lambda: _choose(g == 1, own_single, own_groups))
    return sets[0] * nbytes, sets[1] * nbytes, sets[2] * nbytes


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


class _Model:
    def __init__(self, net: Network, budget: Any, device: Any) -> None:
        self.net = net
        self.train = budget.mode == "train"
        self.act = budget.act_bytes
        self.pbytes = budget.param_bytes
        self.mixed = budget.dtype == "mixed"
        self.optimizer = budget.optimizer or "sgd"
        self.gpu = device is not None and getattr(device, "kind", "cpu") == "gpu"
        self.device = device
        self.dtype = budget.dtype
        # the CPU kernels the model follows: a CPU profile's, else this machine's (detected)
        self.backend: CpuBackend | None = None
        if not self.gpu:
            self.backend = device.cpu_backend() if hasattr(device, "cpu_backend") else detect_cpu_backend()
        self.conv_sets: dict[int, tuple[Expr, Expr, Expr]] = {}

    # -- sizes ---------------------------------------------------------------------------------------
    def rounded(self, nbytes: Expr) -> Expr:
        return ceildiv(nbytes, CUDA_BLOCK) * CUDA_BLOCK if self.gpu else nbytes

    def sizes(self, items: Sizes) -> Expr:
        """Bytes of ``((elements, kind), ...)``, each tensor rounded like the allocator."""
        total: Expr = Const(0)
        for n, kind in items:
            b = self.act if kind == "act" else self.pbytes if kind == "param" else _FIXED[kind]
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
            mem = node.info.mem
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
            needs_grad[out] = any(needs_grad[i] for i in ins) or not (
                node.info.params.is_const and node.info.params.value == 0
            )
            if mem.view or (mem.eval_view and not self.train):
                alias[out] = alias[ins[0]]
                continue
            alias[out] = [(Const(True), out)]
            self.roots[out] = _Root(
                node.index, node.gate, self.rounded(t.numel * self.act), needs_grad[out], [], [], []
            )
            self.alloc_nodes.append(node)
        for node in net.nodes:
            if node.info is None or node.op in ("input", "parameter"):
                continue
            mem = node.info.mem
            if mem.view or (mem.eval_view and not self.train):
                continue
            # add's backward hands its output gradient to both inputs: the input produced first keeps
            # that storage alive (no allocation at the add), the other input's gradient is the same one
            keeper = min(node.inputs) if mem.grad_alias else None
            gate = _split_gate(node.gate)
            for i in node.inputs:
                for c, r in alias[i]:
                    if _contradicts(gate, c):  # e.g. "block i skipped" inside block i + 1
                        continue
                    self.roots[r].uses.append((node.index, c & node.gate))
                    if keeper is None or i == keeper:
                        self.roots[r].grad_uses.append((node.index, c & node.gate, keeper is not None))
            if self.train:
                for s in mem.saves:
                    tensor = node.output if s == "out" else node.inputs[int(s[2:])]
                    for c, r in alias[tensor]:
                        if not _contradicts(gate, c):
                            self.roots[r].savers.append((node.index, c & node.gate))
        self.outputs = net.outputs or [net.last]
        for t in self.outputs:
            for c, r in alias[t.index]:
                self.roots[r].uses.append((_END, c))
                self.roots[r].grad_uses.append((_END, c, False))
        self.alias = alias
        self.needs_grad = needs_grad

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
                self._grad_spans(root, order, gspans, second)
        fwd, bwd = [], []
        prefix_events = sorted(fwd_prefix, key=lambda e: e[0])
        extras: dict[int, Expr] = {}  # tensors an op keeps for backward besides its inputs/output
        for node in self.alloc_nodes:
            kept = self.kept_extra(node)
            if not (kept.is_const and kept.value == 0):
                extras[node.index] = where(node.gate, kept, 0)
        # forward
        running: Expr = Const(0)
        pi = 0
        for node in self.alloc_nodes:
            k = node.index
            while pi < len(prefix_events) and prefix_events[pi][0] <= k:
                running = running + prefix_events[pi][1]
                pi += 1
            here = self.roots[node.output].size + self.working_sets(node)[0] + self.kept_extra(node)
            fwd.append(running + sum_(spans[k]) + where(node.gate, here, 0))
            if k in extras:
                running = running + extras[k]
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
        for op in ops:
            saved = unreleased[op.index] = saved + sum_(saved_at.get(op.index, []))
        grads: Expr = Const(0)
        end = sum_(end_alive) + self.loss_scalars()  # outputs (referenced by the loop) and the loss
        for op in reversed(ops):
            k = op.index
            # under autocast an op whose weights are cast computes their gradients in 16 bits; they
            # become fp32 parameter gradients after its backward (ToCopyBackward)
            own = 2 if self.casts_weights(op) else None
            if k in gspans and self.roots[op.output].grad:
                _, bw, bw_frozen = self.working_sets(op)
                if not self.input_grad(op):
                    bw = bw_frozen
                mine = where(op.gate, self.param_grad_bytes(op, own), 0)
                live = unreleased[k] + grads + mine + sum_(gspans[k]) + sum_(second[k])
                bwd.append(live + end + where(op.gate, bw, 0))
            grads = grads + where(op.gate, self.param_grad_bytes(op), 0)
        return fwd, bwd, saved_end, sum_(end_alive)

    def _grad_spans(
        self, root: _Root, order: list[int], gspans: dict[int, list[Expr]], second: dict[int, list[Expr]]
    ) -> None:
        """The gradient of ``root`` lives from its last consumer's backward to its producer's."""
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
            if uses[j][0] == k and j + 1 < len(uses):  # a later consumer's gradient is there already
                second[k].append(where(uses[j][1] & suffix[j + 1], root.size, 0))

    def working_sets(self, node: Node) -> tuple[Expr, Expr, Expr]:
        """Transient bytes of ``node``: (forward, backward, backward when no input needs a gradient).
        Convolutions follow the CPU backend's kernels (:func:`cpu_conv_working_sets`); on a GPU the
        CPU kernels' buffers give way to the cuDNN workspace (see :meth:`expressions`)."""
        mem = node.info.mem  # type: ignore[union-attr]
        if self.gpu and mem.cpu_kernels:
            return Const(0), Const(0), Const(0)
        if node.op in CONV_OPS and self.backend is not None:
            if node.index not in self.conv_sets:
                x, y = self.net.tensors[node.inputs[0]].shape, self.net.tensors[node.output].shape
                sets = cpu_conv_working_sets(x, y, node.attrs, self.backend, self.dtype, self.act)
                self.conv_sets[node.index] = sets
            return self.conv_sets[node.index]
        fwd = mem.workspace
        if not self.train and mem.eval_workspace is not None:
            fwd = mem.eval_workspace
        return self.sizes(fwd), self.sizes(mem.backward), self.sizes(mem.backward_frozen or mem.backward)

    def kept_extra(self, node: Node) -> Expr:
        """Bytes ``node`` keeps for backward besides its inputs and output (training only): the catalog's
        ``extra`` and, in mixed precision, the fp16 copies of its weights (and of an fp32 network input)
        when it is matmul-like (what autocast casts; norms and embeddings stay fp32), released by the
        op's backward."""
        if not self.train:
            return Const(0)
        kept = self.sizes(node.info.mem.extra)  # type: ignore[union-attr]
        if self.casts_weights(node):
            kept = kept + self.param_grad_bytes(node, 2)
            for i in node.inputs:  # the fp16 copy of an fp32 network input
                t = self.net.tensors[i]
                if self.net.nodes[self.net.producer[i]].op == "input" and t.dtype != "int64":
                    kept = kept + self.rounded(2 * t.numel)
        return kept

    def casts_weights(self, node: Node) -> bool:
        """Mixed precision and a matmul-like op: autocast runs it on 16-bit copies of its weights."""
        macs = node.info.macs  # type: ignore[union-attr]
        return self.mixed and not (macs.is_const and macs.value == 0)

    def loss_scalars(self) -> Expr:
        """The loss and cross-entropy's total weight: two fp32 scalars alive until the step ends."""
        return 2 * self.rounded(Const(4))

    def param_grad_bytes(self, node: Any, nbytes: int | None = None) -> Expr:
        """Bytes of the parameters (or their gradients) of ``node``: on a GPU the largest tensor and the
        rest (biases) are rounded to allocator blocks separately."""
        p = node.info.params
        if p.is_const and p.value == 0:
            return Const(0)
        b = self.pbytes if nbytes is None else nbytes
        largest = node.info.mem.largest_param
        if not self.gpu or largest is None:
            return self.rounded(p * b)
        rest = p - largest
        return self.rounded(largest * b) + (
            0 if rest.is_const and rest.value == 0 else self.rounded(rest * b)
        )

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
        fwd, bwd, saved_end, outputs = self.forward_and_backward()
        overhead: Expr = Const(0)
        optimizer: Expr = Const(0)
        if self.train:
            state_bytes = 4 if self.mixed else self.pbytes
            optimizer = _STATE[self.optimizer] * sum_(
                where(n.gate, self.param_grad_bytes(n, state_bytes), 0) for n in ops
            )
            out_t = self.outputs[0]
            n_classes = out_t.shape[-1]
            rows = prod(out_t.shape[:-1])
            targets = self.rounded(8 * rows)
            inputs = inputs + targets
            logp = self.rounded(4 * rows * n_classes)  # fp32 log-softmax kept for backward
            fwd.append(saved_end + outputs + logp + self.loss_scalars())
            bwd.append(saved_end + outputs + logp + 2 * logp + self.loss_scalars())
            grads = sum_(where(n.gate, self.param_grad_bytes(n), 0) for n in ops)
            opt_tmp = self.optimizer_transient(ops)
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
            context = int(getattr(self.device, "context_bytes", 0) or 0)
            memory = context + ceildiv(alloc_peak + workspace, CUDA_SEGMENT) * CUDA_SEGMENT
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
        largest = [
            where(
                n.gate, n.info.mem.largest_param if n.info.mem.largest_param is not None else n.info.params, 0
            )
            for n in ops
            if n.info and not (n.info.params.is_const and n.info.params.value == 0)
        ]
        return 2 * self.rounded(_balanced_max(largest) * b)


def memory_expressions(net: Network, budget: Any, device: Any = None) -> dict[str, Expr]:
    """Peak memory (bytes) of ``net`` under ``budget`` on ``device``, with its components.

    ``budget``: a :class:`~dnnsat.cost.Budget` (``mode``, ``optimizer``, ``dtype``, ``act_bytes``,
    ``param_bytes``); ``device``: ``None`` or a device profile with ``kind`` (``"gpu"``/``"cpu"``)
    and ``context_bytes``. Returns :data:`MEMORY_KEYS`; the components sum exactly to ``memory``.
    """
    return _Model(net, budget, device).expressions()
