"""One call of a compiled model: what makes it compile anew (its input signature), its device
and the :class:`RematError` inside the exception torch wrapped it in (the RNG and buffers that
let it run again unchanged: :class:`remat.measure.state.StepState`)."""

from __future__ import annotations

import torch
from torch import nn

from remat.joint.torch_private import tree_flatten
from remat.schedules import RematError

_SCALARS = (bool, int, float, complex, str, bytes, type(None))


def _leaf_key(value: object) -> object:
    """A tensor's shape, dtype and device; a Python scalar's type and value (``dynamic=False``:
    torch compiles anew for a new int or bool, so the plan may differ; ``repr`` so that a NaN
    equals itself); for anything else its type."""
    if isinstance(value, torch.Tensor):
        return (tuple(value.shape), value.dtype, value.device)
    if isinstance(value, _SCALARS):
        return (type(value), repr(value))
    return type(value)


def input_signature(args: tuple, kwargs: dict) -> tuple:
    """What makes a call compile anew here: the arguments' structure and each leaf's key."""
    flat, spec = tree_flatten((args, kwargs))
    return (str(spec), *(_leaf_key(a) for a in flat))


def call_device(model: nn.Module, args: tuple, kwargs: dict) -> torch.device:
    """The device of the call's first tensor argument, else of the model's first parameter."""
    for value in tree_flatten((args, kwargs))[0]:
        if isinstance(value, torch.Tensor):
            return value.device
    return next((p.device for p in model.parameters()), torch.device("cpu"))


def remat_error(error: BaseException) -> RematError | None:
    """The RematError inside an exception torch wrapped (BackendCompilerFailed and friends)."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, RematError):
            return error
        seen.add(id(error))
        error = getattr(error, "inner_exception", None) or error.__cause__ or error.__context__
    return None


__all__ = ["call_device", "input_signature", "remat_error"]
