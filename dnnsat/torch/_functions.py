"""Op mapping for tensor functions and methods (``torch.cat``, ``F.relu``, ``x.view``, ``x + y``,
...): the handlers of :data:`_FUNCTIONS`, each turning one call into ops of the trace's network."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.nn as nn

from ..expr import Const, Expr, ceildiv, maximum, minimum, sum_
from ..graph import GraphError, Tensor
from ..graph._catalog import PAD_MODES, einsum_subscripts, eq
from ._errors import TraceError
from ._layers import LAYER_FUNCTIONS, _exprs, _linear_op, _param_shape, _parameters, claim
from ._symbolic import SymFloat, SymInt, as_expr_like, expr_of, fixed, plain, user_line
from ._tensor import STensor, _t, network_dtype

if TYPE_CHECKING:
    from ._capture import _Trace


def _dim(d: Any, n: int) -> int:
    d = fixed(d)
    if not isinstance(d, int) or not -n <= d < n:
        raise TraceError(f"dimension {d!r} out of range for a {n}-D tensor: {user_line()}")
    return d % n


def _sizes(args: tuple[Any, ...]) -> tuple[Any, ...]:
    if len(args) == 1 and isinstance(args[0], tuple | list | torch.Size):
        return tuple(args[0])
    return tuple(args)


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _binary(op: str) -> Callable[..., STensor]:
    """``add``/``sub``/``mul`` of two tensors, or of a tensor and a number (``shift``/``scale``)."""

    def f(tr: _Trace, a: Any, b: Any, *, alpha: Any = 1, out: Any = None) -> STensor:
        if out is not None or fixed(alpha) != 1:
            raise TraceError(f"{op} with out= or alpha= is not supported: {user_line()}")
        if _number(a) or _number(b):
            x, c = (tr.tensor(b, op), float(plain(a))) if _number(a) else (tr.tensor(a, op), float(plain(b)))
            if op == "mul":
                return tr.apply("scale", tr.net.scale, _t(x), c)
            if op == "add":
                return tr.apply("shift", tr.net.shift, _t(x), c)
            return (
                tr.apply("shift", tr.net.shift, _t(x), c, negate=True)
                if _number(a)
                else (tr.apply("shift", tr.net.shift, _t(x), -c))
            )
        x, y = tr.tensor(a, op), tr.tensor(b, op)
        return tr.apply(op, getattr(tr.net, op), _t(x), _t(y))

    return f


def _neg(tr: _Trace, x: Any) -> STensor:
    return tr.apply("scale", tr.net.scale, _t(tr.tensor(x, "neg")), -1.0)


def _div(tr: _Trace, a: Any, b: Any) -> STensor:
    if isinstance(b, int | float) and not isinstance(b, bool) and isinstance(a, STensor | nn.Parameter):
        return tr.apply("scale", tr.net.scale, _t(tr.tensor(a, "div")), 1.0 / float(plain(b)))
    raise TraceError(f"division of tensors is not supported: {user_line()}")


def _softmax(tr: _Trace, x: Any, dim: Any = None, *args: Any, **kwargs: Any) -> STensor:
    x = tr.tensor(x, "softmax")
    if dim is None:
        raise TraceError(f"softmax needs an explicit dim: {user_line()}")
    return tr.apply("softmax", tr.net.softmax, _t(x), _dim(dim, x.ndim))


def _dropout(tr: _Trace, x: Any, p: Any = 0.5, training: bool = True, inplace: bool = False) -> STensor:
    x = tr.tensor(x, "dropout")
    if not training:
        return x
    rate = float(plain(p))
    if isinstance(p, SymFloat) and rate == 0:  # a rate of 0 is no dropout at all: not for every trial here
        rate = 0.5
    return tr.apply("dropout", tr.net.dropout, _t(x), rate)


def _cat(tr: _Trace, tensors: Sequence[Any], dim: Any = 0, **kwargs: Any) -> STensor:
    """``torch.cat``; as PyTorch, a 1-D empty tensor (an empty key/value cache) is left out."""
    ts = [tr.tensor(t, "cat") for t in tensors if not (isinstance(t, torch.Tensor) and _empty_1d(t))]
    return tr.apply("concat", tr.net.concat, [_t(t) for t in ts], _dim(dim, ts[0].ndim))


def _empty_1d(t: torch.Tensor) -> bool:
    with torch._C.DisableTorchFunction():
        return t.shape == (0,)


def _flatten(tr: _Trace, x: Any, start_dim: Any = 0, end_dim: Any = -1) -> STensor:
    x = tr.tensor(x, "flatten")
    return tr.apply("flatten", tr.net.flatten, _t(x), fixed(start_dim), fixed(end_dim))


def _reshape(tr: _Trace, x: Any, *shape: Any) -> STensor:
    x = tr.tensor(x, "reshape")
    target = [as_expr_like(d) for d in _sizes(shape)]
    return tr.apply("reshape", tr.net.reshape, _t(x), target)


def _permute(tr: _Trace, x: Any, *dims: Any) -> STensor:
    x = tr.tensor(x, "permute")
    return tr.apply("permute", tr.net.permute, _t(x), [fixed(d) for d in _sizes(dims)])


def _transpose(tr: _Trace, x: Any, dim0: Any, dim1: Any) -> STensor:
    x = tr.tensor(x, "transpose")
    return tr.apply("permute", tr.net.transpose, _t(x), fixed(dim0), fixed(dim1))


def _reduce(op: str) -> Callable[..., STensor]:
    """``mean``/``sum`` over one dimension or adjacent ones (``(2, 3)``: flattened into one first, a
    view); ``keepdim``: size-1 views in their place."""

    def f(tr: _Trace, x: Any, dim: Any = None, keepdim: bool = False, **kwargs: Any) -> STensor:
        xs = tr.tensor(x, op)
        dims = sorted(_dim(d, xs.ndim) for d in (fixed(dim) if isinstance(dim, tuple | list) else [dim]))
        if not dims or dims != list(range(dims[0], dims[-1] + 1)) or kwargs.get("dtype") is not None:
            raise TraceError(f"{op} is supported over one dimension or adjacent ones: {user_line()}")
        if len(dims) > 1:
            xs = tr.apply("flatten", tr.net.flatten, _t(xs), dims[0], dims[-1])
        y = tr.apply(op, getattr(tr.net, op), _t(xs), dims[0])
        for d in dims if fixed(keepdim) else ():
            y = _unsqueeze(tr, y, d)
        return y

    return f


def _unsqueeze(tr: _Trace, x: Any, dim: Any) -> STensor:
    xs = tr.tensor(x, "unsqueeze")
    d = _dim(dim, xs.ndim + 1)
    shape = list(_t(xs).shape)
    shape.insert(d, Const(1))
    return tr.apply("reshape", tr.net.reshape, _t(xs), shape)


def _squeeze(tr: _Trace, x: Any, dim: Any = None) -> STensor:
    """Drops the given (or every) dimension of size 1; whether a symbolic size is 1 is a guard."""
    xs = tr.tensor(x, "squeeze")
    dims = (
        range(xs.ndim)
        if dim is None
        else [_dim(d, xs.ndim) for d in (dim if isinstance(dim, tuple | list) else [dim])]
    )
    drop = {d for d in dims if tr.sym(_t(xs).shape[d]) == 1}
    if not drop:
        return xs
    return tr.apply(
        "reshape", tr.net.reshape, _t(xs), [e for d, e in enumerate(_t(xs).shape) if d not in drop]
    )


def _stack(tr: _Trace, tensors: Sequence[Any], dim: Any = 0, **kwargs: Any) -> STensor:
    ts = [tr.tensor(t, "stack") for t in tensors]
    d = _dim(dim, ts[0].ndim + 1)
    return _cat(tr, [_unsqueeze(tr, t, d) for t in ts], d)


def _matmul(tr: _Trace, a: Any, b: Any) -> STensor:
    x, y = tr.tensor(a, "matmul"), tr.tensor(b, "matmul")
    return tr.apply("matmul", tr.net.matmul, _t(x), _t(y))


def _addmm(tr: _Trace, bias: Any, a: Any, b: Any, *, beta: Any = 1, alpha: Any = 1) -> STensor:
    """``torch.addmm(bias, a, b)`` (a Hugging Face ``Conv1D``): ``a @ b + bias``."""
    if fixed(beta) != 1 or fixed(alpha) != 1:
        raise TraceError(f"addmm with beta= or alpha= is not supported: {user_line()}")
    return _binary("add")(tr, _matmul(tr, a, b), bias)


def _bmm(tr: _Trace, a: Any, b: Any) -> STensor:
    x, y = tr.tensor(a, "bmm"), tr.tensor(b, "bmm")
    return tr.apply("bmm", tr.net.bmm, _t(x), _t(y))


def _einsum(tr: _Trace, equation: Any, *operands: Any) -> STensor:
    """``torch.einsum`` of two operands in matmul form (``einsum_subscripts``); others are refused."""
    ops = tuple(operands[0]) if len(operands) == 1 and isinstance(operands[0], list | tuple) else operands
    xs = [tr.tensor(o, "einsum") for o in ops]
    try:
        einsum_subscripts(fixed(equation), [x.ndim for x in xs])
    except ValueError as e:
        raise TraceError(f"{e}: {user_line()}") from None
    return tr.apply("einsum", tr.net.einsum, fixed(equation), _t(xs[0]), _t(xs[1]))


def _expand(tr: _Trace, x: Any, *shape: Any) -> STensor:
    xs = tr.tensor(x, "expand")
    return tr.apply("expand", tr.net.expand, _t(xs), [as_expr_like(d) for d in _sizes(shape)])


def _select(tr: _Trace, x: Any, dim: Any, index: Any) -> STensor:
    xs = tr.tensor(x, "select")
    return tr.apply("select_index", tr.net.select_index, _t(xs), fixed(dim), as_expr_like(index))


def _getitem(tr: _Trace, x: Any, index: Any) -> STensor:
    """Basic indexing ``x[0, :, None, 2:n, ...]``: integers (a :func:`_select`), slices of step 1 (a
    ``narrow``, bounds clamped to the dimension as Python does), ``None`` (a new size-1 dimension),
    ``...``; or one integer tensor (``table[idx]``: the ``index`` op)."""
    xs = tr.tensor(x, "indexing")
    if isinstance(index, STensor | torch.Tensor):
        return _index(tr, xs, tr.tensor(index, "indexing"))
    items = list(index) if isinstance(index, tuple) else [index]
    basic = all(it is None or it is Ellipsis or isinstance(it, slice) or _integer(it) for it in items)
    ellipses = [j for j, it in enumerate(items) if it is Ellipsis]
    if not basic or len(ellipses) > 1:
        raise TraceError(
            f"indexing {index!r} is not supported (integers, slices, None, ... and one integer tensor "
            f"are): {user_line()}"
        )
    taking = sum(it is not None and it is not Ellipsis for it in items)
    if ellipses:
        items[ellipses[0] : ellipses[0] + 1] = [slice(None)] * (xs.ndim - taking)
    if taking > xs.ndim:
        raise TraceError(f"too many indices for a {xs.ndim}-D tensor: {user_line()}")
    d = 0
    for it in items:
        if it is None:
            xs = _unsqueeze(tr, xs, d)
        elif not isinstance(it, slice):
            xs = _select(tr, xs, d, it)
            continue
        elif not (it.start is None and it.stop is None and it.step is None):
            xs = _slice(tr, xs, d, it)
        d += 1
    return xs


def _integer(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _slice(tr: _Trace, xs: STensor, d: int, it: slice) -> STensor:
    """``x[..., start:stop:step]`` on dimension ``d``: a ``narrow`` (every ``step``-th entry); negative
    bounds count from the end, bounds past the dimension are clamped (an empty result is invalid, as
    every empty tensor). The step is structural (pinned)."""
    step = 1 if it.step is None else fixed(it.step)
    if not _integer(step) or step < 1:
        raise TraceError(f"slicing with a step below 1 is not supported (PyTorch refuses it): {user_line()}")
    n = _t(xs).shape[d]

    def bound(v: Any, default: Expr) -> Expr:
        if v is None:
            return default
        e = expr_of(v)
        return maximum(e + n, 0) if v < 0 else minimum(e, n)  # the sign is a guard when symbolic

    first = bound(it.start, Const(0))
    length = bound(it.stop, n) - first
    if step == 1:
        return tr.apply("narrow", tr.net.narrow, _t(xs), d, first, length)
    return tr.apply("narrow", tr.net.apply, "narrow", [_t(xs)], dim=d, start=first, length=length, step=step)


def _pieces(tr: _Trace, xs: STensor, d: int, lengths: list[Expr]) -> tuple[STensor, ...]:
    out, start = [], Const(0)
    for length in lengths:
        out.append(tr.apply("narrow", tr.net.narrow, _t(xs), d, start, length))
        start = start + length
    return tuple(out)


def _even_pieces(tr: _Trace, xs: STensor, d: int, size: Expr) -> tuple[STensor, ...]:
    n = _t(xs).shape[d]
    count = int(tr.sym(ceildiv(n, size)))  # the number of pieces is structural: pinned
    return _pieces(tr, xs, d, [size if i < count - 1 else n - i * size for i in range(count)])


def _chunk(tr: _Trace, x: Any, chunks: Any, dim: Any = 0) -> tuple[STensor, ...]:
    xs = tr.tensor(x, "chunk")
    d = _dim(dim, xs.ndim)
    if _record_positive(tr, chunks):
        raise GraphError("chunk: chunks must be >= 1")
    return _even_pieces(tr, xs, d, ceildiv(_t(xs).shape[d], expr_of(chunks)))


def _record_positive(tr: _Trace, n: Any) -> bool:
    return not n >= 1  # a guard when symbolic


def _split(tr: _Trace, x: Any, split_size_or_sections: Any, dim: Any = 0) -> tuple[STensor, ...]:
    xs = tr.tensor(x, "split")
    d = _dim(dim, xs.ndim)
    if isinstance(split_size_or_sections, tuple | list):
        lengths = [expr_of(v) for v in split_size_or_sections]
        pieces = _pieces(tr, xs, d, lengths)
        tr.bind(pieces[0], "split sizes add up to the dimension", eq(sum_(lengths), _t(xs).shape[d]))
        return pieces
    if _record_positive(tr, split_size_or_sections):
        raise GraphError("split: split_size must be >= 1")
    return _even_pieces(tr, xs, d, expr_of(split_size_or_sections))


def _interpolate(
    tr: _Trace,
    x: Any,
    size: Any = None,
    scale_factor: Any = None,
    mode: Any = "nearest",
    align_corners: Any = None,
    recompute_scale_factor: Any = None,
    antialias: Any = False,
) -> STensor:
    xs = tr.tensor(x, "interpolate")
    nd = xs.ndim - 2
    if fixed(antialias) or fixed(mode) not in ("nearest", "linear", "bilinear", "bicubic"):
        raise TraceError(
            f"interpolate with mode {fixed(mode)!r} or antialias is not supported: {user_line()}"
        )
    if scale_factor is not None:
        factors = scale_factor if isinstance(scale_factor, tuple | list) else (scale_factor,) * nd
        if not all(float(fixed(f)).is_integer() for f in factors):
            raise TraceError(f"interpolate: only integer scale factors are supported: {user_line()}")
        scale: Any = tuple(f.expr if isinstance(f, SymInt) else int(fixed(f)) for f in factors)
        return tr.apply(
            "upsample",
            tr.net.upsample,
            _t(xs),
            None,
            scale,
            mode=fixed(mode),
            align_corners=fixed(align_corners),
        )
    return tr.apply(
        "upsample",
        tr.net.upsample,
        _t(xs),
        _exprs(size),
        None,
        mode=fixed(mode),
        align_corners=fixed(align_corners),
    )


def _pad(tr: _Trace, x: Any, pad: Any, mode: str = "constant", value: Any = None) -> STensor:
    xs = tr.tensor(x, "pad")
    if fixed(mode) not in PAD_MODES or (value is not None and fixed(value) != 0):
        raise TraceError(f"F.pad: mode {mode!r} with value {value!r} is not supported (zeros, reflect, "
                         f"replicate, circular are): {user_line()}")  # fmt: skip
    if any(p < 0 for p in pad):  # records the guards: a region with negative padding raises
        raise TraceError(f"F.pad: negative padding (cropping) is not supported: {user_line()}")
    n, rank = len(pad) // 2, xs.ndim
    if fixed(mode) == "constant" and rank - 2 < n <= rank:  # zeros pad any dimension (channels last: Swin)
        pads = tuple(expr_of(p) for p in pad)
        return tr.apply("pad", tr.net.apply, "pad", [_t(xs)], pads=pads, mode="constant")
    if n > rank - 2 and (fixed(mode) == "constant" or (n == rank - 1 and rank in (3, 4))):
        raise TraceError(f"F.pad: padding the batch or channel dimension is not supported: {user_line()}")
    return tr.apply("pad", tr.net.pad, _t(xs), [as_expr_like(p) for p in pad], fixed(mode))


def _roll(tr: _Trace, x: Any, shifts: Any, dims: Any = None) -> STensor:
    """``torch.roll`` over given dimensions, or of the flattened tensor (``dims=None``: ``dims=()``)."""
    xs = tr.tensor(x, "roll")
    ds_ = [
        _dim(d, xs.ndim) for d in (() if dims is None else dims if isinstance(dims, tuple | list) else [dims])
    ]
    sh = list(shifts) if isinstance(shifts, tuple | list) else [shifts]
    if len(sh) != max(len(ds_), 1):
        raise TraceError(f"roll: shifts and dims differ in length: {user_line()}")
    return tr.apply(
        "roll", tr.net.apply, "roll", [_t(xs)], shifts=tuple(expr_of(s) for s in sh), dims=tuple(ds_)
    )


def _made(tr: _Trace, sizes: Sequence[Any], dtype: torch.dtype) -> torch.Tensor:
    """A new tensor of ``sizes`` (symbolic ones allowed) as a factory makes it: a meta tensor whose
    symbolic shape the trace remembers (a ``constant`` node where it meets the network)."""
    for d in sizes:
        if isinstance(d, SymInt):
            d >= 0  # noqa: B015 - records the guard (torch rejects negative sizes)
    with torch._C.DisableTorchFunction():
        out = torch.empty(tuple(plain(d) for d in sizes), dtype=dtype, device="meta")
    tr.remember(out, tuple(expr_of(d) for d in sizes))
    return out


def _like(tr: _Trace, x: Any, *args: Any, dtype: Any = None, **kwargs: Any) -> torch.Tensor:
    """``torch.zeros_like(x)`` (``ones_/empty_/full_/rand_/randn_like``): a new tensor of ``x``'s shape."""
    xs = tr.tensor(x, "zeros_like")
    return _made(tr, xs.shape, dtype or xs.dtype)


