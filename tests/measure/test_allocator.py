"""AllocatorMeter: what the c10 CPU allocator handed out inside a block, phase by phase; it sees
kernel-internal buffers that the live-tensor tracker misses, and ignores memory that existed before."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from remat.measure.allocator import AllocatorMeter, Phase, tensor_meter
from remat.measure.memory import untracked
from remat.schedules import RematError


def test_counts_allocations_and_frees_exactly():
    with AllocatorMeter("cpu") as meter:
        a = torch.empty(1000)  # 4000 bytes
        b = torch.empty(250, dtype=torch.float64)  # 2000 bytes
        del a
        c = torch.empty(10)  # 40 bytes
    assert meter.peak_bytes == 6000
    assert meter.final_bytes == 2040
    del b, c


def test_memory_from_before_the_block_is_outside_the_count():
    before = torch.empty(1000)
    with AllocatorMeter("cpu") as meter:
        del before  # freeing it must not make the count negative
        kept = torch.empty(25)
    assert meter.final_bytes == 100 and meter.peak_bytes == 100
    del kept


def test_phases_split_the_block_at_marks():
    with AllocatorMeter("cpu") as meter:
        a = torch.empty(100)
        meter.mark("second")
        tmp = torch.empty(1000)
        del tmp
        b = torch.empty(50)
        meter.mark("third")
        del a
    first, second, third = meter.phases
    assert [p.label for p in meter.phases] == ["", "second", "third"]
    assert first == Phase("", 0, 400, 400)
    assert second == Phase("second", 400, 4400, 600)
    assert third == Phase("third", 600, 600, 200)
    del b


def test_sees_convolution_buffers_the_tracker_misses():
    """oneDNN allocates scratch buffers inside the convolution kernels: the allocator's peak is
    above the live-tensor peak of the same step (measured in the same step: the tracker
    allocates nothing through the allocator)."""
    torch.manual_seed(0)
    conv = nn.Sequential(nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1))
    x = torch.randn(8, 16, 32, 32)
    for p in conv.parameters():
        p.grad = torch.zeros_like(p)
    conv(x).sum().backward()  # warm-up: kernel caches
    with AllocatorMeter("cpu") as meter, tensor_meter("cpu") as tracker:
        conv(x).sum().backward()
    assert meter.peak_bytes > tracker.peak_bytes > 0
    assert meter.final_bytes == tracker.final_bytes == 0  # everything the step allocated was freed


def test_meta_device_counts_meta_storages():
    with AllocatorMeter("meta") as meter:
        a = torch.empty(1000, device="meta")
        meter.mark("more")
        b = torch.empty(500, device="meta")
        del b
    assert meter.peak_bytes == 6000 and meter.final_bytes == 4000
    assert [p.label for p in meter.phases] == ["", "more"]
    del a


def test_tensor_meter_phases_match_the_tracker():
    with tensor_meter("cpu") as meter:
        a = torch.empty(100)
        meter.mark("next")
        b = torch.empty(300)
        del b
    assert meter.phases == (Phase("", 0, 400, 400), Phase("next", 400, 1600, 400))
    del a


def test_bookkeeping_inside_untracked_is_set_apart():
    """Tensors remat makes for itself (inside ``untracked()``) are reported apart, not counted."""
    with AllocatorMeter("cpu") as meter:
        kept = torch.empty(100)
        with untracked():
            snapshot = torch.empty(1000)
            scratch = torch.empty(500)
            del scratch
        del snapshot
        more = torch.empty(10)
    assert meter.peak_bytes == 440 and meter.final_bytes == 440
    assert meter.bookkeeping_peak == 6000
    del kept, more


def test_bookkeeping_is_set_apart_while_the_tracker_runs_too():
    with AllocatorMeter("cpu") as meter, tensor_meter("cpu") as tracker:
        with untracked():
            snapshot = torch.get_rng_state()
        kept = torch.empty(10)
    assert meter.peak_bytes == tracker.peak_bytes == 40
    assert meter.bookkeeping_peak == snapshot.nbytes
    del kept


def test_refuses_to_run_inside_another_profiler():
    with torch.profiler.profile(), pytest.raises(RematError, match="profiler is already running"):
        with AllocatorMeter("cpu"):
            pass


def test_meters_nest_and_the_outer_one_sees_the_inner_blocks():
    """NOTE [Nested allocator meters]: the inner meter reads its own block; the outer one reads its
    whole block, the inner block's allocations included, and frees across the inner's edges."""
    with AllocatorMeter("cpu") as outer:
        a = torch.empty(1000)  # 4000 bytes, freed inside the inner block
        with AllocatorMeter("cpu") as inner:
            del a
            b = torch.empty(2000)  # 8000 bytes, the outer's peak
            outer.mark("inside")
            del b
            c = torch.empty(100)  # 400 bytes, kept past the inner block
        with AllocatorMeter("cpu") as second:
            d = torch.empty(10)
        del c
    assert inner.peak_bytes == 8000 and inner.final_bytes == 400
    assert second.peak_bytes == 40 and second.final_bytes == 40
    assert outer.peak_bytes == 8000 and outer.final_bytes == 40
    assert [p.label for p in outer.phases] == ["", "inside"]
    assert outer.phases[0] == Phase("", 0, 8000, 8000) and [p.label for p in inner.phases] == [""]
    with AllocatorMeter("cpu") as again:  # every session ended: a meter starts alone again
        e = torch.empty(5)
    assert again.peak_bytes == 20
    del d, e


class _FakeCuda:
    """The caching allocator's counters, as CudaMeter reads them: bytes allocated now, one
    high-water mark per device that a reset lowers to the bytes now."""

    def __init__(self) -> None:
        self.now = self.high = 0

    def allocate(self, nbytes: int) -> None:
        self.now += nbytes
        self.high = max(self.high, self.now)

    def reset(self, device=None) -> None:
        self.high = self.now


def test_cuda_meters_nest_an_inner_reset_keeps_the_outer_peak(monkeypatch):
    """On CUDA an inner meter resets the device's high-water mark when it starts and at each
    mark; the outer meter's peak from before survives (emulated counters: no CUDA here)."""
    fake = _FakeCuda()
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: fake.now)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: fake.high)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", fake.reset)
    fake.allocate(100)  # before the outer block: outside every count
    with AllocatorMeter("cuda") as outer:
        fake.allocate(5000)
        fake.allocate(-5000)
        with AllocatorMeter("cuda:0") as inner:
            fake.allocate(300)
            inner.mark("next")
            fake.allocate(-200)
        fake.allocate(50)
    assert inner.phases == (Phase("", 0, 300, 300), Phase("next", 300, 300, 100))
    assert outer.peak_bytes == 5000 and outer.final_bytes == 150
