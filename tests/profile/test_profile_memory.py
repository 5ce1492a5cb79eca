"""Profiling holds one stage's step at a time: profile_chain's peak (warm-up, per-stage metering,
timing passes, recording options) stays within the least-memory schedule of the profile it
returns, far below the store-all step a model that needs remat cannot take (issue 45).

The peak is read with the live-tensor tracker (StorageTracker), not the allocator meter: the
profiler meters each stage with AllocatorMeter, and on CPU one profiler session cannot run inside
another. A chain of Linear + Tanh has no kernel-internal buffers, so the tracker sees every byte
the step allocates; parameter gradients are pre-allocated by the profiler (untracked: parameters,
gradients and optimizer state are outside a budget)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from remat.measure.memory import StorageTracker
from remat.profile.chain import profile_chain
from remat.schedules import ChainProfile
from remat.solver.chain.optimal import minimum_budget
from remat.solver.chain.store_all import store_all_peak

DEPTH, WIDTH, BATCH = 32, 64, 256  # activations (64 KiB) 4x the weights, so the steps' memory is theirs


def _deep_chain() -> tuple[list[nn.Module], torch.Tensor]:
    torch.manual_seed(0)
    stages = [nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh()) for _ in range(DEPTH)]
    return stages, torch.randn(BATCH, WIDTH)


def _profile_peak(options: bool) -> tuple[ChainProfile, int]:
    """The profile of the deep chain and the most bytes live at once while profiling it, the
    input included (the chain model counts a_0 in every schedule's memory)."""
    stages, x = _deep_chain()
    with StorageTracker("cpu") as tracker:
        profile = profile_chain(stages, x, repeats=1, warmup=1, options=options)
    return profile, tracker.peak_bytes + profile.input_size


@pytest.mark.slow
@pytest.mark.parametrize("options", [False, True], ids=["plain", "options"])
def test_profiling_peaks_within_the_least_memory_schedule(options: bool) -> None:
    profile, peak = _profile_peak(options)
    least, store_all = minimum_budget(profile), store_all_peak(profile)
    # margin 1% of the least budget: less than one boundary (64 KiB of ~6 boundaries' worth)
    assert peak <= least + least // 100, (peak, least, store_all)
    assert 4 * peak < store_all, (peak, least, store_all)


def test_timing_metadata_says_how_stages_were_timed() -> None:
    stages, x = _deep_chain()
    profile = profile_chain(stages[:2], x, repeats=1, warmup=0)
    assert profile.metadata["timing"] == "perf_counter, minimum, stages timed in sequence, one stage's step at a time"
    assert all(s.forward_ms > 0 and s.backward_ms > 0 for s in profile.stages)
