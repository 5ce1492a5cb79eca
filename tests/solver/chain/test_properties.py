"""Property tests: every registered chain strategy on random chains at random budgets.

A strategy either returns a schedule the simulator accepts (valid, claimed cost == simulated,
peak within the budget) or raises :class:`InfeasibleBudgetError`; when that error states a
smallest budget, solving again at that budget must succeed. Strategies are taken from the
registry, so ones added later are covered too.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from remat.schedules import ChainProfile, InfeasibleBudgetError, Stage, check_schedule, simulate
from remat.solver import solve, strategy_names
from remat.solver.chain.store_all import store_all_peak

# These strategies state their exact minimum (optimal: over persistent schedules): one byte less must fail.
EXACT_MINIMUM = {"store-all", "recompute-all", "sequential", "chen-sqrt", "chen-greedy", "revolve", "optimal"}

sizes = st.one_of(st.just(0), st.integers(1, 1000), st.integers(10**6, 10**9))
overheads = st.one_of(st.just(0), st.integers(1, 1000), st.integers(10**8, 10**10))
times = st.one_of(st.just(0.0), st.floats(0.001, 100.0, allow_nan=False, allow_infinity=False))


@st.composite
def stages(draw) -> Stage:
    """Random stages; some hand part of their input on unchanged (``handed_on``, not in
    ``saved_size``) and some have a backward that frees before its peak (a negative overhead,
    down to freeing all of abar[i+1] and g[i+1]): docs/model.md."""
    output = draw(sizes)
    handed_on = draw(st.one_of(st.just(0), st.integers(0, output)))
    saved = output - handed_on + draw(sizes)
    backward = draw(st.one_of(overheads, st.integers(-(saved + output), 0)))
    return Stage(
        name="s",
        forward_ms=draw(times),
        backward_ms=draw(times),
        output_size=output,
        saved_size=saved,
        forward_overhead=draw(overheads),
        backward_overhead=backward,
        handed_on=handed_on,
    )


@st.composite
def chains(draw, max_length: int = 10) -> ChainProfile:
    return ChainProfile(
        name="random",
        input_size=draw(sizes),
        stages=tuple(draw(st.lists(stages(), min_size=1, max_size=max_length))),
    )


def _check(profile, budget, name, **options):
    try:
        schedule = solve(profile, budget, name, **options)
    except InfeasibleBudgetError as error:
        assert error.strategy == name
        if error.min_budget is None:
            return None
        assert error.min_budget > budget
        retry = solve(profile, error.min_budget, name, **options)
        check_schedule(profile, retry)
        if name in EXACT_MINIMUM:
            assert retry.predicted.peak_memory == error.min_budget
        return error
    assert schedule.strategy == name
    assert schedule.budget == budget
    result = check_schedule(profile, schedule)
    assert result.peak_memory <= budget
    assert result.compute_ms >= profile.store_all_compute_ms - 1e-6 * max(1.0, profile.store_all_compute_ms)
    return schedule


@pytest.mark.parametrize("name", strategy_names("chain"))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(profile=chains(), fraction=st.floats(0.0, 1.3))
def test_every_chain_strategy_fits_or_says_why(name, profile, fraction):
    budget = int(store_all_peak(profile) * fraction)
    _check(profile, budget, name)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXACT_MINIMUM & set(strategy_names("chain"))))
@settings(max_examples=30, deadline=None)
@given(profile=chains(max_length=8))
def test_stated_minimum_is_the_minimum(name, profile):
    """At the stated minimum the strategy succeeds (in _check); one byte less it must refuse."""
    error = _check(profile, 0, name)
    if isinstance(error, InfeasibleBudgetError):
        assume(error.min_budget > 0)
        with pytest.raises(InfeasibleBudgetError):
            solve(profile, error.min_budget - 1, name)


@settings(max_examples=40, deadline=None)
@given(profile=chains(), data=st.data())
def test_forced_options(profile, data):
    n = profile.length
    k = data.draw(st.integers(1, n))
    c = data.draw(st.integers(1, n + 1))
    budget = int(store_all_peak(profile) * data.draw(st.floats(0.0, 1.3)))
    schedule = _check(profile, budget, "sequential", segments=k)
    if schedule is not None and not isinstance(schedule, InfeasibleBudgetError):
        assert schedule.extra["segments"] == k
    schedule = _check(profile, budget, "revolve", checkpoints=c)
    if schedule is not None and not isinstance(schedule, InfeasibleBudgetError):
        assert schedule.extra["checkpoints"] == c


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(profile=chains())
def test_store_all_is_fastest_and_recompute_all_has_most_forwards(profile):
    fast = solve(profile, 2**62, "store-all")
    assert fast.predicted.recompute_ms == 0
    for name in strategy_names("chain"):
        try:
            other = solve(profile, 2**62, name)
        except InfeasibleBudgetError:
            continue
        assert other.predicted.compute_ms >= fast.predicted.compute_ms - 1e-9 * max(1.0, fast.predicted.compute_ms)
    slow = solve(profile, 2**62, "recompute-all")
    forwards = sum(1 for name, _ in slow.ops if name != "B")
    assert forwards == profile.length * (profile.length + 1) // 2
    assert simulate(profile, slow.ops).peak_memory == slow.predicted.peak_memory
