"""What ``remat.checkpoint`` accepts, checked before anything is traced: counts, strategy names,
example inputs (the forward's signature, devices, dtypes, finiteness), the loss's scalar result,
and budgets (bytes from an int, a size string or a fraction of the store-all peak)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from remat.schedules import RematError
from remat.schedules.units import resolve_budget  # the one resolver, re-exported for the API


def check_count(name: str, value: Any, least: int) -> int:
    """``value`` if it is an int of at least ``least``, else a one-line :class:`RematError`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise RematError(f"{name}: expected an integer >= {least}, got {value!r}")
    return value


def check_strategy(name: Any) -> str:
    """``name`` if it is a string (the registry refuses unknown names, listing the chain ones)."""
    if not isinstance(name, str):
        raise RematError(f"strategy: expected a chain strategy's name (a string), got {type(name).__name__}")
    return name


def named_tensors(args: tuple, kwargs: dict) -> list[tuple[str, torch.Tensor]]:
    named = [(f"argument {k}", v) for k, v in enumerate(args)] + [(f"'{k}'", v) for k, v in kwargs.items()]
    return [(name, v) for name, v in named if isinstance(v, torch.Tensor)]


def described(args: tuple, kwargs: dict) -> str:
    """A call's tensors for a one-line message: ``(2, 20) torch.int64, (2, 20) torch.int64``."""
    return ", ".join(f"{tuple(t.shape)} {t.dtype}" for _, t in named_tensors(args, kwargs))


def check_inputs(model: nn.Module, args: tuple, kwargs: dict) -> None:
    """Refuse, in one line, example inputs that the model's ``forward`` cannot take (count, names),
    that hold no tensor, that live on the meta device or on another device than the parameters,
    that are floating-point of another dtype than the floating-point parameters, or that hold
    NaN/inf (the proof compares outputs bit for bit, and NaN equals nothing)."""
    try:
        inspect.signature(model.forward).bind(*args, **kwargs)
    except TypeError as error:
        raise RematError(f"example_inputs: {type(model).__name__}.forward cannot take them ({error})") from None
    except ValueError:  # no signature to read (a builtin forward): the eager run below says it
        pass
    tensors = named_tensors(args, kwargs)
    if not tensors:
        raise RematError("example_inputs: no tensor among them (the step is traced and measured on tensor inputs)")
    params = [p for p in model.parameters()]
    devices = {p.device for p in params}
    floats = {p.dtype for p in params if p.is_floating_point()}
    for name, t in tensors:
        if t.device.type == "meta" or any(d.type == "meta" for d in devices):
            raise RematError(
                f"example_inputs: {name} or the model is on the meta device; remat.checkpoint measures the "
                "step on a real device (use `remat plan --meta` to plan without one)"
            )
        if devices and t.device not in devices:
            raise RematError(
                f"example_inputs: {name} is on {t.device}, the model's parameters on {sorted(map(str, devices))[0]}"
            )
        if t.is_floating_point() and len(floats) == 1 and t.dtype not in floats:
            raise RematError(
                f"example_inputs: {name} is {t.dtype}, the model's parameters {next(iter(floats))}; "
                "cast one to the other (or train under torch.autocast)"
            )
        if (t.is_floating_point() or t.is_complex()) and not bool(torch.isfinite(t).all()):
            raise RematError(
                f"example_inputs: {name} holds NaN or infinite values (the proof compares outputs bit for bit)"
            )


def scalar_loss(loss: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """``loss``, refusing in one line a result that is not a scalar tensor (the step calls
    ``.backward()`` on it)."""

    @functools.wraps(loss)
    def checked(*args: Any) -> torch.Tensor:
        out = loss(*args)
        if not isinstance(out, torch.Tensor) or out.dim() != 0:
            what = f"a tensor of shape {tuple(out.shape)}" if isinstance(out, torch.Tensor) else type(out).__name__
            raise RematError(f"loss: returned {what}; the loss must be a scalar tensor (reduce it, e.g. .mean())")
        return out

    return checked


def split_inputs(example_inputs: Any) -> tuple[tuple, dict]:
    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,), {}
    if isinstance(example_inputs, Mapping):
        if not all(isinstance(k, str) for k in example_inputs):
            raise RematError("example_inputs: a dict of keyword inputs needs string keys")
        return (), dict(example_inputs)
    if isinstance(example_inputs, (tuple, list)):
        return tuple(example_inputs), {}
    raise RematError(
        f"example_inputs: expected a tensor, a tuple of positional inputs or a dict of keyword inputs, "
        f"got {type(example_inputs).__name__}"
    )


__all__ = [
    "check_count",
    "check_inputs",
    "check_strategy",
    "named_tensors",
    "resolve_budget",
    "scalar_loss",
    "split_inputs",
]