def _new(tr: _Trace, x: Any, *size: Any, dtype: Any = None, **kwargs: Any) -> torch.Tensor:
    """``x.new_zeros(size)`` (``new_empty/new_ones``): a new tensor of ``x``'s dtype."""
    return _made(tr, _sizes(size), dtype or tr.tensor(x, "new_zeros").dtype)


def _new_full(
    tr: _Trace, x: Any, size: Any, fill_value: Any, dtype: Any = None, **kwargs: Any
) -> torch.Tensor:
    return _made(tr, _sizes((size,)), dtype or tr.tensor(x, "new_full").dtype)


def _convert(dtype: torch.dtype | None) -> Callable[..., STensor]:
    """``x.to(...)`` (a dtype, a device, another tensor), ``x.type_as(y)``, ``x.float()``, ``x.long()``,
    ...: ``x`` itself when the dtype stays (as PyTorch returns it), else a ``cast`` copy."""

    def f(tr: _Trace, x: Any, *args: Any, **kwargs: Any) -> STensor:
        xs = tr.tensor(x, "to")
        want = dtype
        for a in (*args, kwargs.get("dtype"), kwargs.get("other")):
            if isinstance(a, torch.dtype):
                want = a
            elif isinstance(a, STensor | torch.Tensor):
                want = a.dtype
            elif isinstance(a, str) and a.startswith("torch."):  # ``x.type("torch.FloatTensor")``
                want = getattr(torch, a.split(".")[-1]).dtype
        if want is None or want == xs.dtype:
            return xs
        return STensor(tr, tr.net.apply("cast", [_t(xs)], name=tr._name("cast", tr.where()),
                                        dtype=network_dtype(want)), want)  # fmt: skip

    return f


