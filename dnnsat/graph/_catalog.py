"""The operator catalog: one small registered entry per operator.

Each entry is a shape/cost rule ``infer(inputs, attrs) -> OpInfo`` over symbolic shapes (tuples of
:class:`~dnnsat.expr.Expr`) plus, right below it, the PyTorch module that materializes it (torch is
imported lazily inside those functions only). Adding an operator = one ``@op`` entry here (and, for
convenience, a thin method on :class:`~dnnsat.graph.Network`; ``net.apply(name, inputs, **attrs)``
works for every entry without one).

Counting conventions (per operator, whole batch as built):

* ``params``: trainable parameters, as ``sum(p.numel() for p in module.parameters())``.
* ``macs``: multiply-accumulates of matmul-like kernels (conv, conv-transpose, linear, matmul/bmm,
  attention scores and values, LSTM/GRU gates); bias additions are not counted.
* ``flops``: ``2 * macs`` - exactly what ``torch.utils.flop_counter.FlopCounterMode`` reports for a
  forward pass on the meta device. Elementwise ops, norms, pooling, softmax and embedding lookups
  count 0 there; their arithmetic is in ``ops``.
* ``ops``: our estimate of the other arithmetic (1 per output element for activations, add/mul and
  pooling windows, 5 per element for norms, 3 for softmax); not checked against PyTorch.
* ``saved``: elements of activation tensors kept for backward, counted per op as PyTorch's saved-tensor
  hooks see them (parameters excluded; int64 indices count 2, i.e. float32-sized units); an estimate,
  audited against the hooks, not exact (attention assumes a fused kernel; RNNs are approximate).
* ``io``: elements read and written (inputs + outputs + parameters), for a roofline latency model.
* ``mem``: storage-level behaviour for the memory model (:class:`Mem`): which tensors the autograd
  node of the op, as materialized, keeps for backward, extra saved buffers (BatchNorm statistics,
  dropout masks, max-pool indices, attention log-sum-exp), views, transient working sets.

Validity (``checks``): every tensor dimension is >= 1, so every size an operator takes (features,
channels, kernel, stride, dilation, groups, heads, embedding rows and width, hidden size, pooling
window and output size, reshape target) has a rule ``>= 1`` (paddings ``>= 0``), as PyTorch checks
them on the CPU. Where PyTorch accepts 0 only to return an empty tensor (``nn.Linear(n, 0)``,
``nn.Embedding(n, 0)``, adaptive pooling to size 0, an empty input or parameter) dnnsat still asks
for >= 1: an empty activation carries nothing, and PyTorch gives empty tensors shapes of its own (a
``Conv2d`` on a 0-channel input returns 0 channels). PyTorch's ``meta`` kernels skip some checks the
CPU and CUDA kernels make (they run a conv with 0 output channels, kernel 0, dilation 0 or a negative
padding, and an embedding lookup in 0 rows): the materializers make those checks themselves, so a
module built on ``meta`` fails where it would fail on a real device. The other way round, the ``meta``
kernel of a transposed convolution raises where every output size is 0 and the CPU kernel returns an
empty tensor: invalid here too (the rule above). ``tests/test_validity_devices.py`` compares the
convolutions' rules with the CPU kernels over samples of small odd configurations.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..expr import (
    Const,
    Expr,
    ExprLike,
    all_,
    any_,
    as_expr,
    ceildiv,
    digest,
    maximum,
    minimum,
    sum_,
    where,
)
from ..expr._nodes import _digests

__all__ = [
    "Shape",
    "Check",
    "Mem",
    "Autocast",
    "LOWER",
    "KEEP",
    "Sizes",
    "OpInfo",
    "OpDef",
    "CATALOG",
    "op",
    "prod",
    "Attrs",
    "lin",
    "eq",
    "divides",
    "AtenArg",
    "shared_use",
]

Shape = tuple[Expr, ...]


def prod(xs: Sequence[ExprLike]) -> Expr:
    """Product of dimensions (``1`` for none)."""
    out: Expr = Const(1)
    for x in xs:
        out = out * as_expr(x)
    return out


@dataclass(frozen=True)
class Check:
    """A validity rule of one operator: ``expr`` must hold (``train_only``: only when training)."""

    rule: str
    expr: Expr
    train_only: bool = False


Sizes = tuple[tuple[Expr, str], ...]
"""``((elements, kind), ...)``; kind ``"act"`` (activation dtype), ``"param"`` (parameter dtype),
``"f32"``, ``"i64"`` or ``"bool"`` (fixed dtypes), ``"mask"`` (a dropout mask: the activation dtype on
the CPU, bool on CUDA)."""


@dataclass(frozen=True)
class Mem:
    """What an operator does with memory (as its PyTorch materializer runs on the CPU).

    ``saves``: tensors the autograd graph keeps until this op's backward (``"in0"``, ``"in1"``,
    ``"out"``; parameters excluded); ``extra``: other tensors kept for backward, allocated in the
    forward; ``view``: the output aliases input 0 (no allocation); ``eval_view``: the same in eval
    mode only; ``workspace`` / ``eval_workspace`` (default: ``workspace``): transient tensors of a
    training / eval forward, alive with the output (``eval_workspace_avx2``: the eval ones where
    oneDNN runs without AVX-512, when they differ); ``backward``: transient tensors of the backward
    besides the input gradients (``backward_frozen``: when no input needs a gradient; default:
    ``backward``); ``largest_param``: elements of the largest parameter tensor (default: all params);
    ``param_tensors``: elements of every parameter tensor in the order the module registers them
    (default: the largest, then the rest as one tensor); ``releases_grad``: the backward is done with
    the output gradient before its peak, so ``backward`` is net of it where the op holds that gradient
    alone (not where a residual ``add``'s other input keeps the same storage);
    ``buffers``: non-trainable state (running statistics); ``grad_alias``: the backward hands the
    output gradient itself to the inputs (``add``); ``cpu_kernels``: the working sets describe CPU
    kernels only (a GPU model estimates its own); ``half``: the rule where the op's CPU kernel gets a
    16-bit input (bfloat16 autocast, a 16-bit budget) and computes in fp32 (ATen's ``mean`` casts its
    input and its result to fp32; ``rms_norm``'s composite keeps fp32 tensors for backward); its
    parameters and buffers stay this rule's.
    """

    saves: tuple[str, ...] = ()
    extra: Sizes = ()
    view: bool = False
    eval_view: bool = False
    workspace: Sizes = ()
    eval_workspace: Sizes | None = None
    eval_workspace_avx2: Sizes | None = None
    backward: Sizes = ()
    backward_frozen: Sizes | None = None
    largest_param: Expr | None = None
    param_tensors: tuple[Expr, ...] | None = None
    releases_grad: bool = False
    buffers: Sizes = ()
    grad_alias: bool = False
    cpu_kernels: bool = False
    half: Mem | None = None


@dataclass
class OpInfo:
    """What the catalog says about one operator application (all symbolic, element counts)."""

    outputs: list[Shape]
    checks: list[Check] = field(default_factory=list)
    params: Expr = field(default_factory=lambda: Const(0))
    macs: Expr = field(default_factory=lambda: Const(0))
    ops: Expr = field(default_factory=lambda: Const(0))
    saved: Expr = field(default_factory=lambda: Const(0))
    io: Expr | None = None  # default: inputs + outputs + params
    mem: Mem = field(default_factory=Mem)

    @property
    def flops(self) -> Expr:
        return 2 * self.macs


def shared_use(info: OpInfo, elements: Expr) -> OpInfo:
    """``info`` of an op using ``elements`` parameters of an earlier op (a module called again, a weight
    tied to another module's): they count there (params, gradients, optimizer state), not here. The
    memory model keeps this use's gradient of them from its backward to the owner's, where autograd
    adds the two (``cost.memory``)."""
    return replace(
        info, params=info.params - elements, mem=replace(info.mem, largest_param=None, param_tensors=None)
    )


class Attrs(dict):  # type: ignore[type-arg]
    """Operator attributes with attribute access (symbolic Exprs at build time, numbers when concrete)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


@dataclass(frozen=True)
class Autocast:
    """How ``torch.autocast`` runs an operator on the CPU (bfloat16) and on CUDA (float16): the op
    lists of ``aten/src/ATen/autocast_mode.cpp`` (``AutocastCPU``) and ``autocast_mode.h``
    (``AT_FORALL_*``, the CUDA ones) of torch 2.13.

    A policy per device: ``"lower"`` (``lower_precision_fp``: floating inputs cast to 16 bits, 16-bit
    output), ``"fp32"`` (``fp32`` / ``fp32_set_opt_dtype``: inputs cast to fp32, fp32 output),
    ``"promote"`` (inputs cast to the widest floating type among them) or ``"keep"`` (not listed: the
    kernel runs on its inputs as they are; its output has their promoted type, fp32 when it has no
    floating input, e.g. an embedding lookup). ``casts``: how many times the materialized module casts
    each input (the q, k and v projections of ``attention`` each cast theirs); ``input_grad_weights``:
    the backward keeps the 16-bit copies of the weights only to compute the input gradient (``addmm``
    saves ``mat2`` only when ``mat1`` requires grad; a convolution always keeps its weight).
    """

    cpu: str = "keep"
    cuda: str = "keep"
    casts: int = 1
    input_grad_weights: bool = False

    def policy(self, gpu: bool) -> str:
        return self.cuda if gpu else self.cpu


LOWER = Autocast("lower", "lower")
KEEP = Autocast()

InferFn = Callable[[list[Shape], Attrs], OpInfo]
TorchFn = Callable[[Attrs, list[tuple[int, ...]]], Any]


@dataclass
class OpDef:
    """A catalog entry: the symbolic rule and the PyTorch materializer of one operator."""

    name: str
    infer: InferFn
    arity: int | None  # number of tensor inputs (None: variadic)
    build: TorchFn | None = None
    autocast: Autocast = KEEP  # its policy under torch.autocast (mixed precision)

    def torch(self, fn: TorchFn) -> TorchFn:
        """Decorator registering the PyTorch materializer ``fn(attrs, input_shapes) -> nn.Module``."""
        self.build = fn
        return fn


CATALOG: dict[str, OpDef] = {}


def op(name: str, arity: int | None = 1, autocast: Autocast = KEEP) -> Callable[[InferFn], OpDef]:
    """Register ``infer`` as the catalog entry ``name`` (``autocast``: its mixed-precision policy)."""

    def deco(fn: InferFn) -> OpDef:
        if name in CATALOG:
            raise ValueError(f"operator {name!r} is registered twice")
        entry = OpDef(name, fn, arity, autocast=autocast)
        CATALOG[name] = entry
        return entry

    return deco


# ------------------------------------------------------------------------------------------------
# helpers


def _collect(e: Expr, coef: int, terms: dict[int, list[Any]], const: list[int]) -> None:
    if e.op == "const":
        const[0] += coef * e.payload
    elif e.op == "add":
        _collect(e.args[0], coef, terms, const)
        _collect(e.args[1], coef, terms, const)
    elif e.op == "sub":
        _collect(e.args[0], coef, terms, const)
        _collect(e.args[1], -coef, terms, const)
    elif e.op == "neg":
        _collect(e.args[0], -coef, terms, const)
    elif e.op == "mul" and e.args[0].op == "const":
        _collect(e.args[1], coef * e.args[0].payload, terms, const)
    else:
        slot = terms.setdefault(id(e), [e, 0])
        slot[1] += coef


def _digest(e: Expr) -> str:
    """:func:`~dnnsat.expr.digest`, without walking the DAG again when ``e``'s is known."""
    known = _digests.get(id(e))
    return known if known is not None else digest(e)


def lin(x: ExprLike) -> Expr:
    """Canonical form of an integer sum: ``c + a*t1 + b*t2 ...`` with terms in a stable order.

    Makes ``(h + 2*1 - 1*(3 - 1) - 1) // 1 + 1`` the node ``h`` itself, so equal shapes intern to
    the same node and ``where``/equality checks fold.
    """
    e = as_expr(x)
    if e.sort != "int" or e.op not in ("add", "sub", "neg", "mul"):
        return e
    terms: dict[int, list[Any]] = {}
    const = [0]
    _collect(e, 1, terms, const)
    out: Expr | None = None
    for t, c in sorted(terms.values(), key=lambda tc: _digest(tc[0])):
        if c == 0:
            continue
        term = t if c == 1 else (-t if c == -1 else c * t)
        if out is None:
            out = term
        elif c < 0 and c != -1:
            out = out - (-c) * t
        elif c == -1:
            out = out - t
        else:
            out = out + term
    if out is None:
        return Const(const[0])
    return out + const[0] if const[0] > 0 else (out - (-const[0]) if const[0] < 0 else out)


def eq(p: Expr, q: Expr) -> Expr:
    """``p == q`` folded to ``True`` when both are the same canonical node."""
    p, q = lin(p), lin(q)
    return Const(True) if p is q else p == q


def divides(g: Expr, c: Expr) -> Expr:
    """``g >= 1 and g divides c`` (folds to True for ``g == 1``)."""
    g, c = as_expr(g), lin(c)
    if g.is_const and g.value == 1:
        return Const(True)
    terms: dict[int, list[Any]] = {}
    const = [0]
    _collect(c, 1, terms, const)
    if const[0] == 0 and len(terms) == 1:
        ((t, k),) = terms.values()
        if lin(t) is lin(g) and isinstance(k, int) and k >= 1:
            return g >= 1  # c == k * g
    return (g >= 1) & (lin(c - c // g * g) == 0)


def _numel(s: Shape) -> Expr:
    return prod(s)


def _ge1(rule: str, *dims: Expr) -> Check:
    return Check(rule, all_(d >= 1 for d in dims))


def _fn_module(fn: Callable[..., Any]) -> Any:
    """Wrap a function of tensors as an ``nn.Module`` (no parameters)."""
    import torch.nn as nn

    class Fn(nn.Module):
        def forward(self, *xs: Any) -> Any:
            return fn(*xs)

    return Fn()


def _device_checks(a: Attrs, positive: Sequence[str], non_negative: Sequence[str] = ()) -> None:
    """Raise where PyTorch's CPU and CUDA kernels do but its ``meta`` kernels do not (see the module
    docstring): a size in ``positive`` below 1, a padding in ``non_negative`` below 0."""
    for names, low in ((positive, 1), (non_negative, 0)):
        for name in names:
            value = a[name]
            if any(v < low for v in (value if isinstance(value, tuple) else (value,))):
                raise ValueError(f"{name} must be >= {low}, got {value} (the CPU and CUDA kernels reject it)")


def conv_out(size: Expr, k: Expr, s: Expr, p: Expr, d: Expr) -> Expr:
    """Output length of a convolution/pooling window (floor mode)."""
    return lin(lin(size + 2 * p - d * (k - 1) - 1) // s + 1)


# ------------------------------------------------------------------------------------------------
# sources


@op("input", arity=0)
def _input(ins: list[Shape], a: Attrs) -> OpInfo:
    return OpInfo([a.shape], checks=[_ge1("dimensions are positive", *a.shape)], io=Const(0))


@op("parameter", arity=0)
def _parameter(ins: list[Shape], a: Attrs) -> OpInfo:
    """A learned tensor (e.g. a positional embedding table)."""
    checks = [_ge1("dimensions are positive", *a.shape)]
    return OpInfo([a.shape], checks, params=_numel(a.shape), io=_numel(a.shape))


@_parameter.torch
def _parameter_torch(a: Attrs, shapes: list[tuple[int, ...]]) -> Any:
    import torch
    import torch.nn as nn

    class Param(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.empty(tuple(a.shape)))

        def forward(self) -> Any:
            return self.weight

    return Param()


_DTYPE_KIND = {"float32": "act", "int64": "i64", "bool": "bool"}
DTYPES = tuple(_DTYPE_KIND)
"""Tensor dtypes of a network: activations (``float32``: the budget's activation dtype), int64 indices,
boolean masks."""


@op("constant", arity=0)
def _constant(ins: list[Shape], a: Attrs) -> OpInfo:
    """A tensor the forward makes without reading its inputs or parameters: a factory call
    (``torch.zeros``, ``arange``, ``new_empty(...).bernoulli_(p)``: an allocated activation of dtype
    ``dtype``) or, with ``buffer``, a registered buffer (persistent module state, held with the weights).
    No parameters, no FLOPs."""
    checks = [_ge1("dimensions are positive", *a.shape)]
    mem = Mem(buffers=((_numel(a.shape), _DTYPE_KIND[a.dtype]),)) if a.buffer else Mem()
    return OpInfo([a.shape], checks, io=Const(0) if a.buffer else _numel(a.shape), mem=mem)


@_constant.torch
def _constant_torch(a: Attrs, shapes: list[tuple[int, ...]]) -> Any:
    import torch

    dtype = {"float32": torch.float32, "int64": torch.int64, "bool": torch.bool}[a.dtype]
    return _fn_module(lambda: torch.zeros(tuple(a.shape), dtype=dtype))  # zeros: valid indices too


@op("cast")
def _cast(ins: list[Shape], a: Attrs) -> OpInfo:
    """``x.to(dtype)`` to another dtype (``float32``, ``int64``, ``bool``): a copy, no FLOPs."""
    (x,) = ins
    return OpInfo([x], ops=_numel(x), io=2 * _numel(x))


@_cast.torch
def _cast_torch(a: Attrs, shapes: list[tuple[int, ...]]) -> Any:
    import torch

    dtype = {"float32": torch.float32, "int64": torch.int64, "bool": torch.bool}[a.dtype]
    return _fn_module(lambda x: x.to(dtype))


@op("index", arity=2)
def _index(ins: list[Shape], a: Attrs) -> OpInfo:
    """``x[idx]``: the rows of ``x`` (its dimension 0) at the int64 indices ``idx`` -> ``(*idx.shape,
    *x.shape[1:])`` (e.g. a relative-position bias table indexed by a constant index buffer). A gather,
    no FLOPs; the backward keeps the indices (as the embedding lookup)."""
    x, i = ins
    y = (*i, *x[1:])
    return OpInfo([y], ops=_numel(y), saved=2 * _numel(i), io=_numel(i) + 2 * _numel(y),
                  mem=Mem(saves=("in1",)))  # fmt: skip


@_index.torch
def _index_torch(a: Attrs, shapes: list[tuple[int, ...]]) -> Any:
    return _fn_module(lambda x, i: x[i])


@op("masked_fill", arity=2)
def _masked_fill(ins: list[Shape], a: Attrs) -> OpInfo:
    """``x.masked_fill(mask, value)``: ``value`` where the boolean ``mask`` (broadcast with ``x``) is set.
    No FLOPs; the backward keeps the mask."""
    x, m = ins
    out, ok = _broadcast(x, m)
    saved = ceildiv(_numel(m), 4)  # a bool mask, in float32-sized units
    return OpInfo(
        [out], [Check("shapes broadcast", ok)], ops=_numel(out), saved=saved, mem=Mem(saves=("in1",))
    )


@_masked_fill.torch
def _masked_fill_torch(a: Attrs, shapes: list[tuple[int, ...]]) -> Any:
    return _fn_module(lambda x, m: x.masked_fill(m.bool(), a.value))


@op("gather", arity=2)
def _gather(ins: list[Shape], a: Attrs) -> OpInfo:
    """``torch.gather(x, dim, idx)``: ``x``'s entries at the int64 indices ``idx`` along ``dim`` -> ``idx``'s
    shape (of ``x``'s rank, no larger than ``x`` in the other dimensions). No FLOPs; the backward keeps the
    indices."""
    x, i = ins
    fits = all_(i[d] <= x[d] for d in range(len(x)) if d != a.dim)
    checks = [
        Check("index has the input's rank", Const(len(i) == len(x))),
        Check("index fits the input", fits),
    ]
    return OpInfo([tuple(i)], checks, ops=_numel(i), saved=2 * _numel(i), io=4 * _numel(i),
                  mem=Mem(saves=("in1",)))  # fmt: skip


@_gather.torch
def _gather_torch(a: Attrs, shapes: list[tuple[int, ...]]) -> Any:
    import torch

    return _fn_module(lambda x, i: torch.gather(x, a.dim, i))


# ------------------------------------------------------------------------------------------------
# convolutions


def _conv_infer(nd: int) -> InferFn:
    def infer(ins: list[Shape], a: Attrs) -> OpInfo:
        (x,) = ins
        b, cin, sp = x[0], x[1], x[2:]
        k, s, d, g, cout = a.kernel_size, a.stride, a.dilation, a.groups, a.out_channels
        checks = [
            Check("groups divide in_channels", divides(g, cin)),
            Check("groups divide out_channels", divides(g, cout)),
            _ge1("kernel, stride, dilation are positive", *k, *s, *d),
            _ge1("out_channels is positive", cout),
        ]
        if isinstance(a.padding, str):
            if a.padding == "same":
                checks.append(Check("padding='same' needs stride 1", all_(si == 1 for si in s)))
                out = tuple(sp)
            else:  # valid
                out = tuple(conv_out(sp[i], k[i], s[i], Const(0), d[i]) for i in range(nd))
            pad: tuple[Expr, ...] = tuple(Const(0) for _ in range(nd))
        else:
            pad = a.padding
            checks.append(Check("padding is non-negative", all_(p >= 0 for p in pad)))
            out = tuple(conv_out(sp[i], k[i], s[i], pad[i], d[i]) for i in range(nd))
        if a.padding != "same":
            checks.append(
                Check(
                    "kernel fits padded input",
                    all_(sp[i] + 2 * pad[i] >= d[i] * (k[i] - 1) + 1 for i in range(nd)),
                )
            )
        y = (b, cout, *out)
        params = cout * (cin // g) * prod(k) + (cout if a.bias else 0)
        macs = b * prod(out) * cout * (cin // g) * prod(k)
        mem = _conv_mem(x, y, a, nd)
        return OpInfo(
            [y], checks, params=params, macs=macs, ops=_numel(y) if a.bias else Const(0), saved=_numel(x),
            mem=mem,
        )  # fmt: skip

    return infer


def _conv_mem(x: Shape, y: Shape, a: Attrs, nd: int) -> Mem:
    """Memory of ``conv{1,2}d``: it saves its input. Its CPU working sets depend on the CPU backend
    (oneDNN ISA, channel blocks) and live in ``dnnsat.cost.memory._cpu.cpu_conv_working_sets``; on a GPU
    they give way to the cuDNN workspace (``cpu_kernels``).

    ``padding="same"`` where a total padding ``dilation * (kernel - 1)`` is odd: PyTorch pads the
    input by the odd remainder first (``aten/src/ATen/native/Convolution.cpp: _convolution_mode``,
    ``at::pad``), a copy the convolution saves for backward (kept; the input is assumed saved too,
    an upper bound) and that lives through an eval forward (measured: allocator traces of
    ``nn.Conv2d(..., padding="same")`` with kernels 2 and 4, torch 2.13)."""
    copy: Sizes = ()
    if a.padding == "same":
        odd = [d * (k - 1) - d * (k - 1) // 2 * 2 for k, d in zip(a.kernel_size, a.dilation)]
        if not all(o.is_const and o.value == 0 for o in odd):
            copy = ((x[0] * x[1] * prod([s + o for s, o in zip(x[2:], odd)]), "act"),)
    return Mem(
        saves=("in0",),
        extra=copy,
        eval_workspace=copy or None,
        largest_param=a.out_channels * (x[1] // a.groups) * prod(a.kernel_size),
        cpu_kernels=True,
    )


def _conv_torch(nd: int) -> TorchFn:
    def build(a: Attrs, shapes: list[tuple[int, ...]]) -> Any:
        import torch.nn as nn

        pads = () if isinstance(a.padding, str) else ("padding",)
        _device_checks(a, ("out_channels", "kernel_size", "stride", "dilation"), pads)
        cls = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}[nd]
        return cls(
            shapes[0][1],
            a.out_channels,
            a.kernel_size,
            stride=a.stride,
            padding=a.padding,
            dilation=a.dilation,
            groups=a.groups,
            bias=a.bias,
        )

    return build


for _nd in (1, 2, 3):  # conv3d: no CPU working sets in the memory model yet (an underestimate)
    op(f"conv{_nd}d", autocast=LOWER)(_conv_infer(_nd)).torch(_conv_torch(_nd))


def _conv_transpose_infer(nd: int) -> InferFn:
    def infer(ins: list[Shape], a: Attrs) -> OpInfo:
        (x,) = ins
        b, cin, sp = x[0], x[1], x[2:]
        k, s, p, op_, d, g, cout = (
            a.kernel_size,
            a.stride,
            a.padding,
            a.output_padding,
            a.dilation,
            a.groups,
            a.out_channels,
        )
        out = tuple(lin((sp[i] - 1) * s[i] - 2 * p[i] + d[i] * (k[i] - 1) + op_[i] + 1) for i in range(nd))
        checks = [
            Check("groups divide in_channels", divides(g, cin)),
            Check("groups divide out_channels", divides(g, cout)),
            _ge1("kernel, stride, dilation are positive", *k, *s, *d),
            Check("padding is non-negative", all_(pi >= 0 for pi in p)),
            Check(
                "output_padding smaller than stride or dilation",
                all_((op_[i] >= 0) & ((op_[i] < s[i]) | (op_[i] < d[i])) for i in range(nd)),
            ),
            _ge1("output size is positive", *out),
            _ge1("out_channels is positive", cout),
        ]
        y = (b, cout, *out)
        params = cin * (cout // g) * prod(k) + (cout if a.bias else 0)
        macs = b * prod(sp) * cin * (cout // g) * prod(k)
        # CPU working sets: ``dnnsat.cost.memory._cpu.cpu_conv_transpose_working_sets`` (by backend; a
        # 1-D one runs as the 2-D one of height 1: ATen's ``_convolution`` views 3-D inputs as 4-D; a
        # 3-D one picks its kernel as the 2-D one, the rule's element counts over three dimensions)
        mem = Mem(saves=("in0",), largest_param=cin * (cout // g) * prod(k), cpu_kernels=True)
        return OpInfo([y], checks, params=params, macs=macs, saved=_numel(x), mem=mem)

    return infer


def _conv_transpose_torch(nd: int) -> TorchFn:
    def build(a: Attrs, shapes: list[tuple[int, ...]]) -> Any:
        import torch.nn as nn

        # the CPU/CUDA kernels reject these, the meta kernel does not: mirror the real devices
        positive = ("out_channels", "kernel_size", "stride", "dilation")
        _device_checks(a, positive, ("padding", "output_padding"))
        if not all(o < s or o < d for o, s, d in zip(a.output_padding, a.stride, a.dilation)):
            raise ValueError("output padding must be smaller than either stride or dilation")
        return {1: nn.ConvTranspose1d, 2: nn.ConvTranspose2d, 3: nn.ConvTranspose3d}[nd](
            shapes[0][1],
            a.out_channels,
            a.kernel_size,
            stride=a.stride,
            padding=a.padding,
            output_padding=a.output_padding,
            dilation=a.dilation,
            groups=a.groups,
            bias=a.bias,
        )

    return build


for _nd in (1, 2, 3):
    op(f"conv_transpose{_nd}d", autocast=LOWER)(_conv_transpose_infer(_nd)).torch(_conv_transpose_torch(_nd))


# ------------------------------------------------------------------------------------------------
# dense


@op("linear", autocast=Autocast("lower", "lower", input_grad_weights=True))
def _linear(ins: list[Shape], a: Attrs) -> OpInfo:
    (x,) = ins
    fin, fout = x[-1], a.out_features
    y = (*x[:-1], fout)
    rows = prod(x[:-1])
    # ``tied``: the weight is shared with an earlier op (a tied LM head) and counted there
    params = as_expr((0 if a.get("tied") else fin * fout) + (fout if a.bias else 0))
    mem = Mem(saves=("in0",), largest_param=fin * fout)
    checks = [_ge1("out_features is positive", fout)]
    return OpInfo([y], checks, params=params, macs=rows * fin * fout, saved=_numel(x), mem=mem)


@_linear.torch
def _linear_torch(a: Attrs, shapes: list[tuple[int, ...]]) -> Any:
    import torch.nn as nn

    return nn.Linear(shapes[0][-1], a.out_features, bias=a.bias)


def _broadcast(x: Shape, y: Shape) -> tuple[Shape, Expr]:
    """NumPy/PyTorch broadcasting of two shapes: (result, compatibility condition)."""
    n = max(len(x), len(y))
    xs = (Const(1),) * (n - len(x)) + tuple(x)
    ys = (Const(1),) * (n - len(y)) + tuple(y)
    ok = all_(eq(p, q) | (p == 1) | (q == 1) for p, q in zip(xs, ys))
    return tuple(_bdim(p, q) for p, q in zip(xs, ys)), ok


def _bdim(p: Expr, q: Expr) -> Expr:
    if p is q or (q.is_const and q.value == 1):
        return p
    if p.is_const and p.value == 1:
        return q
    return where(p == 1, q, p)


@op("matmul", arity=2, autocast=LOWER)
def _matmul(ins: list[Shape], a: Attrs) -> OpInfo:
    """``torch.matmul`` for operands of rank >= 2 (batch dimensions broadcast)."""
    x, y = ins
    batch, ok = _broadcast(x[:-2], y[:-2])
    m, k, k2, n = x[-2], x[-1], y[-2], y[-1]
    out = (*batch, m, n)
    checks = [Check("inner dimensions match", eq(k, k2)), Check("batch dimensions broadcast", ok)]
    mem = Mem(saves=("in0", "in1"))
    return OpInfo([out], checks, macs=prod(batch) * m * k * n, saved=_numel(x) + _numel(y), mem=mem)


@_matmul.torch
def _matmul_torch(a: Attrs, shapes: list[tuple[int, ...]]) -> Any:
    import torch

    return _fn_module(torch.matmul)


@op("bmm", arity=2, autocast=LOWER)
def _bmm(ins: list[Shape], a: Attrs) -> OpInfo:
    x, y = ins
    out = (x[0], x[1], y[2])
    checks = [Check("batch sizes match", eq(x[0], y[0])), Check("inner dimensions match", eq(x[2], y[1]))]
    mem = Mem(saves=("in0", "in1"))
    return OpInfo([out], checks, macs=x[0] * x[1] * x[2] * y[2], saved=_numel(x) + _numel(y), mem=mem)


@_bmm.torch
def _bmm_torch(a: Attrs, shapes: list[tuple[int, ...]]) -> Any:
    import torch

    return _fn_module(torch.bmm)


def einsum_subscripts(equation: str, ranks: Sequence[int]) -> tuple[str, str, str]:
    """The subscripts (one character per dimension; ``...`` expanded to characters of their own) of a
    two-operand ``torch.einsum`` equation of matmul form: no letter repeated within an operand, every
    letter of an operand in the other operand or in the output (batch, contracted or free dimensions).
    Raises ValueError otherwise."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    ops = lhs.split(",")
    if len(ops) != 2 or len(ranks) != 2:
        raise ValueError(f"einsum {equation!r}: two operands are supported, got {len(ranks)}")
    ell = max(r - len(o.replace("...", "")) for o, r in zip(ops, ranks) if "..." in o) if "..." in lhs else 0

    def expand(sub: str, rank: int) -> str:
        n = rank - len(sub.replace("...", "")) if "..." in sub else 0
        return sub.replace("...", "".join(chr(0x3B1 + ell - n + i) for i in range(n)))  # greek: ``...``

    a, b = (expand(o, r) for o, r in zip(ops, ranks))
    if not arrow:  # implicit output: ``...`` then the letters seen once, sorted
        once = sorted(c for c in set(a + b) if (a + b).count(c) == 1 and c.isascii())
        rhs = "..." + "".join(once)
    out = rhs.replace("...", "".join(chr(0x3B1 + i) for i in range(ell)))
    for sub, r in ((a, ranks[0]), (b, ranks[1])):
        if len(sub) != r or not all(c.isalpha() for c in sub):
            raise ValueError(
                f"einsum {equation!r}: the subscripts do not match operands of rank {tuple(ranks)}"
            )
    if len(set(a)) < len(a) or len(set(b)) < len(b) or len(set(out)) < len(out):
        raise ValueError(
            f"einsum {equation!r}: a letter repeated in one subscript (a diagonal) is not of matmul form"
        )
    if not set(out) <= set(a + b) or any(
        c not in out and c not in other for sub, other in ((a, b), (b, a)) for c in sub
    ):
        raise ValueError(f"einsum {equation!r}: a letter summed in one operand only is not of matmul form")
    return a, b, out


@op("einsum", arity=2, autocast=LOWER)
def _einsum(ins: list[Shape], a: Attrs) -> OpInfo:
    """Two-operand ``torch.einsum`` of matmul form (batch, contracted and free dimensions; size-1
    dimensions broadcast). FLOPs as FlopCounterMode counts einsum's ``bmm``: ``2 * batch * free *
    contracted``, where a contracted letter of size 1 in one operand is summed out first (not counted)
    and no ``bmm`` runs (0 FLOPs) when no contracted letter is left."""
    x, y = ins
    sa, sb, out = einsum_subscripts(a.equation, (len(x), len(y)))
    size: dict[str, Expr] = {}
    ok: list[Expr] = []
    for sub, shape in ((sa, x), (sb, y)):
        for c, d in zip(sub, shape):
            if c in size:
                ok.append(eq(size[c], d) | (size[c] == 1) | (d == 1))
                size[c] = _bdim(size[c], d)
            else:
                size[c] = d
    contracted = [c for c in sa if c in sb and c not in out]
    kept = [where((x[sa.index(c)] == 1) | (y[sb.index(c)] == 1), 1, size[c]) for c in contracted]
    runs = (
        any_((x[sa.index(c)] != 1) & (y[sb.index(c)] != 1) for c in contracted)
        if contracted
        else Const(False)
    )
    macs = where(runs, prod([size[c] for c in out]) * prod(kept), 0)
    checks = [Check("einsum sizes of a letter match or broadcast", all_(ok))]
    # what einsum's bmm keeps for backward; its permutes and reshapes are views when no dimension
    # broadcasts (allocator peaks, torch 2.13: exact on 4 equations, train and inference)
    mem = Mem(saves=("in0", "in1"))
    return OpInfo([tuple(size[c] for c in out)], checks, macs=macs, saved=_numel(x) + _numel(y), mem=mem)


@_einsum.torch
def _einsum_torch(a: Attrs, shapes: list[tuple[int, ...]]) -> Any:
    import torch

    return _fn_module(lambda x, y: torch.einsum(a.equation, x, y))


@op("embedding")
def _embedding(ins: list[Shape], a: Attrs) -> OpInfo:
    """Lookup of integer ids ``(...)`` in a ``(num_embeddings, dim)`` table -> ``(..., dim)``."""
    (x,) = ins
    y = (*x, a.dim)
    saved = 2 * _numel(x)  # int64 ids: 8 bytes = 2 float32 elements
    mem = Mem(saves=("in0",))
    checks = [_ge1("num_embeddings and dim are positive", a.num_embeddings, a.dim)]
    params = a.num_embeddings * a.dim
    return OpInfo([y], checks, params=params, saved=saved, io=_numel(x) + 2 * _numel(y), mem=mem)


@_embedding.torch
def _embedding_torch(a: Attrs, shapes: list[tuple[int, ...]]) -> Any:
    import torch.nn as nn

    _device_checks(a, ("num_embeddings",))  # the meta device does not look the ids up
    return nn.Embedding(a.num_embeddings, a.dim)


@op("attention", arity=None, autocast=Autocast("lower", "lower", casts=3))
def _attention(ins: list[Shape], a: Attrs) -> OpInfo:
    """Multi-head attention: q/k/v/out projections + scaled dot-product. Self-attention on one
    ``(B, S, D)`` input; cross-attention when a second ``(B, L, E)`` input gives the keys and values.

    ``heads`` query heads of width ``head_dim`` (``None``: ``D / heads``), ``kv_heads`` key/value heads
    (grouped-query attention when fewer), ``causal`` masking (FLOPs count the full score matrix, as
    FlopCounterMode does). The q projection maps ``D`` to ``heads * head_dim``, k and v map ``E`` to
    ``kv_heads * head_dim``, the out projection maps back to ``D``.
    """
    if len(ins) not in (1, 2):
        raise ValueError(f"attention takes 1 or 2 input tensors, got {len(ins)}")
    x, kv = ins[0], ins[-1]
    b, s, d = x
    _, n, e = kv
    h, kvh = a.heads, a.kv_heads
    own = a.get("head_dim") is not None
    hd = a.head_dim if own else d // h
    inner = h * hd if own else d  # width of q and of the attention output
    kvd = kvh * hd
    checks = [Check("kv heads divide heads", divides(kvh, h))]
    if not own:
        checks.insert(0, Check("heads divide model width", divides(h, d)))
    if len(ins) == 2:
        checks.append(Check("query and key/value batch sizes match", eq(kv[0], b)))
    if a.get("mask_shape") is not None:
        checks.append(_mask_check(a.mask_shape, (b, h, s, n)))
    bias = 1 if a.bias else 0
    params = 2 * d * inner + 2 * e * kvd + bias * (inner + 2 * kvd + d)
    proj = 2 * b * s * d * inner + 2 * b * n * e * kvd
    scores = 2 * b * h * s * n * hd
    # projections' inputs (x for q, the key/value source for k and v, the attention output for the out
    # projection), q, k, v, output, log-sum-exp: what a fused (flash / memory-efficient) kernel keeps;
    # the meta device's math path also keeps b*h*s*n scores
    saved = b * s * d + 2 * b * n * e + 3 * b * s * inner + 2 * b * n * kvd + b * h * s
    # CPU flash kernel: q, k, v, its output (viewed, not copied, by the reshape) and the fp32
    # log-sum-exp stay for backward; eval keeps q, k, v, y as locals until the out projection returns
    qkvy: Sizes = ((b * s * inner, "act"), (2 * b * n * kvd, "act"), (b * s * inner, "act"))
    # the flash kernel's per-thread fp32 buffer (``aten/src/ATen/native/cpu/FlashAttentionKernel.cpp``:
    # ``qSplit * kvSplit + 2 * qSplit + qSplit * headSize``, qSplit 32/64/256 by query length,
    # kvSplit 512; one intra-op thread), freed before the out projection: allocator traces, torch 2.13
    q_split, kv_split = _flash_splits(s, n)
    buf_n = q_split * kv_split + 2 * q_split + q_split * hd
    buf: Sizes = ((buf_n, "f32"),)
    # eval: the kernel's log-sum-exp and buffer are freed before the out projection allocates the
    # output (counted by the memory model with the working set)
    eval_extra = maximum(b * h * s + buf_n - b * s * d, 0)
    # backward, in order: the out projection's gradients (of y and of its weight; the op's output
    # gradient is then released); the flash backward (gradients of q, k, v and two qSplit x kvSplit
    # buffers), after which q, k, v, y and the log-sum-exp are released; the q/k/v projections'
    # weight gradients and one partial input gradient. The memory model holds what the op keeps and
    # all its parameter gradients through its backward, so the working set is the larger of the two
    # steps net of those (negative when the q/k/v weight gradients outweigh the flash step's
    # buffers; elements, under mixed precision the 4-byte gradients count as 2: an upper bound).
    # Allocator traces of pre- and post-norm encoder layers, GQA and causal, torch 2.13, one thread.
    qkv_grads = d * inner + 2 * e * kvd + bias * (inner + 2 * kvd)
    flash = b * s * inner + 2 * b * n * kvd + 2 * q_split * kv_split - qkv_grads
    # a head width of its own (inner != d) moves the backward's peak: one more b*s*inner (the out
    # projection's input gradient; two for self-attention narrower than d) bounds it from above
    # (allocator traces, torch 2.13, 16 shapes: within -0.2 %/+10.4 %, tests/test_attention_breadth.py)
    narrow_self = where(inner < d, 2, 1) if len(ins) == 1 else Const(1)
    own_extra = where(eq(inner, d), 0, narrow_self * b * s * inner) if own else Const(0)
    if a.get("layout") == "mha":
        mem = _mha_mem(x, kv, h, len(ins) == 2, a)
    else:
        # the materializer's q, k, v and out Linears, each weight then bias
        shapes = ((d * inner, inner), (e * kvd, kvd), (e * kvd, kvd), (inner * d, d))
        linears = tuple(t for w, o in shapes for t in ((w, o) if a.bias else (w,)))
        mem = Mem(
            saves=("in0", "in1") if len(ins) == 2 else ("in0",),
            extra=(*qkvy, (b * h * s, "f32")),
            workspace=buf,
            eval_workspace=(*qkvy, (eval_extra, "f32")),
            backward=((maximum(flash, -b * s * d) + own_extra, "act"),),
            releases_grad=True,
            largest_param=maximum(d * inner, e * kvd) if own or len(ins) == 2 else d * d,
            param_tensors=linears,
        )
    ops = 3 * b * h * s * n
    return OpInfo([x], checks, params=params, macs=proj + scores, ops=ops, saved=saved, mem=mem)


@_attention.torch
def _attention_torch(a: Attrs, shapes: list[tuple[int, ...]]) -> Any:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    d, e = shapes[0][-1], shapes[-1][-1]
    h, kvh = a.heads, a.kv_heads
    if a.get("layout") == "mha":
        return _mha_torch(a, d, e)
    hd = (d // h if h > 0 else 0) if a.get("head_dim") is None else a.head_dim
    inner = d if a.get("head_dim") is None else h * hd

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q = nn.Linear(d, inner, bias=a.bias)
            self.k = nn.Linear(e, kvh * hd, bias=a.bias)
            self.v = nn.Linear(e, kvh * hd, bias=a.bias)
            self.out = nn.Linear(inner, d, bias=a.bias)

        def forward(self, x: Any, kv: Any = None) -> Any:
            kv = x if kv is None else kv
            bsz, seq, _ = x.shape
            n = kv.shape[1]
            q = self.q(x).view(bsz, seq, h, inner // h).transpose(1, 2)
            k = self.k(kv).view(bsz, n, kvh, hd).transpose(1, 2)
            v = self.v(kv).view(bsz, n, kvh, hd).transpose(1, 2)
            mask = None
            if a.get("mask_shape") is not None:
                mask = torch.zeros(a.mask_shape, dtype=x.dtype, device=x.device)
            y = F.scaled_dot_product_attention(q, k, v, mask, is_causal=a.causal, enable_gqa=kvh != h)
            return self.out(y.transpose(1, 2).reshape(bsz, seq, inner))

    return Attention()


@op("attention_weights", arity=None)
def _attention_weights(ins: list[Shape], a: Attrs) -> OpInfo:
    """The attention weights ``nn.MultiheadAttention(need_weights=True)`` returns, from its output
    ``(B, S, D)`` and key/value source ``(B, L, E)`` (self-attention: the output only): ``(B, S, L)``
    (``average``) or ``(B, heads, S, L)``. Computed and counted (FLOPs, memory) by the ``attention`` op
    before it: this node only lets the memory model keep the tensor while the model's code holds it (the
    ``_`` of ``y, _ = mha(...)`` lives until ``forward`` returns)."""
    y, kv = ins[0], ins[-1]
    shape = (y[0], y[1], kv[1]) if a.average else (y[0], a.heads, y[1], kv[1])
    return OpInfo([shape], io=_numel(shape))


@_attention_weights.torch
def _attention_weights_torch(a: Attrs, shapes: list[tuple[int, ...]]) -> Any:
    y, kv = shapes[0], shapes[-1]
    shape = (y[0], y[1], kv[1]) if a.average else (y[0], a.heads, y[1], kv[1])
    return _fn_module(lambda *xs: xs[0].new_zeros(shape))


@op("attention_output")
def _attention_output(ins: list[Shape], a: Attrs) -> OpInfo:
    """The copy a consumer makes of a ``batch_first`` ``nn.MultiheadAttention``'s output: PyTorch returns a
    transposed view, which a Linear or LayerNorm copies (its matmul or kernel needs it contiguous; the Linear
    keeps the copy for its weight gradient instead of the output). Same shape, no parameters or FLOPs, no
    consumer: ``from_torch`` keeps it while the output's value lives. A consumer that needs no copy
    (``x + y``) costs one activation more (an upper bound; no copy for a batch of 1 or in the eval fast
    path, whose output is batch-first)."""
    (x,) = ins
    return OpInfo([x])


@_attention_output.torch
def _attention_output_torch(a: Attrs, shapes: list[tuple[int, ...]]) -> Any:
    return _fn_module(lambda y: y.new_empty(0))  # the real copy is the consumer's


def _mha_torch(a: Attrs, d: int, e: int) -> Any:
    """``layout="mha"``: the ``nn.MultiheadAttention(batch_first=True)`` the op was traced from (boolean
    masks of ``mask_shape``, all positions attended: (L, S) or (B*H, L, S) ``attn_mask``, a key padding
    mask; causal: the (L, S) mask with ``is_causal``)."""
    import torch
    import torch.nn as nn

    class MHA(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = nn.MultiheadAttention(d, a.heads, bias=a.bias, kdim=e, vdim=e, batch_first=True)

        def forward(self, x: Any, kv: Any = None) -> Any:
            kv = x if kv is None else kv
            s, n = x.shape[1], kv.shape[1]
            kw: dict[str, Any] = {}
            shape = a.get("mask_shape")
            if a.causal:
                causal = torch.ones(s, n, dtype=torch.bool, device=x.device).triu(1)
                kw = {"attn_mask": causal, "is_causal": True}
            elif shape is not None and len(shape) == 4 and shape[1] == 1:
                kw = {"key_padding_mask": torch.zeros(shape[0], n, dtype=torch.bool, device=x.device)}
            elif shape is not None:
                dims = (s, n) if len(shape) == 2 else (x.shape[0] * a.heads, s, n)
                kw = {"attn_mask": torch.zeros(dims, dtype=torch.bool, device=x.device)}
            return self.attn(x, kv, kv, need_weights=a.need_weights, **kw)[0]

    return MHA()


def _mha_mem(x: Shape, kv: Shape, h: Expr, cross: bool, a: Attrs) -> Mem:
    """Memory of ``nn.MultiheadAttention(batch_first=True)`` as torch 2.13 runs it on the CPU
    (``layout="mha"``, set by ``from_torch``): ``F.multi_head_attention_forward`` (``torch/nn/functional.py``)
    in training and where the fast path does not apply, ``torch._native_multi_head_attention``
    (``MultiheadAttention.forward`` in ``torch/nn/modules/activation.py``; the same kernel inside
    ``torch._transformer_encoder_layer_fwd``) under ``no_grad`` in eval. Element counts from allocator
    traces (one intra-op thread); where the traces differ between cases the larger term is taken: an upper
    bound (tests/test_mha_memory.py)."""
    b, s, d = x
    _, n, e = kv
    big = where(b >= 2, 1, 0)  # a batch-first input's transpose is a copy for the projections (not for B=1)
    q_, k_ = b * s * d, b * n * d  # one projected query / key (or value) tensor
    scores, lse = b * h * s * n, b * h * s
    q_split, kv_split = _flash_splits(s, n)
    buf = q_split * kv_split + 2 * q_split + q_split * (d // h)  # the CPU flash kernel's fp32 buffer
    # the projections: the transposed inputs' contiguous copies (kept for the weight gradients; a cross
    # key/value source once for the packed weights, once per projection for the separate q/k/v weights that
    # kdim != embed_dim makes), q, k, v (``.contiguous()`` of the packed projection, whose output is
    # transient; the separate projections' outputs are q, k, v)
    packed = eq(e, d)
    copies = big * (q_ + (where(packed, 1, 2) * b * n * e if cross else 0))
    qkv = q_ + 2 * k_
    proj = where(packed, 2 * k_, 0) if cross else 3 * q_
    # masks: the float mask the kernel gets, plus ``_canonical_mask``'s float copies of boolean masks and the
    # key padding mask expanded to (B*H, 1, L): an upper bound
    shape = a.get("mask_shape")
    mask = _numel(shape) + b * h * n + b * n + s * n if shape is not None else Const(0)
    # causal: PyTorch takes is_causal only with a mask, whose float copy (``_canonical_mask``, (L, S) masks
    # measured) lives through the call even when the kernel runs causal without it
    canon = s * n if a.causal else Const(0)
    nw = bool(a.get("need_weights"))
    # training with the module's dropout > 0: the explicit path drops the weights, SDPA runs its math path
    # (``_scaled_dot_product_attention_math``: scaled q and k, scores, ``_safe_softmax``, dropout, ``bmm``);
    # the dropout's mask (the activation dtype on the CPU) and output are kept for backward
    drop = bool(a.get("dropout"))
    math = drop and not nw
    # kept for backward (training): the copies, q/k/v, the kernel's output and log-sum-exp (flash SDPA), or
    # the scaled q (and k: math SDPA), the softmax and the out projection's reshaped input (``bmm`` and
    # ``softmax``: need_weights or math SDPA), the dropout's mask and output, and the masks
    kept = copies + qkv + mask + (2 * q_ + scores if nw else 3 * q_ + scores if math else q_)
    kept = kept + (2 * scores if drop else 0)
    extra: Sizes = ((kept, "act"), (Const(0) if nw or math else lse, "f32"))
    # forward transients: the packed projection's output, then the raw scores and the head-averaged weights
    # the caller holds (need_weights), the raw scores (math SDPA) or the flash buffer
    fwd: Sizes = ((maximum(proj, scores) + b * s * n + canon, "act"),)
    if math:  # the raw scores and ``_safe_softmax``'s boolean ``isneginf`` of them
        fwd = ((maximum(proj, scores) + canon, "act"), (scores, "bool"))
    elif not nw:
        fwd = ((proj + canon, "act"), (buf, "f32"))
    # backward, net of the output and input gradients and the op's weight gradients (which the memory model
    # holds through it): the attention's step is the largest (need_weights: the weights' gradient and
    # softmax's, the value gradient; flash SDPA: dq, dk, dv, the output gradient's copy and two
    # qSplit x kvSplit buffers; dropout: one score matrix over the kept ones, which its backward frees as it
    # goes); the packed projection's ``select_backward`` zeros come after q, k, v are freed
    core = scores + q_ + k_ if drop else 2 * scores + k_ if nw else 2 * q_ + 2 * k_
    bwd: Sizes = ((core, "act"), (Const(0) if nw or math else 2 * q_split * kv_split, "f32"))
    # eval, slow path, net of the op's output (not yet allocated or standing in for q or the kernel's output):
    # the projections (the input copy is freed after its matmul), then the attention (need_weights: raw
    # scores and softmax, then the context's copy and the averaged weights; SDPA: log-sum-exp and buffer)
    slow = maximum(maximum(big * b * n * e + 2 * k_, 4 * k_) if cross else 5 * q_, qkv + lse + buf + mask)
    if nw:
        slow = maximum(slow, qkv - q_ + 2 * scores + mask, scores + q_ + b * s * n)
    ev = slow = slow + canon
    if a.get("fast_path"):
        # ``_native_multi_head_attention`` (self-attention, bias, no float mask, even heads, no autocast):
        # the packed projection and its rescaled copy, then q/k/v and the full score matrix (the CPU kernel
        # materializes it), the context and the out projection (need_weights: the averaged weights); with a
        # mask (causal: the (S, L) mask it was given) ``_masked_softmax`` writes a second score matrix and
        # the mask is converted (int64 (S, L) copies: twice the mask's elements, counted twice)
        masked = shape is not None or a.causal
        mask2 = 2 * (mask if shape is not None else 2 * s * n + b * h * n) if masked else Const(0)
        attend = scores + (scores + mask2 if masked else 0)
        fast = maximum(5 * q_, 2 * q_ + attend)
        if nw:
            fast = maximum(fast, 3 * q_ + attend + maximum(q_, b * s * n))
        ev = where(divides(Const(2), h), maximum(slow, fast), slow)  # autocast runs the slow one: the larger
    # parameters as registered: in_proj_weight (3d x d; with kdim != d, q/k/v_proj_weight, whose Adam peaks
    # the packed size bounds), in_proj_bias, out_proj.weight, out_proj.bias
    in_proj = d * d + 2 * d * e
    tensors = (in_proj, 3 * d, d * d, d) if a.bias else (in_proj, d * d)
    return Mem(
        saves=("in0", "in1") if cross else ("in0",),
        extra=extra,
        workspace=fwd,
        eval_workspace=((ev, "act"),),
        backward=bwd,
        largest_param=in_proj,
        param_tensors=tensors,
    )


def _flash_splits(s: Expr, n: Expr) -> tuple[Expr, Expr]:
    """(qSplit, kvSplit) of PyTorch's CPU flash attention for ``s`` queries and ``n`` keys: 32/64/256 query
    rows by query length, 512 keys (``aten/src/ATen/native/cpu/FlashAttentionKernel.cpp``)."""
    return minimum(where(s >= 768, 256, where(s >= 192, 64, 32)), s), minimum(n, 512)


def _mask_check(mask: Sequence[Expr], target: Shape) -> Check:
    """An attention mask broadcasts to ``target`` = (batch, heads, query length, key length)."""
    fits = all_(eq(p, t) | (p == 1) for p, t in zip(reversed(mask), reversed(target)))
    return Check("attention mask broadcasts to (batch, heads, query length, key length)", fits)


@op("sdpa", arity=None, autocast=LOWER)
def _sdpa(ins: list[Shape], a: Attrs) -> OpInfo:
    """``F.scaled_dot_product_attention(q, k, v)``: ``(B, H, S, E)``, ``(B, Hkv, L, E)``,
    ``(B, Hkv, L, Ev)`` -> ``(B, H, S, Ev)``; ``gqa``: ``Hkv`` may divide ``H`` (``enable_gqa``).
    FLOPs ``2*B*H*S*L*(E + Ev)`` (scores and values over the query heads, the full score matrix even
    when ``causal`` or masked), as FlopCounterMode counts them. A 4th input is ``attn_mask`` (rank <= 4,
    broadcastable to ``(B, H, S, L)``; ``bool_mask``: a boolean one, which PyTorch converts to a float
    mask of its own shape)."""
    if len(ins) not in (3, 4):
        raise ValueError(f"sdpa takes 3 or 4 input tensors (q, k, v[, mask]), got {len(ins)}")
    q, k, v = ins[:3]
    b, h, s, e = q
    kvh, n, ev = k[1], k[2], v[3]
    heads = divides(kvh, h) if a.gqa else eq(kvh, h)
    checks = [
        Check("batch sizes match", eq(k[0], b) & eq(v[0], b)),
        Check("query and key widths match", eq(k[3], e)),
        Check("keys and values match", eq(v[1], kvh) & eq(v[2], n)),
        Check("key/value heads divide query heads" if a.gqa else "query and key/value heads match", heads),
    ]
    converted: Expr = Const(0)
    m = ins[3] if len(ins) == 4 else a.get("mask_shape")
    if m is not None:
        checks.append(_mask_check(m, (b, h, s, n)))
        # a float mask of the mask's shape is kept for backward: the conversion of a boolean mask, or
        # the mask the model builds itself (``mask_shape``, no 4th input); a float input mask is not
        # copied (allocator peaks, torch 2.13)
        converted = _numel(m) if a.get("bool_mask") or len(ins) == 3 else Const(0)
    y = (b, h, s, ev)
    # the CPU flash kernel (masked too: no score matrix) keeps q, k, v, its output, the fp32
    # log-sum-exp and the mask for backward; its per-thread buffer as in ``attention`` (one intra-op
    # thread). Allocator peaks, torch 2.13: a float mask given to it adds nothing
    q_split, kv_split = _flash_splits(s, n)
    buf_n = q_split * kv_split + 2 * q_split + q_split * e
    extra: Sizes = ((b * h * s + converted, "f32"),)
    # the backward's per-thread fp32 buffers: the scores and their gradient of one qSplit x kvSplit
    # block and a row sum of qSplit (allocator traces, torch 2.13; tests/test_memory_sdpa.py)
    mem = Mem(
        saves=("in0", "in1", "in2", "out"), extra=extra, workspace=((buf_n, "f32"),),
        eval_workspace=((buf_n + converted + b * h * s, "f32"),),  # the log-sum-exp is made in eval too
        backward=((2 * q_split * kv_split + q_split, "f32"),),
    )  # fmt: skip
    saved = _numel(q) + _numel(k) + _numel(v) + _numel(y) + b * h * s
    return OpInfo([y], checks, macs=b * h * s * n * (e + ev), ops=3 * b * h * s * n, saved=saved, mem=mem)


@_sdpa.torch
def _sdpa_torch(a: Attrs, shapes: list[tuple[int, ...]]) -> Any:
    import torch
    import torch.nn.functional as F

    def sdpa(q: Any, k: Any, v: Any, mask: Any = None) -> Any:
        if mask is None and a.get("mask_shape") is not None:
            mask = torch.zeros(a.mask_shape, dtype=q.dtype, device=q.device)
        if mask is not None and a.get("bool_mask"):
            mask = mask >= 0
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=a.causal, enable_gqa=a.gqa)

    return _fn_module(sdpa)


def _ld(n: Expr) -> Expr:
    """oneDNN's leading dimension for ``n`` fp32 values (``rnn_utils::get_good_ld``): a multiple of 16,
    plus 16 where it is a multiple of 256."""
    ld = ceildiv(n, 16) * 16
    return ld + where(ld - ld // 256 * 256 == 0, 16, 0)


def _pages(n: Expr) -> Expr:
    """``n`` fp32 values rounded up to 4 KiB pages (oneDNN aligns each workspace part to a page)."""
    return ceildiv(n, 1024) * 1024


# Both RNN ops return ``batch_first`` outputs as a transposed view: the next op copies it to a
# contiguous tensor if it needs one (``nn.Linear`` does, and saves the copy for backward); training
# counts that copy with what the RNN keeps (an upper bound from the RNN's forward on; the consumer's
# backward frees it before the RNN's: the GRU's backward working set subtracts it again, the LSTM's
# was fitted with it).


def _rnn_backward(parts: list[tuple[Expr, Expr, Expr]]) -> Expr:
    """Backward working set of a multi-layer RNN op, net of what the memory model already holds
    through the op's backward (all it keeps, all its parameter gradients): ``parts`` are the
    layer-directions in backward order (top layer first) as (peak of its backward counting its own
    parameter gradients, its parameter elements, what it keeps for backward). Each is differentiated
    by its own autograd nodes, which release what it keeps before the next one runs; the gradients of
    the ones not reached yet do not exist. May be negative."""
    out: Expr | None = None
    for i, (peak, _, _) in enumerate(parts):
        rel = peak - sum_(p for _, p, _ in parts[i:]) - sum_(k for _, _, k in parts[:i])
        out = rel if out is None else maximum(out, rel)
    return out if out is not None else Const(0)


def _batch_first_copy(b: Expr, s: Expr, n: Expr) -> Expr:
    """``n`` elements where a ``(B, S, ...)`` view of a ``(S, B, ...)`` tensor (or back) is not
    contiguous (``B > 1`` and ``S > 1``), else 0: the copy a kernel that needs a dense tensor makes."""
    return where((b > 1) & (s > 1), n, 0)


def _lstm_scratch(b: Expr, h: Expr, steps: Expr) -> Expr:
    """oneDNN's training scratchpad of one LSTM layer and direction (``rnn_utils::set_offsets``, fp32
    elements): the gates of ``steps`` steps (``ld(4H)`` wide), the hidden state and its gradient
    (``ld(H)`` wide), each page-aligned, and a fixed 1166 (pointer arrays; allocator traces)."""
    return _pages(steps * b * _ld(4 * h)) + 2 * _pages(b * _ld(h)) + 1166


def _lstm_mem(b: Expr, s: Expr, fin: Expr, h: Expr, layers: int, dirs: int) -> Mem:
    """Memory of ``nn.LSTM`` on the CPU: oneDNN's RNN (``aten::mkldnn_rnn_layer``, one call per layer
    and direction; fp32 elements, 4-byte "act" units). ``ld(n)``: :func:`_ld`; ``pages``: :func:`_pages`.

    Training, exact against allocator traces (torch 2.13, one thread, avx512_core_bf16 and AVX2; see
    ``tests/test_memory_lstm.py``). Each layer-direction call keeps its workspace ``pages(S*B*ld(4H))
    + 2*pages(2*(S+1)*B*H) + 3*pages(2*(S+1)*B*ld(max(F, H))) + pages(S*B*ld(H))``, its output, ``h_n``
    and ``c_n``; ``nn.LSTM`` keeps zero initial states and (``batch_first``, ``B, S > 1``) a contiguous
    copy of the input; bidirectional, each layer's concatenated output. Transient: the summed bias,
    the weights reordered to ``F x ld(4H)`` and ``H x ld(4H)`` and the scratchpad
    (:func:`_lstm_scratch`; the forward merges the gates of all steps below a batch of 128, the
    backward always). The backward of a call adds the gradients of ``h_n``/``c_n`` (zeros), of
    ``h0``/``c0`` and of its input, a contiguous copy of its output's gradient (where that is a
    strided view), its weight gradients, oneDNN's ``ld(F) x 4H`` / ``ld(H) x 4H`` weight-gradient
    buffers (where ``ld`` pads), the reorders, a bias gradient and the scratchpad; the second
    direction of a layer meets the first one's input gradient. Eval keeps the earlier layers' outputs
    (and, bidirectional, each direction's beside their concatenation) until the op returns.
    """
    g4 = 4 * h
    sbh, bh = s * b * h, b * h
    # the consumer's contiguous copy of the batch_first output (counted with what the op keeps, see
    # the comment above :func:`_rnn_backward`); the forward and the backward are net of it
    copy_out = _batch_first_copy(b, s, s * b * dirs * h)
    parts: list[tuple[Expr, Expr, Expr]] = []
    calls: list[tuple[int, Expr, Expr]] = []  # (layer, transient of the forward call, kept)
    cats: Expr = Const(0)
    for layer in range(layers):
        f = fin if layer == 0 else dirs * h
        ws = (
            _pages(s * b * _ld(g4)) + 2 * _pages(2 * (s + 1) * b * h)
            + 3 * _pages(2 * (s + 1) * b * _ld(maximum(f, h))) + _pages(s * b * _ld(h))
        )  # fmt: skip
        reorders = (f + h) * _ld(g4)
        fwd_scratch = _lstm_scratch(b, h, where(b < 128, s, 1))
        keep = ws + 2 * bh + sbh
        calls += [(layer, g4 + reorders + fwd_scratch, keep)] * dirs
        if dirs == 2 and layer < layers - 1:
            cats = cats + s * b * 2 * h
        # backward: oneDNN's weight-gradient buffers where ld pads (else it writes the gradients)
        pads = where(eq(_ld(f), f), 0, _ld(f) * g4) + where(eq(_ld(h), h), 0, _ld(h) * g4)
        own = g4 * (f + h) + 2 * g4
        grad_copy = _batch_first_copy(b, s, sbh) if layer == layers - 1 and dirs == 1 else Const(0)
        if dirs == 2:
            grad_copy = where(s * b > 1, sbh, 0)
        # the zero h_n/c_n and the h0/c0 gradients (4BH), the input's gradient, the summed bias and
        # oneDNN's bias gradient (2*4H); b_hh's gradient is made after the scratchpad is freed (-4H)
        bwd_scratch = _lstm_scratch(b, h, s)
        peak = grad_copy + 4 * bh + s * b * f + own + g4 + pads + reorders + bwd_scratch
        below = s * b * 2 * h if layer > 0 else 0  # the layer's input, released with both directions
        # the direction differentiated second meets the first one's input gradient
        second = (peak + below, own, keep + below)
        parts[:0] = [(peak, own, keep), second] if dirs == 2 else [(peak, own, keep)]
    # forward: a call beside what the earlier ones keep; net of what the op keeps by its end (the later
    # calls', the concatenations of this layer on, the consumer's copy); then h_n and c_n are stacked
    later: Expr = Const(0)
    fwd: Expr = 2 * layers * dirs * bh
    for i in range(len(calls) - 1, -1, -1):
        layer, transient, keep = calls[i]
        cat_on = (layers - 1 - layer) * s * b * 2 * h if dirs == 2 else 0
        fwd = maximum(fwd, transient - later - cat_on)
        later = later + keep
    states = 2 * layers * dirs * bh

    def eval_working_set(block: Expr) -> Expr:
        """No-grad forward working set with the eval weights' ``4H`` padded to a multiple of ``block``."""
        ws: Expr = Const(0)
        for layer in range(layers):
            f = fin if layer == 0 else dirs * h
            # inference puts every part in oneDNN's scratchpad, page-aligned (``rnn_utils``): the h and
            # c states of two layers over S + 1 steps, the gates of one step (of every step at batch 1,
            # whose input allows one merged GEMM), the hidden state, and a fixed tail (1238: an upper
            # bound): allocator traces, exact on 21 shapes (batch 1-128, S 1-100, F 3-600, H 8-512)
            merged = where(eq(b, Const(1)), s, 1)
            eval_scratch = (
                _pages(2 * (s + 1) * b * _ld(maximum(f, h))) + _pages(2 * (s + 1) * b * h)
                + _pages(merged * b * _ld(g4)) + _pages(b * _ld(h)) + 1238
            )  # fmt: skip
            ws = maximum(ws, (f + h) * (ceildiv(g4, block) * block) + eval_scratch)
        # the layers' outputs but the op's own (dirs 2: each direction's, then their concatenation);
        # the last bidirectional layer's two outputs exist with the second call's scratchpad and
        # weights, or (once it returned) with their concatenation, the op's output: the larger
        per_dir = (layers - 1) * dirs
        eval_cats = (layers - 1) * s * b * dirs * h if dirs == 2 else 0
        outs = layers * dirs * (2 * bh + g4) + per_dir * sbh + eval_cats
        last = maximum(ws, dirs * sbh) if dirs == 2 else ws
        return b * s * fin + 2 * states + outs + last

    x_copy = _batch_first_copy(b, s, b * s * fin)
    # single direction: the last call's output is the op's and is saved for backward
    kept = later + cats - (sbh if dirs == 1 else 0)
    frozen = _rnn_backward(parts) - copy_out
    return Mem(
        saves=("out",) if dirs == 1 else (),
        extra=((kept + x_copy + states + copy_out, "act"),),
        workspace=((fwd - copy_out, "act"),),
        # the eval weights' 4H padded to 128 (AVX-512); without AVX-512 to 64 but at batch 1
        eval_workspace=((eval_working_set(Const(128)), "act"),),
        eval_workspace_avx2=((eval_working_set(where(eq(b, Const(1)), 128, 64)), "act"),),
        # the input's gradient, when it needs one, is the model's (one direction; bidirectional: the
        # second direction's is added to the first's, bounded by the frozen case)
        backward=((frozen - (s * b * fin if dirs == 1 else 0), "act"),),
        backward_frozen=((frozen, "act"),),
        largest_param=g4 * maximum(maximum(fin, dirs * h) if layers > 1 else fin, h),
        cpu_kernels=True,
    )


def _gru_mem(b: Expr, s: Expr, fin: Expr, h: Expr, layers: int, dirs: int) -> Mem:
    """Memory of ``nn.GRU`` on the CPU: PyTorch's own cell loop (no oneDNN RNN for GRU; fp32, 4-byte
    "act" units). Allocator traces (torch 2.13, one thread): per layer and direction the input
    projection of the whole sequence (``S x B x 3H``), then per time step the hidden projection
    (``B x 3H``) and the fused cell's output and workspace (4 ``B x H``), kept for backward (the
    input projection lives until the outputs are stacked, then is freed); eval keeps the steps'
    outputs until the stack (the ``batch_first`` copy of the input lives until the projection is
    computed); the backward (one autograd node per step, releasing that step's tensors) holds a
    step's ``3H x H`` weight-gradient chunk and the new out-of-place sum besides the accumulated
    parameter gradients, keeps every step's input-gate gradient for the projection's, and runs the
    directions one after the other. Checked against allocator traces (``tests/test_memory_rnn.py``:
    eval exact, training within 1 % at the sizes users train, 4 % on small ones, where the consumer's
    copy counted until the op's backward is the rest); upper bounds where a trace left a choice.
    """
    g3, kept, eval_ws = 3 * h, Const(0), Const(0)
    # ``batch_first`` tensors are transposed to (and from) time-major ones: :func:`_batch_first_copy`
    parts: list[tuple[Expr, Expr, Expr]] = []
    frozen_parts: list[tuple[Expr, Expr, Expr]] = []
    for layer in range(layers):
        f = fin if layer == 0 else dirs * h
        # a layer's output (bidirectional: the directions' outputs concatenated, then freed) is the
        # next layer's input; the last one's is the op's output
        out = s * b * dirs * h if layer < layers - 1 else 0
        kept = kept + dirs * s * (b * g3 + 4 * b * h) + out
        prev = s * b * dirs * h if layer > 0 else 0
        # at the stack: the last direction's projection, every step's output, the directions' stacked
        # outputs (bidirectional: beside their concatenation, the op's output)
        stack = s * b * (g3 + dirs * h + (dirs - 1) * dirs * h)
        # at the last direction's projection: its copy of a batch_first input (the first layer's;
        # later layers read the previous output), every direction's projection and the earlier
        # direction's step outputs and stack (the op's output is not there yet)
        x_copy = _batch_first_copy(b, s, b * s * f) if layer == 0 else 0
        project = x_copy + dirs * s * b * g3 + (dirs - 1) * 2 * s * b * h - s * b * dirs * h
        # at the last direction's last step: its projection, the hidden projection and the fused
        # cell's two ``B x H`` temporaries, the earlier steps' outputs, the earlier direction's outputs
        # and stack (the larger below 4 steps)
        cell = s * b * (g3 + (dirs - 1) * 2 * h - dirs * h) + b * (g3 + (s + 1) * h)
        # the earlier layers' last hidden states wait for the final ``h_n`` stack
        eval_ws = maximum(eval_ws, maximum(stack, project, cell) + prev + layer * dirs * b * h)
        # backward (allocator traces; relative to what the layer-direction keeps, the gradient of its
        # output and the parameter gradients the model counts with the op, biases included): the
        # directions run one after the other (autograd's sequence numbers); from the second step on a
        # step holds the hidden-weight gradient, its new chunk and their out-of-place sum, having
        # released 4 ``B x H`` of what its step and the last one kept; at the end the steps' input-gate
        # gradients are stacked beside themselves (unidirectional: the output gradient, sliced per
        # step, is gone), then the input-weight gradient and the input's (a later layer's: each
        # direction's, then their sum) are computed from the stack
        own, steps, w = g3 * (f + h), s * (b * g3 + 4 * b * h), g3 * h
        step = where(s >= 2, 3 * w - 7 * b * h, w - 3 * b * h)
        end = b * h - (s * b * h if dirs == 1 else 0) - steps
        stacked, projected = w + 2 * s * b * g3 + end, own + s * b * g3 + end
        # the input gradient: the first direction's lives through the second's backward, then the two
        # are summed out of place
        x_grad = s * b * f
        first = maximum(step, stacked, projected + x_grad)
        second = maximum(step + x_grad, stacked + x_grad, projected + 3 * x_grad)
        # the first layer's input needs no gradient (``backward_frozen``): no input gradients
        frozen = maximum(step, stacked, projected) if layer == 0 else None
        # released once a direction is differentiated: its steps, its copy of a batch_first input
        # (the first layer's); once the layer is, the previous layer's output its projections saved
        mine = steps + (_batch_first_copy(b, s, b * s * fin) if layer == 0 else 0)
        last = mine + (s * b * dirs * h if layer > 0 else 0)
        layer_parts = [(first, own, last)] if dirs == 1 else [(first, own, mine), (second, own, last)]
        parts[:0] = layer_parts
        frozen_parts[:0] = layer_parts if frozen is None else [(frozen, own, p[2]) for p in layer_parts]
    states = layers * dirs * b * h
    copy = _batch_first_copy(b, s, s * b * dirs * h)  # the consumer's contiguous copy of the output
    return Mem(
        # each direction projects its own contiguous copy of a batch_first input; + the consumer's copy
        extra=((kept + _batch_first_copy(b, s, dirs * b * s * fin) + 2 * states + copy, "act"),),
        # the last layer ends with its (last direction's) input projection and, bidirectional, both
        # directions' outputs beside their concatenation; the consumer's copy counted in ``extra`` is
        # made after they are freed
        workspace=((s * b * (g3 + (dirs - 1) * 2 * h - dirs * h), "act"),),
        eval_workspace=((eval_ws + states, "act"),),
        # the consumer's copy and the states (zero initial ones, h_n) are freed by now
        backward=((_rnn_backward(parts) - copy - 2 * states, "act"),),
        backward_frozen=((_rnn_backward(frozen_parts) - copy - 2 * states, "act"),),
        largest_param=g3 * maximum(maximum(fin, dirs * h) if layers > 1 else fin, h),
        cpu_kernels=True,
    )


def _rnn_infer(gates: int) -> InferFn:
    def infer(ins: list[Shape], a: Attrs) -> OpInfo:
        (x,) = ins
        b, s, fin = x
        hdim, layers = a.hidden_size, a.num_layers
        dirs = 2 if a.bidirectional else 1
        bias = 2 * gates * hdim if a.bias else 0
        params: Expr = Const(0)
        macs: Expr = Const(0)
        for layer in range(layers):
            lin = fin if layer == 0 else dirs * hdim
            params = params + dirs * (gates * hdim * (lin + hdim) + bias)
            macs = macs + dirs * b * s * gates * hdim * (lin + hdim)
        y = (b, s, dirs * hdim)
        saved = layers * dirs * b * s * (fin + (gates + 2) * hdim)
        checks = [_ge1("hidden size is positive", hdim)]
        mem = (_lstm_mem if gates == 4 else _gru_mem)(b, s, fin, hdim, layers, dirs)
        # as nn.LSTM / nn.GRU register them: per layer and direction w_ih, w_hh (then b_ih, b_hh)
        tensors: list[Expr] = []
        for layer in range(layers):
            lin = fin if layer == 0 else dirs * hdim
            one = [gates * hdim * lin, gates * hdim * hdim] + ([gates * hdim] * 2 if a.bias else [])
            tensors += one * dirs
        mem = replace(mem, param_tensors=tuple(tensors))
        return OpInfo(
            [y], checks, params=params, macs=macs, ops=layers * dirs * b * s * hdim * 4 * gates, saved=saved,
            mem=mem,
        )  # fmt: skip

    return infer


def _rnn_torch(kind: str) -> TorchFn:
    def build(a: Attrs, shapes: list[tuple[int, ...]]) -> Any:
        import torch.nn as nn

        cls = {"lstm": nn.LSTM, "gru": nn.GRU}[kind]
        rnn = cls(
            shapes[0][-1],
            a.hidden_size,
            num_layers=a.num_layers,
            bias=a.bias,
            batch_first=True,
            bidirectional=a.bidirectional,
        )

        class RNN(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.rnn = rnn

            def forward(self, x: Any) -> Any:
                return self.rnn(x)[0]

        return RNN()

    return build


op("lstm", autocast=LOWER)(_rnn_infer(4)).torch(_rnn_torch("lstm"))
op("gru", autocast=LOWER)(_rnn_infer(3)).torch(_rnn_torch("gru"))


# ------------------------------------------------------------------------------------------------
# normalization


@op("batchnorm")
def _batchnorm(ins: list[Shape], a: Attrs) -> OpInfo:
    """BatchNorm over channel dim 1 of ``(B, C)``, ``(B, C, L)`` or ``(B, C, H, W)``."""
    (x,) = ins
    c = x[1]
    checks = [
        Check("more than one value per channel (training)", prod((x[0], *x[2:])) > 1, train_only=True),
    ]
    saved = _numel(x) + 4 * c  # input + per-channel batch mean, inverse std and running statistics
    # batch mean and inverse std (fp32) kept for backward; running mean/var (fp32) + a step counter
    # the backward computes into an input-sized buffer besides the input gradient, not when the input
    # needs none (``native_batch_norm_backward``); eval computes a per-channel fp32 scale and shift with
    # the output (``batch_norm_cpu_inference``); allocator traces, torch 2.13: fp32 and bfloat16 inputs
    # of rank 2-4
    mem = Mem(
        saves=("in0",),
        extra=((2 * c, "f32"),),
        eval_workspace=((2 * c, "f32"),),
        backward=((_numel(x), "act"),),
        backward_frozen=(),
        largest_param=c,
        buffers=((2 * c, "f32"), (Const(1), "i64")),
        cpu_kernels=True,
    )
    return OpInfo(
        [x], checks, params=2 * c if a.affine else Const(0), ops=5 * _numel(x), saved=saved, mem=mem
    )


@_batchnorm.torch
def _batchnorm_torch(a: Attrs, shapes: list[tuple[int, ...]]) -> Any:
    import torch.nn as nn

    cls = nn.BatchNorm2d if len(shapes[0]) == 4 else nn.BatchNorm1d
    return cls(shapes[0][1], affine=a.affine)


@op("layernorm", autocast=Autocast("keep", "fp32"))
def _layernorm(ins: list[Shape], a: Attrs) -> OpInfo:
    """LayerNorm over the last ``dims`` dimensions."""
    (x,) = ins
    n = prod(x[len(x) - a.dims :])
    params = (n if a.affine else 0) + (n if a.affine and a.bias else 0)
    rows = prod(x[: len(x) - a.dims])
    mem = Mem(saves=("in0",), extra=((2 * rows, "f32"),), largest_param=n)
    return OpInfo([x], params=as_expr(params), ops=5 * _numel(x), saved=_numel(x) + 2 * rows, mem=mem)


@_layernorm.torch
def _layernorm_torch(a: Attrs, shapes: list[tuple[int, ...]]) -> Any:
    import torch.nn as nn

    return nn.LayerNorm(shapes[0][len(shapes[0]) - a.dims :], elementwise_affine=a.affine, bias=a.bias)


@op("groupnorm", autocast=Autocast("keep", "fp32"))
def _groupnorm(ins: list[Shape], a: Attrs) -> OpInfo:
    (x,) = ins
    c, g = x[1], a.groups
    checks = [Check("groups divide channels", divides(g, c))]
    saved = _numel(x) + 2 * x[0] * g  # input + per-group mean and inverse std
    # the backward's per-sample, per-channel fp32 sums ``ds`` and ``db`` (``native_group_norm_backward``;
    # allocator traces, torch 2.13: fp32 and bfloat16, (N, C), (N, C, L) and (N, C, H, W) inputs)
    mem = Mem(
        saves=("in0",),
        extra=((2 * x[0] * g, "f32"),),
        backward=((2 * x[0] * c, "f32"),),
        largest_param=c,
        cpu_kernels=True,
    )
    return OpInfo(
        [x], checks, params=2 * c if a.affine else Const(0), ops=5 * _numel(x), saved=saved, mem=mem
    )


@_groupnorm.torch
def _groupnorm_torch(a: Attrs, shapes: list[tuple[int, ...]]) -> Any:
    import torch.nn as nn

    return nn.GroupNorm(a.groups, shapes[0][1], affine=a.affine)


@op("rmsnorm")
def _rmsnorm(ins: list[Shape], a: Attrs) -> OpInfo:
    """``nn.RMSNorm`` over the last ``dims`` dimensions (``affine``: a weight, no bias)."""
    (x,) = ins
    n = prod(x[len(x) - a.dims :])
    rows = prod(x[: len(x) - a.dims])
    numel = _numel(x)
    # PyTorch's CPU ``_fused_rms_norm`` (input and weight of one dtype): the square, the per-row mean and
    # rsqrt, then the normalized input and (affine) its scaled copy, the output. It keeps the input, the
    # rsqrt and (affine) the normalized input for backward; eval: the normalized input lives with the
    # output (affine), else the square and the statistics are the peak. The backward is done with the
    # output gradient and (affine) the normalized input before its peak, the square's backward: five
    # tensors of the input's size, one of them the input gradient (an input without a gradient: the
    # weight's gradient at the input's size, then summed). A 16-bit input (bfloat16 autocast:
    # the weight is fp32, so the composite, which runs the same steps) is first copied to fp32
    # (``input.to(opmath)``), which is kept for backward instead of the input; the steps run in fp32 and
    # the result is cast back (one more fp32 tensor with the output; eval: the copy, the normalized input
    # and the scaled one at once); the 16-bit input gradient is cast after the peak. Allocator traces,
    # torch 2.13, fp32 and bfloat16 autocast, AVX-512 and AVX2.
    stats: Sizes = ((rows, "f32"),)
    normalized: Sizes
    copy_normalized: Sizes
    if a.affine:
        normalized, copy_normalized = ((numel, "act"),), ((numel, "f32"),)
        eval_half: Sizes = ((2 * numel, "f32"), (numel, "act"))
        frozen_half: Sizes = ((numel, "f32"), (numel, "act"))
    else:
        normalized = copy_normalized = frozen_half = ()
        eval_half = ((numel, "f32"), (numel, "act"), (2 * rows, "f32"))
    half = Mem(
        extra=((numel, "f32"), *stats, *copy_normalized),
        workspace=((numel, "f32"),),
        eval_workspace=eval_half,
        backward=(((4 if a.affine else 5) * numel, "f32"), (-numel, "act")),
        backward_frozen=frozen_half,
        releases_grad=True,
    )
    mem = Mem(
        saves=("in0",),
        extra=(*stats, *normalized),
        eval_workspace=(*stats, *normalized) if a.affine else ((2 * rows, "f32"),),
        backward=(((3 if a.affine else 4) * numel, "act"),),
        backward_frozen=normalized,
        releases_grad=True,
        largest_param=n,
        cpu_kernels=True,
        half=half,
    )
    params = n if a.affine else Const(0)
    return OpInfo([x], params=params, ops=4 * _numel(x), saved=3 * _numel(x) + 2 * rows, mem=mem)


@_rmsnorm.torch
def _rmsnorm_torch(a: Attrs, shapes: list[tuple[int, ...]]) -> Any:
    import torch.nn as nn

    return nn.RMSNorm(shapes[0][len(shapes[0]) - a.dims :], elementwise_affine=a.affine)


# ------------------------------------------------------------------------------------------------
# elementwise


def _activation(name: str, saves: str) -> None:
    def infer(ins: list[Shape], a: Attrs) -> OpInfo:
        (x,) = ins
        mem = Mem(saves=({"in": "in0", "out": "out"}[saves],))
        return OpInfo([x], ops=_numel(x), saved=_numel(x) if saves else Const(0), mem=mem)

    def build(a: Attrs, shapes: list[tuple[int, ...]]) -> Any:
        import torch.nn as nn

        cls = {
            "relu": nn.ReLU,
            "gelu": nn.GELU,
            "silu": nn.SiLU,
            "sigmoid": nn.Sigmoid,
            "tanh": nn.Tanh,
            "hardswish": nn.Hardswish,
            "hardsigmoid": nn.Hardsigmoid,
            "relu6": nn.ReLU6,
            "leaky_relu": nn.LeakyReLU,
            "elu": nn.ELU,
            "mish": nn.Mish,
        }[name]
        return cls()

    op(name)(infer).torch(build)


for _name, _saves in (
    ("relu", "out"),
    ("gelu", "in"),
    ("silu", "in"),
    ("sigmoid", "out"),
    ("tanh", "out"),
    ("hardswish", "in"),
    ("hardsigmoid", "in"),
    ("relu6", "in"),
    ("leaky_relu", "in"),
    ("elu", "in"),
    ("mish", "in"),
):
    _activation(_name, _saves)


@op("softmax", autocast=Autocast("keep", "fp32"))
def _softmax(ins: list[Shape], a: Attrs) -> OpInfo:
    (x,) = ins
    return OpInfo([x], ops=3 * _numel(x), saved=_numel(x), mem=Mem(saves=("out",)))


@_softmax.torch
def _softmax_torch(a: Attrs, shapes: list[tuple[int, ...]]) -> Any:
    import torch.nn as nn

    return nn.Softmax(dim=a.dim)


@op("dropout")
def _dropout(ins: list[Shape], a: Attrs) -> OpInfo:
    (x,) = ins
    # training keeps a mask for backward; eval is the identity. The CPU runs ``aten::dropout``'s
    # unfused path (``empty_like(input).bernoulli_(1 - p).div_(1 - p)``, then ``input * noise``): a mask
    # of the input's dtype (allocator traces: 4 bytes per element in fp32); CUDA's fused
    # ``native_dropout`` keeps a bool mask (``aten/src/ATen/native/Dropout.cpp``); with ``p == 0`` both
    # return the input itself
    if isinstance(a.p, float) and a.p == 0:
        return OpInfo([x], mem=Mem(view=True))
    mem = Mem(extra=((_numel(x), "mask"),), eval_view=True)
    return OpInfo([x], ops=_numel(x), saved=_numel(x), mem=mem)


@_dropout.torch
def _dropout_torch(a: Attrs, shapes: list[tuple[int, ...]]) -> Any:
    import torch.nn as nn

    return nn.Dropout(a.p)


@op("zero")
def _zero(ins: list[Shape], a: Attrs) -> OpInfo:
    """``x * 0`` (a NAS "none" edge): same shape, no parameters, no counted FLOPs."""
    (x,) = ins
    return OpInfo([x], ops=_numel(x))


@_zero.torch
def _zero_torch(a: Attrs, shapes: list[tuple[int, ...]]) -> Any:
    return _fn_module(lambda x: x.mul(0.0))


def _binary(name: str) -> None:
    def infer(ins: list[Shape], a: Attrs) -> OpInfo:
        x, y = ins
        out, ok = _broadcast(x, y)
        saved = _numel(x) + _numel(y) if name == "mul" else Const(0)
        # mul's backward computes a broadcast operand's gradient at the output's size, then sums it
        # down (``MulBackward0``: ``grad * other``, ``sum_to_size``; allocator traces of an SE block)
        n = _numel(out)
        wide = maximum(where(_numel(x) == n, 0, n), where(_numel(y) == n, 0, n)) if name == "mul" else None
        mem = Mem(
            saves=("in0", "in1") if name == "mul" else (),
            backward=((wide, "act"),) if wide is not None else (),
            grad_alias=name == "add",
        )
        return OpInfo([out], [Check("shapes broadcast", ok)], ops=_numel(out), saved=saved, mem=mem)

    def build(a: Attrs, shapes: list[tuple[int, ...]]) -> Any:
        import torch

        fns: dict[str, Callable[..., Any]] = {"add": torch.add, "sub": torch.sub, "mul": torch.mul}
        return _fn_module(fns[name])

    op(name, arity=2)(infer).torch(build)


_binary("add")
_binary("sub")  # its backward negates the gradient of the subtrahend: no gradient aliasing
_binary("mul")


@op("shift")
def _shift(ins: list[Shape], a: Attrs) -> OpInfo:
    """Add a constant: ``x + value``, or ``value - x`` with ``negate``."""
    (x,) = ins
    return OpInfo([x], ops=_numel(x))


@_shift.torch
def _shift_torch(a: Attrs, shapes: list[tuple[int, ...]]) -> Any:
    return _fn_module(lambda x: a.value - x if a.negate else x + a.value)


@op("scale")
def _scale(ins: list[Shape], a: Attrs) -> OpInfo:
    """Multiply by a constant ``factor``."""
    (x,) = ins
    return OpInfo([x], ops=_numel(x))


@_scale.torch
def _scale_torch(a: Attrs, shapes: list[tuple[int, ...]]) -> Any:
    return _fn_module(lambda x: x * a.factor)


@op("mean")
def _mean(ins: list[Shape], a: Attrs) -> OpInfo:
    """Mean over dimension ``dim`` (removed)."""
    (x,) = ins
    y = tuple(d for i, d in enumerate(x) if i != a.dim)
    # a 16-bit input on the CPU: ``mean_out`` sums an fp32 copy of the input into an fp32 result, then
    # casts it back (``aten/src/ATen/native/ReduceOps.cpp``; allocator traces, torch 2.13, bfloat16
    # autocast, every dim, keepdim or not, AVX-512 and AVX2); ``sum`` accumulates without a copy
    half = Mem(workspace=((_numel(x), "f32"), (_numel(y), "f32")))
    return OpInfo([y], ops=_numel(x), mem=Mem(half=half))


@_mean.torch
def _mean_torch(a: Attrs, shapes: list[tuple[int, ...]]) -> Any:
    return _fn_module(lambda x: x.mean(dim=a.dim))


@op("sum")
def _sum(ins: list[Shape], a: Attrs) -> OpInfo:
    """Sum over dimension ``dim`` (removed)."""
    (x,) = ins
    y = tuple(d for i, d in enumerate(x) if i != a.dim)
    return OpInfo([y], ops=_numel(x))


@_sum.torch
def _sum_torch(a: Attrs, shapes: list[tuple[int, ...]]) -> Any:
    return _fn_module(lambda x: x.sum(dim=a.dim))


# ------------------------------------------------------------------------------------------------
# pooling


def _pool_infer(kind: str, nd: int) -> InferFn:
    def infer(ins: list[Shape], a: Attrs) -> OpInfo:
        (x,) = ins
        sp = x[2:]
        k, s, p = a.kernel_size, a.stride, a.padding
        d = a.dilation if kind == "max" else (Const(1),) * nd
        if a.get("ceil_mode"):  # PyTorch's pooling_output_shape: round up, but start inside the input
            up = tuple(
                lin(lin(sp[i] + 2 * p[i] - d[i] * (k[i] - 1) - 1 + s[i] - 1) // s[i] + 1) for i in range(nd)
            )
            out = tuple(where((o - 1) * s[i] >= sp[i] + p[i], o - 1, o) for i, o in enumerate(up))
        else:
            out = tuple(conv_out(sp[i], k[i], s[i], p[i], d[i]) for i in range(nd))
        checks = [
            _ge1("kernel and stride are positive", *k, *s, *d),
            Check(
                "padding at most half the kernel",
                all_((p[i] >= 0) & (2 * p[i] <= d[i] * (k[i] - 1) + 1) for i in range(nd)),
            ),
            _ge1("output size is positive", *out),
        ]
        y = (x[0], x[1], *out)
        saved = _numel(x) + (2 * _numel(y) if kind == "max" else 0)  # input (+ int64 indices)
        mem = Mem(saves=("in0",), extra=((_numel(y), "i64"),) if kind == "max" else ())
        return OpInfo([y], checks, ops=_numel(y) * prod(k), saved=saved, mem=mem)

    return infer


def _pool_torch(kind: str, nd: int) -> TorchFn:
    def build(a: Attrs, shapes: list[tuple[int, ...]]) -> Any:
        import torch.nn as nn

        ceil = bool(a.get("ceil_mode"))
        if kind == "max":
            mcls: Any = {1: nn.MaxPool1d, 2: nn.MaxPool2d}[nd]
            return mcls(
                a.kernel_size, stride=a.stride, padding=a.padding, dilation=a.dilation, ceil_mode=ceil
            )
        acls: Any = {1: nn.AvgPool1d, 2: nn.AvgPool2d}[nd]
        return acls(
            a.kernel_size,
            stride=a.stride,
            padding=a.padding,
            count_include_pad=a.count_include_pad,
            ceil_mode=ceil,
        )

    return build


def _adaptive_infer(kind: str, nd: int) -> InferFn:
    def infer(ins: list[Shape], a: Attrs) -> OpInfo:
        (x,) = ins
        y = (x[0], x[1], *a.output_size)
        checks = [_ge1("output size is positive", *a.output_size)]
        saved = _numel(x) + 2 * _numel(y) if kind == "max" else Const(0)
        if kind == "max":
            mem = Mem(saves=("in0",), extra=((_numel(y), "i64"),))
        else:  # output size 1 runs as a mean (nothing saved); other sizes keep the input
            ones = all(o.is_const and o.value == 1 for o in a.output_size)
            mem = Mem(saves=() if ones else ("in0",))
        return OpInfo([y], checks, ops=_numel(x), saved=saved, mem=mem)

    return infer


def _adaptive_torch(kind: str, nd: int) -> TorchFn:
    def build(a: Attrs, shapes: list[tuple[int, ...]]) -> Any:
        import torch.nn as nn

        cls = {
            ("avg", 1): nn.AdaptiveAvgPool1d,
            ("avg", 2): nn.AdaptiveAvgPool2d,
            ("max", 1): nn.AdaptiveMaxPool1d,
            ("max", 2): nn.AdaptiveMaxPool2d,
        }[(kind, nd)]
        return cls(a.output_size)

    return build


for _kind in ("max", "avg"):
    for _nd in (1, 2):
        op(f"{_kind}pool{_nd}d")(_pool_infer(_kind, _nd)).torch(_pool_torch(_kind, _nd))
        op(f"adaptive_{_kind}pool{_nd}d")(_adaptive_infer(_kind, _nd)).torch(_adaptive_torch(_kind, _nd))


# ------------------------------------------------------------------------------------------------
# layout


@op("concat", arity=None, autocast=Autocast("promote", "keep"))
def _concat(ins: list[Shape], a: Attrs) -> OpInfo:
    dim = a.dim
    first = ins[0]
    checks = [
        Check(
            f"other dimensions match (input {j})",
            all_(eq(p, q) for i, (p, q) in enumerate(zip(first, s)) if i != dim),
        )
        for j, s in enumerate(ins[1:], start=1)
    ]
    out = tuple(
        lin(sum((s[dim] for s in ins[1:]), first[dim])) if i == dim else d for i, d in enumerate(first)
    )
    return OpInfo([out], checks)


@_concat.torch
def _concat_torch(a: Attrs, shapes: list[tuple[int, ...]]) -> Any:
    import torch

    return _fn_module(lambda *xs: torch.cat(xs, dim=a.dim))


@op("flatten")
def _flatten(ins: list[Shape], a: Attrs) -> OpInfo:
    (x,) = ins
    lo, hi = a.start_dim, a.end_dim
    return OpInfo([(*x[:lo], prod(x[lo : hi + 1]), *x[hi + 1 :])], io=Const(0), mem=Mem(view=True))


@_flatten.torch
def _flatten_torch(a: Attrs, shapes: list[tuple[int, ...]]) -> Any:
    import torch.nn as nn

    return nn.Flatten(a.start_dim, a.end_dim)


@op("reshape")
def _reshape(ins: list[Shape], a: Attrs) -> OpInfo:
    """Reshape to ``shape``: entries >= 1 and at most one constant ``-1`` (inferred)."""
    (x,) = ins
    target = list(a.shape)
    known = prod([d for d in target if not (d.is_const and d.value == -1)])
    free = [i for i, d in enumerate(target) if d.is_const and d.value == -1]
    checks = [_ge1("target dimensions are positive", *(d for i, d in enumerate(target) if i not in free))]
    if free:
        target[free[0]] = _numel(x) // known
        checks.append(
            Check("element count divisible", (known >= 1) & (_numel(x) - _numel(x) // known * known == 0))
        )
    else:
        checks.append(Check("element count preserved", _numel(x) == known))
    return OpInfo([tuple(target)], checks, io=Const(0), mem=Mem(view=True))


@_reshape.torch
def _reshape_torch(a: Attrs, shapes: list[tuple[int, ...]]) -> Any:
    return _fn_module(lambda x: x.reshape(tuple(a.shape)))


@op("permute")
def _permute(ins: list[Shape], a: Attrs) -> OpInfo:
    (x,) = ins
    y = tuple(x[i] for i in a.dims)
    return OpInfo([y], io=2 * _numel(x))


@_permute.torch
def _permute_torch(a: Attrs, shapes: list[tuple[int, ...]]) -> Any:
    return _fn_module(lambda x: x.permute(*a.dims).contiguous())


@op("expand")
def _expand(ins: list[Shape], a: Attrs) -> OpInfo:
    """``x.expand(*shape)``: a view repeating size-1 dimensions (``-1`` keeps a dimension; new leading
    dimensions may be added), e.g. a learned CLS token expanded over the batch."""
    (x,) = ins
    lead = len(a.shape) - len(x)
    y = tuple(
        x[i - lead] if (d.is_const and d.value == -1) else d for i, d in enumerate(a.shape)
    )  # fmt: skip
    fits = all_(eq(x[i - lead], y[i]) | (x[i - lead] == 1) for i in range(lead, len(y)))
    checks = [
        Check("sizes match or expand a size-1 dimension", fits),
        _ge1("target sizes are positive", *y[:lead]),
    ]
    return OpInfo([y], checks, io=Const(0), mem=Mem(view=True))


@_expand.torch
def _expand_torch(a: Attrs, shapes: list[tuple[int, ...]]) -> Any:
    return _fn_module(lambda x: x.expand(*a.shape))


@op("select_index")
def _select_index(ins: list[Shape], a: Attrs) -> OpInfo:
    """``x.select(dim, index)`` / ``x[:, index]``: a view without dimension ``dim`` (e.g. a CLS token)."""
    (x,) = ins
    n, i = x[a.dim], a.index
    checks = [Check("index within the dimension", (i < n) & (i >= -n))]
    y = tuple(d for j, d in enumerate(x) if j != a.dim)
    return OpInfo([y], checks, io=Const(0), mem=Mem(view=True))


@_select_index.torch
def _select_index_torch(a: Attrs, shapes: list[tuple[int, ...]]) -> Any:
    return _fn_module(lambda x: x.select(a.dim, a.index))


@op("narrow")
def _narrow(ins: list[Shape], a: Attrs) -> OpInfo:
    """``x.narrow(dim, start, length)``: a view of ``length`` entries of ``dim`` from ``start``
    (negative: from the end), e.g. the pieces of ``chunk`` and ``split``; with ``step`` (default 1)
    every ``step``-th of them (``x[:, 0::2]``: ``ceildiv(length, step)`` entries)."""
    (x,) = ins
    n, start, length = x[a.dim], a.start, a.length
    first = where(start < 0, start + n, start)  # a negative start counts from the end
    within = (start >= -n) & (length >= 1) & (first + length <= n)
    checks = [Check("slice within the dimension", within)]
    step = a.get("step", 1)
    taken = length if step == 1 else ceildiv(length, step)
    y = tuple(taken if j == a.dim else d for j, d in enumerate(x))
    if step == 1:
        return OpInfo([y], checks, io=Const(0), mem=Mem(view=True))
    # a strided view: the ops after it (flatten, view, most kernels) copy it to a contiguous tensor, so
    # it is counted as that copy (an overestimate where the consumer reads strides)
    return OpInfo([y], checks, io=2 * prod(y))


@_narrow.torch
def _narrow_torch(a: Attrs, shapes: list[tuple[int, ...]]) -> Any:
    step = a.get("step", 1)
    if step == 1:
        return _fn_module(lambda x: x.narrow(a.dim, a.start, a.length))
    lead = (slice(None),) * a.dim
    return _fn_module(lambda x: x[(*lead, slice(a.start, a.start + a.length, step))])


@op("roll")
def _roll(ins: list[Shape], a: Attrs) -> OpInfo:
    """``torch.roll(x, shifts, dims)`` (Swin's cyclic shift): a new tensor of ``x``'s shape; it keeps
    nothing for backward (its backward rolls the gradient back). ATen rolls one dimension at a time,
    each result alive until the last is made (``roll_common``): ``len(dims) - 1`` input-sized
    intermediates in the forward and in the backward (allocator traces, torch 2.13); ``dims=()``: the
    flattened tensor rolled, one shift. ``shifts``: one per dimension in ``dims``, any integers (they
    do not change a cost)."""
    (x,) = ins
    steps = (max(len(a.dims) - 1, 0) * _numel(x), "act")
    return OpInfo([x], io=2 * _numel(x), mem=Mem(workspace=(steps,), backward=(steps,)))


@_roll.torch
def _roll_torch(a: Attrs, shapes: list[tuple[int, ...]]) -> Any:
    import torch

    if not a.dims:
        return _fn_module(lambda x: torch.roll(x, a.shifts[0]))
    return _fn_module(lambda x: torch.roll(x, tuple(a.shifts), tuple(a.dims)))


PAD_MODES = ("constant", "reflect", "replicate", "circular")


@op("pad")
def _pad(ins: list[Shape], a: Attrs) -> OpInfo:
    """``F.pad(x, pads, mode)`` with zeros (``constant``) or ``reflect``/``replicate``/``circular``
    padding, ``pads`` in F.pad's order (last dimension first, (low, high) each); what a ConvNd with
    ``padding_mode`` other than zeros runs before its convolution. No FLOPs (FlopCounterMode counts
    none); reflect and replicate keep their input for backward (``derivatives.yaml``: the backward
    reads ``self``), constant and circular nothing."""
    (x,) = ins
    n = len(a.pads) // 2
    dims = list(range(len(x) - 1, len(x) - 1 - n, -1))  # the padded dimensions, as F.pad pairs them
    lo_hi = [(a.pads[2 * i], a.pads[2 * i + 1]) for i in range(n)]
    out = list(x)
    for d, (lo, hi) in zip(dims, lo_hi):
        out[d] = lin(x[d] + lo + hi)
    checks = [Check("padding is non-negative", all_(p >= 0 for p in a.pads))]
    if a.mode == "reflect":
        checks.append(
            Check(
                "reflect padding smaller than the padded size",
                all_((lo < x[d]) & (hi < x[d]) for d, (lo, hi) in zip(dims, lo_hi)),
            )
        )
    elif a.mode == "circular":
        checks.append(
            Check(
                "circular padding at most the padded size",
                all_((lo <= x[d]) & (hi <= x[d]) for d, (lo, hi) in zip(dims, lo_hi)),
            )
        )
    saves = ("in0",) if a.mode in ("reflect", "replicate") else ()
    return OpInfo([tuple(out)], checks, mem=Mem(saves=saves))


@_pad.torch
def _pad_torch(a: Attrs, shapes: list[tuple[int, ...]]) -> Any:
    import torch.nn.functional as F

    return _fn_module(lambda x: F.pad(x, tuple(a.pads), mode=a.mode))


@op("upsample")
def _upsample(ins: list[Shape], a: Attrs) -> OpInfo:
    """``nn.Upsample`` / ``F.interpolate`` to spatial ``size`` (``mode``: nearest, linear, bilinear,
    bicubic); no parameters, 0 FLOPs as FlopCounterMode counts; nothing kept for backward."""
    (x,) = ins
    y = (x[0], x[1], *a.size)
    per = {"nearest": 1, "linear": 4, "bilinear": 8, "bicubic": 32}[a.mode]
    return OpInfo([y], [_ge1("output size is positive", *a.size)], ops=per * _numel(y))


@_upsample.torch
def _upsample_torch(a: Attrs, shapes: list[tuple[int, ...]]) -> Any:
    import torch.nn as nn

    return nn.Upsample(size=tuple(a.size), mode=a.mode, align_corners=a.align_corners)


# ------------------------------------------------------------------------------------------------
# PyTorch's own operators (``dnnsat.torch.from_torch``'s ATen fallback)


@dataclass(frozen=True)
class AtenArg:
    """A placeholder in the argument template of an ``aten`` node: ``kind`` ``"in"`` (input tensor
    ``index``), ``"size"`` (``sizes[index]``) or ``"const"`` (a constant tensor of dtype ``dtype`` whose
    shape is ``sizes[index : index + ndim]``, zeros when materialized)."""

    kind: str
    index: int
    dtype: str = ""
    ndim: int = 0


@op("aten", arity=None)
def _aten(ins: list[Shape], a: Attrs) -> OpInfo:
    """Output ``part`` of one ATen operator ``aten`` (``"aten.native_layer_norm.default"``) as
    ``from_torch`` traced it: ``shape`` and ``macs`` (half the FLOPs ``FlopCounterMode`` counts, from
    its own formulas) were computed from PyTorch's symbolic meta kernel. Memory, conservatively:
    ``view`` (a view or an in-place op) allocates nothing; otherwise the output is allocated and, when
    training, the inputs ``saves`` names (``"in<k>"``, ``"out"``) are kept for backward; ``buffers``:
    elements of the constant tensors it reads (running statistics); ``workspace``: elements of the
    transient copies its kernel may make in the forward and again in the backward (a convolution's
    reorders). ``ops``: one per output element."""
    y = tuple(a.shape)
    checks = [_ge1("dimensions are positive", *y)]
    if a.view:
        return OpInfo([y], checks, macs=a.macs, io=Const(0), mem=Mem(view=True))
    kept = [_numel(y) if s == "out" else _numel(ins[int(s[2:])]) for s in a.saves]
    mem = Mem(
        saves=tuple(a.saves),
        buffers=((a.buffers, "param"),) if not _is_zero(a.buffers) else (),
        workspace=((a.workspace, "act"),) if not _is_zero(a.workspace) else (),
        backward=((a.workspace, "act"),) if not _is_zero(a.workspace) else (),
    )
    io = sum_(_numel(x) for x in ins) + _numel(y)
    return OpInfo([y], checks, macs=a.macs, ops=_numel(y), saved=sum_(kept), io=io, mem=mem)


def _is_zero(e: Expr) -> bool:
    return e.is_const and e.value == 0


@_aten.torch
def _aten_torch(a: Attrs, shapes: list[tuple[int, ...]]) -> Any:
    import torch
    from torch.utils._pytree import tree_leaves

    ns, name, overload = a.aten.split(".")
    fn = getattr(getattr(getattr(torch.ops, ns), name), overload)

    def run(*xs: Any) -> Any:
        def value(v: Any) -> Any:
            if isinstance(v, tuple):
                return tuple(value(u) for u in v)
            if not isinstance(v, AtenArg):
                return v
            if v.kind == "in":
                return xs[v.index]
            if v.kind == "size":
                return a.sizes[v.index]
            shape = tuple(a.sizes[v.index : v.index + v.ndim])
            return torch.zeros(shape, dtype=getattr(torch, v.dtype), device=xs[0].device if xs else None)

        args, kwargs = a.args
        out = fn(*value(args), **{k: value(v) for k, v in kwargs})
        return [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)][a.part]

    return _fn_module(run)


def broadcast_shape(x: Shape, y: Shape) -> Shape:
    return _broadcast(x, y)[0]


def max_dims(x: Shape, y: Shape) -> Shape:
    return tuple(maximum(p, q) for p, q in zip(x, y))
