"""MkDocs hook: the plots of benchmarks/README.md (included by docs/benchmarks.md) become site files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def on_files(files: Files, config: Any) -> Files:
    """Add ``benchmarks/plots/*`` as ``plots/*`` so the included page's ``plots/...`` links resolve."""
    for plot in sorted((BENCHMARKS / "plots").glob("*")):
        if plot.is_file():
            files.append(
                File(
                    f"plots/{plot.name}",
                    src_dir=str(BENCHMARKS),
                    dest_dir=config["site_dir"],
                    use_directory_urls=config["use_directory_urls"],
                )
            )
    return files
