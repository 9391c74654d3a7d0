"""Latency model: a per-op roofline with launch overhead on a device profile, in execution order.

Each active catalog op (``node.gate``) of class ``c`` costs (seconds)::

    t_op = max(work / (peak(dtype) * eff_c), bytes / (bandwidth * eff_memory))

``work`` is the op's forward FLOPs for matmul-like ops (2 FLOPs per multiply-add) and its other arithmetic
(``info.ops``) otherwise; GEMM-like work is padded to whole channel blocks of the device
(``profile.channel_block``: input and output channels, features, attention head dim), as SIMD units and
tiles compute whole blocks. ``bytes`` is what the op reads and writes (``io`` elements: activations at
``budget.act_bytes``, parameters at ``budget.param_bytes``, both ``budget.dtype_bytes`` when the budget has
no such fields), moved at ``profile.cache_bandwidth`` when they fit in ``profile.cache_bytes`` and at
``profile.memory_bandwidth`` otherwise. Classes (:data:`OP_TABLE`): ``matmul`` (linear, matmul/bmm,
attention projections), ``attention`` (fused scaled-dot-product attention), ``conv`` (k x k), ``pointwise``
(1 x 1), ``grouped_conv`` (groups > 1, depthwise), ``recurrent``, ``elementwise``, ``norm``, ``pool`` and
``copy`` (copies, lookups). A class's efficiency is the profile's own factor for it, else ``compute *
CLASS_SCALE[class]``. Each op also launches ``launches`` kernels, each costing ``launch_overhead_s`` of
host-side dispatch.

* CPU (``kind == "cpu"``): dispatch and kernels run one after the other:
  ``latency = sum(t_op + launches * launch_overhead_s)``. Where the profile has ``conv_overhead_s > 0``
  (``calibrate``'s profiles: PyTorch eager's oneDNN path), each convolution PyTorch hands to oneDNN
  (ATen's rule, :func:`_runs_onednn`) also costs ``conv_overhead_s`` plus a memory-bound reorder of its
  input, output (each read and written) and weights to oneDNN's blocked layout and back, and the other
  convolutions (ATen's im2col + GEMM kernels) are class ``aten_conv``, work padded like a matmul's; its input
  channels are not padded below one block (oneDNN's plain-source kernels), and a grouped convolution runs
  oneDNN's direct kernels at ``sub-block / block`` of the vector width when its channels per group are a
  multiple of a sub-block, else im2col + GEMM (:func:`_onednn_grouped`).
* Mobile CPU (``kind == "mobile_cpu"``: phones, Raspberry Pi, running a deployment runtime such as
  TFLite/XNNPACK): summed like a CPU, ``launch_overhead_s`` being the runtime's per-op overhead, plus
  ``parallel_overhead_s`` per GEMM-like op (convolutions, matmuls), which the runtime spreads over the
  cores through a thread pool (wake-up, barrier); CPUs may set it too (0: none). 1x1 and k x k
  convolutions share the class ``conv`` (XNNPACK/Ruy run both through the same GEMM micro-kernels, where
  PyTorch's CPU path differs). Batch norms run as their own op (runtimes fed through ONNX keep them; a
  converter that folds them is not modelled).
  ``channel_block`` is the NEON width (4 fp32 lanes), ``cache_bytes``/``cache_bandwidth`` the L2.
* Accelerator (``kind == "accelerator"``: systolic-array ASICs such as Eyeriss, FPGA designs): layers run
  one after the other (summed like a CPU, ``launch_overhead_s`` per layer for configuration), on a PE
  array of ``array_rows`` x ``array_cols`` MAC units (``peak`` = PEs x clock x 2 FLOPs). The dataflow maps
  input channels (features) onto rows and output channels onto columns, so GEMM-like work is padded to
  whole rows and columns (utilisation ``c_in / (ceil(c_in / rows) * rows)`` x the same for ``c_out``);
  a depthwise convolution uses one row per column. Batch norms after a convolution are folded and
  activation functions are applied on the fly as data leaves the array (no op, no DRAM pass). DRAM
  traffic of a layer with weights: its weights once, its output once, and its input once per weight tile
  that fits half the on-chip buffer: ``in * ceil(weights / (buffer_bytes / 2)) + weights + out`` bytes,
  moved at ``memory_bandwidth``; other ops move their input and output once. 1x1 convolutions are class
  ``conv`` (the same array and dataflow).
* GPU: kernels run asynchronously to the host, which dispatches op ``i`` at
  ``issue_i = issue_{i-1} + launches_i * launch_overhead_s``; the kernel starts when issued and when
  the previous kernel ends: ``end_i = max(issue_i, end_{i-1}) + t_op``, and ``latency = end_last``
  (launch-bound networks cost their dispatch time, compute-bound ones their kernel time).

``train_step_time`` = forward (dropout active) + backward in reverse order + optimizer step. Backward per
class: matmul-like ops do 2x their forward FLOPs (input and weight gradients) in 2 kernels (``attention``
2.5x: the fused backward recomputes the scores); ``norm`` 2x its arithmetic; ``elementwise``, ``pool`` and
``copy`` ops 1x; every op moves 2x its forward bytes (reads the output gradient and the saved tensors,
writes the input (and weight) gradients). The optimizer step is memory-bound: it reads and writes per
parameter ``3`` (SGD: weight, gradient, new weight), ``5`` (momentum) or ``7`` (Adam/AdamW) elements at
``param_bytes``, in 1 / 2 / 4 kernels per parameterised op. These factors are estimates (not validated
against measurements in this version).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..expr import Const, Expr, ExprLike, Var, all_, as_expr, ceildiv, maximum, sum_, where
from ..graph import Network
from ..graph._network import Node
from ._devices import DeviceProfile, get_device

__all__ = [
    "OP_TABLE",
    "CLASS_SCALE",
    "class_efficiency",
    "latency_expressions",
    "latency_model",
    "LatencyModel",
    "DEFAULT_DEVICE",
]

DEFAULT_DEVICE = "cpu"  # profile used when no device is given
MATMUL_LIKE = frozenset(
    {"matmul", "attention", "conv", "pointwise", "grouped_conv", "aten_conv", "recurrent"}
)

Launches = int | Callable[[Network, Node], Expr]


def _rnn_launches(net: Network, node: Node) -> Expr:
    """Two kernels (gate GEMM, pointwise cell) per time step, layer and direction."""
    seq = net.tensors[node.inputs[0]].shape[1]
    dirs = 2 if node.attrs.get("bidirectional") else 1
    return 2 * int(node.attrs.get("num_layers", 1)) * dirs * seq


# catalog op -> (op class, forward kernels in eval mode). Unknown ops: ("elementwise", 1).
OP_TABLE: dict[str, tuple[str, Launches]] = {
    "input": ("view", 0),
    "parameter": ("view", 0),  # returns the weight tensor
    "flatten": ("view", 0),
    "reshape": ("view", 0),
    "expand": ("view", 0),
    "select_index": ("view", 0),  # x[:, i]
    "narrow": ("view", 0),  # a piece of chunk / split
    "conv1d": ("conv", 1),  # split into "grouped_conv" when groups > 1 (depthwise)
    "conv2d": ("conv", 1),
    "conv_transpose1d": ("conv", 1),
    "conv_transpose2d": ("conv", 1),
    "conv3d": ("conv", 1),
    "linear": ("matmul", 1),  # addmm / matmul with fused bias
    "matmul": ("matmul", 1),
    "bmm": ("matmul", 1),
    "einsum": ("matmul", 1),  # two operands of matmul form: permute/reshape copies + one bmm
    "attention": ("matmul", 6),  # q, k, v, out projections, fused SDPA, output reshape copy
    "sdpa": ("attention", 1),  # F.scaled_dot_product_attention alone
    "lstm": ("recurrent", _rnn_launches),
    "gru": ("recurrent", _rnn_launches),
    "embedding": ("copy", 1),
    "concat": ("copy", 1),
    "permute": ("copy", 1),  # .contiguous() copy
    "batchnorm": ("norm", 1),
    "layernorm": ("norm", 1),
    "groupnorm": ("norm", 1),
    "rmsnorm": ("norm", 1),
    "upsample": ("copy", 1),
    "pad": ("copy", 1),  # F.pad, or a ConvNd's padding_mode before its convolution
    "softmax": ("elementwise", 1),
    "dropout": ("elementwise", 0),  # identity in eval mode (1 kernel when training)
    "add": ("elementwise", 1),
    "mul": ("elementwise", 1),
    "scale": ("elementwise", 1),
    "zero": ("elementwise", 1),
    "mean": ("elementwise", 1),
    **{a: ("elementwise", 1) for a in ("relu", "gelu", "silu", "sigmoid", "tanh", "hardswish", "relu6")},
    **{f"{k}pool{d}d": ("pool", 1) for k in ("max", "avg") for d in (1, 2)},
    **{f"adaptive_{k}pool{d}d": ("pool", 1) for k in ("max", "avg") for d in (1, 2)},
}
# default compute efficiency of a class relative to the device's "compute" factor (when the profile has no
# factor of its own for it): assumptions for eager PyTorch kernels that are not GEMM-shaped - pooling
# windows, norms and activations run far below the FP32 peak (no FMA/tensor units, reductions).
CLASS_SCALE = {
    "attention": 0.5,
    "grouped_conv": 0.1,
    "recurrent": 0.3,
    "elementwise": 0.1,
    "norm": 0.1,
    "pool": 0.05,
}
BACKWARD_WORK = {
    "matmul": 2,
    "attention": 2.5,
    "conv": 2,
    "pointwise": 2,
    "grouped_conv": 2,
    "aten_conv": 2,
    "recurrent": 2,
    "norm": 2,
}  # others: 1
OPTIMIZER = {"sgd": (3, 1), "momentum": (5, 2), "adam": (7, 4), "adamw": (7, 4)}  # (elements r+w, kernels)


@dataclass(frozen=True)
class _Term:
    """One kernel group: active when ``gate``; ``work`` in FLOPs, ``bytes`` moved, ``launches`` kernels."""

    gate: Expr
    cls: str
    work: Expr
    bytes: Expr
    launches: Expr


def class_efficiency(profile: DeviceProfile, op_class: str) -> float:
    """Compute efficiency of ``op_class``: the profile's own factor, else ``compute`` x ``CLASS_SCALE``."""
    eff = profile.efficiency
    return float(eff.get(op_class, eff["compute"] * CLASS_SCALE.get(op_class, 1.0)))