def _inplace_random(tr: _Trace, x: Any, *args: Any, **kwargs: Any) -> STensor:
    """``x.bernoulli_(p)`` (``uniform_``, ``normal_``, ``fill_``, ``zero_``): new values in place, the
    same tensor."""
    return tr.tensor(x, "an in-place fill")


def _index_select(tr: _Trace, x: Any, dim: Any, index: Any) -> STensor:
    xs, idx = tr.tensor(x, "index_select"), tr.tensor(index, "index_select")
    if _dim(dim, xs.ndim) != 0 or idx.ndim != 1:
        raise TraceError(f"index_select is supported on dimension 0 with a 1-D index: {user_line()}")
    return _index(tr, xs, idx)


def _index(tr: _Trace, xs: STensor, idx: STensor) -> STensor:
    """``x[idx]`` by an integer tensor: the ``index`` op (``idx``'s shape, then ``x``'s other dimensions)."""
    if idx.dtype.is_floating_point or idx.dtype == torch.bool:
        raise TraceError(
            f"indexing by a {idx.dtype} tensor is not supported (integer indices are): {user_line()}"
        )
    return tr.apply("index", tr.net.apply, "index", [_t(xs), _t(idx)])


def _masked_fill(tr: _Trace, x: Any, mask: Any, value: Any) -> STensor:
    xs, m = tr.tensor(x, "masked_fill"), tr.tensor(mask, "masked_fill")
    if not _number(value) or m.dtype != torch.bool:
        raise TraceError(f"masked_fill is supported with a boolean mask and a number: {user_line()}")
    return tr.apply("masked_fill", tr.net.apply, "masked_fill", [_t(xs), _t(m)], value=float(plain(value)))


