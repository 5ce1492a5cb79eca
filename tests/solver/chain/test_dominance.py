"""Dominance: at any budget, ``optimal`` is no slower than any other registered chain strategy that
fits the budget.

Every strategy is looked up with ``strategy_names("chain")``, so baselines added on other branches
are covered once merged. Discretization must not create false failures: the DP rounds sizes up to
whole slots, so a baseline whose schedule fits with a few bytes to spare could beat a DP that lost
those bytes to rounding. Here every size is an integer number of bytes and the DP is run with
1-byte slots (``slots = budget - input_size``), where it is the exact persistent optimum (see
tests/solver/chain/test_exhaustive.py). The baselines (store-all, Chen, sequential segments, revolve,
recompute-all) build persistent schedules: none drops a stored checkpoint before its backward.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remat.schedules import ChainProfile, InfeasibleBudgetError, Stage
from remat.solver import solve, strategy_names
from remat.solver.chain.store_all import store_all_peak


@st.composite
def chains_and_budgets(draw):
    n = draw(st.integers(1, 9))
    stages = []
    for i in range(n):
        out = draw(st.integers(1, 12))
        stages.append(
            Stage(
                name=f"s{i}",
                forward_ms=draw(st.floats(0.1, 5.0, allow_nan=False)),
                backward_ms=draw(st.floats(0.1, 9.0, allow_nan=False)),
                output_size=out,
                saved_size=out + draw(st.integers(0, 25)),
                forward_overhead=draw(st.sampled_from([0, 0, 1, 4])),
                backward_overhead=draw(st.sampled_from([0, 0, 2, 7])),
            )
        )
    profile = ChainProfile(name="hypothesis", input_size=draw(st.integers(1, 10)), stages=tuple(stages))
    peak = store_all_peak(profile)
    budget = draw(st.integers(profile.input_size, peak + 5))
    return profile, budget


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chains_and_budgets())
def test_optimal_dominates_every_chain_strategy(case):
    profile, budget = case
    others = [name for name in strategy_names("chain") if name != "optimal"]
    assert "store-all" in others
    exact = {"slots": max(1, budget - profile.input_size)}
    try:
        ours = solve(profile, budget, "optimal", **exact)
    except InfeasibleBudgetError:
        ours = None
    for name in others:
        try:
            theirs = solve(profile, budget, name)
        except InfeasibleBudgetError:
            continue
        assert theirs.predicted.peak_memory <= budget
        assert ours is not None, f"{name} fits {budget} bytes but optimal found nothing"
        assert ours.predicted.compute_ms <= theirs.predicted.compute_ms + 1e-9, name
        assert ours.predicted.peak_memory <= budget
