"""One training step's loss and gradients, for the exactness tests of several rooms."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


def step_grads(model: nn.Module, step: Callable[[], torch.Tensor], seed: int | None = None) -> list[torch.Tensor]:
    """``[loss, *grads]`` of ``step()`` (a scalar loss) and its backward, from no gradients, the
    global RNG seeded with ``seed`` first when one is given (a step with dropout)."""
    for p in model.parameters():
        p.grad = None
    if seed is not None:
        torch.manual_seed(seed)
    loss = step()
    loss.backward()
    return [loss.detach(), *(p.grad.clone() for p in model.parameters())]