def _gather(tr: _Trace, x: Any, dim: Any, index: Any, *, sparse_grad: Any = False) -> STensor:
    xs, idx = tr.tensor(x, "gather"), tr.tensor(index, "gather")
    return tr.apply("gather", tr.net.apply, "gather", [_t(xs), _t(idx)], dim=_dim(dim, xs.ndim))


def _meshgrid(tr: _Trace, *tensors: Any, indexing: Any = "ij") -> tuple[STensor, ...]:
    """``torch.meshgrid(a, b, ..., indexing="ij")`` of 1-D tensors: each one viewed along its own
    dimension and expanded to ``(len(a), len(b), ...)`` (``"xy"``: the first two swapped)."""
    ts = [tr.tensor(t, "meshgrid") for t in _sizes(tensors)]
    if any(t.ndim != 1 for t in ts) or fixed(indexing) not in ("ij", "xy"):
        raise TraceError(f"meshgrid is supported on 1-D tensors with indexing 'ij' or 'xy': {user_line()}")
    order = list(range(len(ts)))
    if fixed(indexing) == "xy" and len(ts) > 1:
        order[:2] = [1, 0]
    full = [ts[j].shape[0] for j in order]
    out = []
    for i, t in enumerate(ts):
        ones = [1] * len(ts)
        ones[order.index(i)] = t.shape[0]
        out.append(_expand(tr, _reshape(tr, t, *ones), *full))
    return tuple(out)


