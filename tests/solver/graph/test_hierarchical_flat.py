"""The local search on the flat R/S plan of the block schedule (remat/solver/graph/hierarchical/flat.py):
never slower than its start, always a valid plan within the budget, never faster than the true
optimum (brute force on tiny graphs), bounded by its work cap and the deadline, and on U-Net at
half of store-all (where the block DP cannot drop a skip around the decoder's peak) faster."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remat.schedules import load_profile, simulate
from remat.solver import solve
from remat.solver.deadline import Deadline
from remat.solver.graph.baselines import store_all_plan
from remat.solver.graph.hierarchical import flat as hierarchical_flat
from remat.solver.graph.hierarchical.flat import flat_search
from remat.solver.graph.stages import plan_from_ops, plan_from_policy, plan_ops, plan_peak
from tests.conftest import EXAMPLES
from tests.solver.graph._graph_bruteforce import frontier_optimum, random_graph
from tests.solver.graph.test_hierarchical_refine import skip_graph


def _lean_plan(profile):
    """The plan that keeps nothing it can recompute: the most recomputation, the least held."""
    return plan_from_policy(profile, lambda i, t, computed: False)


def _checked(profile, budget, start):
    found = flat_search(profile, budget, start)
    found.check(profile)
    assert plan_peak(profile, found) <= budget
    assert found.cost_ms(profile) <= start.cost_ms(profile) + 1e-9
    result = simulate(profile, plan_ops(profile, found), timeline=False)
    assert result.peak_memory <= budget and result.compute_ms == pytest.approx(found.cost_ms(profile))
    return found


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(5, 7), fraction=st.floats(0.0, 1.0))
def test_never_slower_than_its_start_nor_faster_than_the_optimum(seed, n, fraction):
    profile = random_graph(n, seed)
    start = _lean_plan(profile)
    low, high = plan_peak(profile, start), plan_peak(profile, store_all_plan(profile))
    budget = int(low + fraction * max(0, high - low))
    found = _checked(profile, budget, start)
    optimum = frontier_optimum(profile, budget)
    assert optimum is not None and found.cost_ms(profile) >= optimum - 1e-9


@pytest.mark.slow
@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), forward=st.integers(8, 14), fraction=st.floats(0.1, 0.9))
def test_from_the_leanest_plan_of_a_skip_graph_it_keeps_what_fits(seed, forward, fraction):
    """Autograd-shaped graphs with long skips: from the plan that recomputes everything, the
    search is valid and, whenever some stage recomputes and one kept node would fit, faster."""
    profile = skip_graph(seed, forward)
    start = _lean_plan(profile)
    low, high = plan_peak(profile, start), plan_peak(profile, store_all_plan(profile))
    budget = int(low + fraction * (high - low))
    found = _checked(profile, budget, start)
    if budget >= high:
        assert found.cost_ms(profile) == pytest.approx(profile.store_all_compute_ms)


@pytest.mark.slow
def test_unet_at_half_of_store_all_gets_faster_than_the_block_schedule(monkeypatch):
    profile = load_profile(EXAMPLES / "graph_unet.json")
    budget = plan_peak(profile, store_all_plan(profile)) // 2
    monkeypatch.setattr(hierarchical_flat, "MAX_FLAT_WORK", 0)
    blocks_only = solve(profile, budget, "hierarchical")
    monkeypatch.undo()
    start = plan_from_ops(profile, blocks_only.ops)
    assert start is not None
    found = _checked(profile, budget, start)
    assert found.cost_ms(profile) < 0.99 * blocks_only.predicted.compute_ms
    schedule = solve(profile, budget, "hierarchical")
    assert schedule.extra["source"].endswith("flat search")
    assert schedule.predicted.compute_ms == pytest.approx(found.cost_ms(profile))


@pytest.mark.slow
def test_no_work_or_no_time_returns_the_start(monkeypatch):
    profile = load_profile(EXAMPLES / "graph_unet.json")
    start = _lean_plan(profile)
    budget = plan_peak(profile, store_all_plan(profile))
    assert flat_search(profile, budget, start).cost_ms(profile) < start.cost_ms(profile)  # it has work to do
    assert flat_search(profile, budget, start, Deadline(-1.0)) is start
    monkeypatch.setattr(hierarchical_flat, "MAX_FLAT_WORK", 0)
    assert flat_search(profile, budget, start) is start


@pytest.mark.slow
def test_cli_says_which_steps_found_the_schedule(capsys):
    from remat.cli import main

    assert main(["solve", str(EXAMPLES / "graph_unet.json"), "--budget", "50%", "--strategy", "hierarchical"]) == 0
    found = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("found by"))
    steps = "the block DP, then its search over large blocks' kept sets, then the flat search across blocks"
    assert found.endswith(steps)