def _element_bytes(budget: Any) -> tuple[int, int, str]:
    """(activation bytes, parameter bytes, dtype) per element from a Budget (or float32)."""
    if budget is None:
        return 4, 4, "float32"
    act = getattr(budget, "act_bytes", None) or budget.dtype_bytes
    par = getattr(budget, "param_bytes", None) or budget.dtype_bytes
    return int(act), int(par), str(budget.dtype)


def _pad(c: Expr, block: int) -> Expr:
    """``c`` rounded up to whole blocks, over ``c`` (>= 1; 1 when ``block`` is 1)."""
    if block == 1:
        return Const(1.0)
    return where(c >= 1, (ceildiv(c, block) * block) / c, 1.0)


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


ACTIVATIONS = frozenset({"relu", "gelu", "silu", "sigmoid", "tanh", "hardswish", "relu6"})


def _forward_terms(net: Network, act: int, par: int, train: bool, block: int | _Mapping = 1) -> list[_Term]:
    """Kernel groups of the forward pass in execution order (``block``: the device's channel block, or
    its :class:`_Mapping`)."""
    mapping = block if isinstance(block, _Mapping) else _Mapping(block, block)
    rows, cols = mapping.rows, mapping.cols
    producer = {node.output: node for node in net.ops()}
    terms: list[_Term] = []
    for node in net.ops():
        assert node.info is not None
        cls, launches = OP_TABLE.get(node.op, ("elementwise", 1))
        if cls == "view":
            continue
        k = as_expr(launches(net, node) if callable(launches) else launches)
        if node.op == "dropout" and train:
            k = Const(1)
        elif node.op == "dropout":
            continue
        if not train and mapping.fold_norm and node.op == "batchnorm":
            src = producer.get(node.inputs[0])
            if src is not None and src.op.startswith("conv"):  # conv1d/2d/3d, conv_transpose1d/2d
                continue  # folded into the convolution's weights and bias
        if not train and mapping.fuse_act and node.op in ACTIVATIONS:
            continue  # applied on the fly as data leaves the PE array
        info = node.info
        work = info.flops if cls in MATMUL_LIKE else info.ops
        if info.io is not None:  # the catalog's own count (e.g. embedding lookups read rows, not the table)
            nbytes = act * info.io
        else:
            acts = sum_(net.tensors[i].numel for i in node.inputs) + net.tensors[node.output].numel
            nbytes = act * acts + par * info.params
            if mapping.buffer > 0 and cls in MATMUL_LIKE and not _zero(info.params):
                # weights in tiles of half the buffer; the input is streamed once per tile
                inputs = act * sum_(net.tensors[i].numel for i in node.inputs)
                tiles = maximum(ceildiv(par * info.params, max(mapping.buffer // 2, 1)), 1)
                nbytes = nbytes + inputs * (tiles - 1)
        shapes = [net.tensors[i].shape for i in node.inputs]
        if cls == "conv" and mapping.onednn:
            x, y = net.tensors[node.inputs[0]], net.tensors[node.output]
            onednn = _runs_onednn(node, x.shape, mapping)
            terms.extend(_conv_terms(node, x.shape[1], work, nbytes, k, mapping, node.gate & onednn))
            # ATen's own kernels (im2col + GEMM per group; no im2col for 1x1): GEMMs padded like a matmul's
            groups = as_expr(node.attrs.get("groups", 1))
            aten = (
                work
                * _pad(x.shape[1] // groups, rows)
                * _pad(as_expr(node.attrs["out_channels"]) // groups, cols)
            )
            # oneDNN: plain-layout input, weights and output reordered to its blocked layout and back
            moved = 2 * act * (x.numel + y.numel) + 2 * par * info.params
            for cond, kind, w, b in (
                (~onednn, "aten_conv", aten, nbytes),
                (onednn, "reorder", Const(0), moved),
            ):
                if not (cond.is_const and not cond.value):
                    terms.append(_Term(node.gate & cond, kind, w, b, k))
        elif cls == "conv":
            terms.extend(_conv_terms(node, shapes[0][1], work, nbytes, k, mapping))
        elif node.op == "attention":
            terms.extend(_attention_terms(node, shapes, work, nbytes, k, mapping, act))
        elif cls == "matmul":  # linear, matmul, bmm: pad the reduction and output dimensions
            out = net.tensors[node.output].shape[-1]
            terms.append(_Term(node.gate, cls, work * _pad(shapes[0][-1], rows) * _pad(out, cols), nbytes, k))
        else:
            terms.append(_Term(node.gate, cls, work, nbytes, k))
    return terms


def _conv_terms(
    node: Node, cin: Expr, work: Expr, nbytes: Expr, k: Expr, mapping: _Mapping, gate: Expr | None = None
) -> list[_Term]:
    """A convolution as ``pointwise`` (1x1: a GEMM), ``conv`` (k x k) or ``grouped_conv`` (groups > 1),
    active when ``gate`` (default ``node.gate``).

    Work is padded to whole channel blocks (input channels to ``rows``, output channels to ``cols``):
    input and output channels per group, or the channels themselves for depthwise convolutions (one
    channel per group, vectorised across channels; on an accelerator each occupies one of ``rows``).
    """
    rows, cols = mapping.rows, mapping.cols
    groups = as_expr(node.attrs.get("groups", 1))
    cout = as_expr(node.attrs["out_channels"])
    kernel = node.attrs.get("kernel_size", (Const(1),))
    one = all_(as_expr(d) == 1 for d in kernel)
    dense = work * _pad(cin, rows) * _pad(cout, cols)
    cin_g, cout_g = cin // groups, cout // groups
    depthwise = _pad(cout, cols) * (rows if mapping.depthwise_rows else 1)
    padded = _pad(cin_g, rows) * _pad(cout_g, cols)
    if mapping.onednn:
        dense = work * where(cin < rows, 1.0, _pad(cin, rows)) * _pad(cout, cols)
        padded = _onednn_grouped(cin_g, cout_g, rows, padded)
    grouped = work * where(cin_g == 1, depthwise, padded)
    out: list[_Term] = []
    for cond, cls, w in (
        ((groups == 1) & one, "conv" if mapping.one_gemm else "pointwise", dense),
        ((groups == 1) & ~one, "conv", dense),
        (groups != 1, "grouped_conv", grouped),
    ):
        active = (node.gate if gate is None else gate) & cond
        if not (active.is_const and not active.value):
            out.append(_Term(active, cls, w, nbytes, k))
    return out


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


def _attention_terms(
    node: Node, shapes: list[tuple[Expr, ...]], work: Expr, nbytes: Expr, k: Expr, mapping: _Mapping, act: int
) -> list[_Term]:
    """Attention as its projections (``matmul``, the other kernels) and the fused SDPA (``attention``).

    SDPA does ``4 * b * heads * s * l * head_dim`` FLOPs (scores and values; ``l`` the key/value
    length, ``s`` for self-attention), padded to whole blocks of the head dimension; it reads and
    writes q, k, v and its output.
    """
    b, s, d = shapes[0]
    n = shapes[-1][1]
    heads = as_expr(node.attrs["heads"])
    own = node.attrs.get("head_dim")
    hd = d // heads if own is None else as_expr(own)
    inner = d if own is None else heads * hd
    sdpa = 4 * b * heads * s * n * hd
    rows, cols = mapping.rows, mapping.cols
    return [
        _Term(node.gate, "matmul", (work - sdpa) * _pad(d, rows) * _pad(inner, cols), nbytes, k - 1),
        _Term(node.gate, "attention", sdpa * _pad(hd, rows), act * 2 * b * (s + n) * inner, Const(1)),
    ]


def _train_terms(
    net: Network, act: int, par: int, optimizer: str | None, block: int | _Mapping
) -> list[_Term]:
    fwd = _forward_terms(net, act, par, train=True, block=block)
    back = [
        _Term(
            t.gate,
            t.cls,
            BACKWARD_WORK.get(t.cls, 1) * t.work,
            2 * t.bytes,
            2 * t.launches if t.cls in MATMUL_LIKE else t.launches,
        )
        for t in reversed(fwd)
    ]
    rw, kernels = OPTIMIZER[optimizer or "sgd"]
    step = [
        _Term(node.gate, "copy", Const(0), rw * par * node.info.params, Const(kernels))
        for node in net.ops()
        if node.info is not None and not (node.info.params.is_const and node.info.params.value == 0)
    ]
    return fwd + back + step


def _combine(terms: list[_Term], profile: DeviceProfile, dtype: str, p: Mapping[str, ExprLike]) -> Expr:
    """Total seconds of ``terms`` with parameters ``p`` (launch overhead, memory and class efficiencies)."""
    peak = profile.peak(dtype)

    def bandwidth(nbytes: Expr) -> Expr:
        if profile.cache_bytes <= 0:
            return Const(profile.memory_bandwidth)
        return where(nbytes <= profile.cache_bytes, profile.cache_bandwidth, profile.memory_bandwidth)

    launch = as_expr(p["launch_overhead_s"])
    parallel = as_expr(p.get("parallel_overhead_s", 0.0))
    if profile.kind != "gpu":  # CPUs, mobile CPUs, accelerators: one op after the other
        parts = []
        for t in terms:
            compute = t.work / (peak * as_expr(p[t.cls])) if not _zero(t.work) else Const(0.0)
            memory = t.bytes / (bandwidth(t.bytes) * as_expr(p["memory"]))
            op_time = maximum(compute, memory) + launch * t.launches
            if t.cls in MATMUL_LIKE and not _zero(parallel):
                op_time = op_time + parallel
            if t.cls == "reorder":
                op_time = op_time + as_expr(p.get("conv_overhead_s", 0.0))
            parts.append(where(t.gate, op_time, 0.0))
        return _tree_sum(parts)
    issue: Expr = Const(0.0)
    end: Expr = Const(0.0)
    for t in terms:
        compute = t.work / (peak * as_expr(p[t.cls])) if not _zero(t.work) else Const(0.0)
        kernel = maximum(compute, t.bytes / (bandwidth(t.bytes) * as_expr(p["memory"])))
        new_issue = issue + launch * t.launches
        issue = where(t.gate, new_issue, issue)
        end = where(t.gate, maximum(new_issue, end) + kernel, end)
    return maximum(issue, end)


def _tree_sum(parts: list[Expr]) -> Expr:
    """Pairwise sum (depth log n instead of n)."""
    if not parts:
        return Const(0.0)
    while len(parts) > 1:
        parts = [parts[i] + parts[i + 1] if i + 1 < len(parts) else parts[i] for i in range(0, len(parts), 2)]
    return parts[0]


def _zero(e: Expr) -> bool:
    return e.is_const and e.value == 0


@dataclass
class LatencyModel:
    """The inference latency of a network with the profile's factors as variables (for fitting).

    ``expr`` (seconds) has the network's variables plus ``__launch_overhead_s``, ``__eff_memory`` and
    ``__eff_<class>`` for each op class in ``classes`` (and ``__parallel_overhead_s`` when ``parallel``:
    the profile models the thread-pool cost of GEMM-like ops); :meth:`parameter_env` maps fitted values
    (``{"launch_overhead_s": s, "memory": e, "conv": e, ...}``) to those variables.
    """

    expr: Expr
    classes: tuple[str, ...]
    parallel: bool = False

    @staticmethod
    def parameter_env(values: Mapping[str, Any]) -> dict[str, Any]:
        """Expression variables of fitted ``values`` (numbers, or arrays: one value per evaluated row)."""
        seconds = ("launch_overhead_s", "parallel_overhead_s")
        return {
            ("__" if k in seconds else "__eff_") + k: (v if getattr(v, "ndim", 0) else float(v))
            for k, v in values.items()
        }


def latency_model(net: Network, budget: Any, device: str | DeviceProfile) -> LatencyModel:
    """Inference latency of ``net``, launch overhead and efficiencies as variables (:class:`LatencyModel`)."""
    profile = get_device(device)
    act, par, dtype = _element_bytes(budget)
    terms = _forward_terms(net, act, par, train=False, block=_Mapping.of(profile, dtype))
    classes = tuple(sorted({t.cls for t in terms if not _zero(t.work)}))
    p: dict[str, ExprLike] = {c: Var(f"__eff_{c}", "real") for c in {t.cls for t in terms}}
    p["memory"] = Var("__eff_memory", "real")
    p["launch_overhead_s"] = Var("__launch_overhead_s", "real")
    parallel = profile.parallel_overhead_s > 0
    if parallel:
        p["parallel_overhead_s"] = Var("__parallel_overhead_s", "real")
    p["conv_overhead_s"] = profile.conv_overhead_s
    return LatencyModel(_combine(terms, profile, dtype, p), classes, parallel)


def latency_expressions(
    net: Network, budget: Any = None, device: str | DeviceProfile | None = None
) -> dict[str, Expr]:
    """``{"latency", "train_step_time"}`` in seconds for ``net`` (whole batch as built) on ``device``.

    ``latency``: eval-mode inference forward; ``train_step_time``: forward + backward + optimizer step
    (``budget.optimizer``, SGD when None). ``device``: a catalog name, profile path or
    :class:`DeviceProfile`; ``None`` uses the generic ``"cpu"`` profile. ``budget`` sets the dtype.
    """
    profile = get_device(device if device is not None else DEFAULT_DEVICE)
    act, par, dtype = _element_bytes(budget)
    fwd = _forward_terms(net, act, par, train=False, block=_Mapping.of(profile, dtype))
    train = _train_terms(net, act, par, getattr(budget, "optimizer", None), _Mapping.of(profile, dtype))
    classes = {t.cls for t in fwd + train}
    p: dict[str, ExprLike] = {c: class_efficiency(profile, c) for c in classes}
    p["memory"] = profile.efficiency["memory"]
    p["launch_overhead_s"] = profile.launch_overhead_s
    p["parallel_overhead_s"] = profile.parallel_overhead_s
    p["conv_overhead_s"] = profile.conv_overhead_s
    return {
        "latency": _combine(fwd, profile, dtype, p),
        "train_step_time": _combine(train, profile, dtype, p),
    }
