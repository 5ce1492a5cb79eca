"""The ``optimal`` front right at both ends (docs/strategies.md): an exact minimum budget, a
schedule at every budget from it on, ``solve`` monotone in the budget at default slots, and the
front's staircase at or below every baseline point; plus the table's exact numbers (times near
float32's limit, sizes past int64, decision width)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from remat.schedules import ChainProfile, InfeasibleBudgetError, RematError, Stage, check_schedule
from remat.solver import solve, strategy_names
from remat.solver.chain.dp.table import build_table, slot_size
from remat.solver.chain.optimal import minimum_budget, optimal_front
from remat.solver.chain.store_all import store_all_peak
from remat.solver.pareto.chain import chain_front
from tests.solver.chain.chain_strategies import random_chains
from tests.solver.chain.test_exhaustive import exhaustive, random_chain  # noqa: E402

sizes = st.one_of(st.just(0), st.integers(1, 1000), st.integers(10**6, 10**9))
overheads = st.one_of(st.just(0), st.integers(1, 1000), st.integers(10**6, 10**9))
times = st.floats(0.001, 100.0, allow_nan=False, allow_infinity=False)


def chains(max_length: int = 12):
    return random_chains(sizes, times, overheads, max_length=max_length)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(profile=chains(), low=st.floats(0, 1), high=st.floats(0, 1))
def test_solve_is_monotone_in_the_budget_at_default_slots(profile, low, high):
    least, most = minimum_budget(profile), store_all_peak(profile)
    small = least + int(min(low, high) * (most - least))
    large = least + int(max(low, high) * (most - least))
    first = solve(profile, small, "optimal")
    second = solve(profile, large, "optimal")
    check_schedule(profile, first)
    check_schedule(profile, second)
    assert second.predicted.compute_ms <= first.predicted.compute_ms


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(profile=chains())
def test_stated_minimum_is_exact_and_solvable(profile):
    least = minimum_budget(profile)
    schedule = solve(profile, least, "optimal")
    assert schedule.predicted.peak_memory == least
    assume(least > 0)
    with pytest.raises(InfeasibleBudgetError) as caught:
        solve(profile, least - 1, "optimal")
    assert caught.value.min_budget == least
    assert "exact" in str(caught.value)


def test_minimum_equals_the_exhaustive_persistent_minimum():
    """The smallest budget at which the exhaustive persistent search finds a schedule."""
    rng = random.Random(3)
    for _ in range(25):
        profile = random_chain(rng, rng.randint(1, 5), nograd=rng.random() < 0.5)
        least = minimum_budget(profile)
        assert exhaustive(profile, least, persistent=True) is not None
        assert least == profile.input_size or exhaustive(profile, least - 1, persistent=True) is None


def test_minimum_is_at_most_every_baseline_minimum():
    rng = random.Random(8)
    for _ in range(10):
        profile = random_chain(rng, rng.randint(2, 30), unit=rng.choice([1, 7, 1000]), nograd=True)
        least = minimum_budget(profile)
        for name in strategy_names("chain"):
            try:
                solve(profile, 0, name)
            except InfeasibleBudgetError as error:
                assert error.min_budget is None or least <= error.min_budget, name


def _kernel_chain(n: int, seed: int) -> ChainProfile:
    """tests/solver/chain/test_optimal_kernel.py's generator: arbitrary byte sizes, some big stages."""
    from tests.solver.chain.test_optimal_kernel import random_chain as kernel_chain

    return kernel_chain(n, seed, 1)


@pytest.mark.parametrize("seed", [0, 1])
def test_front_dominates_every_baseline_point(seed):
    """Every baseline point of ``chain_front`` has an optimal point with no more memory and no
    more time, and the front reaches the least memory of all."""
    profile = _kernel_chain(60, seed)
    waited = []  # the CLI's hook (it imports matplotlib there): called once, after the sweeps
    front = chain_front(profile, strategy_names("chain"), while_waiting=lambda: waited.append(1))
    assert waited == [1]
    optimal = [p for p in front.points if p.strategy == "optimal"]
    others = [p for p in front.points if p.strategy != "optimal"]
    assert len(others) > 20
    assert min(p.peak_memory for p in optimal) <= min(p.peak_memory for p in others)
    for point in others:
        assert any(
            o.peak_memory <= point.peak_memory and o.compute_ms <= point.compute_ms * (1 + 1e-9) for o in optimal
        ), point


