"""Reading and writing the JSON files (profiles and schedules), with one-line errors."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from remat.schedules.errors import ProfileError, RematError, ScheduleError
from remat.schedules.profile import CHAIN_FORMAT, GRAPH_FORMAT, ChainProfile, GraphProfile
from remat.schedules.schedule import SCHEDULE_FORMAT, Schedule
from remat.schedules.schema import validate


def read_json(path: str | os.PathLike[str]) -> Any:
    """Load a JSON file; a missing file or bad JSON becomes a :class:`RematError` naming the file."""
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
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise RematError(f"{path}: not valid JSON (line {error.lineno}, column {error.colno}: {error.msg})") from None


def write_json(data: Any, path: str | os.PathLike[str]) -> None:
    """Write JSON (indented, trailing newline), creating parent folders; OS errors become one line."""
    path = Path(path)
    text = json.dumps(data, indent=1, allow_nan=False) + "\n"
    try:
        if path.parent and not path.parent.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as error:
        raise RematError(f"{path}: cannot write ({error.strerror or error})") from None


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
