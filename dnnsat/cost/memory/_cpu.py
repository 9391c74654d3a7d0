"""CPU memory rules: the working sets of the kernels PyTorch runs on a CPU, by
:class:`~dnnsat.cost.CpuBackend` (oneDNN and ATen convolutions and transposed convolutions by ISA: AVX2
vs AVX-512, oneDNN's bfloat16 matmul scratchpads), the layout of the CPU flash-attention kernel's
output, and the warnings for ops whose CPU memory is not validated. Used by the analytic peak
(:mod:`dnnsat.cost.memory._peak`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from ...expr import Const, Expr, all_, any_, ceildiv, maximum, minimum, where
from ...graph import Network, Node
from ...graph._catalog import Attrs, Shape, einsum_subscripts, prod
from .._cpu_backend import CpuBackend

if TYPE_CHECKING:
    from ._peak import _Model

log = logging.getLogger("dnnsat.cost")

__all__ = [
    "cpu_conv_working_sets",
    "cpu_conv_transpose_working_sets",
    "cpu_channels_last_depthwise_scratch",
    "cpu_bf16_matmul_scratch",
    "expanded_linear_grad",
    "CONV_OPS",
]


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
    for 1-3 (AVX2: for 3); neither has a kernel wider than 14 (AVX-512) or 13 (AVX2) columns: wider
    ones (fp32; allocator traces of patchify convs, kernels 2-32, strides 1-32, 1-32 input channels)
    run the im2col GEMM (as where a kernel is missing, below); 16-bit kernels add an fp32 accumulator
    and transposed copies of one sample, a 1x1 an fp32 accumulator of one sample's output in the
    forward, and first layers whose output channels do not fill blocks, grouped convs whose channels
    per group do not fill 16-blocks and depthwise kernels wider than 3 compute the weight gradient by
    im2col GEMM (allocator traces of bfloat16 autocast steps, avx512_core_bf16, one thread:
    ``tests/test_memory_conv_bf16.py``).
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
        left = (k[-1] - 1) * d[-1] // 2 if a.padding == "same" else Const(0)
        no_pad = Const(a.padding == "valid") | one
    else:
        left, no_pad = a.padding[-1], all_(p == 0 for p in a.padding)

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

    def even(c: Expr) -> Expr:
        return ceildiv(c, 2) * 2

    def subsampled(n: int = big) -> Expr:
        """A strided 1x1 conv first subsamples one input sample (+ 32 elements)."""
        return where(one & strided, pad(cin, n) * out_sp + 32, 0)

    def blocked_weights(n: int, first: Expr, grouped: bool = False) -> Expr:
        """Backward weights with ``n``-channel blocks (``first``: the plain input is read). 16-bit
        kernels: an fp32 accumulator, transposed input and gradient; groups 1 not for a 1x1, grouped
        ones for a 1x1 too."""
        wg = pad(cout, n) * where(first, cg, pad(cg, n)) * k2
        scratch = subsampled(n)
        if half is not None:
            # transposed rows of the input, each of ``tr_iw`` columns: the strided columns padded by
            # ``tr_pad = max(1, left, right + 1)`` rounded to 2 (and ``tr_pad - 2`` guard elements), and of
            # the output gradient, each rounded to 2 columns (allocator traces, kernels 2-14, strides 1-14,
            # paddings 0-7)
            ow, sw = y[-1], s[-1]
            right = (ow - 1) * sw + d[-1] * (k[-1] - 1) + 1 - sp[-1] - left
            tr_pad = even(maximum(1, left, right + 1))
            tr_src = pad(cin, n) * prod(sp[:-1]) * even(ceildiv(sp[-1], sw) + tr_pad) * sw + tr_pad - 2
            tr_dst = pad(cout, n) * (prod(y[2:-1]) * even(ow) + 2)
            tr = 2 * wg + where(first, 0, tr_src) + tr_dst + 4290
            # a 1x1 of groups 1: an fp32 weight accumulator; strided: the subsampled input and an fp32
            # output gradient; unstrided, below 256 output pixels, per pixel 2 bytes per input and
            # output channel (the latter up to 256: an upper bound of the traces)
            if grouped:
                scratch = tr
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
            # a first-layer kernel whose output channels do not fill blocks, or wider than 24 columns
            # (others: 14; allocator traces, patchify convs of kernels 8-32): the im2col GEMM
            wide = k[-1] > where(first, 24, 14)
            weights = where((first & ~_multiple(cout, big)) | wide, gemm16, blocked_weights(big, first))
        elif backend.avx512:  # kernels wider than 13 (AVX2 kernel) or 14 columns: the im2col GEMM
            weights = where(
                ~one & (cin >= 4) & (cin < 16),
                where(dilated | (k[-1] > 13), gemm[2], blocked_weights(8, Const(False))),
                where(k[-1] > 14, gemm[2], blocked_weights(16, ~one & (cin <= 3))),
            )
        else:
            # an input smaller than the kernel (a 5x5 on a 4x4 map) has no AVX2 backward-weights
            # kernel either (allocator traces, kernels 3-7, inputs 1-14, strides 1-2, paddings 0-3)
            smaller = any_(si < ki for si, ki in zip(sp, k))
            wide = k[-1] > 13
            weights = where(dilated | smaller | wide, gemm[2], blocked_weights(8, ~one & (cin == 3)))
        return fwd, where(strided, strided_data, data), weights

    def depthwise() -> _Sets:
        """oneDNN, one channel per group: the channels are blocked. 16-bit kernels: a strided
        backward data runs as a dense conv (plain output gradient, fp32 weights of ``B`` channels per
        group, a per-sample buffer: an upper bound of the traces), kernels wider than 3 compute the
        weight gradient by GEMM. fp32: so do kernels wider than 3, and kernels wider than 13 columns
        (AVX2: 9) the forward too (allocator traces, kernels 3-31, AVX-512 and AVX2; where oneDNN
        blocks the output pixels of a large one's columns, the full columns are an upper bound)."""
        c_in, c_out, c_w = b * pad(cin) * sp_in, b * pad(cin) * out_sp, pad(cin) * k2
        data = maximum(c_out + c_w + c_in, c_in + gi) - gi - w
        weights = maximum(c_out + c_in + c_w, c_w + w) - w
        fwd = maximum(c_in + c_w + c_out - out, c_out)
        wide = any_(ki > 3 for ki in k)
        if half is not None:
            data = where(strided, dense_data(2 * big * cout * k2, buffer16), data)
            weights = where(wide, gemm16, weights)
        else:
            weights = where(wide, gemm[2], weights)
            fwd = where(k[-1] > (13 if backend.avx512 else 9), gemm[0], fwd)
        return fwd, data, weights

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


def cpu_bf16_matmul_scratch(
    m: Expr, k: Expr, n: Expr, expanded_grad: Expr | None = None
) -> tuple[Expr, Expr, Expr]:
    """Scratchpad bytes of oneDNN's bfloat16 matmul (brgemm) for ``(m, k) @ (k, n)``, as ``linear``
    runs it under CPU autocast: (forward, input gradient, weight gradient). Read off allocator traces
    (torch 2.13, one intra-op thread, avx512_core_bf16) of ``addmm``/``mm`` over m 8-4096, k and n
    10-2048: exact for k, n <= 512 in the forward (a packed 64-column weight block, an fp32
    accumulator of 64 columns and 1 KB), within 35 % beyond; the accumulator's rows are one of the
    equal blocks the ``m`` rows are split into, at most 256 (the fewest blocks that divide ``m``:
    ``ceil(m / ceil(m / 256))`` is exact where that count divides ``m``, an upper bound elsewhere;
    105 shapes, m 130-3000, never under); the weight gradient (``grad.t() @ x``) copies blocks of
    the transposed gradient (``m`` rounded up to 32 rows) and accumulates a block of ``n`` (as the
    forward's ``m``) by ``min(k, 64)`` columns in fp32, the whole ``(n, k)`` block once the reduction
    over ``m`` exceeds 512 rows (exact over m 1-3000, k 2-2000, n 10-513; an upper bound for k = 1 and
    where the blocks do not divide ``n``). ``expanded_grad`` (a condition): the output gradient is an
    expanded view (:func:`expanded_linear_grad`), which ``mm`` first clones in the transposed layout, so
    oneDNN copies no blocks of it (up to 512 rows; beyond, an upper bound). PyTorch hands oneDNN only
    products with ``m * k * n > 16**3`` (``aten/src/ATen/native/mkldnn/Matmul.cpp``); smaller ones, and
    CPUs without oneDNN bfloat16 kernels (AVX2), allocate none."""

    def forward(m: Expr, k: Expr, n: Expr) -> Expr:
        block = ceildiv(m, ceildiv(m, 256))  # <= min(m, 256)
        return ceildiv(minimum(k, 512), 32) * 32 * 128 + block * minimum(n, 64) * 4 + 1024

    # the weight gradient's rows (n) in equal blocks of at most 256, as the forward's; below 64 columns
    # (k) the fp32 accumulator is k wide; m rounded up to 32 (one more block from 481 rows on)
    n_block, m_pad = ceildiv(n, ceildiv(n, 256)), ceildiv(m, 32) * 32 + where(m > 480, 32, 0)
    copied = 2 * m_pad if expanded_grad is None else where(expanded_grad, 0, 2 * m_pad)
    small = n_block * (4 * minimum(k, 64) + copied) + 128 * m_pad + 1152
    small = where(k == 1, 128 * m_pad + 1280, small)
    large = n_block * (1088 + 4 * where(k < 64, k, minimum(ceildiv(k, 64) * 64, 1024))) + 66688
    onednn = m * k * n > 4096
    return (
        where(onednn, forward(m, k, n), 0),
        where(onednn, forward(m, n, k), 0),
        where(onednn & (m <= 512), small, where(onednn, large, 0)),
    )


def expanded_linear_grad(net: Network, node: Node, consumers: list[Node]) -> Expr | None:
    """When the gradient of a ``linear``'s output reaches its backward as an expanded view: its one
    consumer is a ``sum`` over a dimension other than the last (whose backward expands the gradient)
    and every other dimension but the last has size 1, so the linear's reshape to ``(rows, n)`` stays a
    view (allocator traces, torch 2.13: ``sum`` over the tokens of a batch of 1); None if it never is."""
    if len(consumers) != 1 or consumers[0].op != "sum":
        return None
    shape = net.tensors[node.output].shape
    dim = consumers[0].attrs.dim % len(shape)
    if dim == len(shape) - 1:
        return None
    return prod(shape[:-1]) == shape[dim]


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


def cpu_channels_last_depthwise_scratch(x: Shape, a: Attrs, backend: CpuBackend) -> Expr:
    """Bytes the backward of a CPU ``conv2d`` with one input channel per group and a kernel side over 3
    allocates besides its working sets when its input is channels-last (ConvNeXt's 7x7 depthwise
    convolutions after its channels-last LayerNorm2d): ``4 * L**2`` bytes per group and kernel element,
    ``L`` the fp32 lanes of oneDNN's vectors (16 with AVX-512, 8 with AVX2), whatever the batch and the
    image (1029-1042 and 261-274 bytes measured, fp32, one intra-op thread, channels 32-48 and twice
    as many outputs, kernels 4-9, torch 2.13; bounded here by ``4 * L**2 + 4 * L``). A 3x3 one
    allocates less than on a contiguous input (none added)."""
    lanes = backend.channel_block
    depthwise = (a.groups == x[1]) & any_(k > 3 for k in a.kernel_size)
    return where(depthwise, (4 * lanes * lanes + 4 * lanes) * a.groups * prod(a.kernel_size), 0)


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
    # 3-D: not traced kernel by kernel; the 2-D rule's counts missed up to an output grown by one on each
    # side (fp32, AVX-512 and AVX2, 8 configurations, torch 2.13): added to every pass, an upper bound
    grown = b * cout * prod([d + 1 for d in y[2:]]) if len(y) == 5 else Const(0)
    return (
        (where(slow, c, dnn[0]) + grown) * nbytes,
        (where(slow, c + out, dnn[1]) + grown) * nbytes,
        (where(slow, c + out, dnn[2]) + grown) * nbytes,
    )


def _warn_unvalidated(net: Network, model: _Model) -> None:
    """Log the ops whose CPU memory this model is known to underestimate: a strided ``conv_transpose1d``
    (the 2-D rule of height 1: -13 % measured on one inference case, torch 2.13); ``conv3d`` is measured on
    AVX-512 only (torch 2.13): exact for kernel sides <= 3, but training with a larger kernel side is
    -18 % to -70 % when the channels are not multiples of 16, and on AVX2 -6 % to -13 %; and mixed precision
    on an AMX CPU (``avx512_core_amx*``: its bfloat16 kernels are not the AVX-512 BF16 ones modelled).
    ``conv_transpose3d`` is warned about too: its rule is an upper bound, not traced kernel by kernel."""
    if model.backend is None:
        return
    if model.mixed and model.backend.isa.startswith("avx512_core_amx"):
        log.warning(
            "memory: the CPU memory of mixed precision on %s (AMX) is not validated: its bfloat16 kernels "
            "use AMX tiles and other scratchpads than AVX-512 BF16, whose rules this model follows "
            "(measured, torch 2.13: single bf16 convolutions -13 %% to -55 %% (tens to hundreds of KiB), "
            "other graphs -3 %% to +13 %%); add Budget(margin=...) or measure with "
            "dnnsat.torch.peak_memory",
            model.backend.isa,
        )
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
        if node.op == "conv_transpose3d":
            log.warning(
                "memory: %s: the CPU memory of conv_transpose3d is the 2-D rule's over three dimensions "
                "plus an output-sized bound, not traced kernel by kernel: measured never under, up to "
                "+104 %% over (torch 2.13); measure with dnnsat.torch.peak_memory for a tighter figure",
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
