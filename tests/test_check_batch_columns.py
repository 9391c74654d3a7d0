"""check_batch's column checks: the cheap integer tests are exact for every integer dtype, and a
refusal names the first bad value of the first column with one, wherever the chunks fall."""

from __future__ import annotations

import numpy as np
import pytest

import dnnsat as ds
from dnnsat.problem import BATCH_ROWS
from dnnsat.problem._columns import column_test

PARAMS = [
    ds.Int(1, 4),
    ds.Int(0, 255),
    ds.Int(-5, 5),
    ds.Int(16, 512, step=16),
    ds.Int(3, 35, step=4),  # a power-of-two step off the multiples of 4
    ds.Int(-8, 8, step=4),
    ds.Int(0, 10**8, step=1000),
    ds.Int(2, 50, step=3),
    ds.Categorical([3, 5, 7]),
    ds.Categorical([16, 64, 1024]),
    ds.Categorical([0, 7, 2**40]),
    ds.Categorical([-3, 2, 9]),
]
DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]


@pytest.mark.parametrize("param", PARAMS, ids=repr)
def test_integer_column_tests_are_exact(param: ds.Param) -> None:
    values = np.asarray(param.values())
    member = set(values.tolist())
    some = np.concatenate([values[:20], values[len(values) // 2 :][:5], values[-20:]])
    edges = [0, 1, -1, 127, 128, 255, 256]
    near = np.unique(np.concatenate([some, some - 1, some + 1, some * 2, -some, edges]))
    for dtype in DTYPES:
        info = np.iinfo(dtype)
        test = column_test(param, np.dtype(dtype))
        if test is None:
            continue
        ok = [int(v) for v in some if info.min <= v <= info.max]
        for v in [int(v) for v in near if info.min <= v <= info.max] + [info.min, info.max]:
            arr = np.array(ok[:2] + [v] + ok[-1:], dtype=dtype)
            assert test(arr) == (v in member), (param, dtype, v)
        if ok:
            assert test(np.array(ok, dtype=dtype))


def test_a_dtype_that_holds_only_valid_values_is_not_read() -> None:
    test = column_test(ds.Int(0, 255), np.dtype(np.uint8))
    assert test is not None and test(np.empty(0, dtype=np.uint8))  # no min of an empty slice: never read


def _problem() -> ds.Problem:
    s = ds.Space({"w": ds.Int(16, 512, step=16), "d": ds.Int(1, 4), "m": ds.Categorical(["a", "b"])})
    return ds.Problem(s).require(s.vars.w * s.vars.d <= 1024)


def test_a_bad_value_in_a_later_chunk_is_refused_with_its_row() -> None:
    p = _problem()
    n = 9 * BATCH_ROWS + 5  # columns are checked a few chunks at a time
    cols = {"w": np.full(n, 16), "d": np.full(n, 2), "m": ["a"] * n}
    cols["d"][8 * BATCH_ROWS + 3] = 5
    with pytest.raises(ds.SpaceError, match=rf"column 'd' row {8 * BATCH_ROWS + 3} holds 5"):
        p.check_batch(cols)
    cols["w"][n - 1] = 24  # an earlier column: refused first, though its bad row is later
    with pytest.raises(ds.SpaceError, match=rf"column 'w' row {n - 1} holds 24"):
        p.check_batch(cols)
    assert len(p.check_batch(cols, validate=False)) == n  # unchecked: no refusal


def test_the_first_bad_column_is_refused_before_later_refusals() -> None:
    """As checking whole columns in order: a bad integer column comes before a bad label, a short
    column, a bad float column or a missing one after it."""
    p = _problem()
    good = {"w": np.array([16, 32]), "d": np.array([1, 2]), "m": ["a", "b"]}
    for later in ({"m": ["a", "c"]}, {"m": ["a"]}, {"m": [0.5, 1.5]}, {}):
        cols = {"w": np.array([16, 17]), "d": good["d"], **later}
        if "m" not in later:
            del cols["d"]  # then 'd' is missing
        with pytest.raises(ds.SpaceError, match="column 'w' row 1 holds 17"):
            p.check_batch(cols)
    with pytest.raises(ds.SpaceError, match="'c' is not a choice"):
        p.check_batch({**good, "m": ["a", "c"]})
    with pytest.raises(ValueError, match="column 'm' has 1 rows, expected 2"):
        p.check_batch({**good, "m": ["a"]})
    assert p.check_batch(good).tolist() == [True, True]
