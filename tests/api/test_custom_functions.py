"""A custom ``torch.autograd.Function`` inside the model (issue 42, item 2): what its
``ctx.save_for_backward`` keeps is seen as the stage's saved tensors (NOTE [What a custom
autograd.Function saves], remat/rewrite/functions.py), so the net of memory-efficient Swish blocks is
cut at every block, trains bit for bit like the plain model at its least memory, that least memory
is at most per-block checkpointing's, and the profile predicts the step within 2%."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint as torch_checkpoint

import remat
from remat.replay.report import step_allocator_peak
from tests.step_grads import step_grads

WIDTH, DEPTH = 128, 6


class Swish(torch.autograd.Function):
    """The memory-efficient Swish: saves its input only."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return g * s * (1 + x * (1 - s))


class KeptSwish(torch.autograd.Function):
    """Swish that keeps its input on ``ctx`` as an attribute (no version check in eager PyTorch)."""

    @staticmethod
    def forward(ctx, x):
        ctx.x = x
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, g):
        s = torch.sigmoid(ctx.x)
        return g * s * (1 + ctx.x * (1 - s))


class Block(nn.Module):
    def __init__(self, function: type[torch.autograd.Function]) -> None:
        super().__init__()
        self.linear = nn.Linear(WIDTH, WIDTH)
        self.function = function

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.function.apply(self.linear(x))


class Net(nn.Module):
    def __init__(self, function: type[torch.autograd.Function] = Swish) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(function) for _ in range(DEPTH))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def _loss(out: torch.Tensor) -> torch.Tensor:
    return out.pow(2).mean()


def _net(function: type[torch.autograd.Function] = Swish) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return Net(function).train(), torch.randn(256, WIDTH)


@pytest.mark.slow
def test_a_custom_function_net_is_cut_at_every_block_exact_and_within_per_block_checkpointing():
    model, x = _net()
    wrapped = remat.checkpoint(model, (x,), budget=1.0, loss=_loss)
    names = [s.name for s in wrapped.profile.stages]
    for k in range(DEPTH):  # every block its own stage (a fused stage names its parts)
        assert any(f"blocks.{k}" == part for name in names for part in name.split("+")), (k, names)
    least = wrapped.with_budget(wrapped.least_peak)
    plain = step_grads(model, lambda: _loss(model(x)))
    ours = step_grads(model, lambda: least(x))
    assert all(torch.equal(a, b) for a, b in zip(plain, ours, strict=True))

    def per_block() -> torch.Tensor:
        h = x
        for block in model.blocks:
            h = torch_checkpoint(block, h, use_reentrant=False)
        return _loss(h)

    cpu = torch.device("cpu")
    least_peak = step_allocator_peak(model, lambda: least(x), cpu)
    assert least_peak <= step_allocator_peak(model, per_block, cpu), least_peak
    report = least.report(steps=1, warmup=1)
    assert abs(report.measured_peak - report.predicted_peak) <= 0.02 * report.predicted_peak, report


@pytest.mark.slow
def test_a_tensor_kept_on_ctx_is_seen_too_and_the_step_is_exact():
    model, x = _net(KeptSwish)
    wrapped = remat.checkpoint(model, (x,), budget=1.0, loss=_loss)
    blocks = [s.name for s in wrapped.profile.stages if s.name.startswith("blocks.")]
    assert len(blocks) == DEPTH, blocks  # no two blocks fused: each one's stage saves its input
    least = wrapped.with_budget(wrapped.least_peak)
    plain = step_grads(model, lambda: _loss(model(x)))
    ours = step_grads(model, lambda: least(x))
    assert all(torch.equal(a, b) for a, b in zip(plain, ours, strict=True))
