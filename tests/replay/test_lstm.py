"""The unrolled LSTM chain (remat.zoo.lstm): equal to the plain loop, profiled from a real
LSTMCell, and replayed with checkpointing schedules within 1% of the predicted peak."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from remat.profile.chain import profile_chain  # noqa: E402
from remat.replay.chain import RematChain  # noqa: E402
from remat.replay.report import compare  # noqa: E402
from remat.schedules import RematError, simulate  # noqa: E402
from remat.solver import solve  # noqa: E402
from remat.trace.chain import as_chain  # noqa: E402
from remat.zoo.lstm import UnrolledLSTM, repeated_profile, unrolled_loop  # noqa: E402


def _state(batch: int, hidden: int) -> torch.Tensor:
    return torch.randn(batch, 2 * hidden, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("steps_per_stage", [1, 5])
def test_chain_computes_the_plain_loop_bit_for_bit(steps_per_stage) -> None:
    model = UnrolledLSTM(40, 3, 8, 16, steps_per_stage)
    state = _state(3, 16)
    with torch.no_grad():
        assert torch.equal(model(state), unrolled_loop(model, state))
    assert len(as_chain(model)) == 40 // steps_per_stage


def test_bad_block_size_is_an_error() -> None:
    with pytest.raises(RematError, match="multiple"):
        UnrolledLSTM(10, 2, 4, 4, steps_per_stage=3)


def test_repeated_profile_has_the_sizes_of_a_full_profile() -> None:
    model = UnrolledLSTM(20, 4, 8, 16)
    state = _state(4, 16)
    full = profile_chain(model, state, repeats=1)
    repeated = repeated_profile(model, state, sample=4, repeats=1)
    assert repeated.length == full.length == 20 and repeated.input_size == full.input_size
    fields = ("output_size", "saved_size", "forward_overhead", "backward_overhead")
    for r, f in zip(repeated.stages, full.stages, strict=True):
        assert [getattr(r, k) for k in fields] == [getattr(f, k) for k in fields]
    assert repeated.stages[0].saved_size > repeated.stages[0].output_size  # the cell's gates are saved


def _gradients(model: UnrolledLSTM, run, state: torch.Tensor, weight: torch.Tensor) -> list[torch.Tensor]:
    model.zero_grad()
    leaf = state.clone().requires_grad_(True)
    (run(leaf) * weight).sum().backward()
    return [p.grad.clone() for p in model.cell.parameters()] + [leaf.grad]


@pytest.mark.slow
@pytest.mark.parametrize(("strategy", "options"), [("chen-sqrt", {}), ("revolve", {"checkpoints": 3}), ("optimal", {})])
def test_schedules_replay_within_one_percent_with_the_plain_loops_gradients(strategy, options) -> None:
    model = UnrolledLSTM(120, 4, 8, 16)
    state = _state(4, 16)
    profile = repeated_profile(model, state, repeats=1)
    sqrt_peak = solve(profile, 2**40, "chen-sqrt").predicted.peak_memory
    schedule = solve(profile, sqrt_peak if strategy == "optimal" else 2**40, strategy, **options)
    store_all = solve(profile, 2**40, "store-all").predicted.peak_memory
    assert schedule.predicted.peak_memory < store_all / 3  # a real saving, not a trivial schedule
    wrapped = RematChain(as_chain(model), schedule, profile)
    report = compare(profile, schedule, wrapped, state, steps=1)
    assert abs(report.measured_peak - report.predicted_peak) <= 0.01 * report.predicted_peak
    weight = torch.randn(4, 32, generator=torch.Generator().manual_seed(2))
    expected = _gradients(model, lambda s: unrolled_loop(model, s), state, weight)
    got = _gradients(model, wrapped, state, weight)
    assert all(torch.equal(a, b) for a, b in zip(got, expected, strict=True))


def test_the_dp_is_at_least_as_fast_as_revolve_on_identical_stages() -> None:
    """Revolve's schedules are persistent, so the persistent DP is never slower at revolve's peak."""
    model = UnrolledLSTM(50, 2, 4, 8)
    profile = repeated_profile(model, _state(2, 8), repeats=1)
    for c in range(2, 8):
        binomial = solve(profile, 2**40, "revolve", checkpoints=c)
        dp = solve(profile, binomial.predicted.peak_memory, "optimal", slots=2000)
        assert dp.predicted.compute_ms <= binomial.predicted.compute_ms * (1 + 1e-9)
        assert simulate(profile, dp.ops).peak_memory <= binomial.predicted.peak_memory


def test_with_blocks_of_steps_gradients_differ_only_by_the_order_of_a_float_sum() -> None:
    """Several steps per stage: the replay sums the shared weights' gradient per stage, then across
    stages; the plain loop sums it in one go. Same terms, another association: equal to float
    rounding, not bit for bit (one step per stage is bit for bit, above)."""
    model = UnrolledLSTM(60, 4, 8, 16, steps_per_stage=5)
    state = _state(4, 16)
    profile = repeated_profile(model, state, sample=3, repeats=1)
    wrapped = RematChain(as_chain(model), solve(profile, 2**40, "chen-sqrt"), profile)
    weight = torch.randn(4, 32, generator=torch.Generator().manual_seed(2))
    expected = _gradients(model, lambda s: unrolled_loop(model, s), state, weight)
    got = _gradients(model, wrapped, state, weight)
    assert torch.equal(got[-1], expected[-1])  # the state's gradient has a single path: bit for bit
    for a, b in zip(got[:-1], expected[:-1], strict=True):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6 * float(b.abs().max()))
