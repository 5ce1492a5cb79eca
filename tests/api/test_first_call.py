"""remat.checkpoint's first call (docs/models.md, "The first call's memory"): out of memory named
as such, and a budget below the least refused before the proof or any step runs."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import remat
import remat.trace.proof as proof
from remat.measure.allocator import AllocatorMeter
from remat.measure.oom import OutOfMemory
from remat.replay.chain import RematChain
from remat.schedules import InfeasibleBudgetError, RematError

HUGE = 2**60  # bytes no allocator serves
SMALL = 4  # batches up to this size fit; larger ones ask for HUGE bytes


class Greedy(nn.Module):
    """Two linear layers; a batch larger than SMALL asks the allocator for HUGE bytes."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.a = nn.Linear(width, width)
        self.b = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.a(x))
        if x.shape[0] > SMALL:
            h = h + torch.zeros(HUGE, dtype=torch.uint8)[: h.numel()].view(h.shape).to(h)
        return self.b(h)


def _one_line_out_of_memory(info: pytest.ExceptionInfo, phase: str, budget: int) -> str:
    message = str(info.value)
    assert "\n" not in message, message
    assert message.startswith(f"out of memory while {phase} ("), message
    assert f"{HUGE} bytes" in message and f"budget {budget} bytes" in message, message
    assert "TorchDynamo" not in message and "remat_stages" not in message, message
    assert info.value.__suppress_context__ and info.value.__cause__ is None  # the line, no traceback
    return message


@pytest.mark.slow
def test_out_of_memory_in_the_first_call_at_a_new_shape_and_in_a_step_is_one_line(monkeypatch):
    torch.manual_seed(0)
    model = Greedy().train()
    budget = 1 << 20
    with pytest.raises(OutOfMemory) as info:
        remat.checkpoint(model, torch.randn(2 * SMALL, 16), budget=budget, repeats=1, warmup=0)
    _one_line_out_of_memory(info, "tracing and cutting the model", budget)
    wrapped = remat.checkpoint(model, torch.randn(SMALL, 16), budget=budget, repeats=1, warmup=0)
    with pytest.raises(OutOfMemory) as info:
        wrapped(torch.randn(2 * SMALL, 16))  # a new shape: traced now
    _one_line_out_of_memory(info, "tracing and cutting the model", budget)
    # a step's forward that cannot allocate (the device's memory taken by something else)
    monkeypatch.setattr(RematChain, "forward", lambda self, x: torch.empty(HUGE, dtype=torch.uint8))
    with pytest.raises(OutOfMemory) as info:
        wrapped(torch.randn(SMALL, 16))
    _one_line_out_of_memory(info, "a training step's forward (the replay of its schedule)", budget)


@pytest.mark.slow
def test_a_budget_below_the_least_is_refused_in_one_line_before_the_proof_or_a_step(monkeypatch):
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(32, 32), nn.Tanh()) for _ in range(6)]).train()
    x = torch.randn(64, 32)
    least = remat.checkpoint(model, x, budget=1.0, repeats=1, warmup=0).least_peak
    proofs = []
    real = proof.prove_cut

    def counted(*args, **kwargs):
        proofs.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(proof, "prove_cut", counted)
    monkeypatch.setattr(remat.api.entry, "prove_cut", counted)
    solves = []
    real_solve = remat.api.model.solve
    monkeypatch.setattr(remat.api.model, "solve", lambda *a, **k: solves.append(1) or real_solve(*a, **k))
    model.zero_grad(set_to_none=True)
    with pytest.raises(RematError) as info:
        remat.checkpoint(model, x, budget=least - 1, repeats=1, warmup=0)
    message = str(info.value)
    assert "\n" not in message and f"({least} bytes)" in message and f"({least - 1} bytes)" in message, message
    assert "pass a budget of at least that" in message and "before the proof" in message, message
    assert proofs == [], "the proof ran before the refusal"
    assert all(p.grad is None for p in model.parameters()), "a step ran"
    # at the least it trains, proven once (the replay of its schedule)
    wrapped = remat.checkpoint(model, x, budget=least, repeats=1, warmup=0)
    assert len(proofs) == 1 and wrapped.schedule.predicted.peak_memory <= least
    assert len(solves) == 1, "the schedule the proof replayed was solved again"


class Breaks(nn.Module):
    """A forward that branches on a value: TorchDynamo cannot trace it as one graph."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x)
        return h * 2 if h.sum().item() > 0 else h


@pytest.mark.slow
def test_a_graph_break_says_what_works_for_remat_checkpoint():
    with pytest.raises(RematError) as info:
        remat.checkpoint(Breaks().train(), torch.randn(4, 8))
    message = str(info.value)
    assert "\n" not in message and "TorchDynamo cannot trace Breaks" in message, message
    assert "remat_stages" not in message and "remat.checkpoint needs the model's forward as one graph" in message


def _square_mean(output: torch.Tensor) -> torch.Tensor:
    return output.square().mean()


@pytest.mark.slow
def test_the_first_call_as_a_whole_peaks_within_the_budget():
    """The allocator's peak over the whole first call (trace, profile, solve, proof), read by a
    meter around it (meters nest: remat meters inside), at the least budget, far below the plain
    step, on a model in training: its gradients exist (made inside the meter, so that their memory
    freed counts), and they are aside, as the issue's budget sets them aside. The device's total
    rises above its level at the call by at most the budget plus the generators' states remat
    snapshots (a few per step): the proof's steps make their own gradients while the model's wait
    off the device, and it compares them after the backward, one piece read back at a time
    (NOTE [The proof's memory]), below the step's peak. A whole plain step, or the model's
    gradients held beside the proof's, would show."""
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(256, 256), nn.Tanh()) for _ in range(8)]).train()
    x = torch.randn(512, 256)
    with AllocatorMeter("cpu") as plain:
        _square_mean(model(x)).backward()
    grads = sum(p.grad.nbytes for p in model.parameters())
    model.zero_grad(set_to_none=True)
    with pytest.raises(InfeasibleBudgetError) as refused:  # the least, named before any proof
        remat.checkpoint(model, x, budget=1, loss=_square_mean, repeats=1, warmup=0)
    least = refused.value.min_budget
    beside = 8 * torch.get_rng_state().nbytes
    assert plain.peak_bytes - grads > least + beside and grads > beside, (plain.peak_bytes, least, grads)
    with AllocatorMeter("cpu") as meter:
        for p in model.parameters():
            p.grad = torch.ones_like(p)
        meter.mark("first call")
        wrapped = remat.checkpoint(model, x, budget=least, loss=_square_mean, repeats=1, warmup=0)
    call = meter.phases[1]
    assert wrapped.schedule.predicted.peak_memory <= least
    assert 0 < call.peak - call.start <= least + beside, (call, least, beside)
    assert all(torch.equal(p.grad, torch.ones_like(p)) for p in model.parameters())  # the gradients put back
