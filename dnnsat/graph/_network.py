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
import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..expr import (
    Const,
    Expr,
    ExprLike,
    all_,
    any_,
    as_expr,
    ceildiv,
    compile_scalar,
    compile_vectorized,
    interval,
    sum_,
    where,
)
from ._catalog import CATALOG, PAD_MODES, Attrs, Check, OpInfo, Shape, einsum_subscripts, eq, lin, prod

__all__ = ["Network", "Tensor", "Node", "GraphError", "encode_config"]

log = logging.getLogger("dnnsat.graph")


class GraphError(ValueError):
    """A network that cannot be built: the message names the operator, its position and the rule."""


@dataclass(frozen=True, eq=False)
class Tensor:
    """A symbolic tensor: ``shape`` is a tuple of integer expressions."""

    net: Network
    index: int
    shape: Shape
    dtype: str = "float32"

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> Expr:
        return prod(self.shape)

    def __add__(self, other: Tensor) -> Tensor:
        return self.net.add(self, other)

    def __mul__(self, other: Tensor) -> Tensor:
        return self.net.mul(self, other)

    def __repr__(self) -> str:
        return f"Tensor(#{self.index}, shape=({', '.join(str(d) for d in self.shape)}))"


@dataclass(eq=False)
class Node:
    """One operator application (or a ``select`` merging branches) in execution order."""

    index: int
    op: str
    label: str  # "conv2d#3": op name and position, used in constraint names
    inputs: tuple[int, ...]
    output: int
    attrs: Attrs
    gate: Expr
    info: OpInfo | None  # None for "select"
    cases: tuple[tuple[Expr, int], ...] = ()  # select: (condition, tensor index), first true wins
    same_shape: bool = False  # select made by repeat: active body output must keep the shape


@dataclass
class _Built:
    """Cached concrete evaluator for a network (used by the PyTorch bridge)."""

    fn: Callable[[Mapping[str, Any]], tuple[Any, ...]]
    layout: list[tuple[str, Any]] = field(default_factory=list)


def _attrs_key(value: Any) -> Any:
    """A hashable key of attribute values (expressions by identity: they are interned)."""
    if isinstance(value, Expr):
        return ("e", id(value))
    if isinstance(value, tuple | list):
        return ("t", tuple(_attrs_key(v) for v in value))
    if isinstance(value, Mapping):
        return ("d", tuple((k, _attrs_key(v)) for k, v in sorted(value.items())))
    return ("v", type(value).__name__, value)


def _int_expr(value: Any, what: str, where_: str, low: int | None = None) -> Expr:
    """``value`` as an integer expression; a plain int below ``low`` is a :class:`GraphError` at once."""
    try:
        e = as_expr(value)
    except TypeError:
        raise GraphError(f"{where_}: {what} must be an int or an integer expression, got {value!r}") from None
    if e.sort != "int":
        raise GraphError(f"{where_}: {what} must be an integer expression, got {e} of sort {e.sort}")
    if low is not None and not isinstance(value, Expr) and e.value < low:
        raise GraphError(f"{where_}: {what} must be >= {low}, got {value!r}")
    return e


def _tuple(value: Any, n: int, what: str, where_: str, low: int | None = None) -> tuple[Expr, ...]:
    """``n`` integer expressions from one value (repeated) or a tuple/list of ``n`` (as :func:`_int_expr`)."""
    items = list(value) if isinstance(value, tuple | list) else [value] * n
    if len(items) != n:
        raise GraphError(f"{where_}: {what} needs {n} values, got {len(items)}")
    return tuple(_int_expr(v, what, where_, low) for v in items)


FLAG = (False, True)  # the values of a boolean hyperparameter (``bias``, ``causal``, ``bidirectional``)


