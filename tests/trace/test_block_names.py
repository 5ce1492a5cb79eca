"""Stage names and merging at block granularity (remat/trace/naming.py, remat/rewrite/nodes.py
``repeated_blocks``): a shared block called once per layer is one stage per call, blocks nested in
repeated stages are cut per inner block, a lone indexed module inside a block stays in it."""

from __future__ import annotations

import torch
from torch import nn

from remat.trace.proof import cut_model


class Layer(nn.Module):
    """A block whose inside has cuts of its own (no residual): linear, tanh, linear."""

    def __init__(self, width: int, gate: bool = False) -> None:
        super().__init__()
        parts: list[nn.Module] = [nn.Linear(width, width), nn.Tanh(), nn.Linear(width, width)]
        if gate:
            parts.insert(1, Gate(width))  # a lone indexed module of the model's own class
        self.body = nn.Sequential(*parts)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


class Gate(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.scale = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(self.scale(x))


class Shared(nn.Module):
    """ALBERT's pattern: one layer, its weights shared, called ``calls`` times."""

    def __init__(self, width: int = 8, calls: int = 3) -> None:
        super().__init__()
        self.groups = nn.ModuleList([Layer(width)])
        self.calls = calls
        self.head = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(self.calls):
            x = self.groups[0](x)
        return self.head(x)


class Stage(nn.Module):
    def __init__(self, width: int, depth: int) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*[Layer(width, gate=True) for _ in range(depth)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x)


class Nested(nn.Module):
    """ConvNeXt's and Swin's pattern: repeated stages of repeated blocks."""

    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.stages = nn.ModuleList([Stage(width, 2), Stage(width, 3)])
        self.head = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for stage in self.stages:
            x = stage(x)
        return self.head(x)


def _loss(out: torch.Tensor, *_: object) -> torch.Tensor:
    return out.pow(2).mean()


def test_a_shared_block_is_one_stage_per_call() -> None:
    chain = cut_model(Shared(), (torch.randn(4, 8),), {}, loss=_loss)
    names = list(chain.names)
    assert names[:3] == ["groups.0", "groups.0#2", "groups.0#3"], names


def test_nested_repeated_blocks_are_cut_per_inner_block_and_a_lone_module_stays_inside() -> None:
    chain = cut_model(Nested(), (torch.randn(4, 8),), {}, loss=_loss)
    names = list(chain.names)
    blocks = [f"stages.{s}.blocks.{b}" for s, depth in enumerate((2, 3)) for b in range(depth)]
    assert names[: len(blocks)] == blocks, names
    assert not any(".body." in name for name in names), names  # the gate is part of its block
