"""The Chen et al. 2016 reproduction's machinery: the pre-activation ResNet, meta-device profiling
(sizes equal to a real CPU run's), FLOP counting on meta, and replay on meta tensors (the measured
peak equals the simulator's prediction)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from remat.measure.memory import StorageTracker
from remat.profile.chain import profile_chain
from remat.profile.flops import FlopTimeEstimate, KindRate, stage_flops
from remat.replay.chain import RematChain
from remat.replay.report import measure_steps
from remat.schedules import simulate
from remat.solver import solve
from remat.solver.chain.optimal import minimum_budget
from remat.solver.chain.store_all import store_all_peak
from remat.zoo.preact_resnet import PreActResNet, blocks_for_depth, preact_resnet

SIZE_FIELDS = ("output_size", "saved_size", "forward_overhead", "backward_overhead", "param_size")
TRANSIENT_FIELDS = ("forward_overhead", "forward_nograd_overhead", "backward_overhead")


@pytest.mark.slow
@pytest.mark.parametrize("depth", [14, 26, 50, 101, 152, 200, 302, 1001])
def test_depth_is_three_per_block_plus_two(depth):
    blocks = blocks_for_depth(depth)
    assert len(blocks) == 4 and min(blocks) >= 1
    assert 3 * sum(blocks) + 2 == depth
    model = preact_resnet(depth, device="meta")
    assert model.depth == depth
    assert len(model.remat_stages()) == sum(blocks) + 2 == len(model.stage_kinds())


def test_deep_split_follows_resnet152_proportions():
    blocks = blocks_for_depth(1001)
    assert blocks[2] == max(blocks)  # the 14x14 stage holds most blocks, as in ResNet-152
    assert abs(blocks[2] / sum(blocks) - 36 / 50) < 0.01


@pytest.mark.parametrize("depth", [13, 15, 0, 1000])
def test_bad_depth(depth):
    with pytest.raises(ValueError, match="depth"):
        blocks_for_depth(depth)


def _pair(blocks=(1, 2, 1, 1)):
    torch.manual_seed(0)
    cpu = PreActResNet(blocks, num_classes=10)
    with torch.device("meta"):
        meta = PreActResNet(blocks, num_classes=10)
    return cpu, meta


@pytest.mark.slow
def test_meta_profile_sizes_equal_cpu_profile():
    """Every tensor size of every stage is the same measured on meta tensors as on a real CPU run;
    the CPU allocator also sees what kernels allocate inside themselves (oneDNN's reordered
    convolution weights, megabytes for the wide layers), so CPU transients are at least meta's."""
    cpu_model, meta_model = _pair()
    shape = (2, 3, 64, 64)
    cpu = profile_chain(cpu_model, torch.randn(shape), repeats=1, warmup=0)
    meta = profile_chain(meta_model, torch.empty(shape, device="meta"))
    assert cpu.input_size == meta.input_size
    assert [s.name for s in cpu.stages] == [s.name for s in meta.stages]
    for a, b in zip(cpu.stages, meta.stages, strict=True):
        for name in (*SIZE_FIELDS, "forward_nograd_overhead"):
            relation = (lambda c, m: c >= m) if name in TRANSIENT_FIELDS else (lambda c, m: c == m)
            assert relation(getattr(a, name), getattr(b, name)), (
                f"{a.name}.{name}: cpu {getattr(a, name)}, meta {getattr(b, name)}"
            )
    assert all(s.forward_ms == 0 and s.backward_ms == 0 for s in meta.stages)  # nothing is timed on meta
    assert "meta" in meta.metadata["device"]


def test_meta_tracker_counts_a_real_step_exactly():
    """StorageTracker on meta sees the same peak as on CPU for a plain training step."""
    cpu_model, meta_model = _pair((1, 1, 1, 1))
    peaks = []
    for model, x in ((cpu_model, torch.randn(2, 3, 64, 64)), (meta_model, torch.empty(2, 3, 64, 64, device="meta"))):
        device = x.device.type
        with StorageTracker(device) as tracker:
            model(x).sum().backward()
        peaks.append(tracker.peak_bytes)
    assert peaks[0] == peaks[1] > 0


def test_cpu_tracker_ignores_meta_tensors():
    with StorageTracker("cpu") as tracker:
        keep = torch.empty(1000, device="meta") * 2
    assert tracker.peak_bytes == 0 and keep.device.type == "meta"


def test_stage_flops_same_on_meta_and_cpu_and_scale_with_batch():
    cpu_model, meta_model = _pair((1, 1, 1, 1))
    block_cpu, block_meta = cpu_model.layer2[0], meta_model.layer2[0]
    x = torch.randn(2, 256, 16, 16)
    on_cpu = stage_flops(block_cpu, x)
    on_meta = stage_flops(block_meta, torch.empty(2, 256, 16, 16, device="meta"))
    assert on_cpu == on_meta and on_cpu[0] > 0 and on_cpu[1] > on_cpu[0]
    doubled = stage_flops(block_meta, torch.empty(4, 256, 16, 16, device="meta"))
    assert doubled == (2 * on_meta[0], 2 * on_meta[1])


