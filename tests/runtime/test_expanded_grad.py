"""NOTE [Gradient layout at a cut] (remat/runtime/core.py): a step that ends in a bare ``.sum()``
hands the last cut an *expanded* gradient (zero strides); the replay passes the previous stage
autograd's values with autograd's strides, so the step trains and equals plain PyTorch, as
``.mean()`` and a weighted sum do."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import remat
from remat.replay.chain import RematChain

WEIGHT = torch.randn(6, 16, generator=torch.Generator().manual_seed(3))
REDUCTIONS = {
    "sum": lambda h: h.sum(),
    "mean": lambda h: h.mean(),
    "weighted sum": lambda h: (h * WEIGHT).sum(),
    "sum of a column sum": lambda h: h.sum(0).square().sum(),  # expanded along the rows only
}


class Reduce(nn.Module):
    """A last stage that is only the loss's reduction: its input's gradient is autograd's own."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return REDUCTIONS[self.kind](h)


def _schedule(n: int, recompute: bool) -> list:
    if not recompute:
        return [("F_all", i) for i in range(n)] + [("B", i) for i in reversed(range(n))]
    ops = [("F_ck", 0), *[("F_n", i) for i in range(1, n - 1)], ("F_all", n - 1), ("B", n - 1)]
    for i in reversed(range(n - 1)):
        ops += [*([("F_ck", 0)] + [("F_n", j) for j in range(1, i)] if i else []), ("F_all", i), ("B", i)]
    return ops


def _grads(model: nn.Module, step) -> list[torch.Tensor]:
    model.zero_grad()
    step().backward()
    return [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("recompute", [False, True])
@pytest.mark.parametrize("kind", list(REDUCTIONS))
def test_a_step_ending_in_any_reduction_trains_like_plain_pytorch(kind: str, recompute: bool) -> None:
    torch.manual_seed(0)
    stages = nn.Sequential(*[nn.Sequential(nn.Linear(16, 16), nn.Tanh()) for _ in range(3)], Reduce(kind))
    x = torch.randn(6, 16)
    wrapped = RematChain(list(stages), _schedule(len(stages), recompute))
    plain = _grads(stages, lambda: stages(x))
    replayed = _grads(stages, lambda: wrapped(x))
    assert all(torch.equal(a, b) for a, b in zip(plain, replayed, strict=True))


def test_the_previous_stage_gets_the_expanded_gradient_autograd_made() -> None:
    """What the stage before a bare ``.sum()`` receives: zero strides, as in plain autograd."""
    seen: list[tuple[int, ...]] = []

    class Probe(nn.Module):
        def forward(self, h: torch.Tensor) -> torch.Tensor:
            h = h * 1.0
            h.register_hook(lambda g: seen.append(g.stride()))
            return h

    stages = [nn.Linear(4, 4), Probe(), Reduce("sum")]
    x = torch.randn(3, 4)
    RematChain(stages, _schedule(3, False))(x).backward()
    nn.Sequential(*stages)(x).backward()
    assert seen == [(0, 0), (0, 0)]


class SumNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(*[nn.Sequential(nn.Linear(32, 32), nn.Tanh()) for _ in range(4)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x).sum()


@pytest.mark.slow
def test_remat_checkpoint_trains_a_model_whose_forward_returns_a_bare_sum() -> None:
    torch.manual_seed(0)
    model = SumNet().train()
    x = torch.randn(8, 32)
    ours = copy.deepcopy(model)
    wrapped = remat.checkpoint(ours, x, budget=1.0, repeats=1, warmup=0)
    for step in (wrapped, wrapped.with_budget(wrapped.least_peak)):
        reference = copy.deepcopy(ours)
        ours.zero_grad()
        step(x).backward()
        reference(x).backward()
        assert all(torch.equal(a.grad, b.grad) for a, b in zip(ours.parameters(), reference.parameters(), strict=True))
