"""Device profiles: the catalog in ``devices.yaml``, JSON profiles, and looking devices up by name.

A :class:`DeviceProfile` holds what the latency and memory models need: peak FLOP/s per dtype
(1 multiply-add = 2 FLOPs; dense tensor-core figures under ``*_tensor`` keys), DRAM bandwidth (bytes/s),
memory size (bytes), the per-kernel launch/dispatch overhead (seconds), the CUDA context size (bytes),
the device memory of the GPU libraries a network loads (bytes, :attr:`DeviceProfile.libraries`), the
cuBLAS workspace PyTorch allocates (bytes) and efficiency factors (share of the peak that real
kernels reach: ``compute``, ``memory`` and optional per-op-class compute factors such as ``conv`` or
``elementwise``, see :mod:`dnnsat.cost.latency`).
Every number of a catalog entry has a source in ``sources``. Fitting a profile's factors to measured
latencies: :func:`~dnnsat.cost.latency.fit_device`; a CPU's kernels: :mod:`dnnsat.cost._cpu_backend`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from ._cpu_backend import _ISA_FLAGS, CPU_ISAS, CpuBackend, detect_cpu_backend

__all__ = [
    "CATALOG_PATH",
    "KINDS",
    "DeviceProfile",
    "UnknownDeviceError",
    "get_device",
    "list_devices",
]

CATALOG_PATH = Path(__file__).with_name("devices.yaml")
NUMBERS = (
    "peak_flops",
    "memory_bandwidth",
    "memory_bytes",
    "launch_overhead_s",
    "context_bytes",
    "libraries",
    "cublas_workspace_bytes",
    "efficiency",
)
# device kinds (see DeviceProfile): how the latency model schedules and costs ops
KINDS = ("gpu", "cpu", "mobile_cpu", "accelerator")
# accelerator-only fields: the PE array's mapping dimensions and the on-chip buffer (bytes)
ACCELERATOR_NUMBERS = ("array_rows", "array_cols", "buffer_bytes")
# GPU software stacks whose handles and loaded kernels take device memory outside PyTorch's allocator
LIBRARIES = ("cublas", "cudnn", "attention")

# dtype -> peak_flops keys, fastest unit first (PyTorch's defaults: fp32 matmul/conv on the vector
# units, as torch.backends.cuda.matmul.allow_tf32 is False; fp16/bf16 on tensor cores when present)
_UNITS = {
    "float32": ("fp32",),
    "float64": ("fp64", "fp32"),
    "float16": ("fp16_tensor", "fp16", "fp32"),
    "mixed": ("fp16_tensor", "fp16", "fp32"),
    "bfloat16": ("bf16_tensor", "bf16", "fp32"),
    # 8-bit inference: the catalog lists no int8/fp8 peaks, so these run at the 16-bit peak (conservative)
    "int8": ("int8_tensor", "fp16_tensor", "fp16", "fp32"),
    "float8": ("fp8_tensor", "fp16_tensor", "fp16", "fp32"),
}
_DTYPE_ALIASES = {
    "fp32": "float32",
    "fp16": "float16",
    "bf16": "bfloat16",
    "fp64": "float64",
    "fp8": "float8",
}


class UnknownDeviceError(ValueError):
    """A device name that is neither in the catalog nor a profile file."""


@dataclass(frozen=True)
class DeviceProfile:
    """One device. Units: FLOP/s, bytes/s, bytes, seconds; ``efficiency`` values are shares of the peaks.

    A fitted factor may exceed 1 where the peak is a measured number (``calibrate``) that some ops beat,
    e.g. tensors that stay in cache move faster than a DRAM copy. ``probed``: the op classes whose
    ``efficiency`` factor a probe op measured on the device (``calibrate``); :func:`fit_device` holds
    them near that value unless the samples clearly disagree (``()``: none, e.g. catalog entries).

    ``channel_block``: GEMM-like kernels process channels in blocks of this many elements (SIMD lanes
    on a CPU, e.g. 16 fp32 lanes with AVX-512); the latency model pads their work to whole blocks.
    ``cache_bytes``/``cache_bandwidth``: an op whose bytes moved fit in this cache runs at the cache's
    bandwidth instead of ``memory_bandwidth`` (0: not modelled).
    ``kind`` (:data:`KINDS`) is ``"gpu"`` (kernels run asynchronously to the host's dispatch: the latency
    model overlaps launch overhead with kernel time), ``"cpu"`` (a desktop/server CPU running PyTorch eager:
    dispatch and kernels run one after the other), ``"mobile_cpu"`` (a phone or board CPU running a
    deployment runtime such as TFLite/XNNPACK: ops run one after the other, each with the runtime's
    per-op overhead ``launch_overhead_s``; eval-mode batch norms are folded into the preceding
    convolution; ``channel_block`` is the NEON width, ``cache_bytes``/``cache_bandwidth`` its L2) or
    ``"accelerator"`` (a systolic-array ASIC or FPGA design: layers run one after the other on a PE array
    of ``array_rows`` x ``array_cols`` multiply-accumulate units with an on-chip buffer of
    ``buffer_bytes``; see :mod:`dnnsat.cost.latency` for the mapping and DRAM-traffic rules).
    ``array_rows``/``array_cols``/``buffer_bytes`` are required for an accelerator and 0 otherwise.
    ``parallel_overhead_s`` (CPUs, mobile CPUs; seconds): the extra fixed cost of each GEMM-like op
    (convolution, matmul), which the runtime splits across the cores through a thread pool (wake-up,
    work distribution, barrier); 0: not modelled (nor fitted).
    ``conv_overhead_s`` (CPUs; seconds): the extra fixed cost of each convolution PyTorch's eager mode runs
    through oneDNN (primitive creation, reorder calls); where it is > 0 the latency model also charges
    the reorders of the plain-layout input, weights and output to oneDNN's blocked layout and back
    (``calibrate`` measures it; 0: neither modelled, e.g. catalog CPUs, whose convolutions are fitted as
    a whole). ``threads`` (CPUs): the thread count PyTorch runs with (0: not known, taken as several),
    which decides which convolutions PyTorch hands to oneDNN (:mod:`dnnsat.cost.latency`).
    ``isa`` (CPU): the oneDNN ISA its kernels use (:data:`CPU_ISAS`), which sets the memory model's
    convolution buffers; ``""``: derived from ``channel_block`` (16: ``avx512_core``, else ``avx2``).
    In the catalog, ``isa: local`` means this machine's, detected at run time with ``channel_block``.

    GPU memory outside PyTorch's caching allocator (the *footprint*, see
    :mod:`dnnsat.cost.memory._footprint`): ``context_bytes`` (the CUDA context with PyTorch's own kernels) and
    ``libraries``: bytes each software stack takes once a network uses it (:data:`LIBRARIES`: ``cublas``
    handle and GEMM kernels, ``cudnn`` handle and convolution/normalisation/RNN kernels, ``attention`` kernels
    of scaled-dot-product attention). ``cublas_workspace_bytes``: the workspace PyTorch allocates through its
    caching allocator for the cuBLAS handle at the first GEMM (``CUBLAS_WORKSPACE_CONFIG``).
    """

    name: str
    kind: str
    peak_flops: Mapping[str, float]
    memory_bandwidth: float
    memory_bytes: int
    launch_overhead_s: float
    context_bytes: int = 0
    libraries: Mapping[str, int] = field(default_factory=dict)
    cublas_workspace_bytes: int = 0
    channel_block: int = 1
    isa: str = ""
    cache_bytes: int = 0
    cache_bandwidth: float = 0.0
    parallel_overhead_s: float = 0.0
    conv_overhead_s: float = 0.0
    threads: int = 0
    array_rows: int = 0
    array_cols: int = 0
    buffer_bytes: int = 0
    efficiency: Mapping[str, float] = field(default_factory=lambda: {"compute": 0.5, "memory": 0.7})
    sources: Mapping[str, str] = field(default_factory=dict)
    description: str = ""
    aliases: tuple[str, ...] = ()
    probed: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(
                f"device {self.name!r}: kind must be one of {', '.join(map(repr, KINDS))}, got {self.kind!r}"
            )
        accel = {k: getattr(self, k) for k in ACCELERATOR_NUMBERS}
        if self.kind == "accelerator":
            for key, value in accel.items():
                if not (isinstance(value, int) and value >= 1):
                    raise ValueError(
                        f"device {self.name!r}: an accelerator needs {key!r} >= 1 (array_rows/array_cols: "
                        "the PE array's mapping dimensions, buffer_bytes: its on-chip buffer in bytes), "
                        f"got {value!r}"
                    )
        if not self.parallel_overhead_s >= 0 or (
            self.parallel_overhead_s and self.kind not in ("cpu", "mobile_cpu")
        ):
            raise ValueError(
                f"device {self.name!r}: parallel_overhead_s must be >= 0 seconds and only applies to kinds "
                f"'cpu' and 'mobile_cpu' (this one is {self.kind!r}), got {self.parallel_overhead_s!r}"
            )
        if (
            not self.conv_overhead_s >= 0
            or not self.threads >= 0
            or ((self.conv_overhead_s or self.threads) and self.kind != "cpu")
        ):
            raise ValueError(
                f"device {self.name!r}: conv_overhead_s (seconds) and threads must be >= 0 and only apply to "
                f"kind 'cpu' (this one is {self.kind!r}), got {self.conv_overhead_s!r}, {self.threads!r}"
            )
        if self.kind != "accelerator" and any(accel.values()):
            raise ValueError(
                f"device {self.name!r}: {', '.join(k for k, v in accel.items() if v)} only apply to "
                f"kind 'accelerator' (this one is {self.kind!r}); remove them or set kind: accelerator"
            )
        if "fp32" not in self.peak_flops:
            raise ValueError(f"device {self.name!r}: peak_flops needs an 'fp32' entry (FLOP/s)")
        for key in ("compute", "memory"):
            if key not in self.efficiency:
                raise ValueError(f"device {self.name!r}: efficiency needs a {key!r} factor")
        bad = {k: v for k, v in {**self.peak_flops, **self.efficiency}.items() if not v > 0}
        ok = self.memory_bandwidth > 0 and self.launch_overhead_s >= 0 and self.channel_block >= 1
        if bad or not ok or (self.cache_bytes > 0 and not self.cache_bandwidth > 0):
            raise ValueError(
                f"device {self.name!r}: peaks, bandwidth and efficiencies must be positive ({bad})"
            )
        unprobed = [c for c in self.probed if c not in self.efficiency]
        if unprobed:
            raise ValueError(
                f"device {self.name!r}: probed names op classes whose efficiency a probe op measured; "
                f"{unprobed} have no factor in efficiency (add it or remove them from probed)"
            )
        odd = {k: v for k, v in self.libraries.items() if k not in LIBRARIES or v < 0}
        if odd or self.cublas_workspace_bytes < 0 or self.context_bytes < 0:
            raise ValueError(
                f"device {self.name!r}: libraries maps {', '.join(LIBRARIES)} to bytes >= 0 and "
                f"context_bytes/cublas_workspace_bytes are bytes >= 0, got libraries={dict(self.libraries)}"
            )
        if self.isa and (self.kind != "cpu" or self.isa not in _ISA_FLAGS):
            raise ValueError(
                f"device {self.name!r}: isa must be empty for a GPU, mobile CPU or accelerator and one of "
                f"{', '.join(CPU_ISAS)} for a CPU, got {self.isa!r}"
            )

    def cpu_backend(self) -> CpuBackend:
        """The :class:`CpuBackend` of a CPU profile (``isa``, else derived from ``channel_block``).

        A mobile CPU or an accelerator (whose host memory is modelled like a CPU's) has no oneDNN x86-64
        kernels: ``isa`` ``""`` (buffers modelled like AVX2's, unvalidated)."""
        if self.kind in ("mobile_cpu", "accelerator"):
            note = f"device profile {self.name!r} ({self.kind}: no oneDNN x86-64 kernels)"
            return CpuBackend("", source=note)
        if self.kind != "cpu":
            raise ValueError(f"device {self.name!r} is a {self.kind}, not a CPU")
        isa = self.isa or ("avx512_core" if self.channel_block >= 16 else "avx2")
        return CpuBackend(isa, source=f"device profile {self.name!r}")

    def peak(self, dtype: str = "float32") -> float:
        """Peak FLOP/s PyTorch can use for ``dtype`` (``float32``, ``float16``, ``bfloat16``, ``mixed``)."""
        units = _UNITS.get(_DTYPE_ALIASES.get(dtype, dtype))
        if units is None:
            raise ValueError(f"peak: no compute unit for dtype {dtype!r}; known: {sorted(_UNITS)}")
        return float(next(self.peak_flops[u] for u in (*units, "fp32") if u in self.peak_flops))

    def replace(self, **changes: Any) -> DeviceProfile:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["peak_flops"], d["efficiency"], d["sources"], d["libraries"] = (
            dict(self.peak_flops),
            dict(self.efficiency),
            dict(self.sources),
            dict(self.libraries),
        )
        d["aliases"] = list(self.aliases)
        d["probed"] = list(self.probed)
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DeviceProfile:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"device profile: unknown fields {sorted(unknown)}; known: {sorted(known)}")
        missing = {"name", "kind", "peak_flops", "memory_bandwidth", "memory_bytes", "launch_overhead_s"}
        missing -= set(data)
        if missing:
            raise ValueError(
                f"device profile: missing fields {sorted(missing)} (add them; units: peak_flops FLOP/s "
                "per dtype with an 'fp32' entry, memory_bandwidth bytes/s, memory_bytes bytes, "
                "launch_overhead_s seconds)"
            )
        d = dict(data)
        d["peak_flops"] = {k: float(v) for k, v in d["peak_flops"].items()}
        d["memory_bandwidth"] = float(d["memory_bandwidth"])
        d["memory_bytes"] = int(d["memory_bytes"])
        d["launch_overhead_s"] = float(d["launch_overhead_s"])
        d["context_bytes"] = int(d.get("context_bytes", 0))
        d["libraries"] = {str(k): int(v) for k, v in (d.get("libraries") or {}).items()}
        d["cublas_workspace_bytes"] = int(d.get("cublas_workspace_bytes", 0))
        d["channel_block"] = int(d.get("channel_block", 1))
        d["isa"] = str(d.get("isa", ""))
        d["cache_bytes"] = int(d.get("cache_bytes", 0))
        d["cache_bandwidth"] = float(d.get("cache_bandwidth", 0.0))
        for key in ACCELERATOR_NUMBERS:
            d[key] = int(d.get(key, 0))
        d["parallel_overhead_s"] = float(d.get("parallel_overhead_s", 0.0))
        d["conv_overhead_s"] = float(d.get("conv_overhead_s", 0.0))
        d["threads"] = int(d.get("threads", 0))
        if "efficiency" in d:
            d["efficiency"] = {k: float(v) for k, v in d["efficiency"].items()}
        d["aliases"] = tuple(d.get("aliases", ()))
        d["probed"] = tuple(str(c) for c in d.get("probed", ()))
        return cls(**d)

    @classmethod
    def from_json(cls, text: str) -> DeviceProfile:
        return cls.from_dict(json.loads(text))

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json() + "\n")

    @classmethod
    def load(cls, path: str | Path) -> DeviceProfile:
        try:
            return cls.from_json(Path(path).read_text())
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
            raise ValueError(f"cannot read device profile {str(path)!r}: {err}") from None


def _key(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


@cache
def _catalog() -> tuple[dict[str, DeviceProfile], dict[str, str]]:
    import yaml

    raw = yaml.safe_load(CATALOG_PATH.read_text())
    profiles: dict[str, DeviceProfile] = {}
    index: dict[str, str] = {}
    for name, entry in raw["devices"].items():
        base = raw["defaults"][entry["kind"]]
        merged = {**base, **entry, "sources": {**base["sources"], **entry.get("sources", {})}}
        merged["name"] = str(name)
        if merged.get("isa") == "local":
            local = detect_cpu_backend()
            merged["isa"], merged["channel_block"] = local.isa, local.channel_block
            merged["sources"]["isa"] = merged["sources"]["channel_block"] = (
                f"this machine's, detected at run time: oneDNN ISA {local.isa or 'none'} "
                f"({local.source}), {local.channel_block}-channel blocks"
            )
        elif merged.get("isa") and "channel_block" not in entry:
            merged["channel_block"] = CpuBackend(merged["isa"]).channel_block
        profiles[str(name)] = DeviceProfile.from_dict(merged)
        for alias in (name, *entry.get("aliases", ())):
            index[_key(str(alias))] = str(name)
    return profiles, index


def list_devices() -> list[DeviceProfile]:
    """Every catalog profile, in file order."""
    return list(_catalog()[0].values())


def get_device(device: str | Path | DeviceProfile) -> DeviceProfile:
    """A profile by catalog name or alias (case-insensitive), a ``.json`` profile path, or itself."""
    if isinstance(device, DeviceProfile):
        return device
    if not isinstance(device, str | Path):
        raise TypeError(
            f"device must be a name, a profile path or a DeviceProfile, got {type(device).__name__}"
        )
    profiles, index = _catalog()
    text = str(device)
    if _key(text) in index:
        return profiles[index[_key(text)]]
    path = Path(text)
    if path.suffix == ".json" or path.is_file():
        if not path.is_file():
            raise UnknownDeviceError(
                f"device profile file {text!r} does not exist (write one: dnnsat calibrate)"
            )
        return DeviceProfile.load(path)
    raise UnknownDeviceError(
        f"unknown device {text!r}; known: {', '.join(profiles)} (or a profile .json from `dnnsat calibrate`)"
    )