def test_flop_time_estimate_divides_by_the_kind_rate():
    _, model = _pair((1, 1, 1, 1))
    kinds = model.stage_kinds()
    rates = {k: KindRate(1e6 * (i + 1), 2e6 * (i + 1), 0, 0, 0, 0, 1) for i, k in enumerate(sorted(set(kinds)))}
    estimate = FlopTimeEstimate(rates, kinds)
    x = torch.empty(2, 3, 64, 64, device="meta")
    profile = profile_chain(model, x, stage_times=estimate, timing_note="test")
    assert profile.metadata["timing"] == "test"
    for stage, kind, (f, b) in zip(profile.stages, kinds, estimate.flops, strict=True):
        assert stage.forward_ms == pytest.approx(f / rates[kind].forward_flop_per_ms)
        assert stage.backward_ms == pytest.approx(b / rates[kind].backward_flop_per_ms)
    assert profile.stages[1].forward_ms > 0


@pytest.fixture(scope="module")
def resnet50_meta():
    """ResNet-50 (pre-activation) at batch 32, 224x224, on meta; times = FLOPs (rate 1 FLOP/ms)."""
    model = preact_resnet(50, device="meta")
    kinds = model.stage_kinds()
    estimate = FlopTimeEstimate({k: KindRate(1.0, 1.0, 0, 0, 0, 0, 1) for k in set(kinds)}, kinds)
    x = torch.empty(32, 3, 224, 224, device="meta")
    return model, x, profile_chain(model, x, stage_times=estimate)


@pytest.mark.slow
def test_replay_on_meta_peak_equals_prediction(resnet50_meta):
    """The executor replays chen-sqrt and optimal schedules on the full-size meta model; the tracker's
    measured peak is the simulator's prediction to the byte (plus the loss scalar)."""
    model, x, profile = resnet50_meta
    high = store_all_peak(profile)
    sqrt = solve(profile, high, "chen-sqrt")
    schedules = [sqrt, solve(profile, sqrt.predicted.peak_memory, "optimal", slots=100)]
    low = solve(profile, minimum_budget(profile, slots=100), "optimal", slots=100)
    schedules.append(low)
    assert low.predicted.peak_memory < sqrt.predicted.peak_memory < high
    for schedule in schedules:
        assert simulate(profile, schedule).peak_memory == schedule.predicted.peak_memory
        wrapped = RematChain(model, schedule, profile)
        measured = measure_steps(wrapped, x, steps=1, warmup=0, timeline=False, timed=False)
        # to the byte, but for the step's scalar loss and its gradient (4 + 4 bytes, fp32), which the
        # chain model does not count
        assert 0 <= measured.peak_memory - schedule.predicted.peak_memory <= 8, schedule.strategy


@pytest.mark.slow
def test_meta_profile_is_consistent_with_a_plain_meta_step(resnet50_meta):
    """Store-all on the chain model predicts the peak of the plain (no remat) meta step within the
    input gradient the chain model counts at B 0 (a plain step has no leaf input)."""
    model, x, profile = resnet50_meta
    with StorageTracker("meta") as tracker:
        tracker.track(x)
        out = model(x)
        loss = (out * torch.empty_like(out)).sum()
        del out
        loss.backward()
    predicted = store_all_peak(profile)
    assert abs(tracker.peak_bytes - predicted) <= profile.input_size + profile.stages[-1].output_size
    assert dataclasses.asdict(profile.stages[0])["output_size"] == 32 * 64 * 56 * 56 * 4


@pytest.mark.slow
def test_bundled_1001_layer_profile_matches_the_model(resnet50_meta):
    """examples/preact_resnet1001_b32.json (written by benchmarks/chen2016.py) is the depth-1001 net:
    its stages are the model's, and every stage has the sizes that the same kind of stage has in the
    meta profile of ResNet-50 measured here (same shapes, batch 32)."""
    from remat.schedules import load_profile
    from tests.conftest import EXAMPLES

    profile = load_profile(EXAMPLES / "preact_resnet1001_b32.json")
    assert (EXAMPLES / "preact_resnet1001_b32.json").stat().st_size < 2_000_000
    model = preact_resnet(1001, device="meta")
    assert [s.name for s in profile.stages] == [name for name, _ in model.remat_stages()]
    _, _, small = resnet50_meta
    by_kind = {}
    for stage, kind in zip(small.stages, preact_resnet(50, device="meta").stage_kinds(), strict=True):
        by_kind.setdefault(kind, {f: getattr(stage, f) for f in SIZE_FIELDS})
    for stage, kind in zip(profile.stages, model.stage_kinds(), strict=True):
        assert {f: getattr(stage, f) for f in SIZE_FIELDS} == by_kind[kind], stage.name
    assert profile.input_size == small.input_size == 32 * 3 * 224 * 224 * 4
    assert all(s.forward_ms > 0 and s.backward_ms > 0 for s in profile.stages)