def _identity(tr: _Trace, x: Any, *args: Any, **kwargs: Any) -> STensor:
    return tr.tensor(x, "contiguous")


def _size(tr: _Trace, x: Any, dim: Any = None) -> Any:
    return tr.tensor(x, "size").size(dim)


def _sdpa(
    tr: _Trace,
    q: Any,
    k: Any,
    v: Any,
    attn_mask: Any = None,
    dropout_p: Any = 0.0,
    is_causal: Any = False,
    scale: Any = None,
    enable_gqa: Any = False,
) -> STensor:
    qs, ks, vs = (tr.tensor(t, "scaled_dot_product_attention") for t in (q, k, v))
    mask, bool_mask = _mask(tr, attn_mask, "scaled_dot_product_attention: attn_mask")
    if mask is not None and is_causal:
        raise TraceError(
            "scaled_dot_product_attention: attn_mask with is_causal=True (PyTorch refuses both): "
            f"{user_line()}"
        )
    if fixed(dropout_p) != 0.0:
        if fixed(enable_gqa):
            raise TraceError(f"scaled_dot_product_attention with dropout_p and enable_gqa is not supported: "
                             f"{user_line()}")  # fmt: skip
        return _sdpa_math(tr, qs, ks, vs, attn_mask, float(fixed(dropout_p)), bool(is_causal))
    return tr.apply(
        "sdpa", tr.net.sdpa, _t(qs), _t(ks), _t(vs), causal=bool(is_causal), gqa=bool(enable_gqa), mask=mask,
        bool_mask=bool_mask,
    )  # fmt: skip


