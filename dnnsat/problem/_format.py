"""Values and numbers as messages show them (shared by the problem's modules and the Guard)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..units import cost_kind, format_quantity


def _py(x: Any) -> Any:
    return x.item() if hasattr(x, "item") else x


def _fmt(x: Any, name: str | None = None) -> str:
    """A number for messages; with the name of a known cost, in its unit (``"16.0 GiB"``, ``"10.0 ms"``)."""
    if x is None:
        return "?"
    kind = cost_kind(name) if name is not None else None
    if kind is not None and isinstance(x, int | float) and not isinstance(x, bool):
        return format_quantity(x, kind)
    if isinstance(x, float) and x.is_integer():
        x = int(x)
    if isinstance(x, int) and abs(x) >= 10_000:
        return f"{x:.3g}"
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x)


def _cfg_text(cfg: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in cfg.items())
