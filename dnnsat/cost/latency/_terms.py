"""Ops as kernel groups (:class:`~dnnsat.cost.latency._roofline._Term`): the op table (class and kernel
count of every catalog op), the forward pass in execution order with GEMM-like work padded to the
device's blocks, the backward pass and the optimizer step. See :mod:`dnnsat.cost.latency`.
"""

from __future__ import annotations

from collections.abc import Callable

from ...expr import Const, Expr, all_, as_expr, ceildiv, maximum, sum_, where
from ...graph import Network, Node
from ._kinds import _Mapping, _onednn_grouped, _runs_onednn
from ._roofline import MATMUL_LIKE, _Term, _zero

__all__ = ["OP_TABLE", "BACKWARD_WORK", "OPTIMIZER", "ACTIVATIONS"]

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
    "conv_transpose3d": ("conv", 1),
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
    **{
        a: ("elementwise", 1)
        for a in ("relu", "gelu", "silu", "sigmoid", "tanh", "hardswish", "hardsigmoid", "relu6")
    },
    **{f"{k}pool{d}d": ("pool", 1) for k in ("max", "avg") for d in (1, 2)},
    **{f"adaptive_{k}pool{d}d": ("pool", 1) for k in ("max", "avg") for d in (1, 2)},
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


def _pad(c: Expr, block: int) -> Expr:
    """``c`` rounded up to whole blocks, over ``c`` (>= 1; 1 when ``block`` is 1)."""
    if block == 1:
        return Const(1.0)
    return where(c >= 1, (ceildiv(c, block) * block) / c, 1.0)


ACTIVATIONS = frozenset({"relu", "gelu", "silu", "sigmoid", "tanh", "hardswish", "hardsigmoid", "relu6"})


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
        if node.op == "aten":  # a traced ATen operator: a view, a kernel FlopCounterMode counts, or else
            cls = "view" if node.attrs.view else "elementwise" if _zero(node.info.macs) else "matmul"
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
        elif cls == "matmul" and node.op != "aten":  # linear, matmul, bmm: pad the reduction and output
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
