"""Packaging: the wheel holds every module and data file of the package; the CLI entry point resolves."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_holds_every_module_and_data_file(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            tmp_path,
            ROOT,
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("dnnsat-*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    wanted = {
        str(p.relative_to(ROOT))
        for p in (ROOT / "dnnsat").rglob("*")
        if p.suffix in {".py", ".yml", ".yaml", ".json", ".csv"} and "__pycache__" not in p.parts
    }
    assert wanted - shipped == set()
    assert "dnnsat/cost/devices.yaml" in wanted and "dnnsat/integrations/nni/__init__.py" in wanted


def test_console_script_points_at_the_cli() -> None:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["project"]["scripts"]["dnnsat"] == "dnnsat.cli:main"
    from dnnsat.cli import main

    assert callable(main)
