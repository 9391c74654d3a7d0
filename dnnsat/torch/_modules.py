"""Op mapping for ``torch.nn`` modules (``nn.Linear``, ``nn.Conv2d``, ``nn.MultiheadAttention``,
Transformer layers, ...): the handlers of :data:`_MODULES`, and the ``nn.Module.__call__`` used
during a forward trace (:func:`_module_call`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch.nn as nn
from torch.nn.utils import parametrize

from ..expr import Const, Expr, all_
from ..graph import GraphError, Tensor
from ..graph._args import conv_pads
from ..graph._catalog import eq
from ._errors import TraceError
from ._functions import (
    _activation_fn,
    _adaptive_op,
    _avg_pool,
    _dropout,
    _flatten,
    _interpolate,
    _mask,
    _max_pool,
    _softmax,
)
from ._layers import _batchnorm_op, _conv_op, _exprs, _groupnorm_op, _layernorm_op, _linear_op, claim
from ._symbolic import as_expr_like, expr_of, fixed, user_line
from ._tensor import STensor, _Opaque, _t

if TYPE_CHECKING:
    from ._capture import _Trace


def _own(tr: _Trace, mod: nn.Module, start: int, owned: set[int]) -> None:
    """After ``mod``'s handler added ops from node ``start``: the first with parameters counts ``mod``'s
    (those its submodules' calls did not claim), those ``owned`` by an earlier op shared (:func:`claim`)."""
    params = dict(mod.named_parameters())
    node = next((n for n in tr.net.nodes[start:] if n.info is not None and not _zero(n.info.params)), None)
    if node is not None and params:
        claim(tr, tr.net.tensors[node.output], params, owned)


def _owned(tr: _Trace, mod: nn.Module) -> set[int]:
    """Ids of ``mod``'s parameters an earlier op counts."""
    return {id(p) for p in mod.parameters() if id(p) in tr.owners}


def _called_again(tr: _Trace, mod: nn.Module) -> bool:
    """``mod``'s handler makes several ops with parameters and an earlier op counts some of them."""
    return isinstance(mod, _COMPOSITE) and bool(_owned(tr, mod))


def _zero(e: Expr) -> bool:
    return e.is_const and e.value == 0


def _in(tr: _Trace, x: Any, mod: nn.Module) -> STensor:
    return tr.tensor(x, f"{tr.where()} ({type(mod).__name__})")


def _linear_mod(tr: _Trace, mod: nn.Linear, x: Any) -> STensor:
    xs = _in(tr, x, mod)
    return _linear_op(tr, xs, mod.out_features, mod.in_features, mod.bias is not None)


def _conv_mod(nd: int) -> Callable[..., STensor]:
    def h(tr: _Trace, mod: Any, x: Any) -> STensor:
        xs = _in(tr, x, mod)
        pad = fixed(mod.padding) if isinstance(mod.padding, str) else _exprs(mod.padding)
        mode = fixed(mod.padding_mode)
        if mode != "zeros":  # ``_conv_forward``: F.pad(x, _reversed_padding_repeated_twice, mode), no padding
            pads = conv_pads(pad, _exprs(mod.kernel_size), _exprs(mod.dilation))
            xs = tr.apply("pad", tr.net.pad, _t(xs), pads, mode)
            pad = (0,) * nd
        return _conv_op(
            tr, nd, xs, mod.out_channels, mod.kernel_size, mod.stride, pad, mod.dilation, mod.groups,
            mod.bias is not None, mod.in_channels,
        )  # fmt: skip

    return h


def _conv_transpose_mod(nd: int) -> Callable[..., STensor]:
    def h(tr: _Trace, mod: Any, x: Any, output_size: Any = None) -> STensor:
        if output_size is not None:
            raise TraceError(f"module {tr.where()}: output_size is not supported: {user_line()}")
        xs = _in(tr, x, mod)  # (nn.ConvTransposeNd accepts padding_mode="zeros" only)
        method = {1: tr.net.conv_transpose1d, 2: tr.net.conv_transpose2d, 3: tr.net.conv_transpose3d}[nd]
        y = tr.apply(
            f"conv_transpose{nd}d", method, _t(xs), as_expr_like(mod.out_channels),
            _exprs(mod.kernel_size), _exprs(mod.stride), _exprs(mod.padding), _exprs(mod.output_padding),
            _exprs(mod.dilation), as_expr_like(mod.groups), mod.bias is not None,
        )  # fmt: skip
        tr.bind(y, "in_channels matches the input", eq(_t(xs).shape[1], expr_of(mod.in_channels)))
        return y

    return h


def _batchnorm_mod(tr: _Trace, mod: Any, x: Any) -> STensor:
    xs = _in(tr, x, mod)
    ranks = (4,) if isinstance(mod, nn.BatchNorm2d) else (2, 3)
    if xs.ndim not in ranks:
        raise GraphError(
            f"{tr.where()}: {type(mod).__name__} expects a {' or '.join(map(str, ranks))}-D input"
        )
    return _batchnorm_op(tr, xs, bool(mod.affine), mod.num_features, ranks)


def _layernorm_mod(tr: _Trace, mod: nn.LayerNorm, x: Any) -> STensor:
    xs = _in(tr, x, mod)
    return _layernorm_op(
        tr, xs, tuple(mod.normalized_shape), bool(mod.elementwise_affine), mod.bias is not None
    )


def _rmsnorm_mod(tr: _Trace, mod: nn.RMSNorm, x: Any) -> STensor:
    xs = _in(tr, x, mod)
    shape = tuple(mod.normalized_shape)
    n = len(shape)
    if n > xs.ndim:
        raise GraphError(f"{tr.where()}: normalized_shape has more dimensions than the input")
    y = tr.apply("rmsnorm", tr.net.rmsnorm, _t(xs), n, bool(mod.elementwise_affine))
    rule = all_(eq(d, expr_of(s)) for d, s in zip(_t(xs).shape[xs.ndim - n :], shape))
    tr.bind(y, "normalized_shape matches the input", rule)
    return y


def _upsample_mod(tr: _Trace, mod: nn.Upsample, x: Any) -> STensor:
    return _interpolate(tr, _in(tr, x, mod), mod.size, mod.scale_factor, mod.mode, mod.align_corners)


def _groupnorm_mod(tr: _Trace, mod: nn.GroupNorm, x: Any) -> STensor:
    xs = _in(tr, x, mod)
    return _groupnorm_op(tr, xs, mod.num_groups, bool(mod.affine), mod.num_channels)


def _activation_mod(op: str) -> Callable[..., STensor]:
    def h(tr: _Trace, mod: nn.Module, x: Any) -> STensor:
        return tr.apply(op, getattr(tr.net, op), _t(_in(tr, x, mod)))

    return h


def _softmax_mod(tr: _Trace, mod: nn.Softmax, x: Any) -> STensor:
    return _softmax(tr, _in(tr, x, mod), mod.dim)


def _dropout_mod(tr: _Trace, mod: nn.Dropout, x: Any) -> STensor:
    return _dropout(tr, _in(tr, x, mod), mod.p, mod.training)


def _identity_mod(tr: _Trace, mod: nn.Module, x: Any, *args: Any, **kwargs: Any) -> STensor:
    return _in(tr, x, mod)


def _flatten_mod(tr: _Trace, mod: nn.Flatten, x: Any) -> STensor:
    return _flatten(tr, _in(tr, x, mod), mod.start_dim, mod.end_dim)


def _max_pool_mod(nd: int) -> Callable[..., STensor]:
    def h(tr: _Trace, mod: Any, x: Any) -> STensor:
        return _max_pool(nd)(tr, _in(tr, x, mod), mod.kernel_size, mod.stride, mod.padding, mod.dilation,
                             mod.ceil_mode, mod.return_indices)  # fmt: skip

    return h


def _avg_pool_mod(nd: int) -> Callable[..., STensor]:
    def h(tr: _Trace, mod: Any, x: Any) -> STensor:
        return _avg_pool(nd)(tr, _in(tr, x, mod), mod.kernel_size, mod.stride, mod.padding, mod.ceil_mode,
                             mod.count_include_pad, getattr(mod, "divisor_override", None))  # fmt: skip

    return h


def _adaptive_mod(kind: str, nd: int) -> Callable[..., STensor]:
    def h(tr: _Trace, mod: Any, x: Any) -> STensor:
        return _adaptive_op(
            tr, kind, nd, _in(tr, x, mod), mod.output_size, getattr(mod, "return_indices", False)
        )

    return h


def _embedding_mod(tr: _Trace, mod: nn.Embedding, x: Any) -> STensor:
    if mod.max_norm is not None:
        raise TraceError(f"module {tr.where()}: Embedding with max_norm is not supported: {user_line()}")
    xs = _in(tr, x, mod)
    return tr.apply(
        "embedding",
        tr.net.embedding,
        _t(xs),
        as_expr_like(mod.num_embeddings),
        as_expr_like(mod.embedding_dim),
    )


def _rnn_mod(kind: str) -> Callable[..., Any]:
    def h(tr: _Trace, mod: Any, x: Any, hx: Any = None) -> Any:
        if hx is not None or not mod.batch_first or mod.proj_size:
            raise TraceError(
                f"module {tr.where()}: {type(mod).__name__} is supported with batch_first=True, no initial "
                f"state and no proj_size: {user_line()}"
            )
        xs = _in(tr, x, mod)
        y = tr.apply(
            kind, getattr(tr.net, kind), _t(xs), as_expr_like(mod.hidden_size), int(mod.num_layers),
            bool(mod.bidirectional), bool(mod.bias),
        )  # fmt: skip
        tr.bind(y, "input_size matches the input", eq(_t(xs).shape[-1], expr_of(mod.input_size)))
        # (their forward's kernels keep workspaces the ATen fallback cannot see: no retry through it)
        return y, _Opaque(
            f"the final states of {tr.where()} (use its output: out[:, -1] is the last step's hidden "
            f"state of a one-layer, one-direction {type(mod).__name__})",
            None,
        )

    return h


def _mha_mod(
    tr: _Trace,
    mod: nn.MultiheadAttention,
    query: Any,
    key: Any,
    value: Any,
    key_padding_mask: Any = None,
    need_weights: Any = True,
    attn_mask: Any = None,
    average_attn_weights: Any = True,
    is_causal: Any = False,
    _in_layer: bool = False,
    _fused_layer: bool = False,
) -> Any:
    """``nn.MultiheadAttention`` as the catalog's ``attention`` with its own memory rules (``layout="mha"``),
    with the copy its consumer makes of the transposed output (``attention_output``) and the attention
    weights (``attention_weights``), each alive while the model's code holds the value it belongs to.
    ``_in_layer``: called by a Transformer layer, whose dropout and residual add need no copy;
    ``_fused_layer``: by a ``TransformerEncoderLayer`` that may run ``_transformer_encoder_layer_fwd``,
    whose fast path takes float masks too."""
    if key is not value:
        raise TraceError(
            f"module {tr.where()}: MultiheadAttention is supported as self- or cross-attention (key is "
            f"value): {user_line()}"
        )
    same_kv = mod._qkv_same_embed_dim or mod.kdim == mod.vdim
    if not mod.batch_first or not same_kv or mod.bias_k is not None or mod.add_zero_attn:
        raise TraceError(
            f"module {tr.where()}: MultiheadAttention is supported with batch_first=True, kdim == vdim and "
            f"no add_bias_kv or add_zero_attn: {user_line()}"
        )
    xs = _in(tr, query, mod)
    kv = None if key is query else _in(tr, key, mod)
    for t in (xs, kv):
        if t is not None and t.ndim != 3:
            raise GraphError(f"{tr.where()}: expects (batch, sequence, embed_dim) inputs")
    causal, mask, rules = _mha_masks(
        tr, mod, xs, xs if kv is None else kv, attn_mask, key_padding_mask, need_weights, is_causal
    )
    # ``MultiheadAttention.forward``'s fast path in eval under no_grad (torch 2.13): self-attention, packed
    # weights with a bias, boolean masks only (a fused encoder layer merges float ones too); odd heads and
    # autocast rule it out, which the catalog's rule covers by taking the larger of both paths
    float_mask = any(m is not None and not _mask(tr, m, "mask")[1] for m in (attn_mask, key_padding_mask))
    fast = kv is None and mod.in_proj_bias is not None and (_fused_layer or not float_mask)
    y = tr.apply(
        "attention", tr.net.attention, _t(xs), as_expr_like(mod.num_heads), bias=mod.in_proj_bias is not None,
        kv=None if kv is None else _t(kv), causal=causal, mask=mask, layout="mha",
        need_weights=bool(need_weights), fast_path=fast, dropout=bool(mod.dropout > 0),
    )  # fmt: skip
    for rule, cond in rules:
        tr.bind(y, rule, cond)
    tr.bind(y, "embed_dim matches the input", eq(_t(xs).shape[-1], expr_of(mod.embed_dim)))
    if kv is not None:
        tr.bind(y, "kdim matches the key/value input", eq(_t(kv).shape[-1], expr_of(mod.kdim)))
    if not _in_layer:  # the copy lives as long as the output's value does (its consumer runs within that)
        copy = tr.apply("attention_output", tr.net.apply, "attention_output", [_t(y)])
        y.copy = copy  # type: ignore[attr-defined]
        tr.watch(copy)
    weights = _Opaque(f"the attention weights of {tr.where()}", tr.where())
    if need_weights:  # the weights live while the model's code holds them (``y, _ = ...``: to ``return``)
        src = [_t(y)] if kv is None else [_t(y), _t(kv)]
        w = tr.apply(
            "attention_weights", tr.net.apply, "attention_weights", src, heads=expr_of(mod.num_heads),
            average=bool(average_attn_weights),
        )  # fmt: skip
        weights.tensor = w  # type: ignore[attr-defined]  # freed with the opaque value: see _Trace.watch
        tr.watch(w)
    return y, weights


def _mha_masks(
    tr: _Trace,
    mod: nn.MultiheadAttention,
    xs: STensor,
    kv: STensor,
    attn_mask: Any,
    key_padding_mask: Any,
    need_weights: Any,
    is_causal: Any,
) -> tuple[bool, tuple[Expr, ...] | None, list[tuple[str, Expr]]]:
    """``F.multi_head_attention_forward``'s masks: (causal, the shape of the float mask its scaled
    dot-product gets, PyTorch's shape rules). ``is_causal`` needs ``attn_mask`` and, without a key padding
    mask and attention weights, replaces it (unchecked) by causal attention."""
    what = f"module {tr.where()}: MultiheadAttention"
    am, _ = _mask(tr, attn_mask, f"{what} attn_mask")
    kpm, _ = _mask(tr, key_padding_mask, f"{what} key_padding_mask")
    if is_causal and am is None:
        raise TraceError(f"{what}: is_causal=True needs attn_mask (PyTorch refuses it): {user_line()}")
    if is_causal and kpm is None and not need_weights:
        return True, None, []
    b, s, n = _t(xs).shape[0], _t(xs).shape[1], _t(kv).shape[1]
    h = expr_of(mod.num_heads)
    rules: list[tuple[str, Expr]] = []
    shape: tuple[Expr, ...] | None = None
    if am is not None:
        dims = am.shape if isinstance(am, Tensor) else am
        if len(dims) not in (2, 3):
            raise TraceError(f"{what}: attn_mask must be 2-D or 3-D (PyTorch refuses others): {user_line()}")
        want = (s, n) if len(dims) == 2 else (b * h, s, n)
        rules.append((f"attn_mask has shape {'(L, S)' if len(dims) == 2 else '(N*num_heads, L, S)'}",
                      all_(eq(p, q) for p, q in zip(dims, want))))  # fmt: skip
        shape = (s, n) if len(dims) == 2 else (b, h, s, n)
    if kpm is not None:
        dims = kpm.shape if isinstance(kpm, Tensor) else kpm
        if len(dims) != 2:
            raise TraceError(f"{what}: key_padding_mask must be 2-D (PyTorch refuses others): {user_line()}")
        rules.append(("key_padding_mask has shape (N, S)", eq(dims[0], b) & eq(dims[1], n)))
        shape = (b, Const(1), Const(1), n) if shape is None else (b, h, s, n)  # added to attn_mask
    return False, shape, rules


def _feed_forward(
    tr: _Trace, mod: nn.TransformerEncoderLayer | nn.TransformerDecoderLayer, dropout: nn.Module
) -> Callable[[Any], Any]:
    """The feed-forward block of a Transformer layer: ``dropout(linear2(dropout(act(linear1(y)))))``."""
    act = mod.activation
    if isinstance(act, nn.Module):

        def activation(y: STensor) -> Any:
            return _call(tr, act, y)
    else:
        name = getattr(act, "__name__", "")
        if name not in ("relu", "gelu"):
            raise TraceError(f"module {tr.where()}: activation {act!r} is not supported: {user_line()}")

        def activation(y: STensor) -> Any:
            return _activation_fn(name)(tr, y)

    def ff(y: Any) -> Any:
        h = _call(tr, mod.dropout, activation(_call(tr, mod.linear1, y)))
        return _call(tr, dropout, _call(tr, mod.linear2, h))

    return ff


def _attention_block(
    tr: _Trace, attn: nn.Module, dropout: nn.Module, kv: Any, mask: Any, padding_mask: Any, causal: Any,
    fused: bool = False,
) -> Callable[[Any], Any]:  # fmt: skip
    """A Transformer layer's attention sub-block ``dropout(attn(y, kv, kv)[0])`` (``kv=None``:
    self-attention on ``y``), with the layer's masks (``fused``: the layer may run the fused encoder path)."""

    def block(y: Any) -> Any:
        src = y if kv is None else kv
        more = {"_in_layer": True, "_fused_layer": fused} if isinstance(attn, nn.MultiheadAttention) else {}
        att = _call(
            tr, attn, y, src, src, attn_mask=mask, key_padding_mask=padding_mask, need_weights=False,
            is_causal=bool(causal), **more,
        )  # fmt: skip
        return _call(tr, dropout, att[0])

    return block


def _encoder_layer_mod(
    tr: _Trace, mod: nn.TransformerEncoderLayer, src: Any, src_mask: Any = None,
    src_key_padding_mask: Any = None, is_causal: Any = False,
) -> STensor:  # fmt: skip
    x = _in(tr, src, mod)
    ff = _feed_forward(tr, mod, mod.dropout2)
    # ``torch._transformer_encoder_layer_fwd`` in eval (``TransformerEncoderLayer.forward``, torch 2.13)
    fused = bool(mod.activation_relu_or_gelu) and mod.norm1.eps == mod.norm2.eps
    sa = _attention_block(
        tr, mod.self_attn, mod.dropout1, None, src_mask, src_key_padding_mask, is_causal, fused
    )

    if mod.norm_first:
        x = x + sa(_call(tr, mod.norm1, x))
        return x + ff(_call(tr, mod.norm2, x))  # type: ignore[no-any-return]
    x = _call(tr, mod.norm1, x + sa(x))
    return _call(tr, mod.norm2, x + ff(x))  # type: ignore[no-any-return]


def _decoder_layer_mod(
    tr: _Trace, mod: nn.TransformerDecoderLayer, tgt: Any, memory: Any, tgt_mask: Any = None,
    memory_mask: Any = None, tgt_key_padding_mask: Any = None, memory_key_padding_mask: Any = None,
    tgt_is_causal: Any = False, memory_is_causal: Any = False,
) -> STensor:  # fmt: skip
    x, m = _in(tr, tgt, mod), _in(tr, memory, mod)
    ff = _feed_forward(tr, mod, mod.dropout3)
    sa = _attention_block(
        tr, mod.self_attn, mod.dropout1, None, tgt_mask, tgt_key_padding_mask, tgt_is_causal
    )
    ca = _attention_block(
        tr, mod.multihead_attn, mod.dropout2, m, memory_mask, memory_key_padding_mask, memory_is_causal
    )
    if mod.norm_first:
        x = x + sa(_call(tr, mod.norm1, x))
        x = x + ca(_call(tr, mod.norm2, x))
        return x + ff(_call(tr, mod.norm3, x))  # type: ignore[no-any-return]
    x = _call(tr, mod.norm1, x + sa(x))
    x = _call(tr, mod.norm2, x + ca(x))
    return _call(tr, mod.norm3, x + ff(x))  # type: ignore[no-any-return]


def _encoder_mod(
    tr: _Trace, mod: nn.TransformerEncoder, src: Any, mask: Any = None, src_key_padding_mask: Any = None,
    is_causal: Any = None,
) -> Any:  # fmt: skip
    x = _in(tr, src, mod)
    # ``is_causal=None`` with a mask: PyTorch compares the mask's values with a causal one; a shape
    # rule holds either way, and masked and causal attention cost the same but for memory
    for layer in mod.layers:
        x = _call(
            tr, layer, x, src_mask=mask, src_key_padding_mask=src_key_padding_mask, is_causal=bool(is_causal)
        )
    return _call(tr, mod.norm, x) if mod.norm is not None else x


_MODULES: dict[type, Callable[..., Any]] = {
    nn.Linear: _linear_mod,
    nn.Conv1d: _conv_mod(1),
    nn.Conv2d: _conv_mod(2),
    nn.Conv3d: _conv_mod(3),
    nn.ConvTranspose1d: _conv_transpose_mod(1),
    nn.ConvTranspose2d: _conv_transpose_mod(2),
    nn.ConvTranspose3d: _conv_transpose_mod(3),
    nn.BatchNorm1d: _batchnorm_mod,
    nn.BatchNorm2d: _batchnorm_mod,
    nn.LayerNorm: _layernorm_mod,
    nn.GroupNorm: _groupnorm_mod,
    nn.RMSNorm: _rmsnorm_mod,
    nn.Upsample: _upsample_mod,
    nn.ReLU: _activation_mod("relu"),
    nn.GELU: _activation_mod("gelu"),
    nn.SiLU: _activation_mod("silu"),
    nn.Sigmoid: _activation_mod("sigmoid"),
    nn.Tanh: _activation_mod("tanh"),
    nn.Hardswish: _activation_mod("hardswish"),
    nn.Hardsigmoid: _activation_mod("hardsigmoid"),
    nn.ReLU6: _activation_mod("relu6"),
    nn.LeakyReLU: _activation_mod("leaky_relu"),
    nn.ELU: _activation_mod("elu"),
    nn.Mish: _activation_mod("mish"),
    nn.Softmax: _softmax_mod,
    nn.Dropout: _dropout_mod,
    nn.Identity: _identity_mod,
    nn.Flatten: _flatten_mod,
    nn.MaxPool1d: _max_pool_mod(1),
    nn.MaxPool2d: _max_pool_mod(2),
    nn.AvgPool1d: _avg_pool_mod(1),
    nn.AvgPool2d: _avg_pool_mod(2),
    nn.AdaptiveAvgPool1d: _adaptive_mod("avg", 1),
    nn.AdaptiveAvgPool2d: _adaptive_mod("avg", 2),
    nn.AdaptiveMaxPool1d: _adaptive_mod("max", 1),
    nn.AdaptiveMaxPool2d: _adaptive_mod("max", 2),
    nn.Embedding: _embedding_mod,
    nn.LSTM: _rnn_mod("lstm"),
    nn.GRU: _rnn_mod("gru"),
    nn.MultiheadAttention: _mha_mod,
    nn.TransformerEncoderLayer: _encoder_layer_mod,
    nn.TransformerEncoder: _encoder_mod,
    nn.TransformerDecoderLayer: _decoder_layer_mod,
}
# their ``forward`` takes paths a trace cannot follow (nested tensors, fused fast paths, packed
# sequences): where their handler refuses a call, its message says what to change
_REFUSALS_KEPT = (nn.MultiheadAttention, nn.TransformerEncoderLayer, nn.TransformerEncoder,
                  nn.TransformerDecoderLayer, nn.LSTM, nn.GRU)  # fmt: skip
_FORWARD = "modules traced through forward"  # key in the trace cache: paths of modules (OpaqueUsed)
_COMPOSITE = (nn.TransformerEncoderLayer, nn.TransformerEncoder, nn.TransformerDecoderLayer)
_ORIGINAL_CALL = nn.Module.__call__
_CURRENT: list[_Trace] = []


def _call(tr: _Trace, mod: nn.Module, *args: Any, **kwargs: Any) -> Any:
    """A module call during the forward trace: a supported leaf becomes ops; others, and a supported
    one whose handler refuses the call, run ``forward`` (its functions traced, at the ATen level where
    unmapped)."""
    handler = _handler(type(mod))
    hooked = bool(mod._forward_pre_hooks or mod._forward_hooks)
    forward = (
        hooked or parametrize.is_parametrized(mod) or tr.names.get(id(mod)) in tr.cache.get(_FORWARD, ())
    )
    if handler is not None and (forward or _called_again(tr, mod)):
        # children own or share their parameters one by one (see _own); a hook may compute the weight
        # (spectral_norm), a parametrization does (weight_norm): forward reads it; a module whose
        # secondary output the model uses (MultiheadAttention's weights): its forward makes it
        handler = None
    if hooked:
        return _with_hooks(mod, args, kwargs, lambda *a, **k: _call_unhooked(tr, mod, handler, *a, **k))
    return _call_unhooked(tr, mod, handler, *args, **kwargs)


def _with_hooks(
    mod: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], run: Callable[..., Any]
) -> Any:
    """``run(*args, **kwargs)`` between ``mod``'s forward pre-hooks and forward hooks, as
    ``nn.Module.__call__`` runs them (a hook's result, when not ``None``, replaces the arguments or
    the output)."""
    for key, hook in list(mod._forward_pre_hooks.items()):
        if key in mod._forward_pre_hooks_with_kwargs:
            result = hook(mod, args, kwargs)
            if result is not None:
                args, kwargs = result
        else:
            result = hook(mod, args)
            if result is not None:
                args = result if isinstance(result, tuple) else (result,)
    out = run(*args, **kwargs)
    for key, hook in list(mod._forward_hooks.items()):
        if key in mod._forward_hooks_with_kwargs:
            result = hook(mod, args, kwargs, out)
        else:
            result = hook(mod, args, out)
        if result is not None:
            out = result
    return out


