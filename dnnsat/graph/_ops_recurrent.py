"""Recurrent methods of :class:`~dnnsat.graph.Network`: ``lstm`` and ``gru``."""

from __future__ import annotations

from collections.abc import Sequence

from ..expr import Expr, ExprLike
from ._args import FLAG, _int_expr
from ._core import _NetworkCore
from ._tensor import GraphError, Tensor


class _RecurrentOps(_NetworkCore):
    """``nn.LSTM`` and ``nn.GRU`` (``batch_first=True``)."""

    # -- recurrent --------------------------------------------------------------------------------
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
