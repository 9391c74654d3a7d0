"""Shared helpers for benchmarks: timing, markdown tables, and updating benchmarks/README.md."""

from __future__ import annotations

import os
import platform
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

README = Path(__file__).with_name("README.md")


def single_core() -> None:
    """Pin BLAS/OpenMP pools to one thread (call before heavy numpy work)."""
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")


def timings(fn: Callable[[], Any], repeat: int, warmup: int = 1) -> np.ndarray:
    """Wall-clock seconds of ``repeat`` calls of ``fn`` after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    out = np.empty(repeat)
    for i in range(repeat):
        t = time.perf_counter()
        fn()
        out[i] = time.perf_counter() - t
    return out


def fmt_time(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"


def update_readme(section: str, body: str) -> None:
    """Replace (or append) the block between ``<!-- section -->`` markers in benchmarks/README.md."""
    start, end = f"<!-- {section} -->", f"<!-- /{section} -->"
    text = README.read_text() if README.exists() else "# Benchmarks\n"
    block = f"{start}\n{body.strip()}\n{end}"
    pattern = re.compile(re.escape(start) + ".*?" + re.escape(end), re.S)
    text = (
        pattern.sub(lambda _: block, text) if pattern.search(text) else text.rstrip() + "\n\n" + block + "\n"
    )
    README.write_text(text)
