"""What a training step differentiates, in one definition: the tensor a model's output stands for
(:func:`reduce_output`: the user's ``loss=``, the model's own ``loss``, or its one output tensor)
and the scalar a step calls ``backward`` on over the tensors it differentiates (:func:`step_loss`).

Every step remat runs ends here: the traced training step (:class:`remat.trace.capture.TrainingStep`),
the proof's trial steps and each stage's checks (:mod:`remat.trace.proof`, :mod:`remat.trace.kinds`),
the report's measured steps (:mod:`remat.replay.report`) and ``remat.compile``'s measured step
(:mod:`remat.joint.compile`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from remat.schedules import RematError


def own_loss(output: Any) -> Any:
    """The ``loss`` a model's output carries (an attribute, as a ``ModelOutput``'s, or a mapping's
    ``"loss"``), else None."""
    own = getattr(output, "loss", None)
    if own is None and isinstance(output, Mapping):
        own = output.get("loss")
    return own


def reduce_output(output: Any, loss: Callable[..., torch.Tensor] | None, target: Any) -> torch.Tensor:
    """What a training step differentiates: ``loss(output[, target])``, else the model's own
    ``loss`` (``ModelOutput``/dict), else its one tensor (first of a tuple, dict or ``ModelOutput``)."""
    if loss is not None:
        return loss(output) if target is None else loss(output, target)
    if isinstance(output, torch.Tensor):
        return output
    own = own_loss(output)
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


def step_loss(
    outputs: torch.Tensor | Sequence[torch.Tensor], weight: Callable[[torch.Tensor], torch.Tensor] | None = None
) -> torch.Tensor:
    """The scalar a step calls ``backward`` on over ``outputs`` (one tensor, or several, added): a
    scalar (a loss) as it is, as a training loop steps on it, never its ``sum()``, a tensor the
    user's step does not hold (a plan that meets the budget to the byte would measure above it);
    any other tensor ``t`` as ``(t * weight(t)).sum()``, a fixed weighting that hands every element
    a gradient of its own (the replay's and the proof's random ``r``: with ones, a LayerNorm's
    input gradient is 0 up to rounding), or ``t.sum()`` without ``weight``."""
    terms = [outputs] if isinstance(outputs, torch.Tensor) else list(outputs)
    if not terms:
        raise ValueError("step_loss: no output to differentiate")
    total = None
    for t in terms:
        term = t if t.dim() == 0 else (t.sum() if weight is None else (t * weight(t)).sum())
        total = term if total is None else total + term
    return total


__all__ = ["own_loss", "reduce_output", "step_loss"]
