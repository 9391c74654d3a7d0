"""Shared helpers for benchmarks: timing, markdown tables, and updating benchmarks/README.md.

benchmarks/README.md and benchmarks/plots/ are committed results: only the default full run of a
benchmark, or an explicit ``--write-readme``, may rewrite them (:func:`add_write_options`,
:func:`writes_readme`). A run with custom options (``--quick``, fewer seeds, other limits) prints its
tables and leaves them alone.
"""

from __future__ import annotations

import argparse
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


def sampling_parser(
    doc: str, per_family: int, seed: int, quick: int, seed_help: str | None = None
) -> argparse.ArgumentParser:
    """The parser of a benchmark over sampled configurations per model family: ``--quick`` (``quick``
    configurations per family), ``--per-family``, ``--seed`` and the write options."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help=f"{quick} configs per family")
    ap.add_argument("--per-family", type=int, default=per_family)
    ap.add_argument("--seed", type=int, default=seed, help=seed_help)
    add_write_options(ap)
    return ap


def add_write_options(ap: argparse.ArgumentParser) -> None:
    """Add ``--write-readme`` and ``--no-readme`` (alias ``--no-write``), read by :func:`writes_readme`."""
    group = ap.add_mutually_exclusive_group()
    group.add_argument(
        "--write-readme",
        action="store_true",
        help="update benchmarks/README.md and the plots even though options differ from the defaults",
    )
    group.add_argument(
        "--no-readme",
        "--no-write",
        dest="no_readme",
        action="store_true",
        help="never update benchmarks/README.md or the plots",
    )


def writes_readme(ap: argparse.ArgumentParser, args: argparse.Namespace, neutral: Sequence[str] = ()) -> bool:
    """Whether this run may rewrite benchmarks/README.md and the committed plots.

    True for ``--write-readme`` and for the default full run: every option at its default except the
    ``neutral`` ones (destinations of options that do not change the results, such as ``json`` or
    ``jobs``). Call it right after ``parse_args``, before any option is adjusted (``--quick``).
    """
    if args.no_readme:
        return False
    if args.write_readme:
        return True
    skip = {"write_readme", "no_readme", *neutral}
    custom = [
        "--" + k.replace("_", "-") for k, v in vars(args).items() if k not in skip and v != ap.get_default(k)
    ]
    if custom:
        print(
            f"benchmarks/README.md and plots are left unchanged (custom options: {' '.join(custom)}); "
            "add --write-readme to update them"
        )
    return not custom
