"""Checks of single profile fields, shared by chain and graph profiles: each error names its field.

A size is a non-negative integer number of bytes, a time a finite non-negative number of
milliseconds; :func:`digest` is the SHA-256 of a profile's canonical JSON.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import fields
from typing import Any

from remat.schedules.errors import ProfileError


def check_size(value: Any, path: str, minimum: int = 0) -> int:
    """``value`` as a size in bytes (an integral float up to 2**53 is taken), at least ``minimum``
    (0 unless a field may be negative: a backward's net transient), or a ProfileError naming ``path``."""
    kind = "a non-negative integer number of bytes" if minimum == 0 else f"an integer number of bytes >= {minimum}"
    if isinstance(value, bool) or not isinstance(value, int):
        # an integral float is a size only where floats are exact (JSON writers may emit 1e6)
        if isinstance(value, float) and value.is_integer() and abs(value) <= 2**53:
            value = int(value)
        else:
            raise ProfileError(f"{path}: must be {kind}, got {value!r}")
    if value < minimum:
        raise ProfileError(f"{path}: must be {kind}, got {value}")
    return value


def check_time(value: Any, path: str) -> float:
    """``value`` as a time in milliseconds (finite, non-negative), or a ProfileError naming ``path``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ProfileError(f"{path}: must be a non-negative number of milliseconds, got {value!r}")
    try:
        number = float(value)
    except OverflowError:  # an integer past float's range (JSON integers are unbounded)
        size = f"an integer of {value.bit_length()} bits"
        raise ProfileError(f"{path}: must be a finite number of milliseconds, got {size}") from None
    if not math.isfinite(number) or number < 0:
        raise ProfileError(f"{path}: must be a non-negative number of milliseconds, got {value}")
    return number


def check_name(value: Any, path: str) -> str:
    """``value`` if it is a string, else a ProfileError naming ``path``."""
    if not isinstance(value, str):
        raise ProfileError(f"{path}: must be a string, got {value!r}")
    return value


def require(data: Mapping[str, Any], key: str, path: str) -> Any:
    """``data[key]``, or a ProfileError naming the missing field (or ``data`` that is no JSON object)."""
    if not isinstance(data, Mapping):
        raise ProfileError(f"{path or 'profile'}: must be a JSON object, got {type(data).__name__}")
    if key not in data:
        where = f"{path}.{key}" if path else key
        raise ProfileError(f"{where}: missing required field")
    return data[key]


def reject_unknown_keys(raw: Mapping[str, Any], cls: type, path: str) -> None:
    """Refuse a key that is not a field of ``cls`` (a typo like ``forward_overhaed`` would otherwise
    be dropped silently, and with it a transient). The known keys are the dataclass's fields, so a
    new optional field is accepted as soon as it exists. Only stages and nodes are this strict; the
    top level of a file may carry extra keys (docs/formats.md)."""
    known = [f.name for f in fields(cls)]
    for key in raw:
        if key in known:
            continue
        close = difflib.get_close_matches(str(key), known, n=1)
        hint = f"did you mean '{close[0]}'?" if close else f"known keys: {', '.join(known)}"
        raise ProfileError(f"{path}.{key}: unknown key ({hint})")


def records(data: Mapping[str, Any], fmt: str, key: str, cls: type) -> Iterator[tuple[int, str, Mapping[str, Any]]]:
    """(index, path, raw record) of every item of a profile's list ``key`` (``stages``, ``nodes``),
    after the checks both profile formats make: ``data`` says it is ``fmt``, ``key`` is a list,
    each item a JSON object with no key that ``cls`` does not have."""
    found = require(data, "format", "")
    if found != fmt:
        raise ProfileError(f"format: expected '{fmt}', got {found!r}")
    raw_items = require(data, key, "")
    if not isinstance(raw_items, list):
        raise ProfileError(f"{key}: must be a list of {key}")
    for index, raw in enumerate(raw_items):
        path = f"{key}[{index}]"
        if not isinstance(raw, Mapping):
            raise ProfileError(f"{path}: must be a JSON object")
        reject_unknown_keys(raw, cls, path)
        yield index, path, raw


def check_metadata(value: Any, path: str) -> dict[str, Any]:
    """A profile's metadata as a plain dict (None: empty); refused if JSON cannot hold it."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ProfileError(f"{path}: must be a JSON object")
    try:  # the profile's digest serializes it: refuse what JSON cannot hold (NaN, Infinity, objects)
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise ProfileError(f"{path}: must hold plain JSON values ({error})") from None
    except RecursionError:
        raise ProfileError(f"{path}: nested too deep") from None
    return dict(value)


def optional_size(raw: Mapping[str, Any], key: str, path: str) -> Any:
    """The value of an optional size field, or None when absent (null is refused, not "absent")."""
    if key not in raw:
        return None
    if raw[key] is None:
        raise ProfileError(f"{path}.{key}: must be a non-negative integer number of bytes, got null")
    return raw[key]


def digest(data: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of the canonical JSON of ``data`` (sorted keys, no spaces, no NaN)."""
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(canonical.encode()).hexdigest()
