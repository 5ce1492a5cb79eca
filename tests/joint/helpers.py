"""Small models and an AOTAutograd harness for the joint room's tests.

``aot_step`` runs remat's partitioner under ``functorch.compile.aot_module`` with no compiler (the
graphs run as fx code): the same partitioner inductor calls, in a fraction of a second.
"""

from __future__ import annotations

from typing import Any

import torch
from functorch.compile import aot_module, nop
from torch import nn

from remat.joint.partition import RematPartitioner, Session


def mlp(width: int = 16, depth: int = 3, dropout: float = 0.0, seed: int = 0) -> nn.Module:
    """``depth`` Linear+GELU(+Dropout) layers and a Linear head, seeded."""
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.GELU()]
        if dropout:
            layers.append(nn.Dropout(dropout))
    return nn.Sequential(*layers, nn.Linear(width, 4))


class Block(nn.Module):
    """A pre-norm transformer block (attention + MLP), tiny."""

    def __init__(self, dim: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


def aot_step(
    model: nn.Module, budget: int | float | str, times: str = "estimate", **options: Any
) -> tuple[nn.Module, Session]:
    """``model`` under AOTAutograd with remat's partitioner (no compiler) and its session
    (``options``: more of :class:`Session`'s, e.g. ``min_cut_ratios``)."""
    session = Session(budget, times, 0.0, 1, **options)
    return aot_module(model, fw_compiler=nop, bw_compiler=nop, partition_fn=RematPartitioner(session)), session


def grads(model: nn.Module) -> list[torch.Tensor]:
    return [p.grad.clone() for p in model.parameters()]
