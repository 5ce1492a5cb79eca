"""parse_size / format_size."""

from __future__ import annotations

import pytest

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
        ("-5%", 100, "non-negative"),
        ("inf%", 100, "non-negative"),
        ("-5", None, "expected bytes"),
        ("", None, "expected bytes"),
        ("5 parsecs", None, "unknown unit 'parsecs'"),
        ("GiB", None, "expected bytes"),
        (-1, None, "non-negative"),
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