def _sdpa_math(
    tr: _Trace, qs: STensor, ks: STensor, vs: STensor, mask: Any, p: float, causal: bool
) -> STensor:
    """``scaled_dot_product_attention`` with dropout as PyTorch's math path runs it (the CPU's kernel
    then): ``dropout(softmax(q @ k^T * scale + mask)) @ v`` (a causal mask: an ``(L, S)`` tensor made
    by the kernel). The scale's value does not change a cost: the trace configuration's."""
    scores = _matmul(tr, qs, _transpose(tr, ks, -2, -1))
    scores = tr.apply("scale", tr.net.scale, _t(scores), 1.0 / float(plain(qs.shape[-1])) ** 0.5)
    if causal:
        mask = _made(tr, (qs.shape[-2], ks.shape[-2]), torch.bool)
    if mask is not None:
        scores = _binary("add")(tr, scores, mask)
    return _matmul(tr, _dropout(tr, _softmax(tr, scores, -1), p), vs)


def _mask(tr: _Trace, m: Any, what: str) -> tuple[Tensor | tuple[Expr, ...] | None, bool]:
    """An attention mask as the DSL takes it: a tensor of the trace (a model input or computed from one),
    or the symbolic shape of a mask the model builds itself (``torch.ones(s, s).tril()``); and whether
    it is boolean."""
    if m is None:
        return None, False
    if isinstance(m, STensor):
        return _t(m), m.is_bool
    if isinstance(m, torch.Tensor) and not isinstance(m, nn.Parameter):
        shape = tr.shape_of(m)
        if shape is None:
            raise TraceError(
                f"{what}: cannot tell how the shape {tuple(m.shape)} of this mask depends on the "
                f"configuration (build it with torch.ones/zeros/full(shape...) and tril/triu/masked_fill, "
                f"or pass it as a model input): {user_line()}"
            )
        with torch._C.DisableTorchFunction():
            is_bool = m.dtype == torch.bool
        if not (is_bool or m.is_floating_point()):
            raise TraceError(f"{what}: the mask must be boolean or floating point: {user_line()}")
        return tuple(shape), is_bool
    raise TraceError(f"{what}: expected a tensor, got {type(m).__name__}: {user_line()}")


