"""Packaging: every package directory is listed in pyproject.toml, the CLI entry point resolves."""

from __future__ import annotations

from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_is_listed_in_pyproject() -> None:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(meta["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "dnnsat").rglob("__init__.py")} | {
        "dnnsat." + ".".join(p.parent.relative_to(ROOT).parts)
        for p in (ROOT / "integrations").rglob("__init__.py")
    }
    assert found == listed


def test_console_script_points_at_the_cli() -> None:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["project"]["scripts"]["dnnsat"] == "dnnsat.cli:main"
    from dnnsat.cli import main

    assert callable(main)
