"""Checks and normalisation of builder arguments: integer expressions, per-dimension tuples, axes."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

from ..expr import Const, Expr, as_expr
from ._catalog import lin
from ._tensor import GraphError

__all__ = ["FLAG", "conv_pads"]


def _int_expr(value: Any, what: str, where_: str, low: int | None = None) -> Expr:
    """``value`` as an integer expression; a plain int below ``low`` is a :class:`GraphError` at once."""
    try:
        e = as_expr(value)
    except TypeError:
        raise GraphError(f"{where_}: {what} must be an int or an integer expression, got {value!r}") from None
    if e.sort != "int":
        raise GraphError(f"{where_}: {what} must be an integer expression, got {e} of sort {e.sort}")
    if low is not None and not isinstance(value, Expr) and e.value < low:
        raise GraphError(f"{where_}: {what} must be >= {low}, got {value!r}")
    return e


def _tuple(value: Any, n: int, what: str, where_: str, low: int | None = None) -> tuple[Expr, ...]:
    """``n`` integer expressions from one value (repeated) or a tuple/list of ``n`` (as :func:`_int_expr`)."""
    items = list(value) if isinstance(value, tuple | list) else [value] * n
    if len(items) != n:
        raise GraphError(f"{where_}: {what} needs {n} values, got {len(items)}")
    return tuple(_int_expr(v, what, where_, low) for v in items)


FLAG = (False, True)  # the values of a boolean hyperparameter (``bias``, ``causal``, ``bidirectional``)


def conv_pads(padding: Any, kernel: Sequence[Expr], dilation: Sequence[Expr]) -> tuple[Expr, ...]:
    """The F.pad amounts (last dimension first) a ConvNd with a ``padding_mode`` applies before its
    convolution (``_reversed_padding_repeated_twice``): ``padding`` per dimension on both sides;
    ``"same"``: ``dilation * (kernel - 1)`` in all, the odd one on the high side; ``"valid"``: none."""
    pads: list[Expr] = []
    for i in reversed(range(len(kernel))):
        if padding == "same":
            total = lin(dilation[i] * (kernel[i] - 1))
            pads += [total // 2, lin(total - total // 2)]
        else:
            p = Const(0) if padding == "valid" else as_expr(padding[i])
            pads += [p, p]
    return tuple(pads)


def _axis(dim: Any, ndim: int, what: str, where_: str) -> int:
    """A dimension index of a ``ndim``-D tensor, normalised to ``0 <= dim < ndim`` (as PyTorch checks it)."""
    if isinstance(dim, bool) or not isinstance(dim, numbers.Integral) or not -ndim <= int(dim) < ndim:
        raise GraphError(
            f"{where_}: {what} must be an int in [{-ndim}, {ndim - 1}] for a {ndim}-D input, got {dim!r}"
        )
    return int(dim) % ndim
