"""The two tracers of remat. A model's training step as one TorchDynamo graph, for chains
(docs/models.md, "How a model is cut"); a model as a torch.fx graph (``torch.fx.symbolic_trace``,
standard ``torch.nn`` modules as leaves), for graph profiles (:func:`trace_fx`). Both graphs are
read by the one node classification, :mod:`remat.trace.nodes`.

The training step is the model's forward followed by :func:`reduce_output` (its output reduced to
what is differentiated: the user's loss, the model's own ``.loss``, or its one output tensor).
:func:`trace` runs it under ``torch.compile(fullgraph=True, dynamic=False)`` with a backend that
only keeps the graph; :mod:`remat.trace.cut` explains why dynamo is the tracer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.fx as fx
from torch import nn

from remat.schedules import ProfileError, RematError
from remat.trace import branches


def reduce_output(output: Any, loss: Callable[..., torch.Tensor] | None, target: Any) -> torch.Tensor:
    """What a training step differentiates: ``loss(output[, target])``, else the model's own
    ``loss`` (``ModelOutput``/dict), else its one tensor (first of a tuple, dict or ``ModelOutput``)."""
    if loss is not None:
        return loss(output) if target is None else loss(output, target)
    if isinstance(output, torch.Tensor):
        return output
    own = getattr(output, "loss", None)
    if own is None and isinstance(output, Mapping):
        own = output.get("loss")
    if own is not None:
        return own
    if isinstance(output, Mapping):
        for value in output.values():
            if isinstance(value, torch.Tensor):
                return value
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        return output[0]
    raise RematError(
        f"model: its output is a {type(output).__name__} with no loss and no tensor; pass loss=... to reduce it"
    )


class TrainingStep(nn.Module):
    """``model`` followed by :func:`reduce_output`: the function that a cut must reproduce."""

    def __init__(self, model: nn.Module, loss: Callable[..., torch.Tensor] | None = None) -> None:
        super().__init__()
        self.model = model
        self.loss = loss

    def forward(self, args: tuple, kwargs: dict, target: Any = None) -> torch.Tensor:
        return reduce_output(self.model(*args, **kwargs), self.loss, target)


def _quiet_logging() -> set:
    # Logger calls inside a model (transformers' warning_once) stop dynamo; they only print
    logger = logging.Logger
    names = ("debug", "info", "warning", "warn", "error", "warning_once", "info_once")
    return {getattr(logger, n) for n in names if hasattr(logger, n)}


def trace(step: TrainingStep, args: tuple, kwargs: dict, target: Any) -> tuple[fx.GraphModule, list[Any]]:
    """Dynamo's graph of ``step(args, kwargs, target)`` and the values of its placeholders.

    The traced call runs the model once (twice for a Hugging Face model: :mod:`remat.trace.branches`
    records its mask decisions eagerly first): the caller saves and restores its state around it.
    Resets dynamo's caches (before and after) so that this trace neither hits nor leaves one.
    """
    captured: list[tuple[fx.GraphModule, list[Any]]] = []

    def keep(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        captured.append((gm, list(example_inputs)))
        return gm.forward

    torch._dynamo.reset()
    try:
        # transformers' mask code branches on mask values: the trace takes eager's branch, guarded
        with branches.pinned(step.model, lambda: step(args, kwargs, target)):
            with torch._dynamo.config.patch(ignore_logging_functions=_quiet_logging()):
                torch.compile(step, backend=keep, fullgraph=True, dynamic=False)(args, kwargs, target)
    except RematError:
        raise
    except Exception as error:  # noqa: BLE001 - dynamo's many error types; one line for the user
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise RematError(
            f"model: TorchDynamo cannot trace {type(step.model).__name__} as one graph ({first}); "
            "give the model a remat_stages() method to cut it by hand"
        ) from None
    finally:
        torch._dynamo.reset()
    if len(captured) != 1:
        raise RematError(f"model: tracing {type(step.model).__name__} gave {len(captured)} graphs, expected one")
    return captured[0]


def first_tensor_index(leaves: list[Any]) -> int:
    """Index of the first tensor among the flattened inputs (the chain input a_0)."""
    index = next((i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)), None)
    if index is None:
        raise RematError("inputs: the example has no tensor")
    return index


def trace_fx(model: nn.Module) -> fx.GraphModule:
    """``torch.fx.symbolic_trace`` with a one-line error when the model cannot be traced."""
    try:
        return fx.symbolic_trace(model)
    except Exception as exc:  # fx raises many kinds (TraceError, TypeError, ...)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ProfileError(
            f"model: torch.fx cannot trace {type(model).__name__} ({first}), so it has no graph profile; profile it as"
            " a chain instead (remat profile without --graph, or remat.checkpoint: cut from its TorchDynamo trace)"
        ) from exc


__all__ = ["trace_fx", "TrainingStep", "first_tensor_index", "reduce_output", "trace"]
