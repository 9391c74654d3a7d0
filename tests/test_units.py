"""Units: parsing and formatting of counts, FLOPs, bytes and times."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dnnsat.units import KINDS, UnitError, format_quantity, parse_quantity


@pytest.mark.parametrize(
    ("text", "kind", "expected"),
    [
        ("25M", "count", 25_000_000),
        ("25m", "count", 25_000_000),
        ("1.5K", "count", 1_500),
        ("7B", "count", 7_000_000_000),
        ("25_000", "count", 25_000),
        ("4G", "flops", 4_000_000_000),
        ("4GFLOPs", "flops", 4_000_000_000),
        ("4 GFLOP", "flops", 4_000_000_000),
        ("4 gflops", "flops", 4_000_000_000),
        ("1.5T", "flops", 1_500_000_000_000),
        ("4.1G", "flops", 4_100_000_000),
        ("2 GMACs", "flops", 4_000_000_000),  # 1 multiply-add = 2 FLOPs
        ("16GiB", "bytes", 16 * 2**30),
        ("16 GB", "bytes", 16_000_000_000),
        ("512MiB", "bytes", 512 * 2**20),
        ("1.5 KiB", "bytes", 1536),
        ("2kB", "bytes", 2000),
        ("16Gi", "bytes", 16 * 2**30),
        ("16G", "bytes", 16_000_000_000),
        ("1e9", "bytes", 1_000_000_000),
        ("100 bytes", "bytes", 100),
        ("0", "bytes", 0),
        ("10ms", "time", 0.01),
        ("2.5 s", "time", 2.5),
        ("300us", "time", 3e-4),
        ("300µs", "time", 3e-4),  # micro sign
        ("300μs", "time", 3e-4),  # greek mu
        ("5 ns", "time", 5e-9),
        ("2 min", "time", 120.0),
        ("0.01", "time", 0.01),
        ("25M", "params", 25_000_000),  # aliases
        ("16GiB", "memory", 16 * 2**30),
        ("10ms", "latency", 0.01),
    ],
)
def test_parse_strings(text: str, kind: str, expected: float) -> None:
    got = parse_quantity(text, kind)
    assert got == pytest.approx(expected, rel=1e-12)
    if kind in ("time", "latency"):
        assert isinstance(got, float)
    else:
        assert isinstance(got, int) and got == expected


def test_parse_numbers_and_types() -> None:
    assert parse_quantity(25_000_000, "count") == 25_000_000
    assert parse_quantity(4e9, "flops") == 4_000_000_000 and isinstance(parse_quantity(4e9, "flops"), int)
    assert parse_quantity(1.5, "count") == 1.5 and isinstance(parse_quantity(1.5, "count"), float)
    assert parse_quantity("1.5", "count") == 1.5
    assert parse_quantity(3, "time") == 3.0 and isinstance(parse_quantity(3, "time"), float)
    assert parse_quantity("1.0000005K", "count") == 1000.0005


@pytest.mark.parametrize(
    ("value", "kind", "fragment"),
    [
        ("16GiB", "time", "byte size"),
        ("10ms", "flops", "a time"),
        ("10ms", "bytes", "a time"),
        ("4GFLOPs", "bytes", "FLOPs"),
        ("16GiB", "count", "byte size"),
        ("16 GB", "flops", "byte size"),
        ("3 parsecs", "time", "unknown unit 'parsecs'"),
        ("12 apples", "count", "unknown unit"),
        ("abc", "count", "not a number"),
        ("", "bytes", "not a number"),
        ("nan", "count", "finite"),
        ("inf", "flops", "finite"),
        ("-inf", "time", "finite"),
        (float("nan"), "bytes", "finite"),
        (float("inf"), "time", "finite"),
        ("-3", "count", "negative"),
        (-1.0, "bytes", "negative"),
        (True, "count", "not a quantity"),
        (None, "time", "not a quantity"),
        ([1], "count", "not a quantity"),
    ],
)
def test_parse_errors(value: object, kind: str, fragment: str) -> None:
    with pytest.raises(UnitError) as info:
        parse_quantity(value, kind)  # type: ignore[arg-type]
    msg = str(info.value)
    assert fragment in msg
    assert repr(value) in msg  # names the value
    assert "e.g." in msg  # and gives valid examples
    assert isinstance(info.value, ValueError)


def test_unknown_kind() -> None:
    with pytest.raises(UnitError, match="unknown quantity kind 'watts'"):
        parse_quantity("1", "watts")


@pytest.mark.parametrize(
    ("value", "kind", "text"),
    [
        (25_000_000, "count", "25.0M"),
        (1_500, "count", "1.50K"),
        (999, "count", "999"),
        (999_700, "count", "1.00M"),
        (4e9, "flops", "4.00 GFLOPs"),
        (123, "flops", "123 FLOPs"),
        (16 * 2**30, "bytes", "16.0 GiB"),
        (512, "bytes", "512 B"),
        (1536, "bytes", "1.50 KiB"),
        (0.01, "time", "10.0 ms"),
        (2.5, "time", "2.50 s"),
        (3e-4, "time", "300 µs"),
        (5e-9, "time", "5.00 ns"),
        (0, "time", "0 s"),
        (5000, "time", "5000 s"),
    ],
)
def test_format(value: float, kind: str, text: str) -> None:
    assert format_quantity(value, kind) == text


def test_format_non_finite_and_negative() -> None:
    assert format_quantity(float("inf"), "flops") == "inf"
    assert format_quantity(-2_000_000, "count") == "-2.00M"


@settings(max_examples=300, deadline=None)
@given(
    kind=st.sampled_from(KINDS),
    x=st.floats(min_value=1e-9, max_value=1e18, allow_nan=False, allow_infinity=False),
)
def test_parse_format_round_trip(kind: str, x: float) -> None:
    text = format_quantity(x, kind)
    back = parse_quantity(text, kind)
    # three significant digits: relative error <= 0.5 %
    assert math.isclose(back, x, rel_tol=5e-3, abs_tol=1e-12), (x, text, back)


@settings(max_examples=200, deadline=None)
@given(kind=st.sampled_from(("count", "flops", "bytes")), n=st.integers(min_value=0, max_value=10**15))
def test_plain_integers_pass_through(kind: str, n: int) -> None:
    assert parse_quantity(n, kind) == n
    assert parse_quantity(str(n), kind) == n
