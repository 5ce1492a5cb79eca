"""Models for ``remat plan`` tests, importable as ``--model tests.cli.plan_models:NAME``."""

from __future__ import annotations

from torch import nn


class Residual(nn.Module):
    """x + MLP(x)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width))

    def forward(self, x):
        return x + self.body(x)


class StemMLP(nn.Module):
    """A ``stem`` layer, residual ``blocks`` (a module list) and a ``head``: a name-based hint
    knows ``blocks`` and ``head`` but not ``stem``."""

    def __init__(self, features: int = 32, width: int = 32, depth: int = 4, out: int = 8) -> None:
        super().__init__()
        self.stem = nn.Linear(features, width)
        self.blocks = nn.ModuleList([Residual(width) for _ in range(depth)])
        self.head = nn.Linear(width, out)

    def forward(self, x):
        x = self.stem(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def stem_mlp(features: int = 32, width: int = 32, depth: int = 4, out: int = 8) -> StemMLP:
    """:class:`StemMLP` (input: batch x ``features``)."""
    return StemMLP(features, width, depth, out)
