"""NOTE [Shared parameters under gradient accumulation] (remat/runtime/core.py): a weight read by
two stages (tied input and output embeddings) or two graph pieces accumulates over micro-batches
bit-equal to plain PyTorch, where adding each one's gradient into ``.grad`` in turn is a few ulps
off. Both replays (chain and graph) hand their steps' shared parameters to the one sink."""

from __future__ import annotations

import pytest
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


class CellLoop(nn.Module):
    """One ``nn.LSTMCell`` over the sequence: its weights are read by every stage (one per call)."""

    def __init__(self) -> None:
        super().__init__()
        self.cell = nn.LSTMCell(6, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = c = torch.zeros(x.shape[1], 16)
        for t in range(x.shape[0]):
            h, c = self.cell(x[t], (h, c))
        return h.square().mean()


@pytest.mark.slow
def test_saving_the_gradients_changes_neither_the_next_steps_memory_nor_its_grad_tensors():
    """NOTE [The running sum stays in .grad's buffer]: ``torch.save`` of the gradients leaves their
    storages with a Python object each (one more owner); the next step summed the shared cell's
    uses into a fresh gradient-sized buffer and made it ``.grad`` (the LSTM row of
    benchmarks/does_not_fit.py: steps 2-3 above step 1 by one weight's and two biases' gradients)."""
    import io

    from remat.measure.allocator import AllocatorMeter

    torch.manual_seed(0)
    model = CellLoop().train()
    reference = CellLoop().train()
    reference.load_state_dict(model.state_dict())
    x = torch.randn(8, 4, 6)
    wrapped = remat.checkpoint(model, (x,), budget=0.5, repeats=1, warmup=0)
    assert len(wrapped.chain.stages) > 2  # the cell's calls are stages of their own: its weights are shared
    for p in (*model.parameters(), *reference.parameters()):
        p.grad = torch.zeros_like(p)
    peaks = []
    for _ in range(3):  # zero_grad(set_to_none=False), step, save the gradients: a training loop's checkpoint
        for p in (*model.parameters(), *reference.parameters()):
            p.grad.zero_()
        before = [p.grad for p in model.parameters()]  # a caller's reference to .grad: one more owner too
        with AllocatorMeter("cpu") as meter:
            wrapped(x).backward()
        reference(x).backward()
        peaks.append(meter.peak_bytes)
        assert all(p.grad is g for p, g in zip(model.parameters(), before, strict=True))  # the caller's tensors
        assert all(torch.equal(a.grad, b.grad) for a, b in zip(model.parameters(), reference.parameters(), strict=True))
        torch.save(before, io.BytesIO())  # each storage gets its Python object
    assert peaks[1] == peaks[2] == peaks[0]