def conv_pads(padding: Any, kernel: Sequence[Expr], dilation: Sequence[Expr]) -> tuple[Expr, ...]:
    """The F.pad amounts (last dimension first) a ConvNd with a ``padding_mode`` applies before its
    convolution (``_reversed_padding_repeated_twice``): ``padding`` per dimension on both sides;
    ``"same"``: ``dilation * (kernel - 1)`` in all, the odd one on the high side; ``"valid"``: none."""
    pads: list[Expr] = []
    for i in reversed(range(len(kernel))):
        if padding == "same":
            total = lin(dilation[i] * (kernel[i] - 1))
            pads += [total // 2, lin(total - total // 2)]
        else:
            p = Const(0) if padding == "valid" else as_expr(padding[i])
            pads += [p, p]
    return tuple(pads)


def _axis(dim: Any, ndim: int, what: str, where_: str) -> int:
    """A dimension index of a ``ndim``-D tensor, normalised to ``0 <= dim < ndim`` (as PyTorch checks it)."""
    if isinstance(dim, bool) or not isinstance(dim, numbers.Integral) or not -ndim <= int(dim) < ndim:
        raise GraphError(
            f"{where_}: {what} must be an int in [{-ndim}, {ndim - 1}] for a {ndim}-D input, got {dim!r}"
        )
    return int(dim) % ndim


class Network:
    """Builder of a symbolic network. Methods add operators and return the output :class:`Tensor`.

    >>> net = Network()
    >>> x = net.input((v.batch_size, 3, v.res, v.res))
    >>> x = net.relu(net.batchnorm(net.conv2d(x, v.width, v.kernel, padding="same")))
    """

    def __init__(self, name: str = "network", infer_cache: dict[Any, OpInfo] | None = None) -> None:
        self.name = name
        # ``infer_cache``: OpInfo by (op, input shapes, attributes), shared by networks built from the
        # same expressions (``dnnsat.torch.from_torch`` builds one per control-flow region)
        self._infer_cache = infer_cache
        self.nodes: list[Node] = []
        self.tensors: list[Tensor] = []
        self.producer: list[int] = []  # tensor index -> node index
        self.inputs: list[Tensor] = []
        self.outputs: list[Tensor] = []
        self.extra_checks: list[tuple[str, Check]] = []  # (label, check) not tied to a catalog op
        self.repeat_blocks: list[_RepeatBlock] = []  # shape rules of repeat bodies, in build order
        # (tensor index, node index, condition): the model's Python code holds the tensor (a local
        # variable of a traced ``forward``) until that node has run, where the condition holds; the
        # memory model counts it as a use there (``dnnsat.torch.from_torch`` fills it, DSL networks not)
        self.held: list[tuple[int, int, Expr]] = []
        # ``permute`` ops are a torch model's transposes, strided views (``dnnsat.torch.from_torch``), not
        # the contiguous copies a DSL network's make
        self.permute_views = False
        self._gate: Expr = Const(True)
        self._counts: dict[str, int] = {}
        self._built: _Built | None = None
        self.check_sources: dict[str, list[str]] = {}  # constraint name -> ops it covers (see checks())

    # -- core -------------------------------------------------------------------------------------
    @property
    def last(self) -> Tensor:
        """The most recently produced tensor."""
        if not self.tensors:
            raise GraphError("the network has no tensor yet: start with net.input(shape)")
        return self.tensors[-1]

    def _new_tensor(self, shape: Shape, dtype: str, node_index: int) -> Tensor:
        t = Tensor(self, len(self.tensors), tuple(shape), dtype)
        self.tensors.append(t)
        self.producer.append(node_index)
        return t

    def _label(self, op: str, name: str | None) -> str:
        return name or f"{op}#{len(self.nodes)}"

    def _check_tensor(self, x: Any, where_: str) -> Tensor:
        if not isinstance(x, Tensor):
            raise GraphError(f"{where_}: expected a Tensor of this network, got {type(x).__name__}")
        if x.net is not self:
            raise GraphError(f"{where_}: the tensor belongs to another Network")
        return x

    def apply(self, op: str, inputs: Sequence[Tensor], name: str | None = None, **attrs: Any) -> Tensor:
        """Apply catalog operator ``op`` to ``inputs`` with already normalised ``attrs``."""
        if op not in CATALOG:
            raise GraphError(f"unknown operator {op!r}; the catalog has {sorted(CATALOG)}")
        entry = CATALOG[op]
        label = self._label(op, name)
        if entry.arity is not None and len(inputs) != entry.arity:
            raise GraphError(f"{label}: takes {entry.arity} input tensor(s), got {len(inputs)}")
        ins = [self._check_tensor(x, label) for x in inputs]
        a = Attrs(attrs)
        cache = self._infer_cache
        key = (
            (op, tuple(tuple(map(id, x.shape)) for x in ins), _attrs_key(attrs))
            if cache is not None
            else None
        )
        info = cache.get(key) if cache is not None else None
        if info is None:
            try:
                info = entry.infer([x.shape for x in ins], a)
            except GraphError:
                raise
            except (IndexError, KeyError, AttributeError, TypeError, ValueError) as err:
                raise GraphError(
                    f"{label}: cannot apply to inputs of shapes {[x.shape for x in ins]}: {err}"
                ) from err
            if cache is not None:
                cache[key] = info
        index = len(self.nodes)
        dtype = "int64" if op == "input" and attrs.get("dtype") == "int64" else "float32"
        out = self._new_tensor(info.outputs[0], dtype, index)
        node = Node(index, op, label, tuple(x.index for x in ins), out.index, a, self._gate, info)
        self.nodes.append(node)
        self._built = None
        for check in info.checks:
            self._static_check(label, check, self._gate)
        return out

    def _static_check(self, label: str, check: Check, gate: Expr) -> None:
        if check.expr.is_const and not check.expr.value and gate.is_const and gate.value:
            raise GraphError(f"{label}: rule '{check.rule}' can never hold")

    # -- sources ----------------------------------------------------------------------------------
    def input(self, shape: Sequence[ExprLike], dtype: str = "float32", name: str | None = None) -> Tensor:
        """A network input of the given shape (``dtype`` ``"float32"`` or ``"int64"`` for token ids)."""
        if dtype not in ("float32", "int64"):
            raise GraphError(f"input: dtype must be 'float32' or 'int64', got {dtype!r}")
        shp = tuple(_int_expr(d, "shape", self._label("input", name), low=1) for d in shape)
        t = self.apply("input", [], name=name, shape=shp, dtype=dtype)
        self.inputs.append(t)
        return t

    def parameter(self, shape: Sequence[ExprLike], name: str | None = None) -> Tensor:
        """A learned tensor of the given shape (counted in params)."""
        where_ = self._label("parameter", name)
        shp = tuple(_int_expr(d, "shape", where_, low=1) for d in shape)
        return self.apply("parameter", [], name=name, shape=shp)

    def output(self, *tensors: Tensor) -> Network:
        """Mark the network outputs; returns the network (so ``build`` can ``return net.output(x)``)."""
        self.outputs = [self._check_tensor(t, "output") for t in tensors]
        return self

    # -- convolutions -----------------------------------------------------------------------------
    def _conv(
        self,
        nd: int,
        x: Tensor,
        out_channels: ExprLike,
        kernel_size: Any,
        stride: Any,
        padding: Any,
        dilation: Any,
        groups: ExprLike,
        bias: bool,
        name: str | None,
        padding_mode: str = "zeros",
    ) -> Tensor:
        op = f"conv{nd}d"
        where_ = self._label(op, name)
        x = self._check_tensor(x, where_)
        if x.ndim != nd + 2:
            raise GraphError(
                f"{where_}: expects a {nd + 2}-D input (batch, channels, spatial...), got {x.ndim}-D"
            )
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise GraphError(
                    f"{where_}: padding must be an int, a tuple, 'same' or 'valid', got {padding!r}"
                )
            pad: Any = padding
        else:
            pad = _tuple(padding, nd, "padding", where_, low=0)
        if padding_mode != "zeros":  # as nn.ConvNd: F.pad(x, ..., mode) first, then no padding
            if padding_mode not in PAD_MODES[1:]:
                raise GraphError(
                    f"{where_}: padding_mode must be 'zeros', 'reflect', 'replicate' or 'circular', got "
                    f"{padding_mode!r}"
                )
            if pad == "same" and not all(
                e.is_const and e.value == 1 for e in _tuple(stride, nd, "stride", where_)
            ):
                raise GraphError(f"{where_}: padding='same' needs stride 1 (a plain 1 with a padding_mode)")
            k, d = (
                _tuple(kernel_size, nd, "kernel_size", where_, low=1),
                _tuple(dilation, nd, "dilation", where_, low=1),
            )
            x = self.pad(x, conv_pads(pad, k, d), padding_mode)
            pad = tuple(Const(0) for _ in range(nd))
        sizes = (out_channels, kernel_size, stride, dilation, groups)
        return self._conv_like(op, nd, x, where_, sizes, {"padding": pad}, bias, name)

    def _conv_like(
        self,
        op: str,
        nd: int,
        x: Tensor,
        where_: str,
        sizes: tuple[Any, Any, Any, Any, Any],
        pads: dict[str, Any],
        bias: Any,
        name: str | None,
    ) -> Tensor:
        """A convolution or transposed convolution ``op``: ``sizes`` = (out_channels, kernel_size,
        stride, dilation, groups) checked here, ``pads`` its checked padding attributes; ``bias`` may be
        a hyperparameter (:meth:`_per_value`)."""
        out_channels, kernel_size, stride, dilation, groups = sizes
        attrs = dict(
            out_channels=_int_expr(out_channels, "out_channels", where_, low=1),
            kernel_size=_tuple(kernel_size, nd, "kernel_size", where_, low=1),
            stride=_tuple(stride, nd, "stride", where_, low=1),
            **pads,
            dilation=_tuple(dilation, nd, "dilation", where_, low=1),
            groups=_int_expr(groups, "groups", where_, low=1),
        )
        return self._per_value(
            {"bias": (bias, FLAG)}, lambda bias: self.apply(op, [x], name=name, bias=bool(bias), **attrs)
        )

    def conv1d(
        self,
        x: Tensor,
        out_channels: ExprLike,
        kernel_size: Any,
        stride: Any = 1,
        padding: Any = 0,
        dilation: Any = 1,
        groups: ExprLike = 1,
        bias: bool = True,
        name: str | None = None,
        padding_mode: str = "zeros",
    ) -> Tensor:
        """``nn.Conv1d`` on ``(B, C, L)``; ``padding`` may be ``"same"`` (stride 1) or ``"valid"``;
        ``padding_mode`` ``"zeros"``, ``"reflect"``, ``"replicate"`` or ``"circular"`` (a :meth:`pad` op
        first, as PyTorch runs it)."""
        return self._conv(
            1, x, out_channels, kernel_size, stride, padding, dilation, groups, bias, name, padding_mode
        )

    def conv2d(
        self,
        x: Tensor,
        out_channels: ExprLike,
        kernel_size: Any,
        stride: Any = 1,
        padding: Any = 0,
        dilation: Any = 1,
        groups: ExprLike = 1,
        bias: bool = True,
        name: str | None = None,
        padding_mode: str = "zeros",
    ) -> Tensor:
        """``nn.Conv2d`` on ``(B, C, H, W)``; ``padding`` and ``padding_mode`` as :meth:`conv1d`."""
        return self._conv(
            2, x, out_channels, kernel_size, stride, padding, dilation, groups, bias, name, padding_mode
        )

    def conv3d(
        self,
        x: Tensor,
        out_channels: ExprLike,
        kernel_size: Any,
        stride: Any = 1,
        padding: Any = 0,
        dilation: Any = 1,
        groups: ExprLike = 1,
        bias: bool = True,
        name: str | None = None,
        padding_mode: str = "zeros",
    ) -> Tensor:
        """``nn.Conv3d`` on ``(B, C, D, H, W)``; ``padding`` and ``padding_mode`` as :meth:`conv1d`."""
        return self._conv(
            3, x, out_channels, kernel_size, stride, padding, dilation, groups, bias, name, padding_mode
        )

    def pad(
        self, x: Tensor, pads: Sequence[ExprLike], mode: str = "constant", name: str | None = None
    ) -> Tensor:
        """``F.pad(x, pads, mode)`` of a ``(B, C, spatial...)`` tensor: ``pads`` in F.pad's order (last
        dimension first, low then high), non-negative; ``mode`` ``"constant"`` (zeros; the last spatial
        dimensions), ``"reflect"``, ``"replicate"`` or ``"circular"`` (every spatial dimension)."""
        where_ = self._label("pad", name)
        x = self._check_tensor(x, where_)
        if mode not in PAD_MODES:
            raise GraphError(f"{where_}: mode must be one of {PAD_MODES}, got {mode!r}")
        n = len(pads) // 2
        if len(pads) % 2 or not 0 < n <= x.ndim - 2 or (mode != "constant" and n != x.ndim - 2):
            raise GraphError(
                f"{where_}: pads needs 2 values per padded dimension, {x.ndim - 2} dimensions (the spatial "
                f"ones{'' if mode != 'constant' else ' or fewer'}: batch and channels are not padded), got "
                f"{len(pads)} values"
            )
        pads_ = tuple(_int_expr(p, "pads", where_, low=0) for p in pads)
        return self.apply("pad", [x], name=name, pads=pads_, mode=mode)

    def depthwise(
        self,
        x: Tensor,
        kernel_size: Any,
        stride: Any = 1,
        padding: Any = 0,
        multiplier: ExprLike = 1,
        dilation: Any = 1,
        bias: bool = True,
        name: str | None = None,
    ) -> Tensor:
        """Depthwise 2-D convolution (``groups = in_channels``, ``out = multiplier * in_channels``)."""
        where_ = self._label("conv2d", name)
        c = self._check_tensor(x, where_).shape[1]
        m = _int_expr(multiplier, "multiplier", where_, low=1)
        return self.conv2d(x, m * c, kernel_size, stride, padding, dilation, c, bias, name)

    def pointwise(
        self, x: Tensor, out_channels: ExprLike, bias: bool = True, name: str | None = None
    ) -> Tensor:
        """1x1 2-D convolution."""
        return self.conv2d(x, out_channels, 1, bias=bias, name=name)

    def _conv_transpose(
        self,
        nd: int,
        x: Tensor,
        out_channels: ExprLike,
        kernel_size: Any,
        stride: Any,
        padding: Any,
        output_padding: Any,
        dilation: Any,
        groups: ExprLike,
        bias: bool,
        name: str | None,
    ) -> Tensor:
        op = f"conv_transpose{nd}d"
        where_ = self._label(op, name)
        x = self._check_tensor(x, where_)
        if x.ndim != nd + 2:
            raise GraphError(
                f"{where_}: expects a {nd + 2}-D input (batch, channels, spatial...), got {x.ndim}-D"
            )
        pads = {
            "padding": _tuple(padding, nd, "padding", where_, low=0),
            "output_padding": _tuple(output_padding, nd, "output_padding", where_, low=0),
        }
        sizes = (out_channels, kernel_size, stride, dilation, groups)
        return self._conv_like(op, nd, x, where_, sizes, pads, bias, name)

    def conv_transpose1d(
        self,
        x: Tensor,
        out_channels: ExprLike,
        kernel_size: Any,
        stride: Any = 1,
        padding: Any = 0,
        output_padding: Any = 0,
        dilation: Any = 1,
        groups: ExprLike = 1,
        bias: bool = True,
        name: str | None = None,
    ) -> Tensor:
        """``nn.ConvTranspose1d`` on ``(B, C, L)``."""
        return self._conv_transpose(
            1, x, out_channels, kernel_size, stride, padding, output_padding, dilation, groups, bias, name
        )

    def conv_transpose2d(
        self,
        x: Tensor,
        out_channels: ExprLike,
        kernel_size: Any,
        stride: Any = 1,
        padding: Any = 0,
        output_padding: Any = 0,
        dilation: Any = 1,
        groups: ExprLike = 1,
        bias: bool = True,
        name: str | None = None,
    ) -> Tensor:
        """``nn.ConvTranspose2d`` on ``(B, C, H, W)``."""
        return self._conv_transpose(
            2, x, out_channels, kernel_size, stride, padding, output_padding, dilation, groups, bias, name
        )

    # -- dense ------------------------------------------------------------------------------------
    def linear(
        self,
        x: Tensor,
        out_features: ExprLike,
        bias: bool = True,
        tied: bool | str = False,
        name: str | None = None,
    ) -> Tensor:
        """``nn.Linear`` over the last dimension. ``tied``: its weight is the weight of an earlier op (a
        tied LM head), counted there, so only its bias counts as new parameters; the name of that op
        (e.g. ``"embedding#1"``) lets :func:`dnnsat.torch.to_torch` share it too."""
        where_ = self._label("linear", name)
        x = self._check_tensor(x, where_)
        if x.ndim < 1:
            raise GraphError(f"{where_}: needs an input with at least one dimension")
        fout = _int_expr(out_features, "out_features", where_, low=1)
        tie = tied if isinstance(tied, str) else bool(tied)
        return self._per_value(
            {"bias": (bias, FLAG)},
            lambda bias: self.apply("linear", [x], name=name, out_features=fout, bias=bool(bias), tied=tie),
        )

    def matmul(self, a: Tensor, b: Tensor, name: str | None = None) -> Tensor:
        """``torch.matmul`` of operands of rank >= 2 (batch dimensions broadcast)."""
        where_ = self._label("matmul", name)
        if self._check_tensor(a, where_).ndim < 2 or self._check_tensor(b, where_).ndim < 2:
            raise GraphError(f"{where_}: both operands need rank >= 2, got {a.ndim} and {b.ndim}")
        return self.apply("matmul", [a, b], name=name)

    def bmm(self, a: Tensor, b: Tensor, name: str | None = None) -> Tensor:
        """``torch.bmm`` of ``(B, N, K)`` and ``(B, K, M)``."""
        where_ = self._label("bmm", name)
        if self._check_tensor(a, where_).ndim != 3 or self._check_tensor(b, where_).ndim != 3:
            raise GraphError(f"{where_}: both operands must be 3-D, got {a.ndim}-D and {b.ndim}-D")
        return self.apply("bmm", [a, b], name=name)

    def einsum(self, equation: str, a: Tensor, b: Tensor, name: str | None = None) -> Tensor:
        """``torch.einsum(equation, a, b)`` of matmul form (``"bhqd,bhkd->bhqk"``, ``"...ij,...jk->...ik"``,
        ``"bsd,de->bse"``: every letter a batch, contracted or free dimension; no diagonals, no sums
        over one operand)."""
        where_ = self._label("einsum", name)
        try:
            einsum_subscripts(
                equation, (self._check_tensor(a, where_).ndim, self._check_tensor(b, where_).ndim)
            )
        except ValueError as e:
            raise GraphError(f"{where_}: {e}") from None
        return self.apply("einsum", [a, b], name=name, equation=equation.replace(" ", ""))

    def embedding(
        self, ids: Tensor, num_embeddings: ExprLike, dim: ExprLike, name: str | None = None
    ) -> Tensor:
        """``nn.Embedding`` lookup of an ``int64`` tensor of ids."""
        where_ = self._label("embedding", name)
        if self._check_tensor(ids, where_).dtype != "int64":
            raise GraphError(f"{where_}: needs an int64 input of token ids (net.input(shape, dtype='int64'))")
        return self.apply(
            "embedding",
            [ids],
            name=name,
            num_embeddings=_int_expr(num_embeddings, "num_embeddings", where_, low=1),
            dim=_int_expr(dim, "dim", where_, low=1),
        )

    def attention(
        self,
        x: Tensor,
        heads: ExprLike,
        kv_heads: ExprLike | None = None,
        causal: bool = False,
        bias: bool = True,
        head_dim: ExprLike | None = None,
        kv: Tensor | None = None,
        mask: Sequence[ExprLike] | None = None,
        name: str | None = None,
        *,
        layout: str = "dsl",
        need_weights: bool = False,
        fast_path: bool = False,
        dropout: bool = False,
    ) -> Tensor:
        """Multi-head attention on ``(B, S, D)`` (q/k/v/out projections; GQA with ``kv_heads``).

        ``head_dim``: the width of each head (default ``D / heads``; the q projection maps ``D`` to
        ``heads * head_dim`` and the out projection back). ``kv``: a ``(B, L, E)`` tensor the keys and
        values are projected from (cross-attention; default ``x``: self-attention). ``mask``: the shape
        of the float attention mask the scaled dot-product gets (1 to 4 dimensions broadcastable to
        ``(B, heads, S, L)``; not with ``causal``); its memory is not validated (a warning is logged).

        Set by :func:`dnnsat.torch.from_torch` for a traced ``nn.MultiheadAttention`` (same params and
        FLOPs, its own memory rules): ``layout="mha"`` (default ``"dsl"``: this method's own q/k/v/out
        ``nn.Linear`` around ``F.scaled_dot_product_attention``), ``need_weights`` (the explicit path that
        materializes the attention weights), ``fast_path`` (in eval under ``no_grad`` PyTorch may run
        ``torch._native_multi_head_attention``) and ``dropout`` (the module's attention dropout is > 0: in
        training the scaled dot-product runs PyTorch's math path)."""
        where_ = self._label("attention", name)
        if self._check_tensor(x, where_).ndim != 3:
            raise GraphError(f"{where_}: expects a (batch, sequence, width) input, got {x.ndim}-D")
        if kv is not None and self._check_tensor(kv, where_).ndim != 3:
            raise GraphError(f"{where_}: kv expects a (batch, sequence, width) tensor, got {kv.ndim}-D")
        h = _int_expr(heads, "heads", where_, low=1)
        kvh = h if kv_heads is None else _int_expr(kv_heads, "kv_heads", where_, low=1)
        hd = None if head_dim is None else _int_expr(head_dim, "head_dim", where_, low=1)
        ins = [x] if kv is None or kv is x else [x, kv]
        flags: dict[str, Any] = {} if mask is None else {"mask_shape": self._mask_shape(mask, causal, where_)}
        if layout == "mha":
            if kv_heads is not None or head_dim is not None:
                raise GraphError(f"{where_}: layout='mha' takes neither kv_heads nor head_dim")
            mha = {"need_weights": need_weights, "fast_path": fast_path, "dropout": dropout}
            flags.update(layout="mha", **{k: bool(v) for k, v in mha.items()})
        elif layout != "dsl":
            raise GraphError(f"{where_}: layout must be 'dsl' or 'mha', got {layout!r}")
        return self._per_value(
            {"causal": (causal, FLAG), "bias": (bias, FLAG)},
            lambda causal, bias: self.apply(
                "attention", ins, name=name, heads=h, kv_heads=kvh, causal=bool(causal), bias=bool(bias),
                head_dim=hd, **flags,
            ),
        )  # fmt: skip

    @staticmethod
    def _mask_shape(mask: Sequence[ExprLike], causal: Any, where_: str) -> tuple[Expr, ...]:
        """An attention mask's shape (1 to 4 sizes >= 1; PyTorch refuses a mask with ``is_causal``)."""
        shape = tuple(_int_expr(d, "mask", where_, low=1) for d in mask)
        if not 1 <= len(shape) <= 4:
            raise GraphError(f"{where_}: mask must have 1 to 4 dimensions, got {len(shape)}")
        if causal is not False:
            raise GraphError(f"{where_}: give either mask or causal=True, not both (PyTorch refuses both)")
        return shape

    def sdpa(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        causal: bool = False,
        gqa: bool = False,
        mask: Tensor | Sequence[ExprLike] | None = None,
        bool_mask: bool = False,
        name: str | None = None,
    ) -> Tensor:
        """``F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=gqa)``
        on 4-D ``(batch, heads, sequence, width)`` tensors (no parameters; a head width of its own).
        ``mask``: an additive float attention mask (``bool_mask``: a boolean one, True = attend) of 1 to
        4 dimensions broadcastable to ``(batch, heads, query length, key length)`` — a tensor of the
        network, or a shape (a mask the model builds itself in its forward); not with ``causal``."""
        where_ = self._label("sdpa", name)
        for t in (q, k, v):
            if self._check_tensor(t, where_).ndim != 4:
                raise GraphError(
                    f"{where_}: expects 4-D (batch, heads, sequence, width) tensors, got {t.ndim}-D"
                )
        ins, flags = [q, k, v], dict[str, Any]()
        if isinstance(mask, Tensor):
            self._mask_shape(self._check_tensor(mask, where_).shape, causal, where_)
            ins.append(mask)
        elif mask is not None:
            flags["mask_shape"] = self._mask_shape(mask, causal, where_)
        if mask is not None and bool_mask:
            flags["bool_mask"] = True
        return self._per_value(
            {"causal": (causal, FLAG)},
            lambda causal: self.apply("sdpa", ins, name=name, causal=bool(causal), gqa=bool(gqa), **flags),
        )

    def _rnn(
        self,
        kind: str,
        x: Tensor,
        hidden_size: ExprLike,
        num_layers: int | Expr,
        bidirectional: bool | Expr,
        bias: bool | Expr,
        name: str | None,
        max_layers: int | None = None,
    ) -> Tensor:
        where_ = self._label(kind, name)
        if self._check_tensor(x, where_).ndim != 3:
            raise GraphError(f"{where_}: expects a (batch, sequence, features) input, got {x.ndim}-D")
        layers: Sequence[int] = ()
        if isinstance(num_layers, Expr) and not num_layers.is_const:
            if isinstance(max_layers, bool) or not isinstance(max_layers, int) or max_layers < 1:
                raise GraphError(
                    f"{where_}: num_layers given as an expression needs max_layers (an int >= 1), got "
                    f"{max_layers!r}"
                )
            layers = range(1, max_layers + 1)
        else:
            n = num_layers.value if isinstance(num_layers, Expr) else num_layers
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise GraphError(
                    f"{where_}: num_layers must be an int >= 1 or an integer expression (with max_layers), "
                    f"got {num_layers!r}"
                )
        h = _int_expr(hidden_size, "hidden_size", where_, low=1)
        return self._per_value(
            {
                "num_layers": (num_layers, layers),
                "bidirectional": (bidirectional, FLAG),
                "bias": (bias, FLAG),
            },
            lambda num_layers, bidirectional, bias: self.apply(
                kind,
                [x],
                name=name,
                hidden_size=h,
                num_layers=num_layers,
                bidirectional=bool(bidirectional),
                bias=bool(bias),
            ),  # fmt: skip
        )

    def lstm(
        self,
        x: Tensor,
        hidden_size: ExprLike,
        num_layers: int | Expr = 1,
        bidirectional: bool | Expr = False,
        bias: bool | Expr = True,
        name: str | None = None,
        max_layers: int | None = None,
    ) -> Tensor:
        """``nn.LSTM(batch_first=True)`` returning the output sequence ``(B, S, dirs * hidden)``.
        ``num_layers`` (with ``max_layers``), ``bidirectional`` and ``bias`` may be hyperparameters
        (expressions: one op per value, see :meth:`_per_value`)."""
        return self._rnn("lstm", x, hidden_size, num_layers, bidirectional, bias, name, max_layers)

    def gru(
        self,
        x: Tensor,
        hidden_size: ExprLike,
        num_layers: int | Expr = 1,
        bidirectional: bool | Expr = False,
        bias: bool | Expr = True,
        name: str | None = None,
        max_layers: int | None = None,
    ) -> Tensor:
        """``nn.GRU(batch_first=True)`` returning the output sequence ``(B, S, dirs * hidden)``.
        ``num_layers`` (with ``max_layers``), ``bidirectional`` and ``bias`` may be hyperparameters
        (expressions: one op per value, see :meth:`_per_value`)."""
        return self._rnn("gru", x, hidden_size, num_layers, bidirectional, bias, name, max_layers)

    # -- normalization ----------------------------------------------------------------------------
    def batchnorm(self, x: Tensor, affine: bool = True, name: str | None = None) -> Tensor:
        """``nn.BatchNorm1d/2d`` over channel dimension 1."""
        where_ = self._label("batchnorm", name)
        if self._check_tensor(x, where_).ndim not in (2, 3, 4):
            raise GraphError(f"{where_}: expects a 2-D, 3-D or 4-D input, got {x.ndim}-D")
        return self.apply("batchnorm", [x], name=name, affine=bool(affine))

    def layernorm(
        self, x: Tensor, dims: int = 1, affine: bool = True, bias: bool = True, name: str | None = None
    ) -> Tensor:
        """``nn.LayerNorm`` over the last ``dims`` dimensions."""
        where_ = self._label("layernorm", name)
        if not 1 <= dims <= self._check_tensor(x, where_).ndim:
            raise GraphError(f"{where_}: dims must be between 1 and {x.ndim}, got {dims}")
        return self.apply("layernorm", [x], name=name, dims=dims, affine=bool(affine), bias=bool(bias))

    def groupnorm(self, x: Tensor, groups: ExprLike, affine: bool = True, name: str | None = None) -> Tensor:
        """``nn.GroupNorm`` over channel dimension 1."""
        where_ = self._label("groupnorm", name)
        if self._check_tensor(x, where_).ndim < 2:
            raise GraphError(f"{where_}: expects an input with a channel dimension")
        g = _int_expr(groups, "groups", where_, low=1)
        return self.apply("groupnorm", [x], name=name, groups=g, affine=bool(affine))

    def rmsnorm(self, x: Tensor, dims: int = 1, affine: bool = True, name: str | None = None) -> Tensor:
        """``nn.RMSNorm`` over the last ``dims`` dimensions."""
        where_ = self._label("rmsnorm", name)
        if not 1 <= dims <= self._check_tensor(x, where_).ndim:
            raise GraphError(f"{where_}: dims must be between 1 and {x.ndim}, got {dims}")
        return self.apply("rmsnorm", [x], name=name, dims=dims, affine=bool(affine))

    # -- elementwise ------------------------------------------------------------------------------
    def _unary(self, op: str, x: Tensor, name: str | None, **attrs: Any) -> Tensor:
        return self.apply(op, [x], name=name, **attrs)

    def relu(self, x: Tensor, name: str | None = None) -> Tensor:
        return self._unary("relu", x, name)

    def gelu(self, x: Tensor, name: str | None = None) -> Tensor:
        return self._unary("gelu", x, name)

    def silu(self, x: Tensor, name: str | None = None) -> Tensor:
        return self._unary("silu", x, name)

    def sigmoid(self, x: Tensor, name: str | None = None) -> Tensor:
        return self._unary("sigmoid", x, name)

    def tanh(self, x: Tensor, name: str | None = None) -> Tensor:
        return self._unary("tanh", x, name)

    def hardswish(self, x: Tensor, name: str | None = None) -> Tensor:
        return self._unary("hardswish", x, name)

    def activation(self, kind: Any, x: Tensor) -> Tensor:
        """An activation chosen by name, or by a categorical variable (``choose`` over its labels)."""
        if isinstance(kind, str):
            return self._unary(kind, x, None)
        labels = kind.payload[1] if isinstance(kind, Expr) and kind.op == "var" else None
        if not labels:
            raise GraphError("activation: pass a name or a categorical variable of activation names")
        return self.choose(kind, {lab: (lambda y, lab=lab: self._unary(lab, y, None)) for lab in labels}, x)

    def relu6(self, x: Tensor, name: str | None = None) -> Tensor:
        return self._unary("relu6", x, name)

    def leaky_relu(self, x: Tensor, name: str | None = None) -> Tensor:
        """``nn.LeakyReLU`` (the slope does not change any cost)."""
        return self._unary("leaky_relu", x, name)

    def elu(self, x: Tensor, name: str | None = None) -> Tensor:
        return self._unary("elu", x, name)

    def mish(self, x: Tensor, name: str | None = None) -> Tensor:
        return self._unary("mish", x, name)

    def softmax(self, x: Tensor, dim: int = -1, name: str | None = None) -> Tensor:
        where_ = self._label("softmax", name)
        axis = _axis(dim, self._check_tensor(x, where_).ndim, "dim", where_)
        return self._unary("softmax", x, name, dim=axis)

    def dropout(self, x: Tensor, p: float = 0.1, name: str | None = None) -> Tensor:
        """``nn.Dropout(p)``, ``0 <= p <= 1``."""
        if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0 <= p <= 1:
            raise GraphError(f"{self._label('dropout', name)}: p must be a number in [0, 1], got {p!r}")
        return self._unary("dropout", x, name, p=float(p))

    def zero(self, x: Tensor, name: str | None = None) -> Tensor:
        """``x * 0`` (a NAS "none" edge)."""
        return self._unary("zero", x, name)

    def scale(self, x: Tensor, factor: float, name: str | None = None) -> Tensor:
        return self._unary("scale", x, name, factor=factor)

    def mean(self, x: Tensor, dim: int, name: str | None = None) -> Tensor:
        """Mean over ``dim`` (the dimension is removed)."""
        where_ = self._label("mean", name)
        axis = _axis(dim, self._check_tensor(x, where_).ndim, "dim", where_)
        return self._unary("mean", x, name, dim=axis)

    def add(self, a: Tensor, b: Tensor, name: str | None = None) -> Tensor:
        """Elementwise sum with PyTorch broadcasting (residual connections)."""
        return self.apply("add", [a, b], name=name)

    def sub(self, a: Tensor, b: Tensor, name: str | None = None) -> Tensor:
        """Elementwise difference with PyTorch broadcasting."""
        return self.apply("sub", [a, b], name=name)

    def shift(self, x: Tensor, value: float, negate: bool = False, name: str | None = None) -> Tensor:
        """``x + value`` (``value - x`` with ``negate``)."""
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise GraphError(f"{self._label('shift', name)}: value must be a number, got {value!r}")
        return self._unary("shift", x, name, value=float(value), negate=bool(negate))

    def sum(self, x: Tensor, dim: int, name: str | None = None) -> Tensor:
        """Sum over ``dim`` (the dimension is removed)."""
        where_ = self._label("sum", name)
        axis = _axis(dim, self._check_tensor(x, where_).ndim, "dim", where_)
        return self._unary("sum", x, name, dim=axis)

    def mul(self, a: Tensor, b: Tensor, name: str | None = None) -> Tensor:
        """Elementwise product with PyTorch broadcasting."""
        return self.apply("mul", [a, b], name=name)

    # -- pooling ----------------------------------------------------------------------------------
    def _pool(
        self,
        kind: str,
        nd: int,
        x: Tensor,
        kernel_size: Any,
        stride: Any,
        padding: Any,
        dilation: Any,
        count_include_pad: bool,
        name: str | None,
        ceil_mode: bool = False,
    ) -> Tensor:
        op = f"{kind}pool{nd}d"
        where_ = self._label(op, name)
        if self._check_tensor(x, where_).ndim != nd + 2:
            raise GraphError(
                f"{where_}: expects a {nd + 2}-D input (batch, channels, spatial...), got {x.ndim}-D"
            )
        k = _tuple(kernel_size, nd, "kernel_size", where_, low=1)
        attrs: dict[str, Any] = dict(
            kernel_size=k,
            stride=k if stride is None else _tuple(stride, nd, "stride", where_, low=1),
            padding=_tuple(padding, nd, "padding", where_, low=0),
        )
        if kind == "max":
            attrs["dilation"] = _tuple(dilation, nd, "dilation", where_, low=1)
        else:
            attrs["count_include_pad"] = bool(count_include_pad)
        if ceil_mode:
            attrs["ceil_mode"] = True
        return self.apply(op, [x], name=name, **attrs)

    def maxpool2d(
        self,
        x: Tensor,
        kernel_size: Any,
        stride: Any = None,
        padding: Any = 0,
        dilation: Any = 1,
        name: str | None = None,
        ceil_mode: bool = False,
    ) -> Tensor:
        return self._pool("max", 2, x, kernel_size, stride, padding, dilation, True, name, ceil_mode)

    def avgpool2d(
        self,
        x: Tensor,
        kernel_size: Any,
        stride: Any = None,
        padding: Any = 0,
        count_include_pad: bool = True,
        name: str | None = None,
        ceil_mode: bool = False,
    ) -> Tensor:
        return self._pool("avg", 2, x, kernel_size, stride, padding, 1, count_include_pad, name, ceil_mode)

    def maxpool1d(
        self,
        x: Tensor,
        kernel_size: Any,
        stride: Any = None,
        padding: Any = 0,
        dilation: Any = 1,
        name: str | None = None,
        ceil_mode: bool = False,
    ) -> Tensor:
        return self._pool("max", 1, x, kernel_size, stride, padding, dilation, True, name, ceil_mode)

    def avgpool1d(
        self,
        x: Tensor,
        kernel_size: Any,
        stride: Any = None,
        padding: Any = 0,
        count_include_pad: bool = True,
        name: str | None = None,
        ceil_mode: bool = False,
    ) -> Tensor:
        return self._pool("avg", 1, x, kernel_size, stride, padding, 1, count_include_pad, name, ceil_mode)

    def _adaptive(self, kind: str, nd: int, x: Tensor, output_size: Any, name: str | None) -> Tensor:
        op = f"adaptive_{kind}pool{nd}d"
        where_ = self._label(op, name)
        if self._check_tensor(x, where_).ndim != nd + 2:
            raise GraphError(
                f"{where_}: expects a {nd + 2}-D input (batch, channels, spatial...), got {x.ndim}-D"
            )
        size = _tuple(output_size, nd, "output_size", where_, low=1)
        return self.apply(op, [x], name=name, output_size=size)

    def adaptive_avgpool2d(self, x: Tensor, output_size: Any = 1, name: str | None = None) -> Tensor:
        return self._adaptive("avg", 2, x, output_size, name)

    def adaptive_maxpool2d(self, x: Tensor, output_size: Any = 1, name: str | None = None) -> Tensor:
        return self._adaptive("max", 2, x, output_size, name)

    def adaptive_avgpool1d(self, x: Tensor, output_size: Any = 1, name: str | None = None) -> Tensor:
        return self._adaptive("avg", 1, x, output_size, name)

    def adaptive_maxpool1d(self, x: Tensor, output_size: Any = 1, name: str | None = None) -> Tensor:
        return self._adaptive("max", 1, x, output_size, name)

    def adaptive_avgpool(self, x: Tensor, output_size: Any = 1, name: str | None = None) -> Tensor:
        """Adaptive average pooling, 1-D or 2-D by the input's rank (``(B, C, L)`` or ``(B, C, H, W)``)."""
        return self._adaptive("avg", self._pool_nd(x), x, output_size, name)

    def adaptive_maxpool(self, x: Tensor, output_size: Any = 1, name: str | None = None) -> Tensor:
        """Adaptive max pooling, 1-D or 2-D by the input's rank."""
        return self._adaptive("max", self._pool_nd(x), x, output_size, name)

    def maxpool(self, x: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
                name: str | None = None, ceil_mode: bool = False) -> Tensor:  # fmt: skip
        """Max pooling, 1-D or 2-D by the input's rank (``ceil_mode`` as PyTorch's)."""
        nd = self._pool_nd(x)
        return self._pool("max", nd, x, kernel_size, stride, padding, dilation, True, name, ceil_mode)

    def avgpool(self, x: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0,
                count_include_pad: bool = True, name: str | None = None,
                ceil_mode: bool = False) -> Tensor:  # fmt: skip
        """Average pooling, 1-D or 2-D by the input's rank (``ceil_mode`` as PyTorch's)."""
        nd = self._pool_nd(x)
        return self._pool("avg", nd, x, kernel_size, stride, padding, 1, count_include_pad, name, ceil_mode)

    def _pool_nd(self, x: Tensor) -> int:
        nd = self._check_tensor(x, "pool").ndim - 2
        if nd not in (1, 2):
            raise GraphError(f"pool#{len(self.nodes)}: expects a 3-D or 4-D input, got {x.ndim}-D")
        return nd

    # -- layout -----------------------------------------------------------------------------------
    def concat(self, tensors: Sequence[Tensor], dim: int = 1, name: str | None = None) -> Tensor:
        """``torch.cat`` along ``dim``; the other dimensions must match."""
        where_ = self._label("concat", name)
        ts = [self._check_tensor(t, where_) for t in tensors]
        if not ts:
            raise GraphError(f"{where_}: needs at least one tensor")
        if len({t.ndim for t in ts}) != 1:
            raise GraphError(f"{where_}: all tensors need the same rank, got {[t.ndim for t in ts]}")
        return self.apply("concat", ts, name=name, dim=_axis(dim, ts[0].ndim, "dim", where_))

    def flatten(self, x: Tensor, start_dim: int = 1, end_dim: int = -1, name: str | None = None) -> Tensor:
        """``torch.flatten`` of dimensions ``start_dim..end_dim`` (inclusive) into one."""
        where_ = self._label("flatten", name)
        n = self._check_tensor(x, where_).ndim
        lo, hi = _axis(start_dim, n, "start_dim", where_), _axis(end_dim, n, "end_dim", where_)
        if lo > hi:
            raise GraphError(f"{where_}: start_dim {start_dim} comes after end_dim {end_dim} ({n}-D input)")
        return self.apply("flatten", [x], name=name, start_dim=lo, end_dim=hi)

    def reshape(self, x: Tensor, shape: Sequence[ExprLike], name: str | None = None) -> Tensor:
        """Reshape; each target dimension is >= 1 or a literal ``-1`` (at most one, inferred).

        The element count must be preserved. A symbolic dimension is not inferred when it evaluates to
        ``-1``: it must be >= 1 (a validity rule).
        """
        where_ = self._label("reshape", name)
        shp = tuple(_int_expr(d, "shape", where_) for d in shape)
        for d, value in zip(shp, shape):
            if not isinstance(value, Expr) and d.value < 1 and d.value != -1:
                raise GraphError(f"{where_}: shape must be >= 1 or -1 (inferred), got {value!r}")
        if sum(1 for d in shp if d.is_const and d.value == -1) > 1:
            raise GraphError(f"{where_}: at most one -1 in the target shape")
        return self.apply("reshape", [x], name=name, shape=shp)

    def permute(self, x: Tensor, dims: Sequence[int], name: str | None = None) -> Tensor:
        """``x.permute(*dims)`` (copied to a contiguous tensor)."""
        where_ = self._label("permute", name)
        n = self._check_tensor(x, where_).ndim
        axes = tuple(_axis(d, n, "dims", where_) for d in dims)
        if sorted(axes) != list(range(n)):
            raise GraphError(f"{where_}: dims {list(dims)} are not a permutation of {n} dimensions")
        return self.apply("permute", [x], name=name, dims=axes)

    def transpose(self, x: Tensor, dim0: int, dim1: int, name: str | None = None) -> Tensor:
        """Swap ``dim0`` and ``dim1`` (a :meth:`permute`)."""
        where_ = self._label("permute", name)
        n = self._check_tensor(x, where_).ndim
        a, b = _axis(dim0, n, "dim0", where_), _axis(dim1, n, "dim1", where_)
        dims = list(range(n))
        dims[a], dims[b] = dims[b], dims[a]
        return self.permute(x, dims, name)

    def expand(self, x: Tensor, shape: Sequence[ExprLike], name: str | None = None) -> Tensor:
        """``x.expand(*shape)`` (a view): ``-1`` keeps a dimension, size-1 dimensions repeat, new
        leading dimensions may be added (a learned token expanded over the batch)."""
        where_ = self._label("expand", name)
        n = self._check_tensor(x, where_).ndim
        if len(shape) < n:
            raise GraphError(f"{where_}: needs at least {n} sizes for a {n}-D input, got {len(shape)}")
        shp = tuple(_int_expr(d, "shape", where_) for d in shape)
        lead = len(shp) - n
        for j, (d, value) in enumerate(zip(shp, shape)):
            if not isinstance(value, Expr) and d.value < 1 and not (d.value == -1 and j >= lead):
                raise GraphError(f"{where_}: sizes must be >= 1 or -1 (keep), got {value!r}")
        return self.apply("expand", [x], name=name, shape=shp)

    def select_index(self, x: Tensor, dim: int, index: ExprLike, name: str | None = None) -> Tensor:
        """``x.select(dim, index)`` (``x[:, index]`` for ``dim=1``): a view without dimension ``dim``."""
        where_ = self._label("select_index", name)
        axis = _axis(dim, self._check_tensor(x, where_).ndim, "dim", where_)
        return self.apply("select_index", [x], name=name, dim=axis, index=_int_expr(index, "index", where_))

    def narrow(
        self, x: Tensor, dim: int, start: ExprLike, length: ExprLike, name: str | None = None
    ) -> Tensor:
        """``x.narrow(dim, start, length)`` (a view; a negative ``start`` counts from the end)."""
        where_ = self._label("narrow", name)
        axis = _axis(dim, self._check_tensor(x, where_).ndim, "dim", where_)
        return self.apply(
            "narrow",
            [x],
            name=name,
            dim=axis,
            start=_int_expr(start, "start", where_),
            length=_int_expr(length, "length", where_, low=1),
        )

    def chunk(self, x: Tensor, chunks: int, dim: int = 0) -> list[Tensor]:
        """``x.chunk(chunks, dim)`` for a dimension that gives exactly ``chunks`` pieces (each
        ``ceildiv(size, chunks)`` long, the last one the rest): :meth:`narrow` views."""
        axis = _axis(dim, self._check_tensor(x, "chunk").ndim, "dim", "chunk")
        size = ceildiv(x.shape[axis], chunks)
        return [
            self.narrow(x, axis, i * size, size if i < chunks - 1 else x.shape[axis] - i * size)
            for i in range(chunks)
        ]

    def upsample(
        self,
        x: Tensor,
        size: Any = None,
        scale_factor: int | None = None,
        mode: str = "nearest",
        align_corners: bool | None = None,
        name: str | None = None,
    ) -> Tensor:
        """``nn.Upsample``: to spatial ``size``, or by an integer ``scale_factor``."""
        where_ = self._label("upsample", name)
        nd = self._check_tensor(x, where_).ndim - 2
        ranks = {"nearest": (1, 2), "linear": (1,), "bilinear": (2,), "bicubic": (2,)}
        if mode not in ranks or nd not in ranks[mode]:
            raise GraphError(f"{where_}: mode {mode!r} does not apply to a {nd + 2}-D input")
        if (size is None) == (scale_factor is None):
            raise GraphError(f"{where_}: give one of size and scale_factor")
        if size is not None:
            out = _tuple(size, nd, "size", where_, low=1)
        else:
            s = _tuple(scale_factor, nd, "scale_factor", where_, low=1)
            out = tuple(lin(d * f) for d, f in zip(x.shape[2:], s))
        return self.apply("upsample", [x], name=name, size=out, mode=mode, align_corners=align_corners)

    # -- control: depth and op choices --------------------------------------------------------------
    def _select(
        self, cases: list[tuple[Expr, Tensor]], same_shape: bool = False, label: str = "select"
    ) -> Tensor:
        """Merge branch outputs: the first case whose condition holds (last case is the fallback)."""
        ranks = {t.ndim for _, t in cases}
        if len(ranks) != 1:
            raise GraphError(f"{label}: branches produce tensors of different ranks {sorted(ranks)}")
        if len(cases) == 1:
            return cases[0][1]
        shape = list(cases[-1][1].shape)
        for cond, t in reversed(cases[:-1]):
            shape = [_merge_dim(cond, d, s) for d, s in zip(t.shape, shape)]
        index = len(self.nodes)
        out = self._new_tensor(tuple(shape), cases[0][1].dtype, index)
        node = Node(
            index,
            "select",
            f"select#{index}",
            tuple(t.index for _, t in cases),
            out.index,
            Attrs(),
            self._gate,
            None,
            tuple((c, t.index) for c, t in cases),
            same_shape,
        )
        self.nodes.append(node)
        return out

    def _gated(self, cond: Expr, fn: Callable[[], Tensor]) -> Tensor:
        outer = self._gate
        self._gate = outer & cond
        try:
            return fn()
        finally:
            self._gate = outer

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

    def branch(self, cases: Sequence[tuple[ExprLike, Callable[..., Tensor]]], *args: Tensor) -> Tensor:
        """Alternative sub-networks: ``[(condition, body), ...]``; the first true condition is taken.

        Each body is called with ``*args``; costs of a branch count only when its condition holds
        (and no earlier one does). If no condition holds, the configuration is invalid.
        """
        return self._branch(cases, args, False)

    def _branch(
        self,
        cases: Sequence[tuple[ExprLike, Callable[..., Tensor]]],
        args: Sequence[Tensor],
        exhaustive: bool,
        exclusive: bool = False,
    ) -> Tensor:
        label = f"branch#{len(self.nodes)}"
        if not cases:
            raise GraphError(f"{label}: needs at least one case")
        outs: list[tuple[Expr, Tensor]] = []
        taken: Expr = Const(False)
        for cond_like, body in cases:
            cond = as_expr(cond_like)
            if cond.sort != "bool":
                raise GraphError(f"{label}: conditions must be boolean expressions, got {cond}")
            active = cond if exclusive else cond & ~taken
            if active.is_const and not active.value:
                continue
            y = self._gated(active, lambda body=body: body(*args))  # type: ignore[misc]
            outs.append((active, self._check_tensor(y, label)))
            taken = taken | cond
        if not outs:
            raise GraphError(f"{label}: no case can ever be taken")
        if not exhaustive and not (taken.is_const and taken.value):
            self.extra_checks.append((label, Check("some case applies", (~self._gate) | taken)))
        return self._select(outs, label=label)

    def choose(self, var: Expr, options: Mapping[Any, Callable[..., Tensor]], *args: Tensor) -> Tensor:
        """Categorical op choice: ``{value: body}``, ``body(*args)`` used when ``var == value``."""
        if not isinstance(var, Expr):
            if var in options:
                return options[var](*args)
            raise GraphError(f"choose: {var!r} is not one of the options {list(options)}")
        labels = var.payload[1] if var.op == "var" else None
        exhaustive = labels is not None and set(labels) <= set(options)  # every label has a branch
        cases = [(var == value, body) for value, body in options.items()]
        return self._branch(cases, args, exhaustive, exclusive=True)  # distinct values: exclusive cases

    def _per_value(
        self, args: Mapping[str, tuple[Any, Sequence[Any]]], make: Callable[..., Tensor]
    ) -> Tensor:
        """``make(**values)``; an argument given as an expression (a boolean condition, a variable of a
        ``Categorical([False, True])``, an integer variable with its ``domain``) is a hyperparameter:
        the op is made once per value of ``domain`` (a :meth:`branch`), each taken where the
        expression has that value. Plain values go to ``make`` as they are."""
        values = {k: v for k, (v, _) in args.items()}
        for key, (value, domain) in args.items():
            if isinstance(value, Expr) and not value.is_const:
                labels = value.payload[1] if value.op == "var" else None
                flag = value.sort == "bool" or (labels is not None and set(labels) <= {False, True})

                def case(v: Any, key: str = key, domain: Sequence[Any] = domain) -> Callable[[], Tensor]:
                    return lambda: self._per_value({**args, key: (v, domain)}, make)

                conds = [(value if v else ~value) if value.sort == "bool" else value == v for v in domain]
                return self._branch([(c, case(v)) for c, v in zip(conds, domain)], [], flag, exclusive=True)
        return make(**{k: v.value if isinstance(v, Expr) else v for k, v in values.items()})

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


@dataclass
class Concrete:
    """A network evaluated at one configuration: which nodes run, their attributes and shapes."""

    net: Network
    gates: dict[int, bool]
    attrs: dict[int, Attrs]
    cases: dict[int, list[bool]]
    shapes: dict[int, tuple[int, ...]]


def _conjuncts(e: Expr) -> frozenset[int]:
    if e.op == "and":
        return _conjuncts(e.args[0]) | _conjuncts(e.args[1])
    if e.is_const and e.value:
        return frozenset()
    return frozenset([id(e)])


def _split_gate(g: Expr) -> tuple[frozenset[int], dict[int, Any]]:
    """Conjuncts of a gate: (other conjuncts, {id(n): i} for depth conjuncts ``i < n``)."""
    rest: set[int] = set()
    depth: dict[int, Any] = {}
    stack = [g]
    while stack:
        e = stack.pop()
        if e.op == "and":
            stack.extend(e.args)
        elif e.op == "lt" and e.args[0].is_const and e.args[0].sort == "int":
            key = id(e.args[1])
            depth[key] = max(depth.get(key, e.args[0].value), e.args[0].value)
        elif not (e.is_const and e.value):
            rest.add(id(e))
    return frozenset(rest), depth


def _implies(a: tuple[frozenset[int], dict[int, Any]], b: tuple[frozenset[int], dict[int, Any]]) -> bool:
    """Gate ``a`` implies gate ``b`` (b's conjuncts are among a's; ``i < n`` implies ``j < n`` for j <= i)."""
    return b[0] <= a[0] and all(k in a[1] and a[1][k] >= v for k, v in b[1].items())


def _absorb(gates: list[Expr]) -> list[Expr]:
    """Drop gates implied by another one (``a | (a & b) == a``; ``0 < n | 3 < n == 0 < n``)."""
    parts = [_split_gate(g) for g in gates]
    keep = []
    for i, g in enumerate(gates):
        implied = any(
            j != i and _implies(parts[i], parts[j]) and not (_implies(parts[j], parts[i]) and j > i)
            for j in range(len(gates))
        )
        if not implied:
            keep.append(g)
    return keep


def _merge_dim(cond: Expr, d: Expr, s: Expr) -> Expr:
    """``where(cond, d, s)``, folded when equal, or when ``cond`` is ``d == s`` itself (then it is ``s``)."""
    d, s = lin(d), lin(s)
    if d is s:
        return d
    if cond.op == "eq" and {id(lin(a)) for a in cond.args} == {id(d), id(s)}:
        return s
    return where(cond, d, s)


def encode_config(space: Any, config: Mapping[str, Any]) -> dict[str, Any]:
    """Validate ``config`` against ``space`` and return the encoded env (inactive params: first value)."""
    cfg = space.validate(config)
    env: dict[str, Any] = {}
    for name in space:
        p = space[name]
        if name in cfg and space.is_active(name, cfg):
            env[name] = p.encode(cfg[name])
        elif p.is_finite:
            env[name] = p.encoded()[0].item()
        else:
            env[name] = float(p.low)
    return env


def any_true(conds: Iterable[Expr]) -> Expr:
    return any_(conds)
