"""parse_size / format_size."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from remat.schedules import RematError, format_size, parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("123", 123),
        (123, 123),
        ("0", 0),
        ("500MB", 500 * 10**6),
        ("500 mb", 500 * 10**6),
        ("1.5KB", 1500),
        ("6GiB", 6 * 2**30),
        ("6gib", 6 * 2**30),
        ("2MiB", 2 * 2**20),
        ("1KiB", 1024),
        ("1TB", 10**12),
        ("1G", 2**30),
        ("7B", 7),
        ("2.5e3", 2500),
        ("0.1KB", 100),
    ],
)
def test_sizes(text, expected):
    assert parse_size(text) == expected


def test_fractions_round_down():
    assert parse_size("1.0009KB") == 1000
    assert parse_size("33.3%", reference=10) == 3


def test_percent_of_reference():
    assert parse_size("40%", reference=1000) == 400
    assert parse_size("100%", reference=12345) == 12345
    assert parse_size("150%", reference=1000) == 1500
    assert parse_size(" 40 % ", reference=1000) == 400


@pytest.mark.parametrize(
    ("text", "reference", "message"),
    [
        ("40%", None, "needs a reference"),
        ("abc%", 100, "'abc' is not a number"),
        ("-5%", 100, "is negative"),
        ("inf%", 100, "not a finite number"),
        ("nan", None, "not a finite number"),
        ("-5", None, "is negative"),
        ("-5GB", None, "is negative"),
        ("1e400%", 100, "too large"),
        ("1e999999999", None, "too large"),
        ("1" * 101, None, "too long"),
        ("", None, "expected bytes"),
        ("5 parsecs", None, "unknown unit 'parsecs'"),
        ("GiB", None, "expected bytes"),
        (-1, None, "is negative"),
        ("1e400", None, "too large"),
        ("1e300GB", None, "too large"),
        ("1e307%", 10**12, "too large"),
    ],
)
def test_errors(text, reference, message):
    with pytest.raises(RematError, match=message):
        parse_size(text, reference)


def test_format_size():
    assert format_size(512) == "512 B"
    assert format_size(1536) == "1.50 KiB"
    assert format_size(6 * 2**30) == "6.00 GiB"
    assert parse_size(format_size(6 * 2**30).replace(" ", "")) == 6 * 2**30


def test_parsing_is_exact_in_integers():
    # float parsing lost these: 2**53 + 3 came back as 2**53 + 4, and 100% of 1.26e17 as 6 bytes less
    assert parse_size("9007199254740995") == 9007199254740995
    peak = 126_000_000_000_000_017
    assert parse_size("100%", reference=peak) == peak
    assert parse_size("50%", reference=peak) == peak // 2
    assert parse_size("33.3333333333333333%", reference=3 * 10**18) == 999_999_999_999_999_999
    assert parse_size("1.000000000000000001GB") == 10**9
    assert parse_size("1e-999999999") == 0


@given(st.integers(min_value=0, max_value=2**90), st.integers(min_value=0, max_value=1000))
def test_percent_is_floor_of_exact_product(reference, percent):
    assert parse_size(f"{percent}%", reference) == reference * percent // 100
    assert parse_size(str(reference)) == reference
