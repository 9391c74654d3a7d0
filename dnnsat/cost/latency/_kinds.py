"""What differs by device kind besides the schedule (:mod:`dnnsat.cost.latency._roofline`): how a
device runs GEMM-like work (:class:`_Mapping`: channel blocks of a CPU or GPU, a mobile runtime's
single GEMM path, an accelerator's PE array and on-chip buffer) and, on a CPU running PyTorch eager,
which convolutions go through oneDNN and how well its grouped kernels fill the vectors.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...expr import Const, Expr, all_, as_expr, where
from ...graph import Node
from .._devices import DeviceProfile


@dataclass(frozen=True)
class _Mapping:
    """How a device runs GEMM-like ops and which ops its runtime removes (from a :class:`DeviceProfile`).

    ``rows``/``cols``: blocks the reduction (input channels) and output dimensions are padded to;
    ``depthwise_rows``: a depthwise convolution occupies one of ``rows`` (accelerators); ``fold_norm``:
    eval-mode batch norms after a convolution cost nothing; ``fuse_act``: activation functions cost
    nothing; ``buffer``: on-chip buffer bytes for the DRAM-traffic rule (0: not modelled);
    ``one_gemm``: 1x1 convolutions run the same GEMM kernels as k x k ones (class ``conv``, no
    ``pointwise`` class of their own); ``onednn``: PyTorch eager on a CPU whose profile models its oneDNN
    convolution path (``conv_overhead_s > 0``), run with ``threads`` threads (0: several) in ``fp32``.
    """

    rows: int = 1
    cols: int = 1
    depthwise_rows: bool = False
    fold_norm: bool = False
    fuse_act: bool = False
    buffer: int = 0
    one_gemm: bool = False
    onednn: bool = False
    threads: int = 0
    fp32: bool = True

    @staticmethod
    def of(profile: DeviceProfile, dtype: str = "float32") -> _Mapping:
        if profile.kind == "accelerator":
            rows, cols = profile.array_rows, profile.array_cols
            return _Mapping(rows, cols, True, True, True, profile.buffer_bytes, one_gemm=True)
        block = profile.channel_block
        onednn = profile.kind == "cpu" and profile.conv_overhead_s > 0
        fp32 = dtype in ("float32", "fp32")
        return _Mapping(
            block,
            block,
            one_gemm=profile.kind == "mobile_cpu",
            onednn=onednn,
            threads=profile.threads,
            fp32=fp32,
        )


def _onednn_grouped(cin_g: Expr, cout_g: Expr, block: int, gemm: Expr) -> Expr:
    """Work factor of a grouped (not depthwise) convolution through oneDNN on a CPU with ``block``-lane
    vectors: its direct kernels run when the channels per group are a multiple of a sub-block (4, 8 or 16
    with AVX-512; the full block otherwise), using ``sub-block / block`` of each vector; other groups run
    im2col + GEMM per group (``gemm``: both channel counts padded to whole blocks)."""
    factor = gemm
    for sub in (4, 8, 16):
        if sub <= block and (sub == block or block >= 16):
            fits = ((cin_g // sub) * sub == cin_g) & ((cout_g // sub) * sub == cout_g)
            factor = where(fits, block / sub, factor)
    return factor


def _runs_onednn(node: Node, x: tuple[Expr, ...], mapping: _Mapping) -> Expr:
    """Whether PyTorch's eager CPU convolution runs ``node`` through oneDNN (ATen ``use_mkldnn``, fp32):
    not a 1x1, stride-1, undilated convolution of a batch below 16 on one thread, nor an ungrouped one with
    a kernel of at most 3 (in some dimension) on a single input of at most 20480 elements (those run
    ATen's own im2col + GEMM kernels); other dtypes always run oneDNN."""
    if not mapping.fp32:
        return Const(True)
    batch = as_expr(x[0])
    kernel = [as_expr(d) for d in node.attrs.get("kernel_size", (Const(1),))]
    ones = all_(as_expr(d) == 1 for d in (*node.attrs.get("stride", ()), *node.attrs.get("dilation", ())))
    native_1x1 = ones & (batch < 16) & all_(d == 1 for d in kernel) if mapping.threads == 1 else Const(False)
    numel = batch
    for d in x[1:]:
        numel = numel * as_expr(d)
    small = (as_expr(node.attrs.get("groups", 1)) == 1) & ~all_(d > 3 for d in kernel)
    return ~native_1x1 & ~(small & (batch == 1) & (numel <= 20480))
