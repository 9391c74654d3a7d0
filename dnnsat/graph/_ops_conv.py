"""Convolution methods of :class:`~dnnsat.graph.Network`: ``conv1d/2d/3d``, transposed ones, ``pad``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..expr import Const, ExprLike
from ._args import FLAG, _int_expr, _tuple, conv_pads
from ._catalog import PAD_MODES
from ._core import _NetworkCore
from ._tensor import GraphError, Tensor


class _ConvOps(_NetworkCore):
    """Convolutions (``nn.ConvNd``, ``nn.ConvTransposeNd``, depthwise, pointwise) and ``F.pad``."""

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

    def conv_transpose3d(
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
        """``nn.ConvTranspose3d`` on ``(B, C, D, H, W)``."""
        return self._conv_transpose(
            3, x, out_channels, kernel_size, stride, padding, output_padding, dilation, groups, bias, name
        )
