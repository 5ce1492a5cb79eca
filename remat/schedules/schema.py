"""The JSON Schema files of the three formats, and validation against them.

The schemas (``remat/schedules/schemas/*.schema.json``) are the published description of the
formats for other tools. The loaders check every file against them after the dataclass checks
(whose messages are more specific), so a file remat accepts always satisfies its schema.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import jsonschema

from remat.cache import memo
from remat.schedules.errors import RematError

SCHEMA_NAMES = ("remat-chain-v1", "remat-graph-v1", "remat-schedule-v1")


@memo()
def load_schema(name: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of format ``name``, e.g. ``remat-chain-v1``."""
    if name not in SCHEMA_NAMES:
        raise RematError(f"unknown format {name!r} (known: {', '.join(SCHEMA_NAMES)})")
    text = resources.files("remat.schedules").joinpath("schemas", f"{name}.schema.json").read_text()
    return json.loads(text)


@memo()
def _validator(name: str) -> jsonschema.protocols.Validator:
    return jsonschema.Draft202012Validator(load_schema(name))


def _path(error: jsonschema.ValidationError) -> str:
    parts = ""
    for part in error.absolute_path:
        parts += f"[{part}]" if isinstance(part, int) else (f".{part}" if parts else str(part))
    return parts or "(top level)"


def schema_errors(data: Any, name: str) -> list[str]:
    """All violations of schema ``name`` as one-line messages ``path: what is wrong``."""
    errors = sorted(_validator(name).iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))
    return [f"{_path(e)}: {e.message}" for e in errors]


def validate(data: Any, name: str, error_type: type[RematError] = RematError) -> None:
    """Raise ``error_type`` with the first violation of schema ``name``, if any."""
    errors = schema_errors(data, name)
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise error_type(f"{errors[0]}{more} [schema {name}]")
