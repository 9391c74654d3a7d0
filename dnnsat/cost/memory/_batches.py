"""Batch variables of a network's inputs, substituted: the served batch of a latency budget, the
micro-batch of gradient accumulation, the last batch of an epoch."""

from __future__ import annotations

from collections.abc import Callable

from ...expr import Expr, ceildiv
from ...graph import Network

__all__ = ["batch_values", "micro_batches"]


def batch_values(net: Network, size: Callable[[Expr], Expr], what: str) -> dict[str, Expr]:
    """Each batch variable (dim 0 of a network input) -> ``size(batch)``, for :func:`substitute`;
    ``what`` names the option in the error raised when a batch is not a space variable."""
    out: dict[str, Expr] = {}
    for t in net.inputs:
        batch = t.shape[0]
        if batch.op != "var":
            raise ValueError(
                f"{what}: the batch (dim 0 of network input #{t.index}, {batch}) must be a space "
                f"variable (build the input as net.input((v.batch_size, ...)))"
            )
        out[batch.payload[0]] = size(batch)
    return out


def micro_batches(net: Network, steps: int) -> dict[str, Expr]:
    """Gradient accumulation: each batch variable -> the size of the largest of ``steps`` micro-batches,
    ``ceildiv(batch, steps)``."""
    return batch_values(net, lambda batch: ceildiv(batch, steps), f"accumulation_steps={steps}")
