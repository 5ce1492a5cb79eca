"""NOTE [Shared parameters under gradient accumulation] (remat/runtime/core.py): a weight read by
two stages (tied input and output embeddings) or two graph pieces accumulates over micro-batches
bit-equal to plain PyTorch, where adding each one's gradient into ``.grad`` in turn is a few ulps
off. Both replays (chain and graph) hand their steps' shared parameters to the one sink."""

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


class TiedFloat(nn.Module):
    """A float input through a weight that is read twice, far apart (a graph profile's pieces)."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.proj = nn.Linear(width, width)
        self.mid = nn.Sequential(nn.Linear(width, width), nn.Tanh(), nn.Linear(width, width), nn.Tanh())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.proj(x))
        h = self.mid(h)
        return (h @ self.proj.weight).square().mean()


def test_the_graph_replay_accumulates_a_shared_weight_like_plain_pytorch():
    from remat.graph.profiler import profile_graph
    from remat.replay.graph import GraphReplay
    from tests.solver.graph.graph_schedules import checkpoint_schedule

    torch.manual_seed(0)
    model = TiedFloat().train()
    reference = TiedFloat().train()
    reference.load_state_dict(model.state_dict())
    xs = [torch.randn(8, 16, generator=torch.Generator().manual_seed(k)) for k in range(4)]
    profile = profile_graph(model, example_inputs=xs[0], name="tied")
    forward = [v for v, node in enumerate(profile.nodes) if not node.backward]
    wrapped = GraphReplay(model, checkpoint_schedule(profile, forward[::2]), profile)
    for x in xs:  # four micro-batches into the same .grad
        wrapped(x).backward()
        reference(x).backward()
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(model.parameters(), reference.parameters(), strict=True))
