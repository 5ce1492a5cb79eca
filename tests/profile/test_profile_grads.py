"""NOTE [The profile's gradients] (remat/profile/stage.py): the profile measures with zeroed
gradients but never holds a second set beside the model's own, and leaves their values as it found them."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from remat.measure.allocator import AllocatorMeter
from remat.profile.chain import profile_chain


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 256), nn.Tanh(), nn.Linear(256, 64)).train()


def _grad_bytes(model: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


@pytest.mark.slow
def test_zeroed_gradients_are_measured_in_place_and_stay_the_models():
    model, x = _model(), torch.randn(8, 64)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    before = [p.grad for p in model.parameters()]
    with AllocatorMeter("cpu") as meter:
        profile_chain(model, x, repeats=1, warmup=0)
    # no second set of gradients: zeroed copies were made inside untracked() (remat's bookkeeping)
    assert meter.bookkeeping_peak < _grad_bytes(model) // 2
    assert all(p.grad is g and not g.any() for p, g in zip(model.parameters(), before, strict=True))


@pytest.mark.slow
def test_gradients_holding_values_come_back_and_none_stays_none():
    model, x = _model(), torch.randn(8, 64)
    (model(x) ** 2).mean().backward()
    values = [p.grad.clone() for p in model.parameters()]
    profile_chain(model, x, repeats=1, warmup=0)
    assert all(torch.equal(p.grad, v) for p, v in zip(model.parameters(), values, strict=True))
    fresh = _model()
    profile_chain(fresh, x, repeats=1, warmup=0)
    assert all(p.grad is None for p in fresh.parameters())
