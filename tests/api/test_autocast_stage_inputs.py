"""Under bf16 autocast, a replayed stage whose input feeds several matmuls (BERT's q/k/v) gives the
plain model's gradients bit for bit. autocast caches its bf16 cast of a leaf that requires grad;
the replay's stage inputs are such leaves, so without care the three matmuls would share one cast
and sum their bf16 input gradients in bf16, where the plain model sums them in fp32."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import remat


class PostNormBlock(nn.Module):
    """The block input goes straight into three Linears, as in BERT (post-LayerNorm)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.q, self.k, self.v = (nn.Linear(width, width) for _ in range(3))
        self.norm = nn.LayerNorm(width)
        # saves the block input in fp32 (for its own gradient), so under autocast, where q, k and v
        # save only their bf16 casts of it, the fuse pass still keeps each block a stage
        self.gain = nn.Parameter(torch.ones(()))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        scores = self.q(h) @ self.k(h).transpose(-1, -2) / h.shape[-1] ** 0.5
        mixed = torch.softmax(scores, dim=-1) @ self.v(h)
        return self.norm(h + mixed) + h * self.gain


def _grads(model: nn.Module, step) -> list[torch.Tensor]:
    for p in model.parameters():
        p.grad = None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = step()
    loss.backward()
    return [p.grad.clone() for p in model.parameters()]


@pytest.mark.slow
def test_bf16_gradients_of_a_replayed_post_norm_model_equal_plain_autocast():
    torch.manual_seed(0)
    # an embedding, so the residual stream (each block's input) stays fp32 under autocast, as in BERT
    model = nn.Sequential(nn.Embedding(50, 32), *(PostNormBlock(32) for _ in range(3)), nn.Linear(32, 4)).train()
    x = torch.randint(0, 50, (2, 24))
    loss = lambda out: out.float().pow(2).mean()  # noqa: E731
    with torch.autocast("cpu", dtype=torch.bfloat16):  # cut (and profiled) under autocast: its own signature
        wrapped = remat.checkpoint(model, x, budget=1.0, loss=loss, repeats=1, warmup=0)
    assert len(wrapped.profile.stages) >= 4  # the blocks are stages of their own
    plain = _grads(model, lambda: loss(model(x)))
    for budget in (1.0, 0.6):
        replay = wrapped.with_budget(budget)
        replayed = _grads(model, lambda: replay(x))  # noqa: B023 - called at once
        assert all(torch.equal(a, b) for a, b in zip(plain, replayed, strict=True)), budget
