"""The graph profiler's arguments checked, with one-line :class:`ProfileError` messages: the
dtype, the example inputs, the device, where overheads come from."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from remat.models.loading import FLOAT_DTYPES, float_dtype
from remat.schedules import ProfileError

OVERHEAD_SOURCES = ("allocator", "shapes")


def parse_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """A torch dtype, or one of the names of :data:`remat.models.loading.FLOAT_DTYPES`."""
    if isinstance(dtype, torch.dtype):
        return dtype
    found = float_dtype(dtype) if isinstance(dtype, str) else None
    if found is None:
        raise ProfileError(f"dtype: unknown dtype {dtype!r} (use one of {', '.join(sorted(FLOAT_DTYPES))})")
    return found


def input_tensors(input_shape: Sequence[int] | None, examples: Any, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """``examples`` (a tensor or a sequence of tensors) as a tuple, else one meta tensor of
    ``input_shape`` (positive integers, batch first) and ``dtype``."""
    if examples is not None:
        inputs = examples if isinstance(examples, (tuple, list)) else (examples,)
        for index, value in enumerate(inputs):
            if not isinstance(value, torch.Tensor):
                raise ProfileError(f"example_inputs[{index}]: must be a tensor, got {type(value).__name__}")
        return tuple(inputs)
    if input_shape is None:
        raise ProfileError("input_shape: give an input shape (batch first) or example inputs")
    shape = tuple(input_shape)
    if not shape or any(isinstance(d, bool) or not isinstance(d, int) or d <= 0 for d in shape):
        raise ProfileError(f"input_shape: must be positive integers, batch first, got {input_shape!r}")
    return (torch.empty(shape, dtype=dtype, device="meta"),)


def default_device(model: nn.Module, inputs: Sequence[torch.Tensor]) -> torch.device:
    """Where the pieces run when no device is given: the example input's device, else the model's
    (its first parameter or buffer), else the CPU; never meta."""
    for t in (*inputs, *model.parameters(), *model.buffers()):
        if t.device.type != "meta":
            return t.device
    return torch.device("cpu")


def overhead_source(model: nn.Module, time_source: str, overheads: str | None) -> str:
    """``overheads`` checked, or its default: ``"allocator"`` for a model with real parameters,
    ``"shapes"`` for one on the meta device (nothing can run)."""
    on_meta = any(t.is_meta for t in list(model.parameters()) + list(model.buffers()))
    if overheads is None:
        overheads = "shapes" if on_meta and time_source == "flops" else "allocator"
    if overheads not in OVERHEAD_SOURCES:
        raise ProfileError(f"overheads: must be 'allocator' or 'shapes', got {overheads!r}")
    if on_meta and (overheads == "allocator" or time_source == "measured"):
        what = "time_source: 'measured'" if time_source == "measured" else "overheads: 'allocator'"
        raise ProfileError(f"{what} needs a model with real parameters, not one on the meta device")
    return overheads


__all__ = ["OVERHEAD_SOURCES", "default_device", "input_tensors", "overhead_source", "parse_dtype"]
