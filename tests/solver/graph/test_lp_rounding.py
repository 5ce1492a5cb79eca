"""``lp-rounding``: Checkmate's LP relaxation + two-phase rounding, and the graph front."""

from __future__ import annotations

import pytest

from remat.schedules import ChainProfile, InfeasibleBudgetError, Stage
from remat.schedules.simulator import check_schedule
from remat.solver import solve
from remat.solver.graph.baselines import store_all_plan
from remat.solver.graph.chain_to_graph import chain_to_graph
from remat.solver.graph.stages import memory_lower_bound, plan_peak
from remat.solver.pareto.graph import default_budgets, graph_front
from tests.solver.graph._graph_bruteforce import frontier_optimum, random_graph


@pytest.mark.parametrize("seed", range(6))
def test_lp_bound_and_rounded_schedule_bracket_the_optimum(seed):
    """LP value <= optimum (brute force) <= rounded schedule's cost; rounded schedules fit."""
    profile = random_graph(6, seed)
    top = plan_peak(profile, store_all_plan(profile))
    low = memory_lower_bound(profile)
    solved = 0
    for budget in range(low, top + 64, 64):
        optimum = frontier_optimum(profile, budget)
        try:
            schedule = solve(profile, budget, "lp-rounding", time_limit=10)
        except InfeasibleBudgetError as error:
            assert "budget" in str(error)
            continue
        solved += 1
        check_schedule(profile, schedule)
        assert optimum is not None
        assert schedule.extra["lower_bound_ms"] <= optimum + 1e-6
        assert schedule.predicted.compute_ms >= optimum - 1e-9
        assert 0.0 <= schedule.extra["gap"] <= 1.0
    assert solved >= 1  # at least the store-all budget


def test_lp_rounding_on_a_chain_graph_saves_memory():
    stages = tuple(Stage(f"s{i}", 1.0 + i % 3, 2.0, 64 * (1 + i % 4), 64 * (1 + i % 4)) for i in range(12))
    profile = chain_to_graph(ChainProfile("c12", 64, stages))
    top = plan_peak(profile, store_all_plan(profile))
    schedule = solve(profile, int(top * 0.7), "lp-rounding", time_limit=20)
    check_schedule(profile, schedule)
    assert schedule.predicted.peak_memory <= int(top * 0.7)
    assert schedule.extra["lower_bound_ms"] <= schedule.predicted.compute_ms


def test_lp_rounding_below_the_node_bound():
    profile = random_graph(8, 1)
    with pytest.raises(InfeasibleBudgetError) as error:
        solve(profile, memory_lower_bound(profile) - 1, "lp-rounding")
    assert error.value.min_budget == memory_lower_bound(profile)


def test_graph_front_in_a_process_pool():
    """Each point is the strategy's own solve at that budget; ILP points carry a gap and are
    never worse than the baselines at the same budget."""
    profile = random_graph(7, 4)
    budgets = default_budgets(profile, count=4)
    assert budgets[0] == memory_lower_bound(profile) and budgets[-1] == plan_peak(profile, store_all_plan(profile))
    points = graph_front(profile, ["ilp", "chen-greedy"], budgets, time_limit=5, workers=2, progress=False)
    ilp = {p.budget: p for p in points if p.strategy == "ilp"}
    for point in points:
        assert point.peak_memory <= point.budget
        if point.strategy == "chen-greedy" and point.budget in ilp:
            assert ilp[point.budget].compute_ms <= point.compute_ms + 1e-9
    assert ilp and all(p.gap is not None and p.lower_bound_ms <= p.compute_ms + 1e-9 for p in ilp.values())
    for budget, point in ilp.items():
        assert point.compute_ms == pytest.approx(solve(profile, budget, "ilp", time_limit=5).predicted.compute_ms)


def test_graph_front_keeps_failures_and_survives_an_unexpected_exception(monkeypatch):
    import remat.solver.pareto.graph as graph_pareto  # graph_front solves through its own name

    profile = random_graph(7, 3)  # four distinct budgets
    budgets = default_budgets(profile, count=4)
    real = graph_pareto.solve

    def flaky(profile, budget, strategy, **options):
        if strategy == "chen-greedy" and budget == budgets[1]:
            raise ZeroDivisionError("boom")
        return real(profile, budget, strategy, **options)

    monkeypatch.setattr(graph_pareto, "solve", flaky)
    front = graph_front(profile, ["chen-greedy", "store-all"], budgets, time_limit=5, workers=1, progress=False)
    failed = {(f.strategy, f.budget): f for f in front.failed}
    assert failed[("chen-greedy", budgets[1])].message == "ZeroDivisionError: boom"
    assert failed[("chen-greedy", budgets[1])].unexpected
    # store-all fits only the largest budget: the others are kept with their (expected) reason
    assert all(("store-all", b) in failed and not failed[("store-all", b)].unexpected for b in budgets[:-1])
    assert "cannot fit" in failed[("store-all", budgets[0])].message
    solved = {(p.strategy, p.budget) for p in front.points}
    assert ("store-all", budgets[-1]) in solved and ("chen-greedy", budgets[-1]) in solved
    assert len(solved) + len(failed) == 2 * len(budgets)
    assert front.notes == ()  # these strategies leave no notes


@pytest.mark.slow
def test_graph_front_keeps_the_ilp_notes():
    from remat.schedules import load_profile
    from tests.conftest import EXAMPLES

    profile = load_profile(EXAMPLES / "graph_resnet50.json")
    budget = default_budgets(profile, count=3)[1]
    front = graph_front(profile, ["ilp"], [budget], time_limit=1, workers=1, progress=False)
    ((strategy, at, note),) = front.notes
    assert (strategy, at) == ("ilp", budget) and "time limit ran out" in note