def _max_pool(nd: int) -> Callable[..., STensor]:
    def f(
        tr: _Trace,
        x: Any,
        kernel_size: Any,
        stride: Any = None,
        padding: Any = 0,
        dilation: Any = 1,
        ceil_mode: Any = False,
        return_indices: Any = False,
    ) -> STensor:
        _plain_pool(f"max_pool{nd}d", return_indices)
        xs = tr.tensor(x, f"max_pool{nd}d")
        args = (_exprs(kernel_size), _stride(stride), _exprs(padding), _exprs(dilation))
        return tr.apply(f"maxpool{nd}d", tr.net.maxpool, _t(xs), *args, ceil_mode=bool(fixed(ceil_mode)))

    return f


def _avg_pool(nd: int) -> Callable[..., STensor]:
    def f(
        tr: _Trace,
        x: Any,
        kernel_size: Any,
        stride: Any = None,
        padding: Any = 0,
        ceil_mode: Any = False,
        count_include_pad: Any = True,
        divisor_override: Any = None,
    ) -> STensor:
        _plain_pool(f"avg_pool{nd}d", divisor_override is not None)
        xs = tr.tensor(x, f"avg_pool{nd}d")
        args = (_exprs(kernel_size), _stride(stride), _exprs(padding), bool(fixed(count_include_pad)))
        return tr.apply(f"avgpool{nd}d", tr.net.avgpool, _t(xs), *args, ceil_mode=bool(fixed(ceil_mode)))

    return f


def _plain_pool(what: str, other: Any) -> None:
    if fixed(other):
        raise TraceError(f"{what} with return_indices or divisor_override is not supported: {user_line()}")


def _stride(stride: Any) -> Any:
    return None if stride is None or (isinstance(stride, tuple | list) and not stride) else _exprs(stride)


def _adaptive(kind: str, nd: int) -> Callable[..., STensor]:
    def f(tr: _Trace, x: Any, output_size: Any, return_indices: bool = False) -> STensor:
        return _adaptive_op(
            tr, kind, nd, tr.tensor(x, f"adaptive_{kind}_pool{nd}d"), output_size, return_indices
        )

    return f


def _adaptive_op(
    tr: _Trace, kind: str, nd: int, x: STensor, output_size: Any, return_indices: Any
) -> STensor:
    size = output_size if isinstance(output_size, tuple | list) else (output_size,) * nd
    if fixed(return_indices) or any(s is None for s in size):
        raise TraceError(
            f"adaptive pooling with return_indices or None sizes is not supported: {user_line()}"
        )
    method = tr.net.adaptive_maxpool if kind == "max" else tr.net.adaptive_avgpool
    if x.ndim != nd + 2:
        raise GraphError(f"adaptive_{kind}pool{nd}d: expects a {nd + 2}-D input, got {x.ndim}-D")
    return tr.apply(f"adaptive_{kind}pool{nd}d", method, _t(x), _exprs(tuple(size)))


