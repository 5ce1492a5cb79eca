"""One call for the common case: ``remat.checkpoint(model, example_inputs, budget=...)`` (docs/models.md).

It cuts the model's training step into a chain from its traced forward and proves the cut equal
to the model (:func:`remat.trace.proof.cut_model`), profiles the chain
(:func:`remat.profile.chain.profile_chain`), solves a schedule under the budget (the optimal
chain DP by default), and returns an ``nn.Module`` that trains by replaying it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from remat.measure.memory import storage_bytes
from remat.profile.chain import profile_chain
from remat.replay.chain import RematChain
from remat.replay.report import compare
from remat.runtime.compiled import compile_chain
from remat.schedules import ChainProfile, RematError, Schedule
from remat.schedules.units import parse_size
from remat.solver.chain.store_all import store_all_peak
from remat.solver.registry import solve
from remat.trace.proof import cut_model


def _split_inputs(example_inputs: Any) -> tuple[tuple, dict]:
    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,), {}
    if isinstance(example_inputs, Mapping):
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

    def __init__(self, chain: Any, schedule: Schedule, profile: ChainProfile, example: tuple) -> None:
        super().__init__()
        self.chain = chain
        self.replay = RematChain(chain, schedule, profile)
        self.schedule = schedule
        self.profile = profile
        self._example = example

    def forward(self, *args: Any, target: Any = None, **kwargs: Any) -> torch.Tensor:
        return self.replay(self.chain.bind(*args, target=target, **kwargs))

    def with_budget(self, budget: int | float | str, strategy: str | None = None) -> RematModel:
        """The same model, profile and example, solved again for another ``budget`` (no re-profiling)."""
        bytes_ = resolve_budget(budget, store_all_peak(self.profile))
        schedule = solve(self.profile, bytes_, strategy or self.schedule.strategy)
        return RematModel(self.chain, schedule, self.profile, self._example)

    def report(self, steps: int = 3, warmup: int = 1) -> Any:
        """Predicted vs measured peak memory (bytes) and step time (ms) on the example input
        (:func:`remat.replay.report.compare`); print it with ``.table()``."""
        args, kwargs, target = self._example
        x = self.chain.bind(*args, target=target, **kwargs)
        return compare(self.profile, self.schedule, self.replay, x, steps=steps, warmup=warmup)


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
    args, kwargs = _split_inputs(example_inputs)
    chain = cut_model(model, args, kwargs, loss=loss, target=target)
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
    return RematModel(chain, schedule, profile, (args, kwargs, target))


__all__ = ["RematModel", "checkpoint", "resolve_budget"]
