"""Load a user's model from ``pkg.module:factory`` and build example inputs (for the CLI)."""

from __future__ import annotations

import importlib
from collections.abc import Sequence

import torch
from torch import nn

from remat.schedules import RematError

_DTYPES = {
    "float32": torch.float32,
    "float": torch.float32,
    "float64": torch.float64,
    "double": torch.float64,
    "float16": torch.float16,
    "half": torch.float16,
    "bfloat16": torch.bfloat16,
}


def load_model(spec: str) -> nn.Module:
    """Import ``pkg.module`` and call ``factory()`` from ``"pkg.module:factory"``; one-line errors."""
    if not isinstance(spec, str) or spec.count(":") != 1 or not all(spec.split(":")):
        raise RematError(f"--model: expected 'package.module:factory', got {spec!r}")
    module_name, factory_name = spec.split(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        raise RematError(f"--model: cannot import module '{module_name}' ({error})") from None
    except Exception as error:  # noqa: BLE001 - the user's module failed while importing
        raise RematError(f"--model: importing '{module_name}' failed: {type(error).__name__}: {error}") from None
    factory = getattr(module, factory_name, None)
    if factory is None:
        raise RematError(f"--model: module '{module_name}' has no attribute '{factory_name}'")
    if isinstance(factory, nn.Module):
        return factory
    if not callable(factory):
        raise RematError(f"--model: '{spec}' is a {type(factory).__name__}, not a factory or a module")
    try:
        model = factory()
    except Exception as error:  # noqa: BLE001 - the user's factory raised
        raise RematError(f"--model: {spec}() raised {type(error).__name__}: {error}") from None
    if not isinstance(model, nn.Module):
        raise RematError(f"--model: {spec}() returned a {type(model).__name__}, not a torch.nn.Module")
    return model


def parse_shape(text: str) -> tuple[int, ...]:
    """``"32,3,224,224"`` -> ``(32, 3, 224, 224)``; positive integers only."""
    try:
        shape = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        shape = ()
    if not shape or any(d <= 0 for d in shape):
        raise RematError(f"--input-shape: expected comma-separated positive integers like 32,3,224,224, got {text!r}")
    return shape


def parse_dtype(text: str) -> torch.dtype:
    """``"float32"`` etc. -> a torch dtype."""
    dtype = _DTYPES.get(text.lower().replace("torch.", ""))
    if dtype is None:
        raise RematError(f"--dtype: unknown dtype {text!r} (use one of {', '.join(sorted(_DTYPES))})")
    return dtype


def resolve_device(text: str | None) -> torch.device:
    """``cuda``/``cpu``/``None`` (CUDA when available) -> a device; error if CUDA is asked for but absent."""
    if text is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(text)
    except RuntimeError:
        raise RematError(f"--device: unknown device {text!r} (use cuda or cpu)") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RematError("--device: CUDA was asked for but torch sees no CUDA device")
    if device.type not in ("cuda", "cpu"):
        raise RematError(f"--device: unsupported device {text!r} (use cuda or cpu)")
    return device


def build(
    spec: str, shape: Sequence[int], device: torch.device, dtype: torch.dtype, seed: int = 0
) -> tuple[nn.Module, torch.Tensor]:
    """The model (train mode, on ``device``/``dtype``) and a random normal input of ``shape``."""
    torch.manual_seed(seed)
    model = load_model(spec).to(device=device, dtype=dtype).train()
    x = torch.randn(*shape, device=device, dtype=dtype)
    return model, x


__all__ = ["build", "load_model", "parse_dtype", "parse_shape", "resolve_device"]
