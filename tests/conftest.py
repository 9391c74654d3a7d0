"""Suite-wide set-up: the CPU backend the memory tests validate.

The CPU memory rules are validated on oneDNN's ``avx512_core_bf16`` and ``avx2`` kernels. On a CPU with
AMX (Sapphire Rapids and later) oneDNN would run AMX bfloat16 kernels, whose scratchpads the rules do not
model (the model warns there: tests/test_memory_amx.py), so the suite caps oneDNN at AVX-512 BF16, exactly
as ``ONEDNN_MAX_CPU_ISA=AVX2`` emulates AVX2 (set before torch loads, unless the caller chose an ISA).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

# `dnnsat` CLI calls keep their traces in a folder of this run, not in the user's ~/.cache
os.environ.setdefault("DNNSAT_CACHE_DIR", tempfile.mkdtemp(prefix="dnnsat-test-cache-"))


def _cpu_flags() -> set[str]:
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.exists():
        return set()
    for line in cpuinfo.read_text().splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return set()


if "ONEDNN_MAX_CPU_ISA" not in os.environ and "amx_bf16" in _cpu_flags():
    os.environ["ONEDNN_MAX_CPU_ISA"] = "AVX512_CORE_BF16"
