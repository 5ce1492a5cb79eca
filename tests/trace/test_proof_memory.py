"""The proof runs the user's whole step at full size without holding every activation
(NOTE [The proof's memory]), and proves a caller's replay of the chain (``chain_step``)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import remat.trace.kinds as kinds
import remat.trace.proof as proof
from remat.measure.allocator import AllocatorMeter
from remat.measure.offload import PIECE_BYTES
from remat.schedules import RematError
from remat.trace.capture import TrainingStep
from remat.trace.chain import as_chain
from remat.trace.proof import cut_model, one_step, prove_chain, prove_cut


def _deep(depth: int = 32, width: int = 16) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(*[m for _ in range(depth) for m in (nn.Linear(width, width), nn.Tanh())])


def _plain_peak(module: nn.Module, run) -> int:
    with AllocatorMeter("cpu") as meter:
        one_step(module, run)
    module.zero_grad(set_to_none=True)
    return meter.peak_bytes


def test_prove_chain_peaks_far_below_the_plain_step():
    model = _deep()
    x = torch.randn(256, 16)
    chain = as_chain(model)
    plain = _plain_peak(model, lambda: model(x))
    with AllocatorMeter("cpu") as meter:
        prove_chain(model, chain, x)
    assert meter.peak_bytes < plain / 3
    assert all(p.grad is None for p in model.parameters())  # the model is left as it was


def _embedded() -> nn.Sequential:
    """Parameters dominate: a 20000 x 64 embedding (5.1 MB) before three small Linear layers."""
    torch.manual_seed(0)
    linears = [nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 8)]
    return nn.Sequential(nn.Embedding(20000, 64), *linears)


def _param_bytes(model: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def test_prove_chain_holds_one_set_of_parameter_gradients():
    # NOTE [The proof's memory]: the plain step's results wait off the device and the chain step's
    # are compared where they are, a piece at a time; before, the proof held the plain step's
    # cloned gradients, the chain step's and their clones: 3.0x the parameters' bytes
    model = _embedded()
    x = torch.randint(0, 20000, (4, 16))
    plain = _plain_peak(model, lambda: model(x))  # one set of gradients and the activations
    with AllocatorMeter("cpu") as meter:
        prove_chain(model, as_chain(model), x)
    assert meter.peak_bytes < 2 * _param_bytes(model)
    assert meter.peak_bytes < plain + 2 * PIECE_BYTES


@pytest.mark.slow
def test_prove_cut_holds_one_set_of_parameter_gradients():
    # the whole proof: the stage-by-stage checks (F_all's gradients off the device), both steps
    model = _embedded()
    x = torch.randint(0, 20000, (4, 16))
    chain = cut_model(model, (x,), {}, prove=False)
    step = TrainingStep(model, None)
    plain = _plain_peak(step, lambda: step((x,), {}, None))
    with AllocatorMeter("cpu") as meter:
        prove_cut(step, chain, (x,), {})
    assert meter.peak_bytes < 2 * _param_bytes(model)
    assert meter.peak_bytes < plain + 2 * PIECE_BYTES
    assert all(p.grad is None for p in model.parameters())


class _Drifting(torch.autograd.Function):
    """The identity; its backward scales the gradient by how many backwards ran before."""

    calls = 0

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        _Drifting.calls += 1
        return grad * _Drifting.calls


class _DriftingStage(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return _Drifting.apply(self.lin(x))


def test_a_stage_whose_gradients_differ_between_forward_kinds_is_refused():
    # F_all's gradients are the reference, kept off the device; the second F_all is compared to it
    with pytest.raises(RematError, match="stage 's' gives other gradients in F_all run again"):
        kinds._check_stage("s", _DriftingStage(), torch.randn(4, 8), {}, None)


@pytest.mark.slow
def test_prove_cut_peaks_far_below_the_plain_step():
    model = _deep()
    x = torch.randn(1024, 16)
    chain = cut_model(model, (x,), {}, prove=False)
    step = TrainingStep(model, None)
    plain = _plain_peak(step, lambda: step((x,), {}, None))
    with AllocatorMeter("cpu") as meter:
        prove_cut(step, chain, (x,), {})
    assert meter.peak_bytes < plain / 3


def test_prove_chain_runs_the_callers_chain_step_and_refuses_one_that_differs():
    model = _deep(depth=3)
    x = torch.randn(8, 16)
    chain = as_chain(model)
    calls: list[int] = []

    def replay() -> torch.Tensor:
        calls.append(1)
        return chain(x)

    prove_chain(model, chain, x, chain_step=replay)
    assert calls == [1]
    with pytest.raises(RematError, match="computes a different output"):
        prove_chain(model, chain, x, chain_step=lambda: chain(x) * 1.0001)


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x):
        return self.b(torch.tanh(self.a(x))).sum()


@pytest.mark.slow
def test_cut_model_without_proof_then_prove_cut_with_the_callers_replay(monkeypatch):
    model = _Block()
    x = torch.randn(4, 8)
    with monkeypatch.context() as patch:
        patch.setattr(proof, "prove_cut", lambda *a, **k: pytest.fail("prove=False must not prove"))
        chain = cut_model(model, (x,), {}, prove=False)
    step = TrainingStep(model, None)
    calls: list[int] = []

    def replay() -> torch.Tensor:
        calls.append(1)
        return chain.run(x)

    prove_cut(step, chain, (x,), {}, chain_step=replay)
    assert calls == [1]
    with pytest.raises(RematError, match="schedule's replay of the cut _Block computes a different output"):
        prove_cut(step, chain, (x,), {}, chain_step=lambda: chain.run(x) * 1.0001)
