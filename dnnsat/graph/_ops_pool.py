"""Pooling methods of :class:`~dnnsat.graph.Network`: max, average and adaptive pooling."""

from __future__ import annotations

from typing import Any

from ._args import _tuple
from ._core import _NetworkCore
from ._tensor import GraphError, Tensor


class _PoolOps(_NetworkCore):
    """Max, average and adaptive pooling, 1-D or 2-D."""

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
