"""Layout methods of :class:`~dnnsat.graph.Network`: concat, flatten, reshape, permute, views, upsample."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..expr import Expr, ExprLike, ceildiv
from ._args import _axis, _int_expr, _tuple
from ._catalog import lin
from ._core import _NetworkCore
from ._tensor import GraphError, Tensor


class _LayoutOps(_NetworkCore):
    """Concatenation, reshapes, permutations, views (expand, select, narrow, chunk) and upsampling."""

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
