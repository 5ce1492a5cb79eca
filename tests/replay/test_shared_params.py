"""NOTE [Shared parameters under gradient accumulation] (remat/runtime/core.py): a weight read by
two stages (tied input and output embeddings) accumulates over micro-batches bit-equal to plain
PyTorch, where adding each stage's gradient into ``.grad`` in turn is a few ulps off."""

from __future__ import annotations

import torch
from torch import nn

import remat


class Tied(nn.Module):
    """Token ids in, logits out through the transposed embedding: the weight is in two stages."""

    def __init__(self, vocab: int = 50, width: int = 16, depth: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.layers = nn.ModuleList([nn.Sequential(nn.Linear(width, width), nn.Tanh()) for _ in range(depth)])

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        for layer in self.layers:
            h = h + layer(h)
        return (h @ self.embed.weight.t()).logsumexp(-1).mean()


def test_a_tied_weight_accumulates_over_micro_batches_like_plain_pytorch():
    torch.manual_seed(0)
    model = Tied().train()
    reference = Tied().train()
    reference.load_state_dict(model.state_dict())
    batches = [torch.randint(0, 50, (4, 12), generator=torch.Generator().manual_seed(k)) for k in range(4)]
    wrapped = remat.checkpoint(model, batches[0], budget=1.0, repeats=1, warmup=0)
    assert len({id(p) for p in wrapped.chain.stages[0].parameters()} & {id(model.embed.weight)}) == 1
    for ids in batches:  # four micro-batches into the same .grad
        wrapped(ids).backward()
        reference(ids).backward()
    assert torch.equal(model.embed.weight.grad, reference.embed.weight.grad)
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(model.parameters(), reference.parameters(), strict=True))
