"""Reading and writing the JSON files (profiles and schedules), with one-line errors."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from remat.schedules.errors import ProfileError, RematError, ScheduleError
from remat.schedules.files import write_text_atomic
from remat.schedules.profiles import CHAIN_FORMAT, GRAPH_FORMAT, ChainProfile, GraphProfile
from remat.schedules.schedule import SCHEDULE_FORMAT, Schedule
from remat.schedules.schema import validate


def read_json(path: str | os.PathLike[str]) -> Any:
    """Load a JSON file; a missing file or bad JSON becomes a :class:`RematError` naming the file.

    Stricter than :func:`json.loads`, which takes three things silently: a key given twice (the
    last wins, so a second ``stages`` list would replace the first), ``NaN``/``Infinity`` (not JSON)
    and numbers too large for a float (``1e400`` becomes ``inf``). Each is refused with its path in
    the file (``stages[3].forward_ms``). A file nested too deep for the parser is one line too."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise RematError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise RematError(f"{path}: is a directory, not a JSON file") from None
    except OSError as error:
        raise RematError(f"{path}: cannot read ({error.strerror})") from None
    except UnicodeDecodeError:
        raise RematError(f"{path}: not valid JSON (not UTF-8 text)") from None
    try:
        return parse_json(text)
    except RematError as error:
        raise RematError(f"{path}: {error}") from None


def parse_json(text: str) -> Any:
    """Parse JSON text strictly (see :func:`read_json`); errors are one-line :class:`RematError`."""
    found: list[_Flagged] = []
    try:
        data = json.loads(
            text,
            object_pairs_hook=lambda pairs: _object(pairs, found),
            parse_constant=lambda name: _flag(found, _NonFinite(name)),
            parse_float=lambda digits: _float(digits, found),
        )
    except json.JSONDecodeError as error:
        raise RematError(f"not valid JSON (line {error.lineno}, column {error.colno}: {error.msg})") from None
    except RecursionError:
        raise RematError("not valid JSON here: lists or objects nested too deep for the parser") from None
    if found:
        where, what = _first_flagged(data)
        raise RematError(f"{where}: {what}")
    return data


class _Flagged:
    """A value json.loads made that must be refused; :func:`_first_flagged` finds its path."""


class _NonFinite(_Flagged):
    def __init__(self, text: str) -> None:
        self.text = text

    def message(self) -> str:
        if self.text.lstrip("-") in ("NaN", "Infinity"):
            return f"{self.text} is not a number JSON has (sizes and times must be finite numbers)"
        return f"{self.text} is too large for a number (past a float's range; sizes and times must be finite)"


class _Duplicated(dict, _Flagged):
    """A JSON object with a key given twice (json.loads would keep the last silently)."""

    key: str = ""

    def message(self) -> str:
        return f"key '{self.key}' is given twice (remove one; remat does not pick one for you)"


def _flag(found: list, value: _Flagged) -> _Flagged:
    found.append(value)
    return value


def _float(digits: str, found: list) -> Any:
    value = float(digits)
    return value if math.isfinite(value) else _flag(found, _NonFinite(digits))


def _object(pairs: list[tuple[str, Any]], found: list) -> dict:
    data = dict(pairs)
    if len(data) == len(pairs):
        return data
    seen: set[str] = set()
    duplicate = next(key for key, _ in pairs if key in seen or seen.add(key))
    flagged = _Duplicated(data)
    flagged.key = duplicate
    return _flag(found, flagged)


def _first_flagged(data: Any) -> tuple[str, str]:
    """(path, message) of the first flagged value in document order (iterative: no recursion)."""
    pending: list[tuple[str, Any]] = [("", data)]
    while pending:
        where, value = pending.pop()
        if isinstance(value, _Flagged):
            return where or "(top level)", value.message()
        if isinstance(value, dict):
            pending.extend(reversed([(f"{where}.{k}" if where else str(k), v) for k, v in value.items()]))
        elif isinstance(value, list):
            pending.extend(reversed([(f"{where}[{i}]", v) for i, v in enumerate(value)]))
    raise AssertionError("a flagged value was recorded but not found")  # pragma: no cover


def write_json(data: Any, path: str | os.PathLike[str]) -> None:
    """Write JSON (indented, trailing newline) atomically (remat.schedules.files: the old file
    survives any failure), creating parent folders; OS errors become one line."""
    path = Path(path)
    try:
        text = json.dumps(data, indent=1, allow_nan=False) + "\n"
    except ValueError as error:  # NaN or Infinity: JSON has neither, and a reader would refuse it
        raise RematError(f"{path}: cannot write ({error})") from None
    try:
        if path.parent and not path.parent.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise RematError(f"{path}: cannot write ({error.strerror or error})") from None
    write_text_atomic(path, text)


def profile_from_dict(data: Any) -> ChainProfile | GraphProfile:
    """Build a chain or graph profile from parsed JSON, dispatching on ``format``."""
    if not isinstance(data, dict):
        raise ProfileError(f"profile: must be a JSON object, got {type(data).__name__}")
    fmt = data.get("format")
    if fmt in (CHAIN_FORMAT, GRAPH_FORMAT):
        profile = (ChainProfile if fmt == CHAIN_FORMAT else GraphProfile).from_dict(data)
        # The dataclass checks above give the most specific messages; the schema is the
        # published contract, and every accepted file must satisfy it too.
        validate(data, fmt, ProfileError)
        return profile
    if fmt is None:
        raise ProfileError("format: missing required field")
    raise ProfileError(f"format: expected '{CHAIN_FORMAT}' or '{GRAPH_FORMAT}', got {fmt!r}")


def load_profile(path: str | os.PathLike[str]) -> ChainProfile | GraphProfile:
    """Load a chain or graph profile; errors are prefixed with the file name."""
    data = read_json(path)
    try:
        return profile_from_dict(data)
    except ProfileError as error:
        raise ProfileError(f"{path}: {error}") from None


def save_profile(profile: ChainProfile | GraphProfile, path: str | os.PathLike[str]) -> None:
    write_json(profile.to_dict(), path)


def load_schedule(path: str | os.PathLike[str]) -> Schedule:
    """Load a schedule file (shape only; use the simulator to check it against a profile)."""
    data = read_json(path)
    if isinstance(data, dict) and data.get("format") not in (SCHEDULE_FORMAT, None) and "ops" not in data:
        raise ScheduleError(f"{path}: format: expected '{SCHEDULE_FORMAT}', got {data.get('format')!r}")
    try:
        schedule = Schedule.from_dict(data)
        validate(data, SCHEDULE_FORMAT, ScheduleError)
        return schedule
    except ScheduleError as error:
        raise ScheduleError(f"{path}: {error}") from None


def save_schedule(schedule: Schedule, path: str | os.PathLike[str]) -> None:
    write_json(schedule.to_dict(), path)
