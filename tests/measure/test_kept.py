"""OffDevice.put / Kept: copies of tensors off the device, compared as torch.equal compares them,
a piece at a time (NOTE [Copies kept off the device])."""

from __future__ import annotations

import os

import torch

from remat.measure.allocator import AllocatorMeter
from remat.measure.offload import PIECE_BYTES, OffDevice


def test_kept_tensors_come_back_equal_and_compare_as_torch_equal():
    place = OffDevice()
    base = torch.randn(10, 6)
    cases = [
        torch.randn(4, 5),
        torch.randn(4, 5).to(torch.bfloat16),
        torch.randint(-(2**40), 2**40, (7,), dtype=torch.int64),
        torch.randn(5, 8).t(),  # not contiguous
        base[2:, 1:4],  # a view with an offset into a larger storage
        torch.empty(0, 3),
        torch.tensor(2.5),  # zero-dim
        torch.tensor([True, False]),
        torch.randn(3, dtype=torch.complex64).conj(),  # a lazy conjugate: its values are kept
    ]
    for t in cases:
        kept = place.put(t)
        back = kept.get()
        assert back.shape == t.shape and back.dtype == t.dtype and torch.equal(back, t)
        other = torch.float32 if t.dtype == torch.float64 else torch.float64
        assert kept.equal(t) and not kept.equal(t.reshape(-1)[:0]) and not kept.equal(torch.zeros(t.shape, dtype=other))
    assert place.put(cases[-1]).copy is not None
    view = place.put(base[2:, 1:4])
    assert view.copy is not None and view.copy.nbytes == 8 * 3 * 4  # the view's elements, not its storage
    nan = place.put(torch.tensor([float("nan"), 0.0]))
    assert not nan.equal(torch.tensor([float("nan"), 0.0]))  # NaN unequal, as torch.equal
    assert place.put(torch.tensor([-0.0])).equal(torch.tensor([0.0]))  # -0.0 equal to 0.0, as torch.equal


def test_equal_reads_back_one_piece_at_a_time_and_sees_a_difference_in_the_last_piece():
    t = torch.randn(3 * PIECE_BYTES // 4 + 5)  # three pieces and a bit (float32)
    place = OffDevice()
    kept = place.put(t)
    assert kept.copy is not None and os.path.getsize(kept.copy.path) == t.numel() * 4
    with AllocatorMeter("cpu") as meter:
        assert kept.equal(t)
    assert meter.peak_bytes <= PIECE_BYTES + 4096  # one piece, not the whole tensor
    changed = t.clone()
    changed[-1] += 1
    assert not kept.equal(changed)
    changed[-1] = t[-1]
    changed[PIECE_BYTES // 4] += 1  # the first element of the second piece
    assert not kept.equal(changed)


def test_a_kept_tensor_is_a_copy_and_its_file_goes_with_it():
    t = torch.randn(100)
    kept = OffDevice().put(t)
    path = kept.copy.path if kept.copy is not None else None
    before = t.clone()
    t.add_(1)  # changing the original does not change the copy
    assert kept.equal(before) and not kept.equal(t)
    del kept
    assert path is not None and not os.path.exists(path)
