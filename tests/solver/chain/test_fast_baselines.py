"""Fast baselines: closed-form segment costs equal the simulator's, the bisecting greedy walk and
the vectorized thresholds equal the plain ones, and a sweep that skips budgets whose schedule is
not new (``Strategy.choose``) returns exactly what solving at every budget returns."""

from __future__ import annotations

import math
from itertools import accumulate

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remat.schedules import ChainProfile, InfeasibleBudgetError
from remat.solver import solve, strategy_names
from remat.solver.chain.checkpoints import chain_checkpoints
from remat.solver.chain.chen_greedy import candidate_thresholds, greedy_starts
from remat.solver.chain.segments import segment_arrays, segment_costs, simulate_segments
from remat.solver.chain.store_all import store_all_peak
from remat.solver.pareto.chain import budget_sweep, sweep_strategy
from tests.solver.chain.chain_strategies import random_chains

sizes = st.one_of(st.just(0), st.integers(1, 1000), st.integers(10**6, 10**9), st.just(2**66))
times = st.floats(0.0, 100.0, allow_nan=False, allow_infinity=False)


def chains(max_length: int = 14):
    return random_chains(sizes, times, max_length=max_length)


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(profile=chains(), data=st.data())
def test_segment_costs_equal_the_simulator(profile, data):
    n = profile.length
    cuts = data.draw(st.sets(st.integers(1, n - 1), max_size=n - 1)) if n > 1 else set()
    starts = (0, *sorted(cuts))
    peak, compute_ms = segment_costs(segment_arrays(profile), starts)
    simulated = simulate_segments(profile, starts)
    assert peak == simulated.peak_memory  # exact, Python ints past int64 included
    assert math.isclose(compute_ms, simulated.compute_ms, rel_tol=1e-12, abs_tol=1e-9)


def _plain_greedy(sizes: list[int], threshold: int) -> tuple[int, ...]:
    starts, accumulated = [0], 0
    for i, size in enumerate(sizes):
        accumulated += size
        if accumulated > threshold and i + 1 < len(sizes):
            starts.append(i + 1)
            accumulated = 0
    return tuple(starts)


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(0, 50), min_size=1, max_size=30), threshold=st.integers(-1, 400))
def test_bisecting_greedy_equals_the_plain_walk(sizes, threshold):
    assert greedy_starts(sizes, threshold) == _plain_greedy(sizes, threshold)


@settings(max_examples=100, deadline=None)
@given(sizes=st.lists(st.integers(0, 10**6), min_size=1, max_size=40))
def test_thresholds_are_every_run_sum(sizes):
    prefix = [0, *accumulate(sizes)]
    sums = sorted({prefix[j] - prefix[i] for i in range(len(sizes)) for j in range(i + 1, len(sizes) + 1)})
    assert candidate_thresholds(sizes) == [-1, *sums]  # below MAX_THRESHOLDS: all of them


def _sweep_every_budget(profile: ChainProfile, name: str, budgets: list[int]) -> list[tuple]:
    points = {}
    for budget in sorted(budgets):
        try:
            schedule = solve(profile, budget, name)
        except InfeasibleBudgetError:
            continue
        p = schedule.predicted
        points.setdefault((p.peak_memory, round(p.compute_ms, 9)), (budget, chain_checkpoints(schedule.ops)))
    return sorted((peak, ms, *rest) for (peak, ms), rest in points.items())


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(profile=chains(max_length=10))
def test_sweep_with_choose_equals_solving_every_budget(profile):
    budgets = budget_sweep(max(1, profile.input_size), store_all_peak(profile), 12)
    for name in strategy_names("chain"):
        if name == "optimal":
            continue
        fast = [
            (p.peak_memory, round(p.compute_ms, 9), p.budget, p.checkpoints)
            for p in sweep_strategy(profile, name, budgets)
        ]
        assert fast == _sweep_every_budget(profile, name, budgets), name


def test_revolve_ops_need_no_recursion():
    """Slot counts in the thousands (a 1000-stage sweep tries c up to 999) under a low recursion limit."""
    import sys

    from remat.solver.chain.revolve import forward_steps, revolve_ops

    old = sys.getrecursionlimit()
    sys.setrecursionlimit(200)
    try:
        ops = revolve_ops(3000, 2999)
    finally:
        sys.setrecursionlimit(old)
    assert [op for op in ops if op[0] == "B"] == [("B", i) for i in reversed(range(3000))]
    assert forward_steps(ops) == 3000 * 1 - 1  # t(l, c) = r*l - C(c+r, r-1) with r = 1: C(3000, 0) = 1
