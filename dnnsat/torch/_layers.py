"""Op mapping for the functional forms of layers (``F.linear``, ``F.conv1d/2d/3d``, ``F.layer_norm``,
``F.group_norm``, ``F.batch_norm`` with the model's own parameters): the catalog op of the module, with
its exact memory rule, and the ``_*_op`` functions the module handlers (``_modules.py``) share."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
import torch.nn as nn

from ..expr import Const, all_, as_expr, sum_
from ..graph import GraphError, Tensor
from ..graph._catalog import eq
from ._errors import TraceError
from ._symbolic import as_expr_like, expr_of, fixed, user_line
from ._tensor import STensor, _t

if TYPE_CHECKING:
    from ._capture import _Trace


def _exprs(x: Any) -> Any:
    """A size argument (an int, a symbolic one, a tuple of them, ``None``) as the Network API takes it."""
    if x is None:
        return None
    if isinstance(x, tuple | list):
        return tuple(as_expr_like(v) for v in x)
    return as_expr_like(x)


def _parameters(what: str, params: dict[str, Any]) -> dict[str, nn.Parameter]:
    """``params`` (name -> tensor or ``None``) without the ``None`` ones; refuses (:class:`TraceError`:
    the caller's other path or the ATen fallback) a tensor that is not a parameter of the model."""
    for pname, p in params.items():
        if p is not None and not isinstance(p, nn.Parameter):
            raise TraceError(f"{what}: {pname} is not a parameter of the model: {user_line()}")
    return {pname: p for pname, p in params.items() if p is not None}


def claim(tr: _Trace, t: Tensor, params: dict[str, Any], owned: set[int] | None = None) -> None:
    """The op that made graph tensor ``t`` counts ``params`` (name -> parameter); those an earlier op counts
    (``owned``: ids, by default those in ``tr.owners``: a module called again, a weight tied to another
    module's) are marked shared on it (:meth:`Network.share`), so each counts once, as in
    ``module.parameters()``."""
    owned = {id(p) for p in params.values() if id(p) in tr.owners} if owned is None else owned
    path = tr.net.nodes[tr.net.producer[t.index]].label.partition(" ")[2]
    shared = [(name, p) for name, p in params.items() if id(p) in owned]
    for name, p in params.items():
        tr.counted.add(id(p))
        tr.owners.setdefault(id(p), (path, name))
    if shared:
        pairs = tuple((name, *tr.owners[id(p)]) for name, p in shared)
        tr.net.share(t, sum_(tr.numel(p) for _, p in shared), pairs)


def _param_shape(tr: _Trace, p: torch.Tensor) -> tuple[Any, ...]:
    """The sizes of a parameter as :class:`SymInt` (:meth:`_Trace.param_shape`)."""
    return tuple(tr.sym(as_expr(d)) for d in tr.param_shape(p))


def _pair(what: str, weight: Any, bias: Any) -> bool:
    """Whether a norm is affine: its catalog op has a weight and a bias, or neither."""
    if (weight is None) != (bias is None):
        raise TraceError(f"{what} with a weight but no bias (or the reverse) is not supported: {user_line()}")
    return weight is not None


def _linear_op(tr: _Trace, xs: STensor, out_features: Any, in_features: Any, bias: bool) -> STensor:
    y = tr.apply("linear", tr.net.linear, _t(xs), as_expr_like(out_features), bias)
    tr.bind(y, "in_features matches the input", eq(_t(xs).shape[-1], expr_of(in_features)))
    return y


def _conv_op(
    tr: _Trace, nd: int, xs: STensor, out_channels: Any, kernel_size: Any, stride: Any, padding: Any,
    dilation: Any, groups: Any, bias: bool, in_channels: Any,
) -> STensor:  # fmt: skip
    method = {1: tr.net.conv1d, 2: tr.net.conv2d, 3: tr.net.conv3d}[nd]
    pad = fixed(padding) if isinstance(padding, str) else _exprs(padding)
    y = tr.apply(
        f"conv{nd}d", method, _t(xs), as_expr_like(out_channels), _exprs(kernel_size), _exprs(stride), pad,
        _exprs(dilation), as_expr_like(groups), bias,
    )  # fmt: skip
    tr.bind(y, "in_channels matches the input", eq(_t(xs).shape[1], expr_of(in_channels)))
    return y


def _conv_fn(nd: int) -> Callable[..., STensor]:
    """``F.conv{nd}d(x, weight, bias, stride, padding, dilation, groups)``: out_channels and the kernel
    from the weight's shape ``(out, in / groups, *kernel)``."""

    def f(
        tr: _Trace, x: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0,
        dilation: Any = 1, groups: Any = 1,
    ) -> STensor:  # fmt: skip
        what = f"conv{nd}d"
        xs = tr.tensor(x, what)
        if getattr(weight, "ndim", None) != nd + 2 or xs.ndim != nd + 2:
            raise TraceError(f"{what}: expects a {nd + 2}-D (batched) input and weight: {user_line()}")
        params = _parameters(what, {"weight": weight, "bias": bias})
        w = _param_shape(tr, weight)
        y = _conv_op(
            tr, nd, xs, w[0], w[2:], stride, padding, dilation, groups, bias is not None, w[1] * groups
        )
        claim(tr, _t(y), params)
        return y

    return f


def _layernorm_op(tr: _Trace, xs: STensor, shape: tuple[Any, ...], affine: bool, bias: bool) -> STensor:
    n = len(shape)
    if n > xs.ndim:
        raise GraphError(f"{tr.where()}: normalized_shape has more dimensions than the input")
    y = tr.apply("layernorm", tr.net.layernorm, _t(xs), n, affine, bias)
    rule = all_(eq(d, expr_of(s)) for d, s in zip(_t(xs).shape[xs.ndim - n :], shape))
    tr.bind(y, "normalized_shape matches the input", rule)
    return y


def _layer_norm_fn(
    tr: _Trace, x: Any, normalized_shape: Any, weight: Any = None, bias: Any = None, eps: Any = 1e-5
) -> STensor:
    """``F.layer_norm`` (ConvNeXt's channels-last ``LayerNorm2d``); a bias without a weight: refused."""
    xs = tr.tensor(x, "layer_norm")
    shape = tuple(normalized_shape) if isinstance(normalized_shape, tuple | list) else (normalized_shape,)
    if weight is None and bias is not None:
        raise TraceError(f"layer_norm with a bias but no weight is not supported: {user_line()}")
    params = _parameters("layer_norm", {"weight": weight, "bias": bias})
    y = _layernorm_op(tr, xs, shape, weight is not None, bias is not None)
    claim(tr, _t(y), params)
    for p in (weight, bias):
        if p is not None:
            _bind_shape(tr, y, "weight and bias have normalized_shape", _param_shape(tr, p), shape)
    return y


def _bind_shape(tr: _Trace, y: STensor, rule: str, shape: tuple[Any, ...], want: tuple[Any, ...]) -> None:
    ok = len(shape) == len(want)
    tr.bind(y, rule, all_(eq(expr_of(d), expr_of(s)) for d, s in zip(shape, want)) if ok else Const(False))


def _groupnorm_op(tr: _Trace, xs: STensor, groups: Any, affine: bool, channels: Any) -> STensor:
    """``groupnorm`` (``channels``: the declared ones, or ``None``)."""
    y = tr.apply("groupnorm", tr.net.groupnorm, _t(xs), as_expr_like(groups), affine=affine)
    if channels is not None:
        tr.bind(y, "num_channels matches the input", eq(_t(xs).shape[1], expr_of(channels)))
    return y


def _group_norm_fn(
    tr: _Trace, x: Any, num_groups: Any, weight: Any = None, bias: Any = None, eps: Any = 1e-5
) -> STensor:
    xs = tr.tensor(x, "group_norm")
    affine = _pair("group_norm", weight, bias)
    params = _parameters("group_norm", {"weight": weight, "bias": bias})
    y = _groupnorm_op(tr, xs, num_groups, affine, _channels(tr, weight))
    claim(tr, _t(y), params)
    return y


def _channels(tr: _Trace, weight: Any) -> Any:
    """The channels a norm's weight declares (its first size), or ``None`` (no weight)."""
    return None if weight is None else _param_shape(tr, weight)[0]


def _batchnorm_op(tr: _Trace, xs: STensor, affine: bool, features: Any, ranks: tuple[int, ...]) -> STensor:
    """``batchnorm`` of an input of one of ``ranks`` (``features``: the declared ones, or ``None``)."""
    if xs.ndim not in ranks:
        raise GraphError(f"{tr.where()}: batch norm expects a {' or '.join(map(str, ranks))}-D input")
    y = tr.apply("batchnorm", tr.net.batchnorm, _t(xs), affine=affine)
    if features is not None:
        tr.bind(y, "num_features matches the input", eq(_t(xs).shape[1], expr_of(features)))
    return y


def _batch_norm_fn(
    tr: _Trace, x: Any, running_mean: Any, running_var: Any, weight: Any = None, bias: Any = None,
    training: Any = False, momentum: Any = 0.1, eps: Any = 1e-5,
) -> STensor:  # fmt: skip
    """``F.batch_norm`` of a 2- to 4-D input (its running statistics: the catalog's buffers)."""
    xs = tr.tensor(x, "batch_norm")
    affine = _pair("batch_norm", weight, bias)
    if xs.ndim not in (2, 3, 4):
        raise TraceError(
            f"batch_norm of a {xs.ndim}-D input is not supported (2-D to 4-D are): {user_line()}"
        )
    params = _parameters("batch_norm", {"weight": weight, "bias": bias})
    y = _batchnorm_op(tr, xs, affine, _channels(tr, weight), (2, 3, 4))
    claim(tr, _t(y), params)
    return y


LAYER_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "layer_norm": _layer_norm_fn,
    "group_norm": _group_norm_fn,
    "batch_norm": _batch_norm_fn,
    **{f"conv{nd}d": _conv_fn(nd) for nd in (1, 2, 3)},
}
