"""Parsing and printing of memory sizes (bytes), and the one budget resolver.

Parsing is exact: the text's digits are read as a :class:`fractions.Fraction`, never a float, so
``100%`` of any reference is that reference and ``9007199254740995`` is itself. Printing
(:func:`format_size`) lives in :mod:`remat.schedules.errors`, whose messages need it and which
imports nothing of remat; it is re-exported here.

:func:`resolve_budget` is the one place a budget becomes bytes, for every entry point (the API,
``remat.solver.solve``, every CLI ``--budget``); its forms are listed in docs/formats.md, "Budgets".
"""

from __future__ import annotations

import re
from collections.abc import Callable
from fractions import Fraction

from remat.schedules.errors import RematError, format_size

__all__ = ["BUDGET_FORMS", "MAX_SIZE", "format_size", "is_share", "parse_size", "resolve_budget"]

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


# NOTE [One meaning per budget form]
# A budget is bytes (an int, or a size string: "123", "6GiB", "512 MB") or a share of the store-all
# peak (a percentage "40%", or a fraction in (0, 1]: the float 0.5 or the string "0.5"), the same
# in the API, in remat.solver.solve and on the command line. A bare number with a decimal point,
# or one that is not whole ("5e-1"), is a fraction wherever it is written, so "0.5" is never
# 0 bytes and "1.5" never 1 byte: a fraction outside (0, 1] is refused with what was probably
# meant. A share is at least one byte; 0 bytes (an int) is kept, as a budget no strategy meets,
# so that its refusal names the least it can.
BUDGET_FORMS = "bytes (123), a size (6GiB, 512MB), a percentage of the store-all peak (40%) or a fraction of it (0.5)"
_INTEGER = re.compile(r"^[+-]?[0-9]{1,100}$")


def _share_of(text: str, value: Fraction, name: str) -> Fraction:
    """``value`` as a fraction of the store-all peak, or a one-line error saying what was meant."""
    if 0 < value <= 1:
        return value
    if value <= 0:
        raise RematError(
            f"{name} {text}: a fraction of the store-all peak must be in (0, 1]; a budget is at least 1 byte"
        )
    integral = f", or {int(value)} bytes (an integer)" if value.denominator == 1 else ""
    raise RematError(
        f"{name} {text}: a fraction of the store-all peak must be in (0, 1]; "
        f"did you mean {float(value * 100):g}%, or {text}GiB{integral}?"
    )


def _form(budget: object, name: str) -> int | Fraction | str:
    """A budget's meaning before any profile: bytes (int), a fraction of the store-all peak
    (Fraction), or a checked percentage (str, resolved by :func:`parse_size` against the peak)."""
    if isinstance(budget, bool) or not isinstance(budget, (int, float, str)):
        raise RematError(f"{name}: expected {BUDGET_FORMS}, got {budget!r}")
    if isinstance(budget, float):
        if budget != budget or budget in (float("inf"), float("-inf")):
            raise RematError(f"{name} {budget}: not a finite number (a fraction of the store-all peak is in (0, 1])")
        # repr is the shortest text that reads back as this float: 0.3 is 3/10, not 0.29999...
        return _share_of(repr(budget), Fraction(repr(budget)), name)
    if isinstance(budget, int):
        value = budget
    elif _INTEGER.match(budget.strip()):  # "-5" and -5, "0" and 0: one meaning, one message
        value, budget = int(budget.strip()), budget.strip()
    else:
        value = _text_form(budget.strip(), name)
        if not isinstance(value, int):
            return value
    if value < 0:
        raise RematError(f"{name} {budget}: is negative; a budget is at least 1 byte")
    return value  # 0 bytes is a budget no schedule meets: the strategy answers with its least


def _text_form(raw: str, name: str) -> int | Fraction | str:
    """:func:`_form` of a string: a bare decimal is a fraction, a percentage is checked, the rest is a size."""
    short = len(raw) <= _MAX_TEXT and not _NON_FINITE.match(raw)
    if re.fullmatch(r"[+-]?(inf|infinity|nan)", raw, re.IGNORECASE):  # as the float it reads as
        raise RematError(f"{name} {raw}: not a finite number (a fraction of the store-all peak is in (0, 1])")
    try:
        bare = re.match(f"^{_NUMBER}$", raw) if short else None
        if bare and raw.strip("+-.eE0123456789") == "" and raw.strip("+-."):
            sign, digits, exponent = bare.groups()
            value = _exact(raw, "", digits, exponent)
            if "." in raw or value.denominator != 1:  # "0.5", "5e-1": a fraction; "1e9": bytes
                return _share_of(raw, -value if sign == "-" else value, name)
        percent = _PERCENT.match(raw) if short else None
        if percent:
            if not _exact(raw, *percent.groups()):
                raise RematError(f"size '{raw}': is zero; a budget is at least 1 byte")
            return raw
        return parse_size(raw)
    except RematError as error:
        message = str(error)
        raise RematError(message if message.startswith(name) else f"{name}: {message}") from None


def is_share(budget: int | float | str) -> bool:
    """True when ``budget`` is a share of the store-all peak (``"40%"``, ``0.5``, ``"0.5"``), so
    that its bytes need the peak; False for bytes. Refuses every form :func:`resolve_budget` does."""
    return not isinstance(_form(budget, "budget"), int)


def resolve_budget(
    budget: int | float | str, store_all: int | Callable[[], int] | None, name: str = "budget"
) -> int | None:
    """Bytes (an exact int; a share gives at least 1) from a budget in any of its forms (NOTE [One meaning per
    budget form]): an int (bytes), a size string (``"6GiB"``), a percentage (``"40%"``) or a
    fraction in (0, 1] (``0.5``, ``"0.5"``) of the store-all peak ``store_all`` (bytes, or a
    function computing them, called only for a share). ``store_all=None`` checks the form only:
    bytes come back, a share gives None. Shares round down (to at least 1 byte, else refused).
    Errors are one line naming ``name``."""
    form = _form(budget, name)
    if isinstance(form, int):
        return form
    if store_all is None:
        return None
    reference = store_all() if callable(store_all) else store_all
    if isinstance(form, str):
        try:
            value = parse_size(form, reference=reference)
        except RematError as error:
            raise RematError(f"{name}: {error}") from None
    else:
        value = int(form * reference)  # Fraction -> int rounds these non-negative values down
    if value < 1:
        raise RematError(
            f"{name} {budget!r}: 0 bytes of a store-all peak of {reference} bytes; a budget is at least 1 byte"
        )
    return value
