"""The blocked DP of long chains (remat.solver.chain.dp.blocked) against the flat DP on small random
chains where both run: its schedules are valid and within the budget, never faster than the flat
DP's exact optimum (the proven direction of its bound), equal to the flat DP at blocks of one
stage, and its least memory is exact for its family."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from remat.schedules import InfeasibleBudgetError, simulate
from remat.solver.chain import optimal
from remat.solver.chain.dp import blocked, single
from remat.solver.chain.dp.cache import CACHE
from remat.solver.chain.dp.table import build_table, slot_size
from remat.solver.chain.store_all import store_all_peak
from tests.solver.chain.chain_strategies import random_chains

small = st.integers(0, 60)
times = st.floats(0.01, 10.0, allow_nan=False, allow_infinity=False)
chains = random_chains(small, times, st.one_of(st.just(0), st.integers(1, 80)), max_length=16)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.slow
@SETTINGS
@given(chains, st.integers(1, 6), st.floats(0.0, 1.0))
def test_schedule_valid_within_budget_and_never_beats_the_exact_flat_optimum(profile, block, fraction):
    low = blocked.least_budget(profile, block)
    high = store_all_peak(profile)
    assume(low < high)
    budget = int(low + fraction * (high - low))
    schedule = blocked.solve(profile, budget, 40, block)
    result = simulate(profile, schedule.ops, timeline=False)  # raises on an invalid schedule
    assert result.peak_memory <= budget
    assert math.isclose(result.compute_ms, schedule.predicted.compute_ms, rel_tol=1e-9)
    # one-byte slots: the flat table is the exact persistent optimum at this budget
    exact = build_table(profile, 1, budget - profile.input_size).top
    assert exact[-1] <= result.compute_ms * (1 + 1e-5)  # the flat table sums in float32


@SETTINGS
@given(chains, st.integers(2, 6), st.integers(4, 60), st.floats(0.05, 1.0))
def test_flat_table_at_most_blocked_at_every_level_and_equal_at_blocks_of_one(profile, block, levels, fraction):
    free = max(1, int(fraction * (store_all_peak(profile) - profile.input_size)))
    slot = slot_size(free, levels)
    flat = build_table(profile, slot, levels).top
    coarse = blocked.build(profile, slot, levels, block).top
    assert np.all(flat <= coarse * (1 + 1e-5))  # the flat table sums in float32
    ones = blocked.build(profile, slot, levels, 1).top
    assert np.array_equal(np.isinf(flat), np.isinf(ones))
    finite = np.isfinite(flat)
    assert np.allclose(flat[finite], ones[finite], rtol=1e-5)


@SETTINGS
@given(chains, st.integers(1, 6), st.integers(4, 40))
def test_every_level_reads_back_a_schedule_of_its_value_within_its_memory(profile, block, levels):
    free = max(1, store_all_peak(profile) - profile.input_size)
    table = blocked.build(profile, slot_size(free, levels), levels, block)
    for k in range(levels + 1):
        if math.isfinite(table.top[k]):
            kinds, indices = blocked._ops(profile, table, k)
            peak, compute, _ = blocked._costs(profile, kinds, indices)
            assert peak <= profile.input_size + k * table.arrays.slot
            assert math.isclose(compute, table.top[k], rel_tol=1e-9, abs_tol=1e-9)


@SETTINGS
@given(chains, st.integers(1, 6))
def test_least_memory_exact_for_the_family_and_at_least_the_flat_minimum(profile, block):
    CACHE.clear()
    low = blocked.least_budget(profile, block)
    assert low >= single.minimum_budget(profile)
    if block == 1:
        assert low == single.minimum_budget(profile)
    schedule = blocked.solve(profile, low, 40, block)
    assert simulate(profile, schedule.ops, timeline=False).peak_memory <= low
    if low < store_all_peak(profile):
        with pytest.raises(InfeasibleBudgetError):
            blocked.solve(profile, low - 1, 40, block)


def test_optimal_sends_chains_above_the_flat_limit_to_the_blocked_dp_and_says_so(monkeypatch):
    from tests.solver.chain.test_optimal_kernel import random_chain

    profile = random_chain(40, 3, 1)
    monkeypatch.setattr(blocked, "FLAT_LIMIT", 20)
    budget = (optimal.minimum_budget(profile) + store_all_peak(profile)) // 2
    schedule = optimal.solve(profile, budget)
    assert schedule.extra["blocks"]["stages_per_block"] == blocked.block_size(40)
    assert "blocked family" in schedule.extra["claim"]
    assert simulate(profile, schedule.ops, timeline=False).peak_memory <= budget
    front = optimal.optimal_front(profile)
    assert min(p.peak_memory for p in front) == optimal.minimum_budget(profile)


def test_too_long_a_chain_is_refused_in_one_line(monkeypatch):
    from remat.schedules import RematError
    from tests.solver.chain.test_optimal_kernel import random_chain

    profile = random_chain(30, 1, 1)
    monkeypatch.setattr(blocked, "FLAT_LIMIT", 10)
    monkeypatch.setattr(blocked, "MAX_STAGES", 20)
    with pytest.raises(RematError, match="exceed the blocked DP's limit of 20"):
        optimal.solve(profile, store_all_peak(profile) // 2)
