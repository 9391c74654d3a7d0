"""Normalization and elementwise methods of :class:`~dnnsat.graph.Network` (activations, reductions, sums)."""

from __future__ import annotations

import numbers
from typing import Any

from ..expr import Expr, ExprLike
from ._args import _axis, _int_expr
from ._core import _NetworkCore
from ._tensor import GraphError, Tensor


class _ElementwiseOps(_NetworkCore):
    """Normalization layers, activations, elementwise arithmetic and reductions over one dimension."""

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

    def hardsigmoid(self, x: Tensor, name: str | None = None) -> Tensor:
        return self._unary("hardsigmoid", x, name)

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
