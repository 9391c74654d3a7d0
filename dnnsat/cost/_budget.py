"""Budgets: limits on a model's costs, with unit strings (``"25M"``, ``"4G"``, ``"16GiB"``, ``"10ms"``)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from ..units import parse_quantity

__all__ = ["Budget", "DTYPE_BYTES", "OPTIMIZERS", "MIXED"]

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
MIXED = "mixed"  # automatic mixed precision: fp16 activations and compute, fp32 master weights


@dataclass(frozen=True)
class Budget:
    """Limits on a model's costs; every limit is optional.

    ``params`` (count, e.g. ``"25M"``), ``weight_bytes`` (bytes, e.g. ``"100MB"``), ``flops`` (forward
    FLOPs of one batch as the network is built, 1 multiply-add = 2 FLOPs, e.g. ``"4G"``), ``memory``
    (peak bytes of one training step or inference pass, e.g. ``"16GiB"``) and ``latency`` (seconds of
    one inference forward of the batch, e.g. ``"10ms"``) on ``device``: a profile name from
    ``dnnsat devices`` (``"a100-80gb"``), a :class:`~dnnsat.cost.DeviceProfile` or the path of a profile
    JSON written by ``dnnsat calibrate``. With a device and no ``memory``, the memory limit is the
    device's capacity. ``dtype`` (``float32``, ``float16``, ``bfloat16``, ... or ``"mixed"``: fp16
    activations with fp32 master weights) sets the bytes per parameter and activation element;
    ``optimizer`` (``sgd`` (default), ``momentum``, ``adam``, ``adamw``), ``mode`` (``"train"`` or
    ``"inference"``: BatchNorm's training rule applies only when training) and ``batch_size`` (for
    models whose input has no batch variable) feed the memory and latency models.
    """

    params: int | float | None = None
    weight_bytes: int | float | None = None
    flops: int | float | None = None
    memory: int | float | None = None
    latency: float | None = None
    device: str | None = None  # the profile's name
    dtype: str = "float32"
    optimizer: str | None = None
    mode: str = "train"
    batch_size: int | None = None
    device_profile: Any = field(default=None, compare=False, repr=False)  # resolved DeviceProfile or None

    def __init__(
        self,
        params: Any = None,
        weight_bytes: Any = None,
        flops: Any = None,
        memory: Any = None,
        latency: Any = None,
        device: Any = None,
        dtype: str = "float32",
        optimizer: str | None = None,
        mode: str = "train",
        batch_size: int | None = None,
    ) -> None:
        def q(value: Any, kind: str) -> Any:
            return None if value is None else parse_quantity(value, kind)

        if dtype not in DTYPE_BYTES and dtype != MIXED:
            raise ValueError(f"Budget: unknown dtype {dtype!r}; known: {sorted(DTYPE_BYTES) + [MIXED]}")
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
        profile = None
        if device is not None:
            from ._devices import get_device

            profile = get_device(device)
            if memory is None and profile.memory_bytes:
                memory = profile.memory_bytes
        object.__setattr__(self, "memory", q(memory, "bytes"))
        object.__setattr__(self, "latency", q(latency, "time"))
        object.__setattr__(self, "device", profile.name if profile is not None else None)
        object.__setattr__(self, "device_profile", profile)
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "optimizer", optimizer.lower() if optimizer else None)
        object.__setattr__(self, "mode", mode)
        object.__setattr__(self, "batch_size", batch_size)

    @property
    def dtype_bytes(self) -> int:
        """Bytes per activation element (2 for ``"mixed"``)."""
        return self.act_bytes

    @property
    def param_bytes(self) -> int:
        """Bytes per stored parameter element (fp32 master weights for ``"mixed"``)."""
        return 4 if self.dtype == MIXED else DTYPE_BYTES[self.dtype]

    @property
    def act_bytes(self) -> int:
        """Bytes per activation element."""
        return 2 if self.dtype == MIXED else DTYPE_BYTES[self.dtype]

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
            if key not in _FIELDS:
                raise ValueError(f"unknown budget item {key!r}")
            kwargs[key] = int(value) if key == "batch_size" else value
        return cls(**kwargs)


_FIELDS = frozenset(f.name for f in fields(Budget) if f.name != "device_profile")  # keyword arguments
