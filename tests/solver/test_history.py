"""A solve's answer depends on its (profile, budget, strategy, options) alone, never on what the
process solved before (issue 44): the caches keep work, not answers."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remat.cache import clear_caches
from remat.schedules import ChainProfile, InfeasibleBudgetError, Schedule
from remat.solver import solve
from remat.solver.chain.optimal import minimum_budget
from remat.solver.chain.store_all import store_all_peak
from tests.solver.chain.test_exhaustive import random_chain

# (seed, stages, unit): a random chain of small integer sizes; few slots make coarse tables, where
# what a budget's own table finds differs from budget to budget
chains = st.builds(
    lambda seed, n, unit: random_chain(random.Random(seed), n, unit=unit),
    st.integers(0, 2**32),
    st.integers(4, 16),
    st.sampled_from([1, 7, 1000]),
)
shares = st.floats(0, 1)
slots = st.sampled_from([2, 3, 4, 6, 8, 32])
strategies = st.sampled_from(["optimal"] * 6 + ["chen-greedy", "revolve", "sequential"])
# an earlier solve: of the same profile (mostly) or the other one, at a share, by a strategy, with the
# same slots (None, mostly) or others
solves = st.tuples(st.sampled_from([True] * 4 + [False]), shares, strategies, st.sampled_from([None] * 4) | slots)


def _solve(profile: ChainProfile, share: float, strategy: str, count: int) -> Schedule | None:
    least, most = minimum_budget(profile), store_all_peak(profile)
    options = {"slots": count} if strategy == "optimal" else {}
    try:
        return solve(profile, least + int(share * (most - least)), strategy, **options)
    except InfeasibleBudgetError:
        return None


@pytest.mark.slow
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    profile=chains,
    share=shares,
    count=slots,
    other=chains,
    earlier=st.lists(solves, min_size=4, max_size=10),
)
def test_a_solve_after_any_other_solves_is_the_fresh_solve(profile, share, count, other, earlier):
    """The same (profile, budget, slots) solved in a fresh process state and again after solves of
    this profile and another, at other budgets, slots and strategies: the same schedule, op for op."""
    clear_caches()
    fresh = _solve(profile, share, "optimal", count)
    for same, other_share, strategy, other_count in earlier:
        _solve(profile if same else other, other_share, strategy, count if other_count is None else other_count)
    assert _solve(profile, share, "optimal", count) == fresh


def test_a_solve_after_one_at_a_larger_budget_is_the_fresh_solve():
    """The case hypothesis found first: 3 slots over a 6-stage chain, where a larger budget's own
    table finds a schedule that peaks within the half budget, faster than the half budget's own."""
    profile = random_chain(random.Random(0), 6, unit=1)
    clear_caches()
    fresh = _solve(profile, 0.5, "optimal", 3)
    _solve(profile, 0.6875, "optimal", 3)
    assert _solve(profile, 0.5, "optimal", 3) == fresh
