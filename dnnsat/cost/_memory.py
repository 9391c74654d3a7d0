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

Always live: weights (+ BatchNorm running statistics),
optimizer state (SGD 0, momentum 1x, Adam/AdamW 2x the parameters; fp32 for mixed precision) and
the input batch (+ targets). A GPU device adds the footprint outside the caching allocator (CUDA
context and the libraries the network loads, :func:`~dnnsat.cost._footprint.footprint`), rounds
every tensor to the caching allocator's 512-byte blocks, replaces the CPU convolution buffers by one
cuDNN workspace the size of the largest convolution output (an estimate, not validated on a GPU
here), adds PyTorch's cuBLAS workspace and rounds the sum up to 2 MiB segments: a lower bound of what
the GPU sees, as the caching allocator keeps freed blocks reserved. The reserved peak itself comes
from replaying the step's allocation sequence (:func:`allocation_plan`) through a simulation of the
allocator (:mod:`dnnsat.cost._allocator`), configuration by configuration
(:mod:`dnnsat.cost._reserved`).

Mixed precision (``dtype="mixed"``) is a step under ``torch.autocast``: every tensor gets the dtype
autocast gives it (each catalog op's :class:`~dnnsat.graph._catalog.Autocast` policy for the device
type, type promotion for the others, :meth:`_Model.autocast`); an op that casts an input saves the
cast copy instead, 16-bit weight copies live in autocast's cache to the end of the forward (and to
the op's backward when it keeps them), the loss runs in fp32.

What users do to fit memory (:class:`~dnnsat.cost.Budget`): ``checkpoint=True`` runs the outermost
``repeat`` blocks under ``torch.utils.checkpoint`` (:meth:`_Model.checkpoint_blocks`: the forward keeps
only block inputs, the backward of a block sees its recomputed saved tensors);
``accumulation_steps=k`` evaluates everything at the micro-batch (:func:`micro_batches`) with all
parameter gradients alive through the forward and backward of later micro-batches.

