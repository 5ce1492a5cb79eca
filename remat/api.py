"""One call for the common case: ``remat.checkpoint(model, example_inputs, budget=...)`` (docs/models.md).

It cuts the model's training step into a chain from its traced forward and proves the cut equal
to the model (:func:`remat.trace.proof.cut_model`), profiles the chain
(:func:`remat.profile.chain.profile_chain`), solves a schedule under the budget (the optimal
chain DP by default), and returns an ``nn.Module`` that trains by replaying it.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from remat.measure.memory import storage_bytes
from remat.model_errors import where_in_model
from remat.profile.chain import profile_chain
from remat.replay.chain import RematChain
from remat.replay.report import compare
from remat.runtime.compiled import compile_chain
from remat.schedules import ChainProfile, RematError, Schedule
from remat.schedules.units import parse_size
from remat.solver.chain.store_all import store_all_peak
from remat.solver.registry import solve
from remat.trace.proof import cut_model


def _count(name: str, value: Any, least: int) -> int:
    """``value`` if it is an int of at least ``least``, else a one-line :class:`RematError`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise RematError(f"{name}: expected an integer >= {least}, got {value!r}")
    return value


def _strategy(name: Any) -> str:
    """``name`` if it is a string (the registry refuses unknown names, listing the chain ones)."""
    if not isinstance(name, str):
        raise RematError(f"strategy: expected a chain strategy's name (a string), got {type(name).__name__}")
    return name


def _tensors(args: tuple, kwargs: dict) -> list[tuple[str, torch.Tensor]]:
    named = [(f"argument {k}", v) for k, v in enumerate(args)] + [(f"'{k}'", v) for k, v in kwargs.items()]
    return [(name, v) for name, v in named if isinstance(v, torch.Tensor)]


def _check_inputs(model: nn.Module, args: tuple, kwargs: dict) -> None:
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
    tensors = _tensors(args, kwargs)
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


