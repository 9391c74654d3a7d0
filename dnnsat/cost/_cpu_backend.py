"""The CPU backend: which kernels PyTorch runs on a CPU (oneDNN's x86-64 ISA, ATen's vector
capability), detected on this machine or given by a CPU device profile; the CPU memory rules
(:mod:`dnnsat.cost.memory._cpu`) follow it.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache

__all__ = ["CPU_ISAS", "CpuBackend", "cpu_backend_from_flags", "detect_cpu_backend"]

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
