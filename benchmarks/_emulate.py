"""Memory benchmarks on another CPU backend: PyTorch with AVX2 kernels on an AVX-512 machine, and the
goal every memory benchmark of issue 13 is judged by.

oneDNN and ATen read their ISA limits when the interpreter starts, so an emulated backend needs a fresh
interpreter: :func:`run_worker` re-runs a benchmark module with ``--worker`` under :data:`AVX2_ENV` and
reads the JSON rows it prints last. The memory model follows the detected backend in that process
(:func:`dnnsat.cost.detect_cpu_backend`).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from benchmarks._report import markdown_table

AVX2_ENV = {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}
GOAL = (0.02, 0.08, 0.03)  # median |error|, max |error|, worst underestimate (shares of the real peak)


def run_worker(module: str, argv: Sequence[str], env: dict[str, str]) -> list[dict[str, Any]]:
    """Rows of ``python -m module --worker *argv`` run under ``env`` (its last stdout line, JSON)."""
    cmd = [sys.executable, "-m", module, "--worker", *argv]
    root = Path(__file__).resolve().parents[1]
    res = subprocess.run(cmd, env={**os.environ, **env}, cwd=root, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"{module} --worker under {env} failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def summary(rows: Sequence[dict[str, Any]]) -> tuple[float, float, float]:
    """(median |error|, max |error|, worst underestimate as a positive share; 0 if none) of rows with
    ``estimate`` and ``real`` bytes."""
    errs = [(r["estimate"] - r["real"]) / r["real"] for r in rows]
    return statistics.median(abs(e) for e in errs), max(abs(e) for e in errs), max(0.0, -min(errs))


def meets(s: tuple[float, float, float]) -> bool:
    """Whether a :func:`summary` meets :data:`GOAL`."""
    return s[0] <= GOAL[0] and s[1] <= GOAL[1] and s[2] <= GOAL[2]


def cell(rows: Sequence[dict[str, Any]]) -> str:
    """A table cell ``median / max / worst under`` of rows, marked ✗ where it misses :data:`GOAL`."""
    s = summary(rows)
    return f"{s[0]:.2%} / {s[1]:.2%} / {s[2]:.2%}" + ("" if meets(s) else " ✗")


def outliers(backend: str, rows: Sequence[dict[str, Any]], keys: Sequence[str]) -> list[str]:
    """One line per row beyond the goal's max or underestimate (``keys`` name the row)."""
    out = []
    for r in rows:
        err = (r["estimate"] - r["real"]) / r["real"]
        if abs(err) > GOAL[1] or err < -GOAL[2]:
            name = " ".join(str(r[k]) for k in keys)
            real = f"PyTorch {r['real']:,} B ({err:+.1%})"
            out.append(f"  {backend} {name}: estimate {r['estimate']:,} B, {real}")
    return out


def family_table(
    results: dict[str, list[dict[str, Any]]], modes: Iterable[str], families: Sequence[str]
) -> str:
    """Markdown rows per mode and family (and all families) of rows with ``mode`` and ``family``: n,
    then one :func:`cell` per backend (the keys of ``results``)."""
    rows = []
    for mode in modes:
        for fam in [*families, "all"]:
            cells: list[Any] = [mode, fam, 0]
            for backend_rows in results.values():
                sel = [r for r in backend_rows if r["mode"] == mode and fam in ("all", r["family"])]
                cells[2] = len(sel)
                cells.append(cell(sel))
            rows.append(cells)
    header = ["mode", "family", "n", *(f"{b}: median / max / worst under" for b in results)]
    return markdown_table(header, rows)
