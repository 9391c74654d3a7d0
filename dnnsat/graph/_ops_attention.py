"""Attention methods of :class:`~dnnsat.graph.Network`: ``attention`` (multi-head) and ``sdpa``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..expr import Expr, ExprLike
from ._args import FLAG, _int_expr
from ._core import _NetworkCore
from ._tensor import GraphError, Tensor


class _AttentionOps(_NetworkCore):
    """Multi-head attention and ``F.scaled_dot_product_attention``."""

    # -- attention --------------------------------------------------------------------------------
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
