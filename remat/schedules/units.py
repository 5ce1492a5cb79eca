"""Parsing and printing of memory sizes (bytes)."""

from __future__ import annotations

import math
import re

from remat.schedules.errors import RematError

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
    "K": 2**10,
    "M": 2**20,
    "G": 2**30,
}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


def parse_size(text: str | int, reference: int | None = None) -> int:
    """Parse a memory size into bytes.

    Accepts plain bytes (``123``), decimal and binary units (``500MB``, ``6GiB``), and a
    percentage of ``reference`` bytes (``40%``, typically the store-all peak). Fractional
    results are rounded down, so a budget never grows by parsing.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise RematError(f"size must be non-negative, got {text}")
        return text
    raw = str(text).strip()
    if raw.endswith("%"):
        if reference is None:
            raise RematError(f"size '{raw}': a percentage needs a reference size")
        try:
            percent = float(raw[:-1])
        except ValueError:
            raise RematError(f"size '{raw}': '{raw[:-1]}' is not a number") from None
        if not math.isfinite(percent) or percent < 0:
            raise RematError(f"size '{raw}': percentage must be non-negative")
        value = reference * percent / 100.0
        if not math.isfinite(value):
            raise RematError(f"size '{raw}': too large")
        return int(math.floor(value))
    match = _SIZE.match(raw)
    if not match:
        raise RematError(f"size '{raw}': expected bytes, a unit like 6GiB or 500MB, or a percentage like 40%")
    number, unit = match.groups()
    factor = _UNITS.get(unit.upper())
    if factor is None:
        raise RematError(f"size '{raw}': unknown unit '{unit}' (use B, KB, MB, GB, KiB, MiB, GiB)")
    value = float(number) * factor
    if not math.isfinite(value):
        raise RematError(f"size '{raw}': too large")
    return int(math.floor(value))


def format_size(size: float) -> str:
    """Human-readable binary size, e.g. ``1.50 GiB``."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