def _activation_fn(op: str) -> Callable[..., STensor]:
    def f(tr: _Trace, x: Any, *args: Any, **kwargs: Any) -> STensor:
        return tr.apply(op, getattr(tr.net, op), _t(tr.tensor(x, op)))

    return f


def _linear_fn(tr: _Trace, x: Any, weight: Any, bias: Any = None) -> STensor:
    """``F.linear(x, weight, bias)``: the ``linear`` op where the weight (shared or not) and the bias are
    parameters of the model; else (Swin V2's qkv bias, a clone) ``x @ weight^T + bias``."""
    if isinstance(weight, nn.Parameter) and weight.ndim == 2 and isinstance(bias, nn.Parameter | None):
        xs = tr.tensor(x, "linear")
        params = _parameters("linear", {"weight": weight, "bias": bias})
        fout, fin = _param_shape(tr, weight)
        y = _linear_op(tr, xs, fout, fin, bias is not None)
        claim(tr, _t(y), params)
        return y
    y = _matmul(tr, x, _transpose(tr, weight, 0, 1))
    return y if bias is None else _binary("add")(tr, y, bias)


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    **{
        n: _activation_fn(n)
        for n in (
            "relu",
            "gelu",
            "silu",
            "sigmoid",
            "tanh",
            "hardswish",
            "hardsigmoid",
            "relu6",
            "mish",
            "elu",
        )
    },
    "leaky_relu": _activation_fn("leaky_relu"),
    "relu_": _activation_fn("relu"),
    "softmax": _softmax,
    "dropout": _dropout,
    "add": _binary("add"),
    "sub": _binary("sub"),
    "__sub__": _binary("sub"),
    "__rsub__": lambda tr, a, b: _binary("sub")(tr, b, a),
    "rsub": lambda tr, a, b: _binary("sub")(tr, b, a),
    "neg": _neg,
    "__neg__": _neg,
    "sum": _reduce("sum"),
    "unsqueeze": _unsqueeze,
    "squeeze": _squeeze,
    "stack": _stack,
    "__add__": _binary("add"),
    "__radd__": lambda tr, a, b: _binary("add")(tr, b, a),
    "__iadd__": _binary("add"),
    "mul": _binary("mul"),
    "__mul__": _binary("mul"),
    "__rmul__": lambda tr, a, b: _binary("mul")(tr, b, a),
    "div": _div,
    "__truediv__": _div,
    "cat": _cat,
    "concat": _cat,
    "flatten": _flatten,
    "view": _reshape,
    "reshape": _reshape,
    "permute": _permute,
    "transpose": _transpose,
    "swapaxes": _transpose,
    "swapdims": _transpose,
    "mean": _reduce("mean"),
    "matmul": _matmul,
    "__matmul__": _matmul,
    "bmm": _bmm,
    "addmm": _addmm,
    "linear": _linear_fn,
    "einsum": _einsum,
    "contiguous": _identity,
    "expand": _expand,
    "chunk": _chunk,
    "split": _split,
    "interpolate": _interpolate,
    "pad": _pad,
    "roll": _roll,
    "select": _select,
    "__getitem__": _getitem,
    "size": _size,
    **{f"{n}_like": _like for n in ("zeros", "ones", "empty", "full", "rand", "randn")},
    **{f"new_{n}": _new for n in ("zeros", "ones", "empty")},
    "new_full": _new_full,
    **{n: _convert(None) for n in ("to", "type", "type_as")},
    **{
        n: _convert(getattr(torch, n)) for n in ("float", "half", "bfloat16", "double", "long", "int", "bool")
    },
    **{n: _inplace_random for n in ("bernoulli_", "uniform_", "normal_", "fill_", "zero_")},
    "index_select": _index_select,
    "gather": _gather,
    "masked_fill": _masked_fill,
    "meshgrid": _meshgrid,
    "scaled_dot_product_attention": _sdpa,
    "max_pool1d": _max_pool(1),
    "max_pool2d": _max_pool(2),
    "avg_pool1d": _avg_pool(1),
    "avg_pool2d": _avg_pool(2),
    "adaptive_avg_pool1d": _adaptive("avg", 1),
    "adaptive_avg_pool2d": _adaptive("avg", 2),
    "adaptive_max_pool1d": _adaptive("max", 1),
    "adaptive_max_pool2d": _adaptive("max", 2),
    **LAYER_FUNCTIONS,
}
