"""Small models whose blocks hand on several tensors (remat.trace.boundary), for the trace and
replay tests: T5's pattern (a position bias computed once, in the first block, from a parameter,
and read by every block) beside an int tensor computed once from the activations (the experts a
router picked) that every later block reads too."""

from __future__ import annotations

import torch
from torch import nn


class BiasBlock(nn.Module):
    """The first call computes the position bias (an embedding: it requires grad) and the picked
    columns (an int tensor: no gradient); every call reads both and hands them on."""

    def __init__(self, width: int, seq: int, first: bool) -> None:
        super().__init__()
        self.lin = nn.Linear(width, width)
        self.positions = nn.Embedding(seq, width) if first else None

    def forward(self, h: torch.Tensor, bias: torch.Tensor | None, picked: torch.Tensor | None):
        if self.positions is not None:
            bias = self.positions(torch.arange(h.shape[1])).unsqueeze(0)  # a view, as T5's
            picked = h.detach().abs().argmax(-1, keepdim=True)
        h = torch.tanh(self.lin(h) + bias) + h
        return h + 0.1 * h.gather(-1, picked), bias, picked


class BiasModel(nn.Module):
    def __init__(self, width: int = 8, seq: int = 6, depth: int = 4) -> None:
        super().__init__()
        self.embed = nn.Linear(width, width)
        self.blocks = nn.ModuleList(BiasBlock(width, seq, k == 0) for k in range(depth))
        self.head = nn.Linear(width, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, bias, picked = torch.relu(self.embed(x)), None, None
        for block in self.blocks:
            h, bias, picked = block(h, bias, picked)
        return self.head(h).pow(2).mean()


def bias_model() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return BiasModel(), torch.randn(2, 6, 8)
