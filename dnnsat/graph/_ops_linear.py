"""Dense methods of :class:`~dnnsat.graph.Network`: linear, matmul, bmm, einsum and embedding."""

from __future__ import annotations

from ..expr import ExprLike
from ._args import FLAG, _int_expr
from ._catalog import einsum_subscripts
from ._core import _NetworkCore
from ._tensor import GraphError, Tensor


class _LinearOps(_NetworkCore):
    """Matrix products and lookups: ``nn.Linear``, ``torch.matmul``/``bmm``/``einsum``, ``nn.Embedding``."""

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
