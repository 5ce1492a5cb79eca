"""Capturing a model as a torch.fx graph for graph profiling (``torch.fx.symbolic_trace``; standard
``torch.nn`` modules are leaves). :mod:`remat.trace.cut` captures chains with TorchDynamo instead."""

from __future__ import annotations

import torch.fx as fx
from torch import nn

from remat.schedules import ProfileError


def trace(model: nn.Module) -> fx.GraphModule:
    """``torch.fx.symbolic_trace`` with a one-line error when the model cannot be traced."""
    try:
        return fx.symbolic_trace(model)
    except Exception as exc:  # fx raises many kinds (TraceError, TypeError, ...)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ProfileError(
            f"model: torch.fx cannot trace {type(model).__name__} ({first}), so it has no graph profile; profile it as"
            " a chain instead (remat profile without --graph, or remat.checkpoint: cut from its TorchDynamo trace)"
        ) from exc


__all__ = ["trace"]