def _scalar_loss(loss: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
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


def _cut(model: nn.Module, args: tuple, kwargs: dict, loss: Any, target: Any) -> Any:
    """:func:`cut_model`, with an exception raised inside the user's model (or loss) as one line
    naming the stage, the module and the user's source line (:mod:`remat.model_errors`)."""
    try:
        return cut_model(model, args, kwargs, loss=loss, target=target)
    except RematError:
        raise
    except Exception as error:  # noqa: BLE001 - only errors from running the user's code are turned into lines
        where = where_in_model(error)
        if where is None:
            raise
        where = where.replace("in TrainingStep", "in the loss")  # remat's wrapper of model + loss
        lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
        shapes = ", ".join(f"{tuple(t.shape)} {t.dtype}" for _, t in _tensors(args, kwargs))
        raise RematError(
            f"model: running it on the example inputs ({shapes}) failed ({where}): "
            f"{type(error).__name__}: {lines[0] if lines else '(no message)'}"
        ) from None


def _split_inputs(example_inputs: Any) -> tuple[tuple, dict]:
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


def resolve_budget(budget: int | float | str, store_all_peak: int) -> int:
    """Bytes from ``budget``: an int (bytes), a size string (``"6GiB"``, ``"40%"`` of the store-all
    peak) or a float in (0, 1] (a fraction of the store-all peak, in bytes)."""
    if isinstance(budget, bool) or not isinstance(budget, (int, float, str)):
        raise RematError(
            f"budget: expected bytes (int), a size ('6GiB', '40%') or a fraction in (0, 1], got {budget!r}"
        )
    if isinstance(budget, float):
        if not 0.0 < budget <= 1.0:
            raise RematError(f"budget: a float is a fraction of the store-all peak in (0, 1], got {budget}")
        return int(budget * store_all_peak)
    return parse_size(budget, reference=store_all_peak)


class RematModel(nn.Module):
    """A model that trains by replaying ``schedule``: call it like the model (same positional and
    keyword inputs, plus ``target=`` when a ``loss`` taking one was given); it returns the training
    step's output (the loss, or the model's one output tensor), to call ``.backward()`` on.

    ``.schedule`` and ``.profile`` are what was solved and measured; ``.report()`` measures steps
    on the example input and puts them next to the prediction.
    """

    def __init__(
        self, chain: Any, schedule: Schedule, profile: ChainProfile, example: tuple, loss_given: bool = False
    ) -> None:
        super().__init__()
        self.chain = chain
        self.replay = RematChain(chain, schedule, profile)
        self.schedule = schedule
        self.profile = profile
        self._example = example
        self._loss_given = loss_given

    def forward(self, *args: Any, target: Any = None, **kwargs: Any) -> torch.Tensor:
        return self.replay(self.chain.bind(*args, target=target, **kwargs))

    def with_budget(self, budget: int | float | str, strategy: str | None = None) -> RematModel:
        """The same model, profile and example, solved again for another ``budget`` (no re-profiling)."""
        bytes_ = resolve_budget(budget, store_all_peak(self.profile))
        schedule = solve(self.profile, bytes_, _strategy(strategy or self.schedule.strategy))
        return RematModel(self.chain, schedule, self.profile, self._example, self._loss_given)

    def report(self, steps: int = 3, warmup: int = 1) -> Any:
        """Predicted vs measured peak memory (bytes) and step time (ms) of the user's step on the
        example input (:func:`remat.replay.report.compare`); print it with ``.table()``.

        The step measured is the one this model trains (``Report.step``, a line of the table):
        ``loss = self(x, target=y); loss.backward()`` with the ``loss=`` given (and its example
        target), the model's own loss (Hugging Face ``labels``) held the same way, or, when the
        step ends in the model's output, the documented default ``(self(x) * r).sum()``."""
        _count("steps", steps, 1)
        _count("warmup", warmup, 0)
        args, kwargs, target = self._example
        x = self.chain.bind(*args, target=target, **kwargs)
        kind = "loss" if self._loss_given else None
        return compare(self.profile, self.schedule, self.replay, x, steps=steps, warmup=warmup, kind=kind)


def _side_bytes(chain: Any, x: torch.Tensor) -> int:
    """Bytes of the side values held for a call besides the inputs (masks, rotary tables, ...)."""
    tensors = [v for v in chain.context.values.values() if isinstance(v, torch.Tensor)]
    return storage_bytes(x, *tensors) - storage_bytes(x)


def checkpoint(
    model: nn.Module,
    example_inputs: Any,
    budget: int | float | str = 1.0,
    *,
    loss: Callable[..., torch.Tensor] | None = None,
    target: Any = None,
    strategy: str = "optimal",
    repeats: int = 3,
    warmup: int = 1,
    compile: bool = False,  # noqa: A002 - the option's name in the docs
) -> RematModel:
    """Cut, prove, profile and solve ``model``; return the :class:`RematModel` that trains under ``budget``.

    Args:
        model: any ``nn.Module`` (Hugging Face, torchvision, timm or your own), in train mode.
        example_inputs: a tensor, a tuple of positional inputs, or a dict of keyword inputs
            (``{"input_ids": ids, "labels": ids}``); integer token ids are fine. The cut is made for
            these shapes and dtypes; calls with other shapes are refused.
        budget: bytes (int), a size (``"6GiB"``), a percentage of the store-all peak (``"40%"``) or a
            fraction of it (float in (0, 1]). Activation memory of the step, parameters excluded.
        loss: optional ``loss(output)`` or ``loss(output, target)``; without it the step
            differentiates the model's own ``loss`` (Hugging Face with ``labels``) or its output.
        target: the example's target when ``loss`` takes one (then pass ``target=`` on each call).
        strategy: a chain strategy of ``remat solve`` (``optimal``, ``revolve``, ``chen-sqrt``, ...).
        compile: run every stage through ``torch.compile`` (inductor), checked against the eager
            stage within a tolerance, for profiling and replay alike
            (:func:`remat.runtime.compiled.compile_chain`; docs/executor.md, "Compiled stages").
    """
    if not isinstance(model, nn.Module):
        raise RematError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    if not model.training:
        raise RematError("model: in eval mode; call model.train() first (remat profiles and replays the training step)")
    if loss is not None and not callable(loss):
        raise RematError(f"loss: expected a callable loss(output) or loss(output, target), got {type(loss).__name__}")
    if target is not None and loss is None:
        raise RematError("target: given without loss= (the target is loss(output, target)'s second argument)")
    if not isinstance(compile, bool):
        raise RematError(f"compile: expected True or False, got {compile!r}")
    _count("repeats", repeats, 1)
    _count("warmup", warmup, 0)
    _strategy(strategy)
    resolve_budget(budget, 1)  # its form only (a size, a fraction): the bytes need the profile
    args, kwargs = _split_inputs(example_inputs)
    _check_inputs(model, args, kwargs)
    chain = _cut(model, args, kwargs, None if loss is None else _scalar_loss(loss), target)
    x = chain.bind(*args, target=target, **kwargs)
    if compile:
        chain = compile_chain(chain, x)
    batch = int(x.shape[0]) if x.dim() > 0 else 1
    profile = profile_chain(
        chain, x, name=f"{type(model).__name__.lower()}-b{batch}-{x.device.type}", repeats=repeats, warmup=warmup
    )
    metadata = {**profile.metadata, "cut": "traced (TorchDynamo), proven equal", "side_bytes": _side_bytes(chain, x)}
    profile = dataclasses.replace(profile, metadata=metadata)
    schedule = solve(profile, resolve_budget(budget, store_all_peak(profile)), strategy)
    return RematModel(chain, schedule, profile, (args, kwargs, target), loss_given=loss is not None)


__all__ = ["RematModel", "checkpoint", "resolve_budget"]
