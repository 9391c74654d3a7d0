"""Budgets: limits on a model's costs, with unit strings (``"25M"``, ``"4G"``, ``"16GiB"``, ``"10ms"``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..units import parse_quantity

__all__ = ["Budget", "CostModelUnavailable", "DTYPE_BYTES", "OPTIMIZERS"]

DTYPE_BYTES = {
    "float32": 4,
    "fp32": 4,
    "float16": 2,
    "fp16": 2,
    "bfloat16": 2,
    "bf16": 2,
    "float64": 8,
    "int8": 1,
    "float8": 1,
    "fp8": 1,
}
OPTIMIZERS = ("sgd", "momentum", "adam", "adamw")


class CostModelUnavailable(NotImplementedError):
    """A budget uses a cost (memory, latency) whose model is not available in this version."""


@dataclass(frozen=True)
class Budget:
    """Limits on a model's costs; every limit is optional.

    ``params`` (count, e.g. ``"25M"``), ``weight_bytes`` (bytes, e.g. ``"100MB"``), ``flops`` (forward
    FLOPs of one batch as the network is built, 1 multiply-add = 2 FLOPs, e.g. ``"4G"``), ``memory``
    (bytes) and ``latency`` (seconds or ``"10ms"``) with ``device`` (a device profile name).
    ``dtype`` sets the bytes per parameter and activation element; ``optimizer`` (``sgd``, ``momentum``,
    ``adam``, ``adamw``), ``mode`` (``"train"`` or ``"inference"``: BatchNorm's training rule applies
    only when training) and ``batch_size`` (for models whose input has no batch variable) feed the
    memory and latency models.
    """

    params: int | float | None = None
    weight_bytes: int | float | None = None
    flops: int | float | None = None
    memory: int | float | None = None
    latency: float | None = None
    device: str | None = None
    dtype: str = "float32"
    optimizer: str | None = None
    mode: str = "train"
    batch_size: int | None = None

    def __init__(
        self,
        params: Any = None,
        weight_bytes: Any = None,
        flops: Any = None,
        memory: Any = None,
        latency: Any = None,
        device: str | None = None,
        dtype: str = "float32",
        optimizer: str | None = None,
        mode: str = "train",
        batch_size: int | None = None,
    ) -> None:
        def q(value: Any, kind: str) -> Any:
            return None if value is None else parse_quantity(value, kind)

        if dtype not in DTYPE_BYTES:
            raise ValueError(f"Budget: unknown dtype {dtype!r}; known: {sorted(DTYPE_BYTES)}")
        if mode not in ("train", "inference"):
            raise ValueError(f"Budget: mode must be 'train' or 'inference', got {mode!r}")
        if optimizer is not None and optimizer.lower() not in OPTIMIZERS:
            raise ValueError(f"Budget: unknown optimizer {optimizer!r}; known: {list(OPTIMIZERS)}")
        if batch_size is not None and (
            isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1
        ):
            raise ValueError(f"Budget: batch_size must be a positive int, got {batch_size!r}")
        object.__setattr__(self, "params", q(params, "count"))
        object.__setattr__(self, "weight_bytes", q(weight_bytes, "bytes"))
        object.__setattr__(self, "flops", q(flops, "flops"))
        object.__setattr__(self, "memory", q(memory, "bytes"))
        object.__setattr__(self, "latency", q(latency, "time"))
        object.__setattr__(self, "device", device)
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "optimizer", optimizer.lower() if optimizer else None)
        object.__setattr__(self, "mode", mode)
        object.__setattr__(self, "batch_size", batch_size)

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def train(self) -> bool:
        return self.mode == "train"

    def limits(self) -> dict[str, int | float]:
        """The limits that are set, by cost name."""
        names = ("params", "weight_bytes", "flops", "memory", "latency")
        return {n: getattr(self, n) for n in names if getattr(self, n) is not None}

    @classmethod
    def parse(cls, text: str) -> Budget:
        """``"params=25M,flops=4G,dtype=float16"`` -> Budget (the CLI's ``--budget``)."""
        kwargs: dict[str, Any] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            if "=" not in part:
                raise ValueError(f"budget item {part!r} must look like name=value (e.g. params=25M)")
            key, value = (s.strip() for s in part.split("=", 1))
            if key not in (
                "params",
                "weight_bytes",
                "flops",
                "memory",
                "latency",
                "device",
                "dtype",
                "optimizer",
                "mode",
                "batch_size",
            ):
                raise ValueError(f"unknown budget item {key!r}")
            kwargs[key] = int(value) if key == "batch_size" else value
        return cls(**kwargs)
