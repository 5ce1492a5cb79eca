"""Parsing and printing of memory sizes (bytes).

Parsing is exact: the text's digits are read as a :class:`fractions.Fraction`, never a float, so
``100%`` of any reference is that reference and ``9007199254740995`` is itself. Printing
(:func:`format_size`) lives in :mod:`remat.schedules.errors`, whose messages need it and which
imports nothing of remat; it is re-exported here.
"""

from __future__ import annotations

import re
from fractions import Fraction

from remat.schedules.errors import RematError, format_size

__all__ = ["MAX_SIZE", "format_size", "parse_size"]

_UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
    "PB": 10**15,
    "PIB": 2**50,
    "EB": 10**18,
    "EIB": 2**60,
    "K": 2**10,
    "M": 2**20,
    "G": 2**30,
}
_NUMBER = r"([+-]?)([0-9]*\.?[0-9]*)(?:[eE]([+-]?[0-9]+))?"
_SIZE = re.compile(rf"^{_NUMBER}\s*([A-Za-z]*)$")
_PERCENT = re.compile(rf"^{_NUMBER}\s*%$")
_NON_FINITE = re.compile(r"^[+-]?(inf|infinity|nan)\b", re.IGNORECASE)
# Sizes past this are refused as "too large" (a yottabyte is 2**80): it also keeps an exponent
# like 1e999999999 from building a billion-digit integer.
MAX_SIZE = 2**100
_MAX_TEXT = 100


def _exact(text: str, sign: str, digits: str, exponent: str | None) -> Fraction:
    """The exact value of a decimal number's parts; one-line errors for what is not a finite number."""
    if not digits or digits == ".":
        raise RematError(f"size '{text}': expected bytes, a unit like 6GiB or 500MB, or a percentage like 40%")
    value = Fraction(digits)
    power = int(exponent or 0)
    if value and power > 200:  # more than 10**200 bytes whatever the digits: refuse before computing it
        raise RematError(f"size '{text}': too large (more than 2**100 bytes)")
    if power < -200:  # under 10**-100 of a byte (the text is at most 100 characters): rounds down to 0
        value = Fraction(0)
    else:
        value *= Fraction(10) ** power
    if sign == "-" and value:
        raise RematError(f"size '{text}': is negative; a size must be zero or more bytes")
    return value


def parse_size(text: str | int, reference: int | None = None) -> int:
    """Parse a memory size into bytes (an exact Python int).

    Accepts plain bytes (``123``), decimal and binary units (``500MB``, ``6GiB``), and a
    percentage of ``reference`` bytes (``40%``, typically the store-all peak). The arithmetic is
    exact (fractions, never floats); fractional results are rounded down, so a budget never
    grows by parsing. Refuses negative, non-finite and too-large (over 2**100 bytes) values.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise RematError(f"size {text}: is negative; a size must be zero or more bytes")
        return text
    raw = str(text).strip()
    if len(raw) > _MAX_TEXT:
        raise RematError(f"size '{raw[:20]}...': too long ({len(raw)} characters; at most {_MAX_TEXT})")
    if _NON_FINITE.match(raw):
        raise RematError(f"size '{raw}': not a finite number")
    percent = _PERCENT.match(raw)
    if percent:
        if reference is None:
            raise RematError(f"size '{raw}': a percentage needs a reference size")
        value = _exact(raw, *percent.groups()) * reference / 100
    else:
        match = _SIZE.match(raw)
        if not match:
            if raw.endswith("%"):
                raise RematError(f"size '{raw}': '{raw[:-1].strip()}' is not a number")
            raise RematError(f"size '{raw}': expected bytes, a unit like 6GiB or 500MB, or a percentage like 40%")
        *number, unit = match.groups()
        value = _exact(raw, *number)
        factor = _UNITS.get(unit.upper())
        if factor is None:
            raise RematError(f"size '{raw}': unknown unit '{unit}' (use B, KB, MB, GB, TB, PB, EB or KiB ... EiB)")
        value *= factor
    # A percentage of a reference is as large as the reference allows: a profile may be that big
    # (its sizes are exact ints), and "100%" of it must not be blamed on the percentage.
    limit = max(MAX_SIZE, reference or 0) if percent else MAX_SIZE
    if value > limit:
        if percent and reference and reference > MAX_SIZE:
            raise RematError(f"size '{raw}': too large (over 2**100 bytes and over 100% of {reference} bytes)")
        raise RematError(f"size '{raw}': too large (more than 2**100 bytes)")
    return int(value)  # Fraction -> int truncates toward zero: rounds down for these non-negative values
