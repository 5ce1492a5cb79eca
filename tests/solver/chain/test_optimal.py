"""The ``optimal`` chain DP: valid schedules, claims equal to the simulator, the front, infeasible
budgets, long chains, and revolve's binomial optimum on identical stages."""

from __future__ import annotations

import inspect
import math
import random
import sys
from itertools import pairwise
from math import comb

import numpy as np
import pytest

from remat.schedules import ChainProfile, InfeasibleBudgetError, RematError, Stage, check_schedule, simulate
from remat.solver import solve, strategy_names
from remat.solver.chain.optimal import minimum_budget, optimal_front, plan, table_for
from remat.solver.chain.store_all import store_all_peak


def hetero_chain(n: int, seed: int) -> ChainProfile:
    """Sizes that are not multiples of anything, with transients: rounding bites."""
    rng = random.Random(seed)
    stages = []
    for i in range(n):
        out = rng.randint(1_000, 90_000)
        stages.append(
            Stage(
                name=f"s{i}",
                forward_ms=rng.uniform(0.2, 3.0),
                backward_ms=rng.uniform(0.4, 6.0),
                output_size=out,
                saved_size=out + rng.randint(0, 200_000),
                forward_overhead=rng.choice([0, rng.randint(0, 50_000)]),
                backward_overhead=rng.choice([0, rng.randint(0, 80_000)]),
            )
        )
    return ChainProfile(name=f"hetero{n}", input_size=rng.randint(1_000, 50_000), stages=tuple(stages))


@pytest.mark.parametrize("seed", range(4))
def test_schedules_are_valid_within_budget_and_claims_match(seed):
    profile = hetero_chain(25, seed)
    peak = store_all_peak(profile)
    low = minimum_budget(profile, slots=200)
    for fraction in (0.0, 0.1, 0.3, 0.6, 0.9):
        budget = int(low + fraction * (peak - low))
        schedule = solve(profile, budget, "optimal", slots=200)
        result = check_schedule(profile, schedule)  # valid, within budget, predicted == simulated
        assert result.peak_memory <= budget
        assert schedule.predicted.compute_ms >= profile.store_all_compute_ms - 1e-9


def test_more_budget_never_costs_more_within_one_table():
    profile = hetero_chain(30, 11)
    table = table_for(profile, store_all_peak(profile) - profile.input_size, 300)
    finite = table.top[np.isfinite(table.top)]
    assert len(finite) > 10
    assert np.all(np.diff(finite) <= 1e-4)


def test_every_level_of_the_table_replays_exactly_in_the_simulator():
    """The DP's model (cost from the recurrence, peak walked in bytes) equals the simulator at every
    level of the table, and the table's stored optimum equals the replayed time."""
    profile = hetero_chain(18, 3)
    free = store_all_peak(profile) - profile.input_size
    table = table_for(profile, free, 120)
    levels = [k for k in range(table.slots + 1) if math.isfinite(table.top[k])]
    assert levels
    for k in levels:
        chosen = plan(profile, table, k)
        result = simulate(profile, chosen.ops, timeline=False)
        assert result.peak_memory == chosen.peak_memory
        assert result.peak_memory <= profile.input_size + k * table.sizes.slot
        assert math.isclose(result.compute_ms, chosen.compute_ms, rel_tol=1e-9)
        assert math.isclose(result.compute_ms, table.top[k], rel_tol=1e-5)


