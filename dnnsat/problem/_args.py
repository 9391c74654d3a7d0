"""Arguments of the public calls checked where they enter (seeds, counts, request sizes), so that a bad
value is refused by dnnsat with a message naming the argument and the fix, never by numpy deep inside."""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

__all__ = [
    "ArgumentError",
    "MAX_REQUEST_BYTES",
    "check_count",
    "check_request",
    "check_seconds",
    "check_seed",
]

#: the most memory one call may allocate for its answer (``sample``, ``estimate_count``, ``check_batch``);
#: a larger request is refused before numpy allocates, naming a size that fits
MAX_REQUEST_BYTES = 4 * 2**30


class ArgumentError(ValueError, TypeError):
    """An argument of a dnnsat call has the wrong type or an unusable value; the message names the
    argument, what it got and what to pass instead. Both a :class:`ValueError` and a :class:`TypeError`,
    so code that caught either before keeps working."""


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool | np.bool_)


def check_seed(seed: Any, where: str) -> int | None:
    """``seed`` as a Python int (or ``None``): an integer ``>= 0``; ``where`` names the call."""
    if seed is None:
        return None
    if not _is_int(seed) or int(seed) < 0:
        raise ArgumentError(
            f"{where}: seed must be None or an integer >= 0 (e.g. seed=0), got {seed!r}"
            + (f" ({type(seed).__name__})" if not _is_int(seed) else "")
            + (
                f"; use seed={int(seed)}"
                if isinstance(seed, float) and seed.is_integer() and seed >= 0
                else ""
            )
        )
    return int(seed)


def check_count(value: Any, name: str, where: str, minimum: int = 0, example: int = 10) -> int:
    """``value`` as a Python int ``>= minimum``; ``name`` is the argument, ``where`` the call."""
    if not _is_int(value) or int(value) < minimum:
        raise ArgumentError(
            f"{where}: {name} must be an integer >= {minimum} (e.g. {name}={max(example, minimum)}), "
            f"got {value!r}"
        )
    return int(value)


def check_seconds(max_seconds: Any, where: str) -> float | None:
    """``max_seconds`` as seconds > 0, or ``None`` for no limit (``None`` or ``math.inf``)."""
    if max_seconds is None:
        return None
    if isinstance(max_seconds, bool) or not isinstance(max_seconds, int | float) or not max_seconds > 0:
        raise ArgumentError(
            f"{where}: max_seconds must be a number of seconds > 0 (None or math.inf: no limit), "
            f"got {max_seconds!r}"
        )
    return None if math.isinf(max_seconds) else float(max_seconds)


def check_request(where: str, name: str, n: int, bytes_each: int, limit: int | None = None) -> None:
    """Refuse ``n`` items of about ``bytes_each`` bytes each when together they exceed ``limit`` (default
    :data:`MAX_REQUEST_BYTES`): the message names ``name``, the estimate and the largest value that fits."""
    limit = MAX_REQUEST_BYTES if limit is None else limit
    need = n * bytes_each
    if need > limit:
        fits = max(limit // max(bytes_each, 1), 1)
        raise ArgumentError(
            f"{where}: {name}={n} would allocate about {_gib(need)} (more than the {_gib(limit)} one call "
            f"may use); ask for {name} <= {fits} at a time (e.g. several calls with different seeds)"
        )


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"
