"""saved_off_device: autograd's saved tensors kept off the device during a step and brought back
bit for bit, at the same layout (NOTE [Saved tensors off the device, bit for bit])."""

from __future__ import annotations

import os

import pytest
import torch
from torch import nn

from remat.measure.allocator import AllocatorMeter
from remat.measure.offload import existing_storages, saved_off_device


class _Probe(torch.autograd.Function):
    """Saves the given tensors; its backward hands what it unpacked to ``seen``."""

    @staticmethod
    def forward(ctx, x, seen, *saved):
        ctx.seen = seen
        ctx.save_for_backward(*saved)
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        ctx.seen.extend(ctx.saved_tensors)
        return (grad, None, *([None] * len(ctx.saved_tensors)))


def _storage_bytes(t: torch.Tensor) -> torch.Tensor:
    return torch.empty(0, dtype=torch.uint8).set_(t.untyped_storage()).clone()


def _round_trip(make):
    """Tensors made by ``make()`` inside the block, saved, and what the backward unpacked."""
    seen: list[torch.Tensor] = []
    x = torch.randn(3, requires_grad=True)
    with saved_off_device() as hooks:
        saved = make()
        originals = [_storage_bytes(t) for t in saved]
        _Probe.apply(x, seen, *saved).sum().backward()
    return saved, originals, seen, hooks


def test_saved_tensors_come_back_bit_exact_at_their_layout():
    def make():
        base = torch.randn(10, 6)
        return [
            torch.randn(4, 5),
            torch.randn(4, 5).to(torch.bfloat16),
            torch.randint(-(2**40), 2**40, (7,), dtype=torch.int64),
            torch.randn(5, 8).t(),  # transposed view
            base[2:, 1:4],  # a view with a storage offset, not contiguous
            torch.empty(0, 3),  # zero-size
            torch.tensor([float("nan"), -0.0, float("inf")]),  # bit patterns, not values
        ]

    saved, originals, seen, hooks = _round_trip(make)
    assert hooks.saved_bytes > 0 and len(seen) == len(saved)
    for t, raw, back in zip(saved, originals, seen, strict=True):
        assert (back.dtype, back.shape, back.stride(), back.storage_offset()) == (
            t.dtype, t.shape, t.stride(), t.storage_offset()
        )  # fmt: skip
        assert back.untyped_storage().nbytes() == t.untyped_storage().nbytes()
        assert torch.equal(_storage_bytes(back), raw)  # every byte of the storage, NaN's bits included
        assert back.untyped_storage().data_ptr() != t.untyped_storage().data_ptr() or t.numel() == 0


def test_views_of_one_storage_share_one_copy_and_one_restored_storage():
    def make():
        base = torch.randn(64, 64)
        return [base, base[1:], base.t(), base]  # one storage, saved four times

    saved, _, seen, hooks = _round_trip(make)
    assert hooks.saved_bytes == saved[0].untyped_storage().nbytes()
    assert len({t.untyped_storage().data_ptr() for t in seen}) == 1
    assert torch.equal(seen[1], saved[1]) and torch.equal(seen[2], saved[2])


def _net_step(net: nn.Module, x: torch.Tensor, table: nn.Embedding) -> list[torch.Tensor]:
    for p in [*net.parameters(), *table.parameters()]:
        p.grad = None
    h = torch.tanh(net(x))
    idx = (h.detach().abs() * 10).long() % table.num_embeddings  # int64 made in the step, saved
    h = h + table(idx).sum(-1)
    low = h.to(torch.bfloat16)
    h = h + (low @ low.t()).float().sum(0)[: h.shape[1]]  # bf16 matmul saves a transposed view
    h = h[1:] * h[1:]  # a view with a storage offset, saved twice by one op
    h.sum().backward()
    return [p.grad.clone() for p in [*net.parameters(), *table.parameters()]]


def test_gradients_equal_with_saved_tensors_off_device():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 16))
    table = nn.Embedding(11, 4)
    x = torch.randn(16, 16)
    plain = _net_step(net, x, table)
    with saved_off_device(existing_storages(net, table, x)) as hooks:
        off = _net_step(net, x, table)
    assert hooks.saved_bytes > 0
    assert all(torch.equal(a, b) for a, b in zip(plain, off, strict=True))


def test_storages_that_existed_before_stay_where_they_are():
    net = nn.Linear(32, 32, bias=False)
    x = torch.randn(8, 32, requires_grad=True)
    with saved_off_device(existing_storages(net, x)) as hooks:
        net(x).sum().backward()  # saves x and the weight only: both existed before
    assert hooks.saved_bytes == 0
    with saved_off_device() as hooks:
        net(x).sum().backward()
    assert hooks.saved_bytes == x.untyped_storage().nbytes() + net.weight.untyped_storage().nbytes()


def test_a_saved_tensor_changed_in_place_fails_as_without_the_hooks():
    x = torch.randn(5, requires_grad=True)
    with saved_off_device():
        y = x * 2
        z = y.sin()  # saves y
        y.mul_(2)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            z.sum().backward()


def test_files_are_removed_once_the_backward_has_run():
    x = torch.randn(4, 4, requires_grad=True)
    with saved_off_device() as hooks:
        loss = (x.exp() * 3).tanh().sum()
        assert os.listdir(hooks.directory.name)  # the saved tensors are in files now
        loss.backward()
        assert os.listdir(hooks.directory.name) == []


def test_a_deep_step_peaks_far_below_holding_every_activation():
    torch.manual_seed(0)
    net = nn.Sequential(*[m for _ in range(32) for m in (nn.Linear(16, 16), nn.Tanh())])
    x = torch.randn(256, 16)

    def step() -> list[torch.Tensor]:
        net(x).sum().backward()
        grads = [p.grad for p in net.parameters()]
        net.zero_grad(set_to_none=True)
        return grads

    with AllocatorMeter("cpu") as plain:
        expected = step()
    with AllocatorMeter("cpu") as meter, saved_off_device(existing_storages(net, x)):
        got = step()
    assert meter.peak_bytes < plain.peak_bytes / 3
    assert all(torch.equal(a, b) for a, b in zip(expected, got, strict=True))
