"""The text of the model options (``--input-shape``, ``--dtype``, ``--input-dtype``, ``--input-range``,
``--config``, ``--vary``) read and checked without torch, so that a typo is one line before torch's
import and long before a model is built (remat.cli.options.check_model_arguments). The torch side
(remat.models.loading) turns the checked names into torch dtypes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from remat.schedules import RematError

# The one table of float dtype names (the CLI's --dtype/--input-dtype and the graph profiler's
# ``dtype`` argument both read it): each name and the torch dtype attribute it means.
FLOAT_DTYPE_NAMES = {
    "float32": "float32",
    "fp32": "float32",
    "float": "float32",
    "float64": "float64",
    "double": "float64",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
}
INT_DTYPE_NAMES = {"int64": "int64", "long": "int64", "int32": "int32", "int": "int32"}


def parse_shape(text: str) -> tuple[int, ...]:
    """``"32,3,224,224"`` -> ``(32, 3, 224, 224)``; positive integers only."""
    try:
        shape = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        shape = ()
    if not shape or any(d <= 0 for d in shape):
        raise RematError(f"--input-shape: expected comma-separated positive integers like 32,3,224,224, got {text!r}")
    return shape


def float_dtype_name(text: str) -> str | None:
    """The torch attribute of the float dtype ``text`` names (``"bf16"`` -> ``"bfloat16"``; any case), or None."""
    return FLOAT_DTYPE_NAMES.get(text.lower().replace("torch.", ""))


def dtype_name(text: str) -> str:
    """``--dtype``: the torch attribute of a float dtype's name, or a one-line error."""
    name = float_dtype_name(text)
    if name is None:
        raise RematError(f"--dtype: unknown dtype {text!r} (use one of {', '.join(sorted(FLOAT_DTYPE_NAMES))})")
    return name


def input_dtype_name(text: str | None) -> str | None:
    """``--input-dtype``: ``int64``/``int32`` (token ids) or a float dtype's torch attribute; None: the model's."""
    if text is None:
        return None
    name = INT_DTYPE_NAMES.get(text.lower().replace("torch.", "")) or float_dtype_name(text)
    if name is None:
        names = ", ".join(sorted({*INT_DTYPE_NAMES, *FLOAT_DTYPE_NAMES}))
        raise RematError(f"--input-dtype: unknown dtype {text!r} (use one of {names})")
    return name


def parse_input_range(text: str | None) -> tuple[int, int] | None:
    """``--input-range 0,50257`` -> ``(0, 50257)``: integer inputs are drawn from [low, high)."""
    if text is None:
        return None
    try:
        low, high = (int(part) for part in text.split(","))
    except ValueError:
        raise RematError(f"--input-range: expected LOW,HIGH integers like 0,50257, got {text!r}") from None
    if high <= low:
        raise RematError(f"--input-range: HIGH must be above LOW, got {text!r}")
    return low, high


def _value(text: str) -> Any:
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("none", "null"):
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text.strip()


def parse_config(text: str | None) -> dict[str, Any]:
    """``"n_layer=2,n_embd=64,activation=gelu"`` -> ``{"n_layer": 2, "n_embd": 64, "activation": "gelu"}``;
    a path ending in ``.json`` (a Hugging Face ``config.json``, or any JSON object) -> its fields."""
    if not text:
        return {}
    if text.strip().lower().endswith(".json"):
        return _config_file(Path(text.strip()))
    config: dict[str, Any] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise RematError(f"--config: expected key=value pairs separated by commas, got {part!r}")
        config[key.strip()] = _value(value)
    return config


def _config_file(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise RematError(f"--config: no such file '{path}'") from None
    except (OSError, ValueError) as error:
        raise RematError(f"--config: cannot read '{path}' as JSON ({error})") from None
    if not isinstance(data, dict):
        raise RematError(f"--config: '{path}' holds a JSON {type(data).__name__}, not an object of config fields")
    return data


def parse_vary(text: str, rank: int) -> int:
    """``batch`` -> 0, ``dim=N`` -> N: the input dimension that varies (checked against ``rank``)."""
    if text == "batch":
        return 0
    if text.startswith("dim="):
        try:
            dim = int(text[4:])
        except ValueError:
            dim = -1
        if 0 <= dim < rank:
            return dim
    raise RematError(f"--vary: expected 'batch' or 'dim=N' with 0 <= N < {rank} (the input's rank), got {text!r}")


__all__ = [
    "FLOAT_DTYPE_NAMES",
    "INT_DTYPE_NAMES",
    "dtype_name",
    "float_dtype_name",
    "input_dtype_name",
    "parse_config",
    "parse_input_range",
    "parse_shape",
    "parse_vary",
]
