"""After ``remat.checkpoint`` returns, the process holds no tensor storage it did not hold before,
other than what the wrapped model keeps by design: the example cut's side values (issue 45, item 6;
NOTE [The fuse pass holds one stage], remat/trace/fuse.py).

The count is every CPU tensor the garbage collector can reach, after a collection, by distinct
storage: a reference cycle through autograd (a saved tensor whose graph points back at it) is
reached this way, and it is what held the whole activation set after the first call before.
Nor the solver's DP tables (host memory: NOTE [The first call's host memory], remat/api/shapes.py).
"""

from __future__ import annotations

import gc

import pytest
import torch
from torch import nn

import remat
from remat.solver.chain.dp.cache import CACHE, TABLES


def _storages() -> dict[int, int]:
    """data pointer -> bytes of every distinct storage of a live CPU tensor with data (fake and
    meta tensors, which own no memory, are left out)."""
    gc.collect()
    found: dict[int, int] = {}
    for obj in gc.get_objects():
        if isinstance(obj, torch.Tensor) and obj.device.type == "cpu" and obj.layout == torch.strided:
            try:
                storage = obj.untyped_storage()
                found[storage.data_ptr()] = storage.nbytes()
            except (RuntimeError, NotImplementedError):  # a fake tensor has no data pointer
                continue
    return found


def _held_by_design(wrapped: nn.Module) -> set[int]:
    """Storages the wrapped model keeps on purpose: the side values of its example's cut
    (position ids, masks, rotary tables: computed once per call, handed to the stages)."""
    values = wrapped.chain.context.values.values()
    return {v.untyped_storage().data_ptr() for v in values if isinstance(v, torch.Tensor) and v.device.type == "cpu"}


def _loss(output: torch.Tensor) -> torch.Tensor:
    return output.square().mean()


def _mlp() -> tuple[nn.Module, torch.Tensor]:
    return nn.Sequential(*[nn.Sequential(nn.Linear(64, 64), nn.Tanh()) for _ in range(6)]), torch.randn(128, 64)


def _cnn() -> tuple[nn.Module, torch.Tensor]:
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        nn.Flatten(), nn.Linear(8 * 12 * 12, 10),
    )  # fmt: skip
    return model, torch.randn(16, 3, 12, 12)


@pytest.mark.slow
@pytest.mark.parametrize(("make", "budget"), [(_mlp, 0.7), (_cnn, 1.0)], ids=["mlp", "cnn-batchnorm"])
def test_the_first_call_holds_nothing_after_it_returns(make, budget):
    torch.manual_seed(0)
    model, x = make()
    before = _storages()
    wrapped = remat.checkpoint(model, x, budget=budget, loss=_loss)
    after = _storages()
    new = {ptr: size for ptr, size in after.items() if ptr not in before}
    extra = {ptr: size for ptr, size in new.items() if ptr not in _held_by_design(wrapped)}
    # before: every stage output that its own backward saves (each Tanh's, ReLU's) stayed alive
    assert sum(extra.values()) == 0, f"{len(extra)} storages, {sum(extra.values())} bytes held"
    assert all(p.grad is None for p in model.parameters())  # the first call leaves no gradient behind
    assert all(CACHE.count(kind) == 0 for kind in TABLES), "the solver's tables were kept"
    loss = wrapped(x)  # and the wrapped model still trains
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())
