"""Device profiles: the catalog in ``devices.yaml``, JSON profiles, and fitting efficiency factors.

A :class:`DeviceProfile` holds what the latency and memory models need: peak FLOP/s per dtype
(1 multiply-add = 2 FLOPs; dense tensor-core figures under ``*_tensor`` keys), DRAM bandwidth (bytes/s),
memory size (bytes), the per-kernel launch/dispatch overhead (seconds), the CUDA context size (bytes),
the device memory of the GPU libraries a network loads (bytes, :attr:`DeviceProfile.libraries`), the
cuBLAS workspace PyTorch allocates (bytes) and efficiency factors (share of the peak that real
kernels reach: ``compute``, ``memory`` and optional per-op-class compute factors such as ``conv`` or
``elementwise``, see :mod:`dnnsat.cost._latency`).
Every number of a catalog entry has a source in ``sources``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "CATALOG_PATH",
    "KINDS",
    "CPU_ISAS",
    "CpuBackend",
    "DeviceProfile",
    "UnknownDeviceError",
    "cpu_backend_from_flags",
    "detect_cpu_backend",
    "fit_device",
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


# ------------------------------------------------------------------------------------------------
# CPU backend: which kernels PyTorch runs on this CPU

# oneDNN's x86-64 ISAs (``dnnl::cpu_isa``), oldest first, each with the CPU flags (Linux
# ``/proc/cpuinfo`` names) it needs in all: oneDNN ``src/cpu/x64/cpu_isa_traits.hpp: mayiuse``.
_ISA_FLAGS: dict[str, frozenset[str]] = {}
for _isa, _base, _extra in (
    ("sse41", None, "sse4_1"),
    ("avx", "sse41", "avx"),
    ("avx2", "avx", "avx2"),
    ("avx2_vnni", "avx2", "avx_vnni"),
    ("avx2_vnni_2", "avx2_vnni", "avx_vnni_int8 avx_ne_convert"),
    ("avx512_core", "avx2", "avx512f avx512bw avx512vl avx512dq"),
    ("avx512_core_vnni", "avx512_core", "avx512_vnni"),
    ("avx512_core_bf16", "avx512_core_vnni", "avx512_bf16"),
    ("avx512_core_fp16", "avx512_core_bf16", "avx512_fp16"),
    ("avx512_core_amx", "avx512_core_fp16", "amx_tile amx_int8 amx_bf16"),
    ("avx512_core_amx_fp16", "avx512_core_amx", "amx_fp16"),
):
    _ISA_FLAGS[_isa] = frozenset(_extra.split()) | (_ISA_FLAGS[_base] if _base else frozenset())
CPU_ISAS = tuple(_ISA_FLAGS)
# ONEDNN_MAX_CPU_ISA spellings of oneDNN >= 3.3 for the same ISAs (AVX10.1/512 = AVX-512 with FP16)
_ISA_ALIASES = {
    "avx10_1_512": "avx512_core_fp16",
    "avx10_1_512_amx": "avx512_core_amx",
    "avx10_1_512_amx_fp16": "avx512_core_amx_fp16",
}


def _includes(isa: str, base: str) -> bool:
    """Whether oneDNN kernels for ``base`` run under ``isa`` (the ISAs are only partially ordered)."""
    return isa in _ISA_FLAGS and _ISA_FLAGS[base] <= _ISA_FLAGS[isa]


@dataclass(frozen=True)
class CpuBackend:
    """The CPU kernels PyTorch's convolutions run, which decide their buffers' layouts and sizes.

    ``isa``: the oneDNN ISA (one of :data:`CPU_ISAS`; ``""`` where oneDNN's x86-64 kernels do not run,
    e.g. on ARM, whose buffers are modelled like AVX2's, unvalidated); ``aten``: ATen's vector
    capability (``torch.backends.cpu.get_cpu_capability()``: ``"AVX512"``, ``"AVX2"``, ``"DEFAULT"``);
    ``source``: how they were found. The memory rules were measured on ``avx512_core_bf16`` and
    ``avx2``; other ISAs use the rules of their class (AVX-512 or not).
    """

    isa: str
    aten: str = ""
    source: str = ""

    def __post_init__(self) -> None:
        if self.isa and self.isa not in _ISA_FLAGS:
            raise ValueError(f"unknown oneDNN CPU ISA {self.isa!r}; known: {', '.join(CPU_ISAS)}")

    @property
    def avx512(self) -> bool:
        """oneDNN runs its AVX-512 kernels (16 fp32 lanes)."""
        return _includes(self.isa, "avx512_core")

    @property
    def channel_block(self) -> int:
        """Channels per oneDNN block (``nChw16c`` with AVX-512, ``nChw8c`` with SSE4.1 to AVX2); 4
        (128-bit vectors) where oneDNN's x86-64 kernels do not run."""
        return 16 if self.avx512 else 8 if self.isa else 4

    @property
    def bf16(self) -> bool:
        """oneDNN has bfloat16 convolutions (``ideep::has_bf16_type_support``: AVX-512 or AVX2-VNNI-2);
        without them PyTorch runs its own im2col kernels (``torch.ops.mkldnn._is_mkldnn_bf16_supported``)."""
        return self.avx512 or self.isa == "avx2_vnni_2"

    @property
    def fp16(self) -> bool:
        """oneDNN has float16 convolutions (``torch.ops.mkldnn._is_mkldnn_fp16_supported``)."""
        return _includes(self.isa, "avx512_core_fp16") or self.isa == "avx2_vnni_2"


def _cpu_flags() -> frozenset[str] | None:
    """The CPU's feature flags (Linux ``/proc/cpuinfo`` names), None where they cannot be read."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None


def cpu_backend_from_flags(flags: Iterable[str], environ: Mapping[str, str]) -> CpuBackend:
    """The backend PyTorch runs on an x86-64 CPU with these feature ``flags`` (Linux ``/proc/cpuinfo``
    names) under the environment ``environ``: the best oneDNN ISA the flags allow within
    ``ONEDNN_MAX_CPU_ISA`` (else ``DNNL_MAX_CPU_ISA``; like oneDNN, an unknown value, ``ALL`` or
    ``DEFAULT`` sets no limit), and ATen's capability (``AVX512``: AVX-512 F/BW/VL/DQ and FMA;
    ``AVX2``: AVX2 and FMA; else ``DEFAULT``) within ``ATEN_CPU_CAPABILITY``."""
    have = frozenset(flags)
    limit, notes = None, []
    for var in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"):
        value = environ.get(var, "").strip()
        if value:
            name = _ISA_ALIASES.get(value.lower(), value.lower())
            limit = name if name in _ISA_FLAGS else None
            notes.append(f"{var}={value}")
            break
    allowed = [i for i in CPU_ISAS if _ISA_FLAGS[i] <= have and (limit is None or _includes(limit, i))]
    levels = ["DEFAULT"]
    if {"avx2", "fma"} <= have:
        levels.append("AVX2")
        if _ISA_FLAGS["avx512_core"] <= have:
            levels.append("AVX512")
    wanted = environ.get("ATEN_CPU_CAPABILITY", "").strip().upper()
    if wanted:
        notes.append(f"ATEN_CPU_CAPABILITY={wanted}")
    aten = levels[levels.index(wanted)] if wanted in levels else levels[-1]
    return CpuBackend(allowed[-1] if allowed else "", aten, ", ".join(["CPU flags", *notes]))


@cache
def detect_cpu_backend() -> CpuBackend:
    """This machine's :class:`CpuBackend` (:func:`cpu_backend_from_flags` of its flags and environment;
    PyTorch reads the same variables when it starts: set them before Python starts). Read once.

    Flags come from ``/proc/cpuinfo``; where it is missing (not Linux) from PyTorch's own detection
    (``torch.backends.cpu.get_cpu_capability()``, imported only then). Not x86-64: ``isa`` is ``""``.
    Once PyTorch is loaded, ``aten`` is its own answer.
    """
    if platform.machine().lower() not in ("x86_64", "amd64", "x86", "i686"):
        return CpuBackend("", "", f"{platform.machine()}: oneDNN's x86-64 kernels do not run")
    flags = _cpu_flags()
    if flags is None:  # no /proc/cpuinfo: PyTorch's view of the CPU (before environment limits)
        import torch

        level = torch.backends.cpu.get_cpu_capability()
        isa = {"AVX512": "avx512_core", "AVX2": "avx2"}.get(level, "sse41")
        flags = _ISA_FLAGS[isa] | ({"fma"} if isa != "sse41" else set())
    backend = cpu_backend_from_flags(flags, os.environ)
    if "torch" in sys.modules:
        aten = sys.modules["torch"].backends.cpu.get_cpu_capability()
        backend = dataclasses.replace(backend, aten=aten)
    return backend


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
    ``buffer_bytes``; see :mod:`dnnsat.cost._latency` for the mapping and DRAM-traffic rules).
    ``array_rows``/``array_cols``/``buffer_bytes`` are required for an accelerator and 0 otherwise.
    ``parallel_overhead_s`` (CPUs, mobile CPUs; seconds): the extra fixed cost of each GEMM-like op
    (convolution, matmul), which the runtime splits across the cores through a thread pool (wake-up,
    work distribution, barrier); 0: not modelled (nor fitted).
    ``conv_overhead_s`` (CPUs; seconds): the extra fixed cost of each convolution PyTorch's eager mode runs
    through oneDNN (primitive creation, reorder calls); where it is > 0 the latency model also charges
    the reorders of the plain-layout input, weights and output to oneDNN's blocked layout and back
    (``calibrate`` measures it; 0: neither modelled, e.g. catalog CPUs, whose convolutions are fitted as
    a whole). ``threads`` (CPUs): the thread count PyTorch runs with (0: not known, taken as several),
    which decides which convolutions PyTorch hands to oneDNN (:mod:`dnnsat.cost._latency`).
    ``isa`` (CPU): the oneDNN ISA its kernels use (:data:`CPU_ISAS`), which sets the memory model's
    convolution buffers; ``""``: derived from ``channel_block`` (16: ``avx512_core``, else ``avx2``).
    In the catalog, ``isa: local`` means this machine's, detected at run time with ``channel_block``.

    GPU memory outside PyTorch's caching allocator (the *footprint*, see :mod:`dnnsat.cost._footprint`):
    ``context_bytes`` (the CUDA context with PyTorch's own kernels) and ``libraries``: bytes each
    software stack takes once a network uses it (:data:`LIBRARIES`: ``cublas`` handle and GEMM kernels,
    ``cudnn`` handle and convolution/normalisation/RNN kernels, ``attention`` kernels of
    scaled-dot-product attention). ``cublas_workspace_bytes``: the workspace PyTorch allocates through
    its caching allocator for the cuBLAS handle at the first GEMM (``CUBLAS_WORKSPACE_CONFIG``).
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


# ------------------------------------------------------------------------------------------------
# fitting


Sample = tuple[Any, float]
PRIOR_GRID = (1e-4, 1e-3, 1e-2, 0.1, 1.0)  # prior weights fit_device(prior_weight="cv") chooses from
# prior weight fit_device gives, at least, to a class efficiency a probe op measured (DeviceProfile.probed):
# the probe counts like one more sample (residuals are log errors), so the samples must agree to move it
PROBE_PRIOR_WEIGHT = 1.0


def fit_device(
    profile: str | DeviceProfile,
    samples: Sequence[Sample],
    budget: Any = None,
    space: Any = None,
    prior_weight: float | str = "cv",
    name: str | None = None,
) -> DeviceProfile:
    """Adjust ``profile``'s launch overhead and efficiency factors to measured latencies.

    ``samples``: ``(network, seconds)`` for networks without free variables, or
    ``((network, config), seconds)`` with ``config`` a user configuration encoded with ``space`` when
    given, else an already encoded assignment, or ``((problem, config), seconds)`` for a Problem built
    with a model (encoded with the problem's space). Seconds are the measured inference latency
    of the batch as built (the model's ``latency`` cost); ``budget`` sets the dtype.

    Fitted parameters: ``launch_overhead_s`` (and ``parallel_overhead_s`` where the profile has one), the
    ``memory`` efficiency and one compute efficiency per op class present in the samples (``conv``,
    ``matmul``, ``elementwise``, ...). The fit minimises the
    squared log error of the predictions (a ratio error: small and large networks weigh alike) plus
    ``prior_weight`` times the squared log distance of each parameter from the starting profile - a
    log-normal prior that keeps parameters the samples cannot identify where they were. It is a
    damped Gauss-Newton (Levenberg-Marquardt) fit in log space, started from the profile and from 30x
    lower compute efficiencies (the roofline's ``max`` has no gradient in its inactive branch); the
    better of the two is kept. It sees only ``samples``; peaks, bandwidth and sizes are not changed.

    ``prior_weight="cv"`` (default) fits every weight of :data:`PRIOR_GRID`, weak to strong (the
    weakest from the two starts above, each stronger one from the previous weight's two fits), and keeps
    the one whose leave-one-out predictions misorder the fewest sample pairs, then have the smallest log
    error (exact ties: the stronger prior), so the samples decide how far the fit may move from the
    profile. Leave-one-out residuals come from the Gauss-Newton linearisation at each fit
    (``r_i / (1 - h_ii)``, the PRESS statistic): no refits. A number fixes the weight (0.05 was the
    default before). The choice is recorded in the profile's ``sources``.

    Efficiencies of the classes in ``profile.probed`` (measured on the device by a probe op,
    :func:`dnnsat.torch.calibrate`) get a prior weight of at least :data:`PROBE_PRIOR_WEIGHT` (as much as
    one sample), whatever the chosen weight: a few samples that barely involve a class cannot move a
    measured value far. The fitted profile has no ``probed`` classes (its factors are fitted).
    """
    from ..expr import compile_vectorized
    from ..graph import Network
    from ._latency import class_efficiency, latency_model

    base = get_device(profile)
    if len(samples) < 2:
        raise ValueError(f"fit_device: needs at least 2 samples (network, seconds), got {len(samples)}")
    groups: dict[int, tuple[Network, list[Mapping[str, Any]], list[float]]] = {}
    for i, (item, seconds) in enumerate(samples):
        net, config = item if isinstance(item, tuple) else (item, {})
        sample_space = space
        if not isinstance(net, Network) and isinstance(getattr(net, "network", None), Network):
            net, sample_space = net.network, net.space  # a Problem: encode with its own space
        if not isinstance(net, Network):
            raise TypeError(
                f"fit_device: sample {i} must hold a dnnsat Network or Problem, got {type(net).__name__}"
            )
        if not seconds > 0:
            raise ValueError(f"fit_device: sample {i} has a non-positive latency {seconds!r} (seconds)")
        env = _encode(sample_space, config)
        groups.setdefault(id(net), (net, [], []))[1].append(env)
        groups[id(net)][2].append(float(seconds))
    models = [latency_model(net, budget, base) for net, _, _ in groups.values()]
    classes = sorted({c for m in models for c in m.classes})
    overheads = ["launch_overhead_s"] + (["parallel_overhead_s"] if base.parallel_overhead_s > 0 else [])
    names = [*overheads, "memory", *classes]
    start = np.log(
        [base.launch_overhead_s or 1e-6, *([base.parallel_overhead_s] if len(overheads) > 1 else [])]
        + [base.efficiency["memory"]]
        + [class_efficiency(base, c) for c in classes]
    )
    fns = [compile_vectorized([m.expr]) for m in models]
    columns = [{k: np.asarray([env[k] for env in envs]) for k in envs[0]} for _, envs, _ in groups.values()]
    measured = np.log(np.concatenate([np.asarray(ys) for _, _, ys in groups.values()]))

    def predict(theta: np.ndarray) -> np.ndarray:
        """Log latencies of the samples under log-parameters ``theta``: shape (n,) for a vector, (k, n)
        for k parameter vectors (rows), evaluated in one vectorised call (the Jacobian's k + 1 points)."""
        thetas = np.atleast_2d(theta)
        k = len(thetas)
        params = np.exp(np.clip(thetas, -60.0, 60.0))
        out = []
        for m, fn, cols, (_, envs, _) in zip(models, fns, columns, groups.values()):
            n = len(envs)
            values = {name: np.repeat(params[:, j], n) for j, name in enumerate(names)}
            env = {**{c: np.tile(v, k) for c, v in cols.items()}, **m.parameter_env(values)}
            out.append(np.broadcast_to(np.asarray(fn(env)[0], dtype=float), (k * n,)).reshape(k, n))
        logs = np.log(np.concatenate(out, axis=1))
        return logs if np.ndim(theta) == 2 else logs[0]

    # max() in the roofline has no gradient in its inactive branch: also start from 30x lower compute
    # efficiencies (compute-bound everywhere) and keep the better fit
    low = start.copy()
    low[len(overheads) + 1 :] -= math.log(30.0)
    probe_floor = np.array([PROBE_PRIOR_WEIGHT if n in base.probed else 0.0 for n in names])

    def fit(weight: float, starts: Sequence[np.ndarray]) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
        """Fits from each start, the best of them and its leave-one-out residuals."""

        strength = np.sqrt(np.maximum(weight, probe_floor))

        def residuals(theta: np.ndarray) -> np.ndarray:
            prior = strength * (theta - start)
            return np.concatenate([predict(theta) - measured, prior], axis=-1)

        fits = [_levenberg_marquardt(residuals, s) for s in starts]
        best = min(fits, key=lambda t: float(np.sum(residuals(t) ** 2)))
        return fits, best, _loo_residuals(residuals, best, len(measured))

    if isinstance(prior_weight, str):
        if prior_weight != "cv":
            raise ValueError(f"fit_device: prior_weight must be a number or 'cv', got {prior_weight!r}")
        chosen: list[tuple[tuple[float, float], float, np.ndarray]] = []  # (CV score, weight, theta)
        starts = [start, low]
        for weight in sorted(PRIOR_GRID):  # weak to strong: a strong prior first traps fits near the profile
            starts, theta, loo = fit(weight, starts)
            chosen.append((_cv_score(loo, measured), weight, theta))
        score, weight, theta = min(reversed(chosen), key=lambda c: c[0])
        how = (
            f"prior weight {weight:g}, chosen by leave-one-out cross-validation: {100 * score[0]:.1f} % of "
            f"sample pairs misordered, RMS log error {math.sqrt(score[1]):.3g}"
        )
    else:
        weight = float(prior_weight)
        theta = fit(weight, [start, low])[1]
        how = f"prior weight {weight:g}"
    fitted = dict(zip(names, np.exp(theta)))
    efficiency = {**base.efficiency, "memory": float(fitted["memory"])}
    efficiency.update({c: float(fitted[c]) for c in classes})
    n = len(samples)
    if base.probed:
        how += f"; probed classes ({', '.join(base.probed)}) weight >= {PROBE_PRIOR_WEIGHT:g}"
    note = f"fitted by fit_device on {n} measured latencies (log least squares, {how})"
    return base.replace(
        name=name or f"{base.name}-fitted",
        launch_overhead_s=float(fitted["launch_overhead_s"]),
        parallel_overhead_s=float(fitted.get("parallel_overhead_s", 0.0)),
        efficiency=efficiency,
        sources={**base.sources, "launch_overhead_s": note, "efficiency": note}
        | ({"parallel_overhead_s": note} if len(overheads) > 1 else {}),
        aliases=(),
        probed=(),
    )


def _encode(space: Any, config: Mapping[str, Any]) -> dict[str, Any]:
    if space is None:
        return dict(config)
    from ..graph import encode_config

    return encode_config(space, config)


def _jacobian(residuals: Callable[[np.ndarray], np.ndarray], theta: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Forward-difference Jacobian of ``residuals`` at ``theta`` (``r = residuals(theta)``); ``residuals``
    maps a (k, p) array of parameter rows to (k, m) residual rows in one call."""
    step = 1e-6
    return np.asarray((residuals(theta + step * np.eye(len(theta))) - r) / step).T


def _loo_residuals(residuals: Callable[[np.ndarray], np.ndarray], theta: np.ndarray, n: int) -> np.ndarray:
    """Leave-one-out residuals of the first ``n`` residuals (the data; the rest is the prior) at the
    least-squares fit ``theta``: ``r_i / (1 - h_ii)``, ``h`` the hat matrix of the linearised fit."""
    r = residuals(theta)
    jac = _jacobian(residuals, theta, r)
    data = jac[:n]
    leverage = np.einsum("ij,ji->i", data, np.linalg.pinv(jac.T @ jac) @ data.T)
    return np.asarray(r[:n] / np.maximum(1.0 - leverage, 1e-3))


def _cv_score(loo: np.ndarray, measured: np.ndarray) -> tuple[float, float]:
    """(share of the sample pairs with different latencies that the leave-one-out predictions misorder,
    their mean squared log error): ranking first, as budgets compare configurations; log error breaks ties.
    ``loo`` and ``measured`` are log latencies; pairs within 1e-9 of each other count as ties."""
    upper = np.triu_indices(len(measured), 1)

    def order(x: np.ndarray) -> np.ndarray:
        d = np.subtract.outer(x, x)[upper]
        return np.where(np.abs(d) > 1e-9, np.sign(d), 0.0)

    truth = order(measured)
    wrong = (order(measured + loo) != truth)[truth != 0]
    return float(wrong.mean()) if wrong.size else 0.0, float(np.mean(loo**2))


def _levenberg_marquardt(
    residuals: Callable[[np.ndarray], np.ndarray], theta: np.ndarray, iterations: int = 60
) -> np.ndarray:
    """Minimise ``sum(residuals(theta)**2)`` (finite-difference Jacobian, adaptive damping)."""
    r = residuals(theta)
    cost = float(r @ r)
    damping = 1e-2
    for _ in range(iterations):
        jac = _jacobian(residuals, theta, r)
        g = jac.T @ r
        h = jac.T @ jac
        improved = False
        while damping < 1e8:
            delta = np.linalg.solve(h + damping * np.diag(np.diag(h) + 1e-12), -g)
            cand = theta + delta
            rc = residuals(cand)
            cc = float(rc @ rc)
            if cc < cost:
                theta, r, improved = cand, rc, True
                damping = max(damping / 3, 1e-9)
                converged = cost - cc < 1e-9 * max(cost, 1e-30)
                cost = cc
                break
            damping *= 4
        if not improved or converged:
            break
    return theta
