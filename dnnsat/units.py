"""Parse and format quantities: parameter counts, FLOPs, bytes, times and shares.

Conventions:

* **count** (e.g. parameters): SI prefixes ``K M G T P`` (powers of 1000; case-insensitive), ``B`` as
  in ``"7B"`` is a billion. ``"25M"`` → ``25_000_000``.
* **flops**: floating-point operations, **1 multiply-add = 2 FLOPs** (as ``torch.utils.flop_counter``).
  ``"4G"``, ``"4GFLOPs"``, ``"4 GFLOP"`` → ``4e9``; MACs are accepted and doubled (``"2 GMACs"`` → ``4e9``).
  Prefixes as for counts. ``FLOPs`` means a number of operations, not a rate.
* **bytes**: binary units ``KiB MiB GiB TiB PiB`` (powers of 1024) and decimal units ``KB MB GB TB PB``
  (powers of 1000; ``kB`` too); a bare prefix (``"16G"``) is decimal, ``"16Gi"`` is binary; a plain
  number is bytes. ``"16GiB"`` → ``17_179_869_184``, ``"16 GB"`` → ``16_000_000_000``.
* **time**: seconds as a float. Units ``ns``, ``us``/``µs``/``μs``, ``ms``, ``s``/``sec``, ``min``, ``h``;
  a plain number is seconds. ``"10ms"`` → ``0.01``.
* **share** (e.g. GPU utilization): a fraction as a float; ``"40%"`` → ``0.4``, a plain number is the
  fraction itself.

Counts, FLOPs and bytes are returned as ``int`` when integral (computed in decimal, so ``"4.1G"`` is
exactly ``4_100_000_000``), else as ``float``. Negative, NaN and infinite values, unknown units and units
of another kind (``"16GiB"`` for a time) raise :class:`UnitError`, a :class:`ValueError`.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation
from typing import Any

__all__ = ["KINDS", "UnitError", "format_quantity", "parse_quantity"]

KINDS = ("count", "flops", "bytes", "time", "share")
_ALIASES = {
    "params": "count",
    "parameters": "count",
    "memory": "bytes",
    "weight_bytes": "bytes",
    "latency": "time",
}
_EXAMPLES = {
    "count": "25M, 1.5K, 7B, 25000000",
    "flops": "4G, 4GFLOPs, 4 GFLOP, 1.5T, 2 GMACs, 4e9",
    "bytes": "16GiB, 16 GB, 512MiB, 1e9",
    "time": "10ms, 2.5 s, 300us, 300µs, 0.01",
    "share": "40%, 0.4",
}
_SI = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "p": 10**15}
_BIN = {"ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40, "pi": 2**50}
_TIME = {
    "": Decimal(1),
    "ns": Decimal("1e-9"),
    "nsec": Decimal("1e-9"),
    "us": Decimal("1e-6"),
    "µs": Decimal("1e-6"),  # micro sign U+00B5
    "μs": Decimal("1e-6"),  # greek mu U+03BC
    "usec": Decimal("1e-6"),
    "ms": Decimal("1e-3"),
    "msec": Decimal("1e-3"),
    "s": Decimal(1),
    "sec": Decimal(1),
    "secs": Decimal(1),
    "second": Decimal(1),
    "seconds": Decimal(1),
    "min": Decimal(60),
    "h": Decimal(3600),
    "hr": Decimal(3600),
}
_NUMBER = re.compile(r"^\s*([+-]?(?:\d[\d_]*(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*(.*?)\s*$")


class UnitError(ValueError):
    """A quantity could not be parsed; the message names the value, the expected kind and examples."""


def _kind(kind: str) -> str:
    k = _ALIASES.get(kind, kind)
    if k not in KINDS:
        raise UnitError(f"unknown quantity kind {kind!r}; use one of {list(KINDS)}")
    return k


def _unit_multiplier(unit: str, kind: str) -> Decimal | None:
    """The multiplier of ``unit`` for ``kind``, or ``None`` when ``unit`` is not a unit of ``kind``."""
    u = unit.strip()
    low = u.lower()
    if kind == "time":
        return _TIME.get(u, _TIME.get(low))
    if kind == "share":
        return {"": Decimal(1), "%": Decimal("0.01")}.get(u)
    if kind == "count":
        if low in ("b", "bn"):
            return Decimal(10**9)
        return Decimal(_SI[low]) if low in _SI else None
    if kind == "flops":
        m = re.fullmatch(r"([kmgtp]?)\s*(flops?|macs?)?", low)
        if m is None:
            return None
        factor = 2 if m.group(2) and m.group(2).startswith("mac") else 1
        return Decimal(_SI[m.group(1)] * factor)
    # bytes
    m = re.fullmatch(r"([kmgtp]i?)?\s*(b|bytes?)?", low)
    if m is None:
        return None
    prefix = m.group(1) or ""
    if prefix in _BIN:
        return Decimal(_BIN[prefix])
    return Decimal(_SI[prefix])


def _other_kind(unit: str, kind: str) -> str | None:
    for other in KINDS:
        if other != kind and _unit_multiplier(unit, other) is not None:
            return other
    return None


_KIND_WORDS = {
    "count": "a count",
    "flops": "a number of FLOPs",
    "bytes": "a byte size",
    "time": "a time",
    "share": "a share",
}


def _fail(value: Any, kind: str, why: str) -> UnitError:
    return UnitError(f"{value!r}: {why}; expected {_KIND_WORDS[kind]}, e.g. {_EXAMPLES[kind]}")


def _result(d: Decimal, kind: str) -> int | float:
    if kind not in ("time", "share") and d == d.to_integral_value():
        return int(d)
    return float(d)


def parse_quantity(value: str | int | float, kind: str) -> int | float:
    """Parse ``value`` (a number or a string such as ``"25M"``, ``"16GiB"``, ``"10ms"``) as a ``kind``.

    ``kind`` is ``"count"``, ``"flops"``, ``"bytes"``, ``"time"`` or ``"share"`` (aliases: ``params``,
    ``memory``, ``latency``). Returns ``int`` for integral counts/FLOPs/bytes, else ``float``; times are
    seconds, shares fractions.
    """
    kind = _kind(kind)
    if isinstance(value, bool) or value is None:
        raise _fail(value, kind, "not a quantity")
    if not isinstance(value, str):
        try:
            x = float(value)
        except (TypeError, ValueError):
            raise _fail(value, kind, f"a {type(value).__name__} is not a quantity") from None
        if not math.isfinite(x):
            raise _fail(value, kind, "not a finite number")
        if x < 0:
            raise _fail(value, kind, "negative")
        if kind not in ("time", "share") and x.is_integer():
            return int(value) if isinstance(value, int) else int(x)
        return x
    m = _NUMBER.match(value)
    if m is None:
        low = value.strip().lower()
        if low.lstrip("+-") in ("nan", "inf", "infinity") or low.lstrip("+-").startswith(("nan", "inf")):
            raise _fail(value, kind, "not a finite number")
        raise _fail(value, kind, "not a number followed by a unit")
    number, unit = m.group(1), m.group(2)
    try:
        d = Decimal(number.replace("_", ""))
    except InvalidOperation:  # pragma: no cover - the regex admits only valid literals
        raise _fail(value, kind, "not a number") from None
    if d < 0:
        raise _fail(value, kind, "negative")
    mult = _unit_multiplier(unit, kind)
    if mult is None:
        other = _other_kind(unit, kind)
        if other is not None:
            raise _fail(
                value, kind, f"{unit!r} is a unit of {_KIND_WORDS[other]}, not of {_KIND_WORDS[kind]}"
            )
        raise _fail(value, kind, f"unknown unit {unit!r}")
    return _result(d * mult, kind)


def _three_digits(x: float) -> str:
    """``x`` (``1 <= x < 1000`` after rounding) with three significant digits."""
    if x < 10:
        return f"{x:.2f}"
    if x < 100:
        return f"{x:.1f}"
    return f"{x:.0f}"


def _scaled(x: float, steps: list[tuple[float, str]]) -> tuple[str, str]:
    """Pick the largest step not above ``x`` (after rounding to three digits); ``steps`` descend."""
    for factor, name in steps:
        y = x / factor
        rounded = float(f"{y:.3g}")
        if rounded >= 1:  # a larger step would have taken a value that rounds to 1000
            return (_three_digits(rounded) if rounded < 1000 else f"{y:.0f}"), name
    factor, name = steps[-1]
    return f"{x / factor:.3g}", name


# Units of the costs that budgets and networks name; other cost names have none.
_COST_KINDS = {
    "params": "count",
    "flops": "flops",
    "macs": "count",  # multiply-accumulates: flops / 2
    "other_ops": "count",  # elementwise, norm and pool arithmetic
    "train_flops": "flops",
    "weight_bytes": "bytes",
    "activation_bytes": "bytes",
    "bytes_moved": "bytes",
    "latency": "time",
    "train_step_time": "time",
    "gpu_utilization": "share",
}


def cost_kind(name: str) -> str | None:
    """The quantity kind of a named cost (``memory*`` -> ``"bytes"``, ``latency`` -> ``"time"``), or None."""
    return "bytes" if name.startswith("memory") else _COST_KINDS.get(name)


def format_quantity(value: int | float, kind: str) -> str:
    """A short human string: ``"25.0M"``, ``"4.00 GFLOPs"``, ``"16.0 GiB"``, ``"10.0 ms"``.

    Three significant digits; counts and FLOPs use SI prefixes (``K M G T P``), bytes binary ones
    (``KiB MiB GiB TiB PiB``), times ``ns µs ms s``, shares percent. :func:`parse_quantity` reads every
    result back.
    """
    kind = _kind(kind)
    x = float(value)
    if not math.isfinite(x):
        return str(x)
    sign = "-" if x < 0 else ""
    x = abs(x)
    if kind == "count":
        if x < 1000:
            return sign + (str(int(x)) if x.is_integer() else f"{x:.3g}")
        steps = [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K")]
        num, unit = _scaled(x, steps)
        return f"{sign}{num}{unit}"
    if kind == "flops":
        if x < 1000:
            return f"{sign}{int(x) if x.is_integer() else f'{x:.3g}'} FLOPs"
        num, unit = _scaled(x, [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K")])
        return f"{sign}{num} {unit}FLOPs"
    if kind == "bytes":
        if x < 1024:
            return f"{sign}{int(x) if x.is_integer() else f'{x:.3g}'} B"
        steps = [(2.0**50, "PiB"), (2.0**40, "TiB"), (2.0**30, "GiB"), (2.0**20, "MiB"), (2.0**10, "KiB")]
        num, unit = _scaled(x, steps)
        return f"{sign}{num} {unit}"
    if kind == "share":
        return f"{sign}{100 * x:.3g} %"
    if x == 0:
        return "0 s"
    num, unit = _scaled(x, [(1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")])
    return f"{sign}{num} {unit}"
