"""Budgets: limits on a model's costs, with unit strings (``"25M"``, ``"4G"``, ``"16GiB"``, ``"10ms"``)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from ..units import UnitError, parse_quantity
from .memory import AllocatorConfig

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
MIXED = "mixed"  # torch.autocast (bf16 on a CPU, fp16 on CUDA) with fp32 master weights


@dataclass(frozen=True)
class Budget:
    """Limits on a model's costs; every limit is optional.

    ``params`` (count, e.g. ``"25M"``), ``weight_bytes`` (bytes, e.g. ``"100MB"``), ``flops`` (forward
    FLOPs of one batch as the network is built, 1 multiply-add = 2 FLOPs, e.g. ``"4G"``), ``memory``
    (peak bytes of one training step or inference pass, e.g. ``"16GiB"``) and ``latency`` (seconds of
    one inference forward of the batch, e.g. ``"10ms"``) on ``device``: a profile name from
    ``dnnsat devices`` (``"a100-80gb"``), a :class:`~dnnsat.cost.DeviceProfile` or the path of a profile
    JSON written by ``dnnsat calibrate``. With a device and no ``memory``, the memory limit is the
    device's capacity. ``dtype`` (``float32``, ``float16``, ``bfloat16``, ... or ``"mixed"``: a step
    under ``torch.autocast`` with fp32 master weights, each op's output dtype following autocast's op
    lists for the device) sets the bytes per parameter and activation element;
    ``optimizer`` (``sgd`` (default), ``momentum``, ``adam``, ``adamw``), ``mode`` (``"train"`` or
    ``"inference"``: BatchNorm's training rule applies only when training) and ``batch_size`` (for
    models whose input has no batch variable) feed the memory and latency models. ``latency_batch``
    (e.g. 1): the batch size the model is served at; ``latency`` is then the forward of that batch, not
    of the training batch (the network's batch variable, dim 0 of its inputs, set to it), while
    ``memory`` and ``train_step_time`` stay at the training batch. ``dataset_size`` (training samples
    per epoch, e.g. 50000): the last batch of an epoch (a DataLoader's default ``drop_last=False``) has
    ``dataset_size - batch * ((dataset_size - 1) // batch)`` samples; the network's training validity
    rules are checked at that batch too (with 1297 samples and ``batch_size=16`` the last batch holds one
    sample, and BatchNorm after the pooling or in a dense head raises at the end of the first epoch).

    ``gpu_utilization`` (a share, e.g. ``"40%"`` or ``0.4``; GPU devices only) is a lower limit: the
    configuration must keep the GPU at least that busy (cost ``gpu_utilization``: achieved FLOP/s over the
    device's peak for the dtype, from the latency model; of a training step when training, of the
    served forward for ``mode="inference"``). A job that leaves a shared GPU idle wastes it.

    ``margin`` (``0 <= margin < 1``, default 0): a safety margin on the estimated costs, ``memory`` and
    ``latency``: a configuration passes when its estimate is at most ``limit * (1 - margin)`` (with
    ``memory="24GiB", margin=0.05`` the model may use 22.8 GiB); params, weight bytes and FLOPs are
    exact counts and keep their limits. What users do to fit memory (training only):
    ``checkpoint=True`` runs every ``repeat`` block under activation checkpointing
    (``torch.utils.checkpoint``: a block keeps only its input; its backward recomputes its forward);
    ``accumulation_steps=k`` splits the batch (dim 0 of the network inputs, a space variable) into
    ``k`` micro-batches whose gradients accumulate before one optimizer step.

    ``allocator`` (GPU devices): the caching allocator's settings the run uses, as
    ``PYTORCH_CUDA_ALLOC_CONF`` spells them (``"expandable_segments:True,max_split_size_mb:128"``; ``;``
    separates items too), a dict or an :class:`~dnnsat.cost.AllocatorConfig`, plus
    ``memory_fraction`` (``torch.cuda.set_per_process_memory_fraction``). On a GPU the symbolic
    ``memory`` (footprint + allocation peak in 2 MiB segments) is a lower bound of what the GPU reserves;
    ``simulate=True`` also checks the simulated reserved peak plus the footprint configuration by
    configuration (constraint ``"memory_reserved"``). It is off by default because searches then
    simulate every configuration the bound leaves undecided (2-8 ms each: a first ``sample`` or
    pruning of a 10^5-configuration CNN space takes minutes); turn it on when the budget is tight.
    """

    params: int | float | None = None
    weight_bytes: int | float | None = None
    flops: int | float | None = None
    memory: int | float | None = None
    latency: float | None = None
    gpu_utilization: float | None = None  # a lower limit, a share of the peak
    device: str | None = None  # the profile's name
    dtype: str = "float32"
    optimizer: str | None = None
    mode: str = "train"
    batch_size: int | None = None
    latency_batch: int | None = None
    dataset_size: int | None = None
    margin: float = 0.0
    checkpoint: bool = False
    accumulation_steps: int = 1
    allocator: AllocatorConfig = field(default_factory=AllocatorConfig)
    simulate: bool = False
    device_profile: Any = field(default=None, compare=False, repr=False)  # resolved DeviceProfile or None

    def __init__(
        self,
        params: Any = None,
        weight_bytes: Any = None,
        flops: Any = None,
        memory: Any = None,
        latency: Any = None,
        gpu_utilization: Any = None,
        device: Any = None,
        dtype: str = "float32",
        optimizer: str | None = None,
        mode: str = "train",
        batch_size: int | None = None,
        latency_batch: int | None = None,
        dataset_size: int | None = None,
        margin: float = 0.0,
        checkpoint: bool = False,
        accumulation_steps: int = 1,
        allocator: Any = None,
        simulate: bool = False,
    ) -> None:
        def q(value: Any, kind: str, name: str) -> Any:
            try:
                return None if value is None else parse_quantity(value, kind)
            except UnitError as err:
                raise UnitError(f"Budget: {name}: {err}") from None

        if not isinstance(dtype, str) or dtype not in DTYPE_BYTES and dtype != MIXED:
            raise ValueError(f"Budget: unknown dtype {dtype!r}; known: {sorted(DTYPE_BYTES) + [MIXED]}")
        if not isinstance(mode, str) or mode not in ("train", "inference"):
            raise ValueError(f"Budget: mode must be 'train' or 'inference', got {mode!r}")
        if optimizer is not None and (not isinstance(optimizer, str) or optimizer.lower() not in OPTIMIZERS):
            raise ValueError(f"Budget: unknown optimizer {optimizer!r}; known: {list(OPTIMIZERS)}")
        if batch_size is not None and (
            isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1
        ):
            raise ValueError(f"Budget: batch_size must be a positive int, got {batch_size!r}")
        if latency_batch is not None and (
            isinstance(latency_batch, bool) or not isinstance(latency_batch, int) or latency_batch < 1
        ):
            raise ValueError(f"Budget: latency_batch must be a positive int (e.g. 1), got {latency_batch!r}")
        if dataset_size is not None and (
            isinstance(dataset_size, bool) or not isinstance(dataset_size, int) or dataset_size < 1
        ):
            raise ValueError(
                "Budget: dataset_size must be a positive int (training samples per epoch), "
                f"got {dataset_size!r}"
            )
        if isinstance(margin, bool) or not isinstance(margin, int | float) or not 0 <= margin < 1:
            raise ValueError(f"Budget: margin must be a number with 0 <= margin < 1, got {margin!r}")
        if not isinstance(checkpoint, bool):
            raise ValueError(f"Budget: checkpoint must be True or False, got {checkpoint!r}")
        steps = accumulation_steps
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ValueError(f"Budget: accumulation_steps must be a positive int, got {steps!r}")
        if (checkpoint or steps > 1 or dataset_size is not None) and mode != "train":
            raise ValueError(
                "Budget: checkpoint, accumulation_steps and dataset_size apply to training (mode='train')"
            )
        if dataset_size is not None and steps > 1:
            raise ValueError(
                "Budget: dataset_size with accumulation_steps > 1 is not supported (how the last batch is "
                "split into micro-batches depends on the training loop): drop one of them"
            )
        try:
            alloc = AllocatorConfig.of(allocator)
        except (TypeError, ValueError) as err:
            raise ValueError(f"Budget: allocator: {err}") from None
        object.__setattr__(self, "params", q(params, "count", "params"))
        object.__setattr__(self, "weight_bytes", q(weight_bytes, "bytes", "weight_bytes"))
        object.__setattr__(self, "flops", q(flops, "flops", "flops"))
        if latency is not None and device is None:
            raise ValueError(
                "Budget: a latency budget needs a device: Budget(latency=..., device=...), e.g. "
                "device='a100-80gb', 'cpu' or a profile written by `dnnsat calibrate`; see `dnnsat devices`"
            )
        profile = None
        if device is not None:
            from ._devices import get_device

            profile = get_device(device)
            if memory is None and profile.memory_bytes:
                memory = profile.memory_bytes
        object.__setattr__(self, "memory", q(memory, "bytes", "memory"))
        object.__setattr__(self, "latency", q(latency, "time", "latency"))
        share = _utilization(q(gpu_utilization, "share", "gpu_utilization"), profile)
        object.__setattr__(self, "gpu_utilization", share)
        object.__setattr__(self, "device", profile.name if profile is not None else None)
        object.__setattr__(self, "device_profile", profile)
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "optimizer", optimizer.lower() if optimizer else None)
        object.__setattr__(self, "mode", mode)
        object.__setattr__(self, "batch_size", batch_size)
        object.__setattr__(self, "latency_batch", latency_batch)
        object.__setattr__(self, "dataset_size", dataset_size)
        object.__setattr__(self, "margin", float(margin))
        object.__setattr__(self, "checkpoint", checkpoint)
        object.__setattr__(self, "accumulation_steps", steps)
        if alloc != AllocatorConfig() and (profile is None or profile.kind != "gpu"):
            raise ValueError(
                "Budget: allocator settings apply to the CUDA caching allocator: give a GPU device "
                "(e.g. device='a100-80gb') or drop allocator="
            )
        object.__setattr__(self, "allocator", alloc)
        if not isinstance(simulate, bool):
            raise ValueError(f"Budget: simulate must be True or False, got {simulate!r}")
        object.__setattr__(self, "simulate", simulate)

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
        """Bytes per activation element (``"mixed"``: of the 16-bit ones; the memory model gives every
        tensor autocast's dtype)."""
        return 2 if self.dtype == MIXED else DTYPE_BYTES[self.dtype]

    @property
    def train(self) -> bool:
        return self.mode == "train"

    def limits(self) -> dict[str, int | float]:
        """The limits that are set, by cost name (``memory`` and ``latency`` less the ``margin``)."""
        names = ("params", "weight_bytes", "flops", "memory", "latency")
        out = {n: getattr(self, n) for n in names if getattr(self, n) is not None}
        for name in _ESTIMATED:
            if name in out and self.margin:
                out[name] = out[name] * (1 - self.margin)
        return out

    @classmethod
    def parse(cls, text: str) -> Budget:
        """``"params=25M,flops=4G,dtype=float16"`` -> Budget (the CLI's ``--budget``; allocator settings
        are separated by ``;``: ``allocator=expandable_segments:True;max_split_size_mb:128``)."""
        kwargs: dict[str, Any] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            if "=" not in part:
                raise ValueError(f"budget item {part!r} must look like name=value (e.g. params=25M)")
            key, value = (s.strip() for s in part.split("=", 1))
            if key not in _FIELDS:
                raise ValueError(f"unknown budget item {key!r}")
            kwargs[key] = _PARSE.get(key, str)(value)
        return cls(**kwargs)


_FIELDS = frozenset(f.name for f in fields(Budget) if f.name != "device_profile")  # keyword arguments
_ESTIMATED = ("memory", "latency")  # the limits a margin applies to


def _utilization(share: float | None, profile: Any) -> float | None:
    """The ``gpu_utilization`` lower limit, checked: a share in (0, 1] on a GPU device."""
    if share is None:
        return None
    if profile is None or profile.kind != "gpu":
        raise ValueError(
            "Budget: gpu_utilization needs a GPU device: Budget(gpu_utilization='40%', device='h200'); "
            "see `dnnsat devices` for the GPU profiles"
        )
    if not 0 < share <= 1:
        raise ValueError(
            f"Budget: gpu_utilization must be a share in (0, 1], e.g. '40%' or 0.4; got {share!r}"
        )
    return float(share)


def _flag(text: str) -> bool:
    if text.lower() not in ("true", "false", "1", "0"):
        raise ValueError(f"budget item: expected true or false, got {text!r}")
    return text.lower() in ("true", "1")


_PARSE: dict[str, Any] = {
    "batch_size": int,
    "latency_batch": int,
    "dataset_size": int,
    "accumulation_steps": int,
    "margin": float,
    "checkpoint": _flag,
    "simulate": _flag,
    "allocator": AllocatorConfig.parse,  # items separated by ';' on the command line
}
