"""NOTE [Gradient layout at a cut] (remat/runtime/core.py): a channels-last boundary between two
stages (timm ConvNeXt's block outputs) gets its gradient in the layout autograd produced, so the
previous stage's backward reduces in the same order as plain PyTorch: gradients bit for bit."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from remat.replay.chain import RematChain


class PermutedBlock(nn.Module):
    """ConvNeXt's pattern: depthwise conv, an NHWC linear, permuted back, scaled by a layer scale."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(width, width, 3, padding=1, groups=width)
        self.linear = nn.Linear(width, width)
        self.gamma = nn.Parameter(torch.rand(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(self.conv(x).permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        return y.mul(self.gamma.reshape(1, -1, 1, 1)) + x  # the first operand lays the sum out


class Head(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear = nn.Linear(width, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x.mean((2, 3))).pow(2).mean()


def _grads(model: nn.Module, step) -> list[torch.Tensor]:
    for p in model.parameters():
        p.grad = None
    step().backward()
    return [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("ops", ["store-all", "recompute"])
def test_channels_last_boundaries_train_bit_for_bit(ops: str) -> None:
    torch.manual_seed(0)
    stages = nn.Sequential(*[PermutedBlock(32) for _ in range(3)], Head(32))
    x = torch.randn(4, 32, 16, 16)
    assert not stages[0](x).is_contiguous()  # the boundary is channels-last
    if ops == "store-all":
        schedule = [("F_all", i) for i in range(4)] + [("B", i) for i in reversed(range(4))]
    else:
        schedule = [("F_ck", 0), ("F_n", 1), ("F_n", 2), ("F_all", 3), ("B", 3)]
        schedule += [("F_ck", 0), ("F_all", 1), ("F_all", 2), ("B", 2), ("B", 1), ("F_all", 0), ("B", 0)]
    wrapped = RematChain(list(stages), schedule)
    plain = _grads(stages, lambda: stages(x))
    replayed = _grads(stages, lambda: wrapped(x))
    names = [name for name, _ in stages.named_parameters()]
    unequal = [n for n, a, b in zip(names, plain, replayed, strict=True) if not torch.equal(a, b)]
    assert unequal == []
