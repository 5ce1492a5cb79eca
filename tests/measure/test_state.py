"""A step's state in one owner (remat/measure/state.py): the generators, buffers and gradients a
step changes come back as they were, in each way the callers keep them."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from remat.measure.state import StepState, kept_buffers, kept_rng


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Dropout(0.5))


def _step(model: nn.Module) -> None:
    model.train()
    model(torch.randn(8, 4)).sum().backward()  # draws RNG, moves BatchNorm's statistics, adds into grads


def _grads(model: nn.Module) -> list:
    return [None if p.grad is None else p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize(("grads", "off_device"), [(None, False), ("same", False), ("copy", False), ("copy", True)])
def test_a_step_state_puts_rng_buffers_and_gradients_back(grads, off_device):
    model = _model()
    _step(model)  # gradients exist before the state is taken
    before_grads, before_buffers = _grads(model), [b.clone() for b in model.buffers()]
    state = StepState(model, grads=grads, off_device=off_device)
    draw = torch.rand(3)
    if off_device:
        assert all(p.grad is None for p in model.parameters())  # one set of gradients at a time
    for _ in range(2):  # as often as asked
        if grads == "same":
            for p in model.parameters():
                p.grad = torch.zeros_like(p)  # the profilers' fresh gradient tensors
        _step(model)
        state.reset()
        assert torch.equal(torch.rand(3), draw)
        state.reset()
        assert all(torch.equal(a, b) for a, b in zip(model.buffers(), before_buffers, strict=True))
    state.restore()
    after = _grads(model)
    if grads is None:  # not kept: left as the steps made them
        assert not all(torch.equal(a, b) for a, b in zip(after, before_grads, strict=True))
    else:
        assert all(torch.equal(a, b) for a, b in zip(after, before_grads, strict=True))


def test_a_step_state_as_a_block_restores_when_it_ends():
    model = _model()
    _step(model)
    before_grads, before_buffers = _grads(model), [b.clone() for b in model.buffers()]
    torch.manual_seed(1)
    with StepState(model, grads="copy"):
        _step(model)
        _step(model)
    after = torch.rand(3)
    torch.manual_seed(1)
    assert torch.equal(after, torch.rand(3))
    assert all(torch.equal(a, b) for a, b in zip(_grads(model), before_grads, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(model.buffers(), before_buffers, strict=True))


def test_kept_rng_and_kept_buffers_undo_their_block():
    model = _model()
    before = [b.clone() for b in model.buffers()]
    state = torch.get_rng_state()
    with kept_rng(), kept_buffers(model):
        _step(model)
    assert torch.equal(torch.get_rng_state(), state)
    assert all(torch.equal(a, b) for a, b in zip(model.buffers(), before, strict=True))
