"""Domain checks of ``Problem.check_batch``'s columns: exact, and cheap for integer columns.

An integer column of a parameter with integer values is checked by :func:`column_test` in one to four
passes that keep no temporary of the column's size (a range is its min and max; a power-of-two step
adds the OR and AND of the values' low bits; other sets, one table lookup), slice by slice:
``check_batch`` runs them on each chunk it evaluates, while the chunk is in the cache. Every other
column takes the general check of :func:`check_column`. A refusal always names the first bad value of
the first column that has one, as checking whole columns in order does (:class:`ColumnChecks`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..space import SpaceError
from ._format import _py

__all__ = ["ColumnChecks", "check_column", "column_test"]

_SLICE_ROWS = 1 << 16  # rows per slice when a whole column is tested (cache-sized)
_TABLE_MAX = 1 << 20  # largest value range checked by a table lookup

Test = Callable[[np.ndarray], bool]


def _always(part: np.ndarray) -> bool:
    return True


def column_test(p: Any, dtype: np.dtype[Any]) -> Test | None:
    """A test of a non-empty slice of a column of ``dtype``: True exactly when every value is one of
    ``p``'s values. ``None`` when no cheap exact test exists (a non-integer column or parameter):
    :func:`check_column` decides then. A column whose dtype holds only values of ``p`` (``uint8`` of
    ``Int(0, 255)``) needs no pass at all.
    """
    if dtype.kind not in "iu" or not p.is_finite:
        return None
    enc = np.unique(np.asarray(p.encoded()))
    if enc.dtype.kind not in "iu" or len(enc) == 0 or (dtype.kind == "u" and enc[0] < 0):
        return None
    low, high = int(enc[0]), int(enc[-1])
    info = np.iinfo(dtype)
    span = high - low
    if len(enc) == span + 1 and low <= info.min and info.max <= high:
        return _always
    lowest, highest = np.minimum.reduce, np.maximum.reduce

    def in_range(part: np.ndarray) -> bool:
        return bool(lowest(part) >= low and highest(part) <= high)

    if len(enc) == span + 1:
        return in_range
    steps = np.diff(enc)
    step = int(steps[0]) if (steps == steps[0]).all() else 0
    if step & (step - 1) == 0 and step:  # a power-of-two step: the low bits of every value are low's
        mask, bits = step - 1, low & (step - 1)
        clear = mask & ~bits  # Python ints >= 0 (safe with unsigned columns)
        if bits == 0:  # the values are multiples of the step: no bit of the mask is ever set
            return lambda part: in_range(part) and int(np.bitwise_or.reduce(part)) & clear == 0
        return lambda part: (
            in_range(part)
            and int(np.bitwise_or.reduce(part)) & clear == 0
            and int(np.bitwise_and.reduce(part)) & bits == bits
        )
    if span < _TABLE_MAX:
        if low >= 1 and (dtype.kind == "i" or dtype.itemsize < 8):
            # indexed by the value itself, out-of-range values clipped onto the two False ends
            table = np.zeros(high + 2, dtype=bool)
            table[enc] = True
            return lambda part: bool(np.take(table, part, mode="clip").all())
        table = np.zeros(span + 1, dtype=bool)
        table[enc - low] = True
        offset = dtype.type(low)
        return lambda part: in_range(part) and bool(table[part - offset].all())
    if 0 < step <= info.max:
        offset, stride = dtype.type(low), dtype.type(step)
        return lambda part: in_range(part) and bool(((part - offset) % stride == 0).all())
    return None


def check_column(name: str, p: Any, arr: np.ndarray) -> None:
    """Raise ``SpaceError`` at the first value of a numeric column outside the parameter's domain."""
    test = column_test(p, arr.dtype) if len(arr) else None
    if test is not None and all(test(arr[i : i + _SLICE_ROWS]) for i in range(0, len(arr), _SLICE_ROWS)):
        return
    try:
        if arr.dtype == bool or (arr.dtype == object and any(v.__class__ is bool for v in arr)):
            raise TypeError("booleans are not numbers here")
        x = np.asarray(arr, dtype=np.float64)
    except (TypeError, ValueError):
        bad = np.array([v.__class__ is bool or not isinstance(v, int | float | np.number) for v in arr])
        bad = bad if bad.any() else np.ones(len(arr), dtype=bool)
    else:
        if p.is_finite:
            enc = np.asarray(p.encoded(), dtype=np.float64)
            pos = np.clip(np.searchsorted(enc, x), 0, len(enc) - 1)
            near = np.minimum(np.abs(enc[pos] - x), np.abs(enc[np.maximum(pos - 1, 0)] - x))
            bad = ~(near <= 1e-9 * np.maximum(1.0, np.abs(x)))
        else:
            low, high = p.bounds()
            bad = ~((x >= low) & (x <= high))
    if bad.any():
        i = int(np.argmax(bad))
        raise SpaceError(
            f"check_batch: column {name!r} row {i} holds {_py(arr[i])!r}, which is not a value of {name!r} "
            f"({p!r}); pass valid values, or validate=False to skip this check"
        )


class ColumnChecks:
    """The domain checks of one ``check_batch`` call, column by column in the caller's order.

    :meth:`add` checks a column now, or keeps its cheap test for :meth:`chunk` (each chunk of rows,
    while it is in the cache); a failed test, or :meth:`first_error` before another refusal, checks
    the kept columns whole and in order, so the refusal is the one checking whole columns gives.
    """

    def __init__(self) -> None:
        self._kept: list[tuple[str, Any, np.ndarray, Test]] = []

    def add(self, name: str, p: Any, arr: np.ndarray) -> None:
        test = column_test(p, arr.dtype) if len(arr) else None
        if test is None:
            check_column(name, p, arr)
        elif test is not _always:
            self._kept.append((name, p, arr, test))

    def chunk(self, start: int, stop: int) -> None:
        """Test rows ``start:stop`` of the kept columns (raise ``SpaceError`` naming a bad value)."""
        if not all(test(arr[start:stop]) for _, _, arr, test in self._kept):
            self.finish()

    def finish(self) -> None:
        """Check the kept columns whole (once; raise ``SpaceError`` naming the first bad value)."""
        kept, self._kept = self._kept, []
        for name, p, arr, _ in kept:
            check_column(name, p, arr)

    def first_error(self) -> SpaceError | None:
        """The refusal of the kept columns, if any (checked whole)."""
        try:
            self.finish()
        except SpaceError as e:
            return e
        return None