def _call_unhooked(
    tr: _Trace, mod: nn.Module, handler: Callable[..., Any] | None, *args: Any, **kwargs: Any
) -> Any:
    tr.stack.append(tr.names.get(id(mod), type(mod).__name__))
    try:
        if handler is not None:
            start, owned = len(tr.net.nodes), _owned(tr, mod)
            if isinstance(mod, _REFUSALS_KEPT):
                done, out = True, tr.handle(handler, mod, *args, **kwargs)
            else:
                done, out = tr.attempt(handler, mod, *args, **kwargs)
            if done:
                _own(tr, mod, start, owned)
                return out
        return mod.forward(*args, **kwargs)
    finally:
        tr.stack.pop()


def _handler(cls: type) -> Callable[..., Any] | None:
    """The handler of a supported module class, or of its supported base when it keeps the base's
    ``forward`` (``class MyConv(nn.Conv2d)`` with a new ``__init__`` only)."""
    for base in cls.__mro__:
        if base in _MODULES:
            return _MODULES[base] if getattr(cls, "forward", None) is getattr(base, "forward", None) else None
    return None


def _module_call(mod: nn.Module, *args: Any, **kwargs: Any) -> Any:
    if _CURRENT and _CURRENT[-1].forward:
        return _call(_CURRENT[-1], mod, *args, **kwargs)
    return _ORIGINAL_CALL(mod, *args, **kwargs)
