"""Chain strategies on long chains: bounded work and memory, or a one-line refusal naming the limit
(issue 24). No timing asserts: what is checked is what each strategy builds and answers."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remat.schedules import ChainProfile, RematError, Stage, simulate
from remat.solver import solve
from remat.solver.chain import chen_greedy, recompute_all, revolve, sequential
from remat.solver.chain.limits import MAX_OPS, recompute_all_ops_count
from remat.solver.chain.segments import segment_arrays, segment_costs
from remat.solver.chain.store_all import store_all_ops, store_all_peak
from remat.solver.pareto.chain import chain_front, length_refusals
from tests.solver.chain.chain_strategies import random_chains

sizes = st.one_of(st.just(0), st.integers(1, 1000), st.integers(10**6, 10**9))
times = st.floats(0.0, 10.0, allow_nan=False, allow_infinity=False)


@pytest.mark.slow
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_chains(sizes, times, max_length=40))
def test_sequential_closed_form_per_count_equals_segment_costs(profile):
    peaks, times_ms = sequential.count_costs(profile)
    arrays = segment_arrays(profile)
    for k in range(1, profile.length + 1):
        peak, ms = segment_costs(arrays, sequential.torch_segment_starts(profile.length, k))
        assert peaks[k - 1] == peak
        assert abs(times_ms[k - 1] - ms) <= 1e-9 * max(1.0, ms)


def uniform_chain(n: int) -> ChainProfile:
    stage = Stage("s", 1.0, 2.0, output_size=100, saved_size=150, forward_overhead=10, backward_overhead=20)
    return ChainProfile(name=f"uniform{n}", input_size=100, stages=(stage,) * n)


def test_recompute_all_and_revolve_counts_stay_within_the_ops_limit():
    assert not recompute_all.too_long(6323) and recompute_all.too_long(6324)
    assert recompute_all_ops_count(6323) <= MAX_OPS < recompute_all_ops_count(6324)
    long = uniform_chain(10_000)
    assert recompute_all.choose(long, 10**12) is None
    with pytest.raises(RematError, match="recompute-all: 10000 stages make a schedule of 50015000 ops"):
        solve(long, store_all_peak(long), "recompute-all")
    counts = revolve._choices(long, None)
    assert 1 not in counts and all(revolve.fits_limit(10_000, c) for c in counts)
    with pytest.raises(RematError, match="revolve: 1 slots on 10000 stages"):
        solve(long, store_all_peak(long), "revolve", checkpoints=1)


def test_chen_greedy_refuses_past_its_limit_and_pareto_names_what_it_left_out(monkeypatch):
    monkeypatch.setattr(chen_greedy, "MAX_STAGES", 50)
    profile = uniform_chain(60)
    with pytest.raises(RematError, match="chen-greedy: .* 60 stages exceed its limit of 50"):
        solve(profile, store_all_peak(profile), "chen-greedy")
    assert set(length_refusals(profile, ["chen-greedy", "sequential"])) == {"chen-greedy"}
    front = chain_front(profile, ["chen-greedy", "sequential"])
    assert [name for name, _ in front.left_out] == ["chen-greedy"]
    assert {p.strategy for p in front.points} == {"sequential"}
    with pytest.raises(RematError, match="chen-greedy"):
        chain_front(profile, ["chen-greedy"])


@pytest.mark.slow
def test_a_100k_stage_chain_solves_and_simulates_in_bounded_work():
    """recompute-all refuses at once (its schedule would be 5 billion ops); the segment strategies
    and store-all's schedule are built and simulated (O(n) ops)."""
    profile = uniform_chain(100_000)
    with pytest.raises(RematError, match="more than the 20000000 a schedule may hold"):
        solve(profile, store_all_peak(profile), "recompute-all")
    result = simulate(profile, store_all_ops(profile), timeline=False)
    assert result.peak_memory == store_all_peak(profile)
    for name in ("chen-sqrt", "sequential"):
        schedule = solve(profile, store_all_peak(profile) // 4, name)
        assert schedule.predicted.peak_memory <= store_all_peak(profile) // 4
        assert len(schedule.ops) < 4 * profile.length