def test_front_points_are_what_solve_returns():
    profile = _kernel_chain(40, 2)
    for point in optimal_front(profile)[::7]:
        schedule = solve(profile, point.peak_memory, "optimal")
        assert schedule.predicted.peak_memory <= point.peak_memory
        assert schedule.predicted.compute_ms <= point.compute_ms * (1 + 1e-9)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(profile=chains(20), fractions=st.lists(st.floats(0, 1), min_size=2, max_size=6))
def test_solve_is_the_best_of_the_front_and_its_own_table(profile, fractions):
    """At every budget, no slower than the budget's own 500-level table (filled here directly) and
    than the front's point within it; over calls at rising budgets, never slower than before."""
    least, most = minimum_budget(profile), store_all_peak(profile)
    previous = math.inf
    for fraction in sorted(fractions):
        budget = least + int(fraction * (most - least))
        schedule = solve(profile, budget, "optimal")
        check_schedule(profile, schedule)
        got = schedule.predicted.compute_ms
        free = budget - profile.input_size
        slot = slot_size(free, 500)
        own = build_table(profile, slot, min(500, free // slot)).top
        assert got <= float(np.min(own)) * (1 + 1e-6)  # the table's float32 sums against float64
        within = [p.compute_ms for p in optimal_front(profile) if p.peak_memory <= budget]
        assert got <= min(within) * (1 + 1e-9)
        assert got <= previous
        previous = got


def test_a_budget_between_two_tables_is_resolved_by_its_own_table():
    """Just above the front's second table (an eighth of the store-all memory), the front alone
    sees the budget in the first table's coarse slots; solve's own table does better here."""
    profile = _kernel_chain(60, 5)
    free = (store_all_peak(profile) - profile.input_size) // 8
    budget = profile.input_size + free + free // 2
    within = [p.compute_ms for p in optimal_front(profile) if p.peak_memory <= budget]
    schedule = solve(profile, budget, "optimal")
    assert schedule.predicted.compute_ms < min(within) * (1 - 1e-6)
    assert schedule.extra["table_free_bytes"] == budget - profile.input_size


def _scaled(profile: ChainProfile, factor: float) -> ChainProfile:
    stages = tuple(
        Stage(**{**vars(s), "forward_ms": s.forward_ms * factor, "backward_ms": s.backward_ms * factor})
        for s in profile.stages
    )
    return ChainProfile(profile.name, profile.input_size, stages)


def test_huge_times_give_the_same_front():
    """1e38 ms stages (past float32's range once summed): same peaks, times scaled."""
    base = _kernel_chain(30, 4)
    huge = _scaled(base, 2.0**126)  # a power of two: the exact times scale exactly
    front, big = optimal_front(base), optimal_front(huge)
    assert [p.peak_memory for p in big] == [p.peak_memory for p in front]
    for small_point, big_point in zip(front, big, strict=True):
        assert math.isclose(big_point.compute_ms, small_point.compute_ms * 2.0**126, rel_tol=1e-9)
    assert minimum_budget(huge) == minimum_budget(base)


def test_sizes_past_int64_are_a_clean_error():
    stage = Stage("s", 1.0, 2.0, 2**70, 2**71)
    profile = ChainProfile("huge", 2**70, (stage,) * 4)
    with pytest.raises(RematError, match="2\\*\\*60"):
        solve(profile, 2**73, "optimal")
    with pytest.raises(RematError, match="2\\*\\*60"):
        optimal_front(profile)
    schedule = solve(profile, 2**74, "chen-sqrt")  # the other strategies take any size
    check_schedule(profile, schedule)


@pytest.mark.slow
def test_wide_decisions_fill_the_same_table():
    """int32 decisions (used from 32,767 stages on) give the same table as int16."""
    from remat.solver.chain.dp import table as optimal_table

    profile = _kernel_chain(25, 5)
    free = store_all_peak(profile) - profile.input_size
    narrow = optimal_table.build_table(profile, optimal_table.slot_size(free, 90), 90)
    chosen = optimal_table.decision_dtype
    optimal_table.decision_dtype = lambda n: np.int32
    try:
        wide = optimal_table.build_table(profile, optimal_table.slot_size(free, 90), 90)
    finally:
        optimal_table.decision_dtype = chosen
    assert optimal_table.decision_dtype(40_000) is np.int32
    assert wide.flat.dtype == np.int32 and narrow.flat.dtype == np.int16
    assert np.array_equal(wide.flat, narrow.flat)
    assert np.array_equal(wide.top, narrow.top)