CPU convolution buffers depend on the kernels PyTorch runs, which depend on the CPU:
:func:`cpu_conv_working_sets` follows the :class:`~dnnsat.cost.CpuBackend` of a CPU device profile,
or, without a device, the one detected on this machine (oneDNN's ISA within ``ONEDNN_MAX_CPU_ISA``).

Components are a breakdown of the peak, filled in this order: weights, optimizer, input, overhead,
activations (kept for backward at the end of the forward; inference: the largest live set),
gradients (all parameter gradients), and ``memory_transient``, the rest, so that they sum exactly to
``memory``. Everything is in bytes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..expr import Const, Expr, all_, any_, ceildiv, maximum, minimum, substitute, sum_, where
from ..graph import Network, Node
from ..graph._catalog import CATALOG, Attrs, Shape, Sizes, einsum_subscripts, prod
from ..graph._network import _implies, _split_gate
from ._devices import CpuBackend, detect_cpu_backend
from ._footprint import cublas_workspace, footprint

log = logging.getLogger("dnnsat.cost")

__all__ = [
    "memory_expressions",
    "allocation_plan",
    "AllocationPlan",
    "cpu_conv_working_sets",
    "cpu_conv_transpose_working_sets",
    "MEMORY_KEYS",
    "CONV_OPS",
]

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

CONV_OPS = ("conv1d", "conv2d", "conv3d")
_STRIDED_BWD_DATA_SCRATCH = 36888  # bytes: fixed buffer of the strided backward-data pass
_STRIDED_BWD_DATA_SCRATCH16 = 33816  # bytes: its 16-bit kernels' fixed part (plus 1 byte per input element)
_HALF = {"mixed": "bf16", "bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "fp16": "fp16"}


def _multiple(c: Expr, n: int) -> Expr:
    return ceildiv(c, n) * n == c


_Sets = tuple[Expr, Expr, Expr]


def _group_blocks(cg: Expr, og: Expr, backend: CpuBackend) -> Expr:
    """Channels per group (in, out) that oneDNN's blocked grouped forward kernels take: multiples of
    4 with AVX-512, of 8 with AVX2 (allocator traces, see ``grouped`` in :func:`cpu_conv_working_sets`)."""
    n = 4 if backend.avx512 else 8
    return _multiple(cg, n) & _multiple(og, n)


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
    for 1-3 (AVX2: for 3); 16-bit kernels add an fp32 accumulator and transposed copies of one sample,
    a 1x1 an fp32 accumulator of one sample's output in the forward, and first layers whose output
    channels do not fill blocks, grouped convs whose channels per group do not fill 16-blocks and
    depthwise kernels wider than 3 compute the weight gradient by im2col GEMM (allocator traces of
    bfloat16 autocast steps, avx512_core_bf16, one thread: ``tests/test_memory_conv_bf16.py``).
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
        # a conv1d runs as a conv2d of kernel (1, k): its kernel always has a side <= 3 (allocator
        # traces of nn.Conv1d with kernels 3-5 at batch 1)
        narrow = any_(ki <= 3 for ki in k) if len(k) > 1 else Const(True)
        small = (g == 1) & narrow & (b == 1) & (b * cin * sp_in <= 20480)
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
    # 16-bit backward weights by im2col GEMM: columns of one sample and group (none for an unstrided
    # 1x1) and 4 fp32 weight-sized accumulators (8 units each); allocator traces, avx512_core_bf16
    gemm16 = maximum(where(one & ~strided, 0, col + 64) + 8 * w + 128, w)
    big = 16 if backend.avx512 else 8

    def pad(c: Expr, n: int = big) -> Expr:
        return ceildiv(c, n) * n

    def subsampled(n: int = big) -> Expr:
        """A strided 1x1 conv first subsamples one input sample (+ 32 elements)."""
        return where(one & strided, pad(cin, n) * out_sp + 32, 0)

    def blocked_weights(n: int, first: Expr, grouped: bool = False) -> Expr:
        """Backward weights with ``n``-channel blocks (``first``: the plain input is read). 16-bit
        kernels: an fp32 accumulator, transposed input and gradient; groups 1 not for a 1x1, grouped
        ones for a 1x1 too, with 2 more rows per input channel (an upper bound of the traces)."""
        wg = pad(cout, n) * where(first, cg, pad(cg, n)) * k2
        scratch = subsampled(n)
        if half is not None:
            rows = (sp[0] + 2 * top) * prod(sp[1:])
            tr = 2 * wg + where(first, 0, pad(cin, n) * rows) + pad(cout, n) * (out_sp + 2) + 4290
            # a 1x1 of groups 1: an fp32 weight accumulator; strided: the subsampled input and an fp32
            # output gradient; unstrided, below 256 output pixels, per pixel 2 bytes per input and
            # output channel (the latter up to 256: an upper bound of the traces)
            if grouped:
                scratch = tr + where(one, 2 * pad(cin, n) * sp[0], 0)
            else:
                acc = 2 * pad(cin, n) * pad(cout, n)
                sub = out_sp * (pad(cin, n) + 2 * cout) + acc + 256
                small = out_sp * (pad(cin, n) + minimum(pad(cout, n), 256)) + 192
                scratch = where(one, where(strided, sub, acc + where(out_sp < 256, small, 64)), tr)
        copies = b * pad(cout, n) * out_sp + where(first, 0, b * pad(cin, n) * sp_in) + scratch
        return maximum(copies + wg, wg + w) - w

    # strided (groups 1, or more than B channels per group): plain output gradient, a fixed buffer,
    # then two input-gradient-sized copies
    def dense_data(weights: Expr, buffer: Expr) -> Expr:
        return maximum(out + weights + gi + buffer, 3 * gi) - gi - w

    strided_data = dense_data(cout * pad(cg) * k2, Const(_STRIDED_BWD_DATA_SCRATCH // nbytes))
    # 16-bit kernels: the buffer grows with the input (an upper bound of the traces)
    buffer16 = (_STRIDED_BWD_DATA_SCRATCH16 + cin * sp_in) // 2

    def plain() -> _Sets:
        """oneDNN, groups 1."""
        first = ~one & (cin < big)
        out_pad, in_pad = b * pad(cout) * out_sp, b * pad(cin) * sp_in
        w_fwd = pad(cout) * where(first, cin, pad(cin)) * k2
        scratch = subsampled()
        if half is not None:  # 16-bit 1x1: an fp32 accumulator of one sample's output (+ strided: the
            # subsampled sample), allocator traces of channels 8-48, strides 1-2, batches 1-4
            sub = where(strided, pad(cin) * out_sp + 64, 0)
            scratch = where(one, pad(cout) * out_sp * 2 + 64 + sub, 0)
        fwd = maximum(scratch + where(first, 0, in_pad) + w_fwd + out_pad - out, out_pad)
        if len(k) == 1 and not backend.avx512 and not isinstance(a.padding, str):
            # AVX2, conv1d: a dilated kernel with a left padding >= 4 that keeps the length runs the
            # im2col GEMM forward (allocator traces of nn.Conv1d, kernels 2-7, dilations 1-5)
            wide = dilated & (a.padding[0] >= 4) & (out_sp == sp_in)
            fwd = where(wide, gemm[0], fwd)
        data = maximum(out_pad + pad(cout) * pad(cin) * k2 + in_pad, in_pad + gi) - gi - w
        if half is not None:
            # a first-layer kernel whose output channels do not fill blocks: the im2col GEMM
            weights = where(first & ~_multiple(cout, big), gemm16, blocked_weights(big, first))
        elif backend.avx512:
            weights = where(
                ~one & (cin >= 4) & (cin < 16),
                where(dilated, gemm[2], blocked_weights(8, Const(False))),
                blocked_weights(16, ~one & (cin <= 3)),
            )
        else:
            # an input smaller than the kernel (a 5x5 on a 4x4 map) has no AVX2 backward-weights
            # kernel either (allocator traces, kernels 3-7, inputs 1-14, strides 1-2, paddings 0-3)
            smaller = any_(si < ki for si, ki in zip(sp, k))
            weights = where(dilated | smaller, gemm[2], blocked_weights(8, ~one & (cin == 3)))
        return fwd, where(strided, strided_data, data), weights

    def depthwise() -> _Sets:
        """oneDNN, one channel per group: the channels are blocked. 16-bit kernels: a strided
        backward data runs as a dense conv (plain output gradient, fp32 weights of ``B`` channels per
        group, a per-sample buffer: an upper bound of the traces), kernels wider than 3 compute the
        weight gradient by GEMM."""
        c_in, c_out, c_w = b * pad(cin) * sp_in, b * pad(cin) * out_sp, pad(cin) * k2
        data = maximum(c_out + c_w + c_in, c_in + gi) - gi - w
        weights = maximum(c_out + c_in + c_w, c_w + w) - w
        if half is not None:
            data = where(strided, dense_data(2 * big * cout * k2, buffer16), data)
            weights = where(any_(ki > 3 for ki in k), gemm16, weights)
        return maximum(c_in + c_w + c_out - out, c_out), data, weights

    def grouped() -> _Sets:
        """oneDNN, other groups: plain layouts where the channels per group fill 8-blocks, else GEMM
        (AVX-512: in backward weights only).

        Forward: oneDNN runs a blocked grouped kernel where the output channels per group are a
        multiple of 8 and an unstrided conv has fewer than 8 input channels, or (AVX-512) both channels per
        group are multiples of 4, or (AVX2) of 8; else the im2col GEMM (allocator traces of no-grad
        3x3 convs, channels per group 1-16 x 1-16, groups 2 and 4, AVX-512 and AVX2 emulated)."""
        in_blocks = _multiple(cg, 8) & _multiple(og, 8)
        if half is not None:
            # 16-bit backward weights: blocked where both channels per group fill 16-blocks, else GEMM
            blocked = blocked_weights(16, Const(False), grouped=True)
            weights16 = where(_multiple(cg, 16) & _multiple(og, 16), blocked, gemm16)
        gemm_fwd = Const(False) if backend.avx512 else ~in_blocks
        per_group = _group_blocks(cg, og, backend)
        fwd_gemm = ~(per_group | (_multiple(og, 8) & (cin < 8) & ~strided))
        dense, strided16 = strided & (cg > big), strided_data
        if half is not None:  # 16-bit: a strided 1x1 with 9-15 channels per group too (buffer: bounded)
            dense = strided & ((cg > big) | (one & (cg > 8)))
            strided16 = dense_data(cout * pad(cg) * k2, buffer16)
        return (
            where(fwd_gemm, gemm[0], maximum(gi + w, out)),
            where(dense, strided16, where(gemm_fwd, gemm[1], maximum(out, gi - w))),
            where(in_blocks, maximum(out + gi, w), gemm[2]) if half is None else weights16,
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


def cpu_bf16_matmul_scratch(m: Expr, k: Expr, n: Expr) -> tuple[Expr, Expr, Expr]:
    """Scratchpad bytes of oneDNN's bfloat16 matmul (brgemm) for ``(m, k) @ (k, n)``, as ``linear``
    runs it under CPU autocast: (forward, input gradient, weight gradient). Read off allocator traces
    (torch 2.13, one intra-op thread, avx512_core_bf16) of ``addmm``/``mm`` over m 8-4096, k and n
    10-2048: exact for k, n <= 512 in the forward (a packed 64-column weight block, an fp32
    accumulator of 64 columns and 1 KB), within 35 % beyond; the accumulator's rows are one of the
    equal blocks the ``m`` rows are split into, at most 256 (the fewest blocks that divide ``m``:
    ``ceil(m / ceil(m / 256))`` is exact where that count divides ``m``, an upper bound elsewhere;
    105 shapes, m 130-3000, never under); the weight gradient
    (``grad.t() @ x``) copies blocks of the transposed gradient and accumulates the whole
    ``(n, k)`` block in fp32 once the reduction over ``m`` exceeds 512 rows (within 15 % except for
    n or k below 64). PyTorch hands oneDNN only products with ``m * k * n > 16**3``
    (``aten/src/ATen/native/mkldnn/Matmul.cpp``); smaller ones, and CPUs without oneDNN bfloat16
    kernels (AVX2), allocate none."""

    def forward(m: Expr, k: Expr, n: Expr) -> Expr:
        block = ceildiv(m, ceildiv(m, 256))  # <= min(m, 256)
        return ceildiv(minimum(k, 512), 32) * 32 * 128 + block * minimum(n, 64) * 4 + 1024

    rows = minimum(n, 256)
    small = 2 * rows * m + 256 * rows + 128 * m + 1152
    large = rows * (1088 + 4 * minimum(ceildiv(k, 64) * 64, 1024)) + 66688
    onednn = m * k * n > 4096
    return (
        where(onednn, forward(m, k, n), 0),
        where(onednn, forward(m, n, k), 0),
        where(onednn & (m <= 512), small, where(onednn, large, 0)),
    )


def _as_2d(x: Shape, y: Shape, a: Attrs) -> tuple[Shape, Shape, Attrs]:
    """A 1-D convolution's shapes and attributes as the 2-D one of height 1 ATen runs it as
    (``aten/src/ATen/native/Convolution.cpp: _convolution``, ``view1d_as_2d``); 2-D ones as they are."""
    if len(x) != 3:
        return x, y, a
    one = Const(1)
    tuples = ("kernel_size", "stride", "padding", "output_padding", "dilation")
    first = {k: one if k in ("kernel_size", "stride", "dilation") else Const(0) for k in tuples}
    wide = Attrs({**a, **{k: (first[k], *a[k]) for k in tuples}})
    return (x[0], x[1], one, x[2]), (y[0], y[1], one, y[2]), wide


def cpu_conv_transpose_working_sets(x: Shape, y: Shape, a: Attrs, backend: CpuBackend, nbytes: int) -> _Sets:
    """Transient bytes of a CPU ``conv_transpose2d`` (fp32; other dtypes: the same element counts):
    (forward besides the output, backward besides the output, input and weight gradients, backward
    when the input needs no gradient). Read off allocator traces (torch 2.13, one intra-op thread,
    AVX-512 native and AVX2 emulated; channels 3-64, kernels 2-4, strides 1-3, groups 1-3, batches
    1-8); upper bounds where a trace left a choice.

    PyTorch picks the kernel like a convolution's (``use_mkldnn``): batch 1, groups 1, a kernel side
    <= 3 and <= 20480 input elements run ``slow_conv_transpose2d``, whose columns
    (``out_channels * k * k * H_in * W_in``) live through the forward and, with a copy of the output
    gradient, through each backward pass. Otherwise oneDNN runs it as a backward-data convolution:
    depthwise, unstrided, or grouped with channels per group filling blocks (as
    :func:`cpu_conv_working_sets`): a scratch buffer (the padded output + 32), then the input,
    the weights and the output in blocked layouts at once (grouped: plain weights); strided (groups 1
    or more than 8 input channels per group): a scratch of the output + 14406 elements where the
    kernel equals the stride, else ``max(9254, input + 5158)``, with the plain input and output and
    the weights padded on the output channels; other grouped ones: an im2col GEMM (an output-sized
    buffer + one sample's and group's columns + 96). Backward: the output gradient, the input and the
    weights in those layouts (GEMM: the columns and 4 weight-sized accumulators).
    """
    b, cin, sp = x[0], x[1], x[2:]
    k, s, g, cout = a.kernel_size, a.stride, a.groups, a.out_channels
    blk = backend.channel_block

    def pad(c: Expr) -> Expr:
        return ceildiv(c, blk) * blk

    cg, og = cin // g, cout // g
    k2, sp_in, sp_out = prod(k), prod(sp), prod(y[2:])
    inp, out = b * cin * sp_in, b * cout * sp_out
    in_pad, out_pad = b * pad(cin) * sp_in, b * pad(cout) * sp_out
    strided = any_(si > 1 for si in s)
    same = all_(ki == si for ki, si in zip(k, s))
    depthwise = (g == cin) & (cout == cin)
    per_group = _group_blocks(cg, og, backend)
    w_blk = where(g == 1, pad(cin) * pad(cout), where(depthwise, pad(cin), cin * og)) * k2
    blocked = (out_pad + 32 + in_pad + w_blk + out_pad - out, out_pad + in_pad + w_blk)
    scratch = where(same, out + 14406, maximum(9254, inp + 5158))
    w_str = cin * pad(cout) * k2
    plain = (maximum(scratch + inp + w_str, out), out + inp + w_str)
    cols = og * k2 * sp_in
    gemm = (out + cols + 96, cols + 4 * cin * og * k2 + 96)
    dnn = _choose(
        strided & ((g == 1) | (cg > 8)),
        lambda: (*plain, plain[1]),
        lambda: _choose(
            depthwise | per_group | (g == 1),
            lambda: (*blocked, blocked[1]),
            lambda: (*gemm, gemm[1]),
        ),
    )
    slow = (g == 1) & any_(ki <= 3 for ki in k) & (b == 1) & (inp <= 20480)
    c = cout * k2 * sp_in
    return (
        where(slow, c, dnn[0]) * nbytes,
        where(slow, c + out, dnn[1]) * nbytes,
        where(slow, c + out, dnn[2]) * nbytes,
    )


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
_ELEMENTWISE = frozenset(
    {"add", "sub", "mul", "dropout", "relu", "gelu", "silu", "sigmoid", "tanh", "hardswish", "relu6",
     "leaky_relu", "elu", "mish"}
)  # fmt: skip


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
            # a traced model's transpose back is a view in training too: the kernel wrote its output in
            # the layout of a query that is itself a transposed view (``empty_like``), and its backward
            # copies nothing
            flash = not self.gpu and (net.permute_views or not self.train) and _flash_transpose(net, node)
            if mem.view or (mem.eval_view and not self.train) or flash:
                alias[out] = alias[ins[0]]
                continue
            alias[out] = [(Const(True), out)]
            size = self.rounded(t.numel * self.tensor_bytes(out))
            self.roots[out] = _Root(node.index, node.gate, size, needs_grad[out], [], [], [])
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
            mem = node.info.mem
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
        for op in reversed(ops):
            k = op.index
            # under autocast an op whose weights are cast computes their gradients in 16 bits; they
            # become fp32 parameter gradients after its backward (ToCopyBackward)
            own = 2 if self.casts_weights(op) else None
            if k in gspans and self.roots[op.output].grad:
                bw = self.backward_set(op)
                mine = where(op.gate, self.param_grad_bytes(op, own), 0)
                live = unreleased[k] + recomputed.get(k, Const(0)) + grads + mine + sum_(gspans[k])
                live = live + sum_(second[k])
                bwd.append(live + end + where(op.gate, bw, 0))
                if own is not None:  # ToCopyBackward: the fp32 gradients while the 16-bit ones live
                    fp32 = where(op.gate, self.param_grad_bytes(op), 0)
                    bwd.append(released[k] + grads + mine + fp32 + sum_(through[k]) + end)
            if self.steps == 1:
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
        if node.op == "layernorm" and self._strided(node.inputs[0]):
            # ``native_layer_norm`` and its backward make a contiguous copy of a strided input
            # (allocator traces of a ViT's transposed patch embeddings, torch 2.13)
            copy = self.net.tensors[node.inputs[0]].numel * self.tensor_bytes(node.inputs[0])
            sets = (sets[0] + copy, sets[1] + copy, sets[2] + copy)
        return sets

    def _strided(self, ti: int) -> bool:
        """Whether tensor ``ti`` of a traced model is a strided (transposed) view or an elementwise
        result of one (TensorIterator keeps its first operand's layout)."""
        net = self.net
        if not net.permute_views:
            return False
        p = net.nodes[net.producer[ti]]
        if p.info is None:  # a select: strided if a case may be (an upper bound)
            return any(self._strided(c) for _, c in p.cases)
        if p.op == "permute":
            return not _flash_transpose(net, p)
        return p.op in _ELEMENTWISE and bool(p.inputs) and self._strided(p.inputs[0])

    def _kernel_sets(self, node: Node) -> tuple[Expr, Expr, Expr]:
        """:meth:`working_sets` as the kernels see contiguous inputs."""
        mem = node.info.mem  # type: ignore[union-attr]
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
        if node.op in ("conv_transpose1d", "conv_transpose2d") and self.backend is not None:
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
        frozen = mem.backward_frozen or mem.backward
        return self.sizes(fwd, b), self.sizes(mem.backward, b), self.sizes(frozen, b)

    def kept_extra(self, node: Node) -> Expr:
        """Bytes ``node`` keeps for backward besides its inputs and output (training only): the catalog's
        ``extra`` and, in mixed precision, the 16-bit copies of its weights when autocast runs it in
        16 bits and the cast copies of the inputs it saves, released by the op's backward."""
        if not self.train:
            return Const(0)
        kept = self.sizes(node.info.mem.extra, self.tensor_bytes(node.output))  # type: ignore[union-attr]
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
    def tensor_bytes(self, index: int) -> int:
        """Bytes per element of tensor ``index`` (mixed precision: 2 for 16-bit, else 4)."""
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
        # node -> (input, bytes of one copy, copies, an autocast cast: else TensorIterator's)
        self.casts: dict[int, list[tuple[str, Expr, int, bool]]] = {}
        self.saved_copies: dict[int, set[str]] = {}  # node -> inputs whose cast copies it saves
        for node in net.nodes:
            out = node.output
            if node.info is None:  # select: a branch's tensor
                self.half[out] = all(self.half[t] for _, t in node.cases)
                continue
            floats = [(p, i) for p, i in enumerate(node.inputs) if net.tensors[i].dtype != "int64"]
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
            if casts:
                self.casts[node.index] = casts
                saves = set(node.info.mem.saves) if self.train else set()
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
        if op.info.mem.releases_grad and self.input_grad(op) and root is not None and root.grad_uses:  # type: ignore[union-attr]
            owned = any_(c for _, c, _ in root.grad_uses)  # its own gradient storage
            total = total - where(owned, root.size, 0)
        return total

    def mixed_sets(self, node: Node) -> tuple[Expr, Expr, Expr]:
        """Transient bytes of ``node`` under mixed precision, as :meth:`working_sets`: the cast copies
        it makes in the forward and does not save (alive with its output; an input cast several times,
        by attention's projections, is freed after each) and, on a CPU with oneDNN
        bfloat16 kernels, the scratchpads of its bfloat16 matmuls (:func:`cpu_bf16_matmul_scratch`).
        In the backward the op computes the gradient of its saved 16-bit copy, which is cast to the fp32
        input's gradient once the op has released that copy: the sweep counts the fp32 gradient at the
        op, so the backward entry is negative by the 16-bit gradient's size (the caller clamps the sum
        with the op's working set at 0)."""
        if not self.mixed:
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
        mm_fwd, mm_data, mm_weight = cpu_bf16_matmul_scratch(rows, k, n)
        return fwd + mm_fwd, maximum(mm_data, mm_weight) - slack, mm_weight

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
        if self.steps > 1:  # later micro-batches run with every gradient accumulated so far
            self.accumulated = sum_(where(n.gate, self.param_grad_bytes(n), 0) for n in ops)
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
            # autocast runs the loss in fp32 (cross_entropy_loss / log_softmax): 16-bit logits are
            # copied to fp32 for the log-softmax
            logits32 = logp if self.half[out_t.index] else Const(0)
            loss = outputs + logp + self.accumulated + self.loss_scalars()
            fwd.append(saved_end + self.cached + logits32 + loss)
            bwd.append(saved_end + 2 * logp + loss)
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


def _warn_unvalidated(net: Network, model: _Model) -> None:
    """Log the ops whose CPU memory this model is known to underestimate: a strided ``conv_transpose1d``
    (the 2-D rule of height 1: -13 % measured on one inference case, torch 2.13); ``conv3d`` is measured on
    AVX-512 only (torch 2.13): exact for kernel sides <= 3, but training with a larger kernel side is
    -18 % to -70 % when the channels are not multiples of 16, and on AVX2 -6 % to -13 %."""
    if model.backend is None:
        return
    avx512 = model.backend.isa.startswith("avx512")
    warned: set[str] = set()  # one warning per op kind
    for node in net.ops():
        if node.op in warned:
            continue
        if node.op == "einsum" and _broadcasts(net, node):
            log.warning(
                "memory: %s: the CPU memory of an einsum whose operands broadcast (a missing or size-1 "
                "batch dimension) is not validated: einsum may copy the expanded operand (measured -16 %% "
                "for '...ij,...jk->...ik' at inference, torch 2.13); add Budget(margin=...) or measure with "
                "dnnsat.torch.peak_memory",
                node.label,
            )
            warned.add(node.op)
            continue
        if node.op == "attention" and node.attrs.get("layout") == "mha":  # masks measured too
            if model.mixed:  # the rules follow fp32 allocator traces (tests/test_mha_memory.py)
                log.warning(
                    "memory: %s: the CPU memory of nn.MultiheadAttention under mixed precision is not "
                    "validated (autocast rules out its fast path; measured in fp32 only, torch 2.13); add "
                    "Budget(margin=...) or measure with dnnsat.torch.peak_memory",
                    node.label,
                )
                warned.add(node.op)
            continue
        if _unvalidated_mask(net, node):
            log.warning(
                "memory: %s: the CPU memory of attention with this attention mask is not validated (a mask "
                "of the DSL's attention, or a scaled_dot_product_attention mask of rank other than 2 or 4, "
                "which PyTorch runs on its math path: -43 %% to -69 %% measured, torch 2.13); add "
                "Budget(margin=...) or measure with dnnsat.torch.peak_memory",
                node.label,
            )
            warned.add(node.op)
            continue
        strided = not all(s.is_const and s.value == 1 for s in node.attrs.get("stride", ()))
        if node.op == "conv_transpose1d" and strided:
            log.warning(
                "memory: %s: the CPU memory of a strided conv_transpose1d is that of the 2-D one of height "
                "1 (as ATen runs it), whose rule is validated on square kernels: measured -13 %% to +24 %%; "
                "add Budget(margin=...) or measure with dnnsat.torch.peak_memory",
                node.label,
            )
            warned.add(node.op)
        if node.op != "conv3d":
            continue
        large = not all(k.is_const and k.value <= 3 for k in node.attrs["kernel_size"])
        if not avx512 or (model.train and large):
            log.warning(
                "memory: %s: the CPU memory of conv3d is validated on AVX-512 with kernel sides <= 3 only "
                "(here: %s, kernel %s): it may be underestimated by up to 70 %%; add Budget(margin=...) "
                "or measure with dnnsat.torch.peak_memory",
                node.label,
                model.backend.isa or "no oneDNN ISA",
                "larger" if large else "<= 3",
            )
            warned.add(node.op)


def _broadcasts(net: Network, node: Node) -> bool:
    """Whether an einsum's operands broadcast: ``...`` stands for more dimensions in one operand than in
    the other, or a letter of both operands has size 1 in one of them."""
    a, b = (net.tensors[i].shape for i in node.inputs)
    sa, sb, _ = einsum_subscripts(node.attrs["equation"], (len(a), len(b)))
    if set(c for c in sa + sb if not c.isascii()) - (set(sa) & set(sb)):
        return True
    ones = [(d, b[sb.index(c)]) for c, d in zip(sa, a) if c in sb]
    return any((d.is_const and d.value == 1) != (e.is_const and e.value == 1) for d, e in ones)


def _flash_transpose(net: Network, node: Node) -> bool:
    """Whether ``node`` swaps the heads and sequence of an ``sdpa`` output run by the CPU flash kernel
    (``sdpa(q, k, v).transpose(1, 2)``): ATen writes that output as (batch, sequence, heads, width) and
    returns its transpose, so the transpose back is contiguous, no copy (nor the reshape after it). In
    training the model keeps the copy: the kernel's backward copies the gradient flowing back through it
    (a DSL ``sdpa -> transpose -> reshape -> linear`` step measured 12 % over the model without it)."""
    if node.op != "permute" or tuple(node.attrs["dims"]) != (0, 2, 1, 3):
        return False
    src = net.nodes[net.producer[node.inputs[0]]]
    return src.op == "sdpa" and not _unvalidated_mask(net, src)


def _unvalidated_mask(net: Network, node: Node) -> bool:
    """Whether an attention op has an attention mask whose memory is not validated: a mask of the DSL's
    ``attention``, an ``sdpa`` mask of rank other than 2 or 4 (PyTorch's CPU flash kernel takes those: a
    2-D or 4-D float or boolean mask is within 0.1 % at inference and adds nothing to the unmasked error
    in training, on hand-written blocks traced by ``from_torch``, torch 2.13)."""
    if len(node.inputs) == 4:
        rank = net.tensors[node.inputs[3]].ndim
    elif node.attrs.get("mask_shape") is not None:
        rank = len(node.attrs["mask_shape"])
    else:
        return False
    if node.op == "attention":
        return node.attrs.get("layout") != "mha"  # a traced nn.MultiheadAttention's masks are measured
    return node.op == "sdpa" and rank not in (2, 4)


def batch_values(net: Network, size: Callable[[Expr], Expr], what: str) -> dict[str, Expr]:
    """Each batch variable (dim 0 of a network input) -> ``size(batch)``, for :func:`substitute`;
    ``what`` names the option in the error raised when a batch is not a space variable."""
    out: dict[str, Expr] = {}
    for t in net.inputs:
        batch = t.shape[0]
        if batch.op != "var":
            raise ValueError(
                f"{what}: the batch (dim 0 of network input #{t.index}, {batch}) must be a space "
                f"variable (build the input as net.input((v.batch_size, ...)))"
            )
        out[batch.payload[0]] = size(batch)
    return out


def micro_batches(net: Network, steps: int) -> dict[str, Expr]:
    """Gradient accumulation: each batch variable -> the size of the largest of ``steps`` micro-batches,
    ``ceildiv(batch, steps)``."""
    return batch_values(net, lambda batch: ceildiv(batch, steps), f"accumulation_steps={steps}")


# -- the allocation sequence of a step, for the caching allocator's simulation ---------------------


class AllocationPlan:
    """The ordered tensor allocations and frees of a training step (or inference pass) as expressions,
    built once from the memory model's liveness (:func:`allocation_plan`) and replayed per
    configuration through a :class:`~dnnsat.cost._allocator.CachingAllocator`.

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
            from ..expr import compile_scalar

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