def test_front_is_monotone_and_spans_minimum_to_store_all():
    profile = hetero_chain(40, 5)
    front = optimal_front(profile, slots=300)
    peaks = [p.peak_memory for p in front]
    times = [p.compute_ms for p in front]
    assert peaks == sorted(peaks) and len(set(peaks)) == len(peaks)
    assert all(a > b for a, b in pairwise(times))
    assert front[-1].peak_memory == store_all_peak(profile)
    assert math.isclose(front[-1].compute_ms, profile.store_all_compute_ms)
    assert front[0].peak_memory <= minimum_budget(profile, slots=300)
    # each front point is reachable through solve at its own peak (up to discretization: never slower
    # than the next point to its left would allow, and always within budget)
    for point in front[:: max(1, len(front) // 6)]:
        schedule = solve(profile, point.budget, "optimal", slots=300)
        assert schedule.predicted.peak_memory <= point.budget


def test_infeasible_budget_names_a_budget_that_works():
    profile = hetero_chain(12, 8)
    low = minimum_budget(profile)
    with pytest.raises(InfeasibleBudgetError) as info:
        solve(profile, low // 3, "optimal")
    assert info.value.min_budget == low
    assert str(low) in str(info.value)
    schedule = solve(profile, info.value.min_budget, "optimal")
    assert schedule.predicted.peak_memory <= low


def test_budget_below_the_input_is_infeasible():
    profile = hetero_chain(5, 1)
    with pytest.raises(InfeasibleBudgetError):
        solve(profile, profile.input_size - 1, "optimal")


def test_store_all_budget_gives_store_all():
    profile = hetero_chain(10, 2)
    schedule = solve(profile, store_all_peak(profile) + 10, "optimal")
    assert schedule.predicted.recompute_ms == pytest.approx(0.0, abs=1e-9)
    assert [op for op, _ in schedule.ops].count("F_all") == profile.length


@pytest.mark.parametrize("slots", [0, -3, True, 2.5])
def test_bad_slots_is_a_one_line_error(slots):
    with pytest.raises(RematError, match="slots"):
        solve(hetero_chain(4, 0), 10**9 // 2 + 1, "optimal", slots=slots)


def test_long_chain_reconstruction_needs_no_recursion():
    """Reading a schedule back is iterative: it works under a recursion limit far below the
    chain length (a recursive reader would need one frame per nested segment)."""
    profile = hetero_chain(160, 4)
    table = table_for(profile, store_all_peak(profile) - profile.input_size, 40)
    k = next(k for k in range(table.slots + 1) if math.isfinite(table.top[k]))
    budget = profile.input_size + k * table.sizes.slot
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack()) + 40)
    try:
        chosen = plan(profile, table, k)
    finally:
        sys.setrecursionlimit(old)
    assert minimum_budget(profile) <= simulate(profile, chosen.ops, timeline=False).peak_memory <= budget


# --- identical stages: revolve's binomial optimum -------------------------------------------------
#
# Where the models coincide: every activation is 1 byte and every stage saves H = 100 bytes (its
# output included), no transients, f = 1 ms, b = 0. Keeping a recorded stage (abar, H bytes) is
# then unaffordable except for the single stage being reversed, which is revolve's "taped step";
# each further byte of budget holds one more checkpoint a[j]. With budget = a_0 + H + 2 + c bytes
# (H + 1 for the taped step, its gradient and g[n]; c checkpoints), the DP's recomputation is the
# number of advancing forwards (F_ck, F_n) and must equal Griewank's minimal count
#     t(l, c) = r*l - binom(c + r, c + 1) with binom(c + r - 1, c) < l <= binom(c + r, c)
# (Griewank & Walther 2000, Prop. 1: beta(c, r) = binom(c + r, c) steps reversible with c
# checkpoints and r repetitions).

H = 100


def revolve_forwards(steps: int, checkpoints: int) -> int:
    if steps <= 1:
        return 0
    r = 1
    while comb(checkpoints + r, checkpoints) < steps:
        r += 1
    return r * steps - comb(checkpoints + r, checkpoints + 1)


def identical_chain(n: int) -> ChainProfile:
    stage = Stage(name="step", forward_ms=1.0, backward_ms=0.0, output_size=1, saved_size=H)
    return ChainProfile(name=f"identical{n}", input_size=1, stages=(stage,) * n)


@pytest.mark.parametrize("checkpoints", [1, 2, 3, 5])
def test_identical_stages_match_revolve_binomial(checkpoints):
    for n in (1, 2, 3, 5, 8, 13, 21, 30):
        profile = identical_chain(n)
        budget = 1 + H + 2 + checkpoints
        schedule = solve(profile, budget, "optimal", slots=budget - 1)  # 1-byte slots: exact
        advancing = sum(1 for op, _ in schedule.ops if op in ("F_ck", "F_n"))
        assert schedule.predicted.recompute_ms == pytest.approx(advancing)
        assert advancing == revolve_forwards(n, checkpoints), (n, checkpoints)


def test_identical_stages_equal_the_revolve_strategy_where_models_coincide():
    """The ``revolve`` baseline (binomial schedule in DESIGN.md ops, largest checkpoint count that
    fits) recomputes exactly as much as the DP on the chain above, at every budget tried."""
    if "revolve" not in strategy_names("chain"):
        pytest.skip("revolve strategy not registered on this branch yet")
    for n in (2, 5, 13, 30):
        profile = identical_chain(n)
        for checkpoints in (1, 2, 3, 5):
            budget = 1 + H + 2 + checkpoints
            theirs = solve(profile, budget, "revolve")
            ours = solve(profile, budget, "optimal", slots=budget - 1)
            assert ours.predicted.recompute_ms == pytest.approx(theirs.predicted.recompute_ms), (n, checkpoints)


def test_identical_stages_beat_revolve_when_a_recorded_stage_is_cheap_to_keep():
    """Where the models differ (saved = output: keeping a recorded forward costs no more than a
    checkpoint), the DP keeps recorded stages and is never slower than revolve, strictly faster
    somewhere."""
    if "revolve" not in strategy_names("chain"):
        pytest.skip("revolve strategy not registered on this branch yet")
    stage = Stage(name="step", forward_ms=1.0, backward_ms=2.0, output_size=4, saved_size=4)
    profile = ChainProfile(name="cheap-record", input_size=4, stages=(stage,) * 12)
    strictly = 0
    for budget in range(4 * 4, store_all_peak(profile) + 1, 4):
        try:
            theirs = solve(profile, budget, "revolve")
        except InfeasibleBudgetError:
            continue
        ours = solve(profile, budget, "optimal", slots=budget - 4)
        assert ours.predicted.compute_ms <= theirs.predicted.compute_ms + 1e-9
        strictly += ours.predicted.compute_ms < theirs.predicted.compute_ms - 1e-9
    assert strictly > 0
