"""The ``nnictl algo register --meta`` file shipped with the package."""

from __future__ import annotations

from pathlib import Path

__all__ = ["registration_file"]


def registration_file() -> Path:
    """Path of the ``nnictl algo register --meta`` file shipped with the package (builtin name ``DnnSAT``)."""
    return Path(__file__).with_name("dnnsat_tuner.yml")
