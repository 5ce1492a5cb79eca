"""The ``ilp`` strategy's warm-start hook (``warm_starts`` / ``ilp.WARM_STARTS``) and its HiGHS ->
CP-SAT hand-off: a provider's plan within the budget becomes the hint (so the answer is never
worse than it), one over the budget is ignored, an invalid one is a bug said plainly, and HiGHS
runs next to Moccasin's search, then Checkmate's CP-SAT searches from the best plan."""

from __future__ import annotations

import random

import pytest

import remat.solver.graph.ilp as ilp
from remat.schedules import ChainProfile, Stage
from remat.schedules.simulator import check_schedule
from remat.solver import solve
from remat.solver.common import SolverBug
from remat.solver.deadline import Deadline
from remat.solver.graph.baselines import best_baseline_plan, store_all_plan
from remat.solver.graph.chain_to_graph import chain_to_graph
from remat.solver.graph.stages import StagePlan, plan_from_ops, plan_ops, plan_peak


def _chain_graph(stages: int = 20, seed: int = 5):
    rng = random.Random(seed)
    chain = []
    for i in range(stages):
        size = rng.randint(1, 8) * 1024
        chain.append(Stage(f"s{i}", rng.uniform(1, 3), rng.uniform(2, 6), size, size))
    profile = chain_to_graph(ChainProfile(f"chain{stages}", 4096, tuple(chain)))
    return profile, int(plan_peak(profile, store_all_plan(profile)) * 0.5)


@pytest.mark.slow
def test_a_provided_plan_is_the_hint_and_the_answer_is_never_worse():
    profile, budget = _chain_graph()
    best = solve(profile, budget, "ilp", time_limit=20, workers=2)  # it ends once proven
    prior = plan_from_ops(profile, best.ops)
    assert prior is not None
    baseline = best_baseline_plan(profile, budget)
    assert prior.cost_ms(profile) < baseline[1].cost_ms(profile)  # so the provider's plan must win the hint
    calls = []

    def provider(graph, bytes_, deadline):
        calls.append((graph, bytes_, deadline))
        return prior

    schedule = ilp.solve(profile, budget, time_limit=0.5, workers=1, warm_starts=[("prior", provider)])
    check_schedule(profile, schedule)
    assert len(calls) == 1 and calls[0][0] is profile and calls[0][1] == budget
    assert isinstance(calls[0][2], Deadline) and calls[0][2].limit <= 0.5
    assert schedule.extra["warm_start"] == "prior"
    assert schedule.predicted.compute_ms <= prior.cost_ms(profile) + 1e-9
    assert "warm_start prior" in schedule.extra["phases_seconds"]


@pytest.mark.slow
def test_the_module_list_is_the_default(monkeypatch):
    """The coordinator adds the hierarchical solver to ``ilp.WARM_STARTS``: the default reads it."""
    profile, budget = _chain_graph()
    seen = []
    monkeypatch.setattr(ilp, "WARM_STARTS", (("none", lambda g, b, d: seen.append(b)),))
    ilp.solve(profile, budget, time_limit=2, workers=1)
    assert seen == [budget]
    seen.clear()
    ilp.solve(profile, budget, time_limit=2, workers=1, warm_starts=())
    assert seen == []


@pytest.mark.slow
def test_a_plan_over_the_budget_is_ignored_and_an_invalid_one_is_a_bug():
    profile, budget = _chain_graph()
    over = store_all_plan(profile)
    assert plan_peak(profile, over) > budget
    schedule = ilp.solve(profile, budget, time_limit=1, workers=1, warm_starts=[("over", lambda g, b, d: over)])
    check_schedule(profile, schedule)
    assert schedule.extra["warm_start"] != "over" and schedule.predicted.peak_memory <= budget
    broken = StagePlan(over.R[:-1], over.S[:-1])
    with pytest.raises(SolverBug, match="warm start 'broken' returned an invalid plan"):
        ilp.solve(profile, budget, time_limit=1, workers=1, warm_starts=[("broken", lambda g, b, d: broken)])


@pytest.mark.slow
def test_moccasin_searches_while_highs_runs_then_cp_sat_from_the_best_plan():
    profile, budget = _chain_graph(30, seed=5)
    schedule = ilp.solve(profile, budget, time_limit=10, workers=2)
    check_schedule(profile, schedule)
    phases = schedule.extra["phases_seconds"]
    assert {"cp_sat_build", "moccasin_during_highs", "highs"} <= set(phases)
    # CP-SAT searched after HiGHS, unless HiGHS proved the optimum or a loaded machine left it no
    # time (then it says so)
    optimal = schedule.extra["status"] == "optimal"
    assert "cp_sat" in phases or optimal or "ran out" in schedule.extra.get("note", "")
    assert schedule.extra["lower_bound_ms"] <= schedule.predicted.compute_ms + 1e-9


def test_background_workers_leave_a_core_for_the_lp(monkeypatch):
    monkeypatch.setattr(ilp.os, "cpu_count", lambda: 2)
    assert ilp.background_workers(8) == 1
    monkeypatch.setattr(ilp.os, "cpu_count", lambda: 16)
    assert ilp.background_workers(8) == 8 and ilp.background_workers(4) == 4
    monkeypatch.setattr(ilp.os, "cpu_count", lambda: 1)
    assert ilp.background_workers(8) == 1


def test_plan_from_ops_reads_back_the_plan_with_its_frees():
    """plan_ops then plan_from_ops is the identity: S[t] is what is held when stage t starts,
    after the frees that end stage t-1 (not before them), so the peak is unchanged."""
    profile, budget = _chain_graph(12, seed=7)
    plan = best_baseline_plan(profile, budget)[1]
    again = plan_from_ops(profile, plan_ops(profile, plan))
    assert again == plan and plan_peak(profile, again) == plan_peak(profile, plan)


@pytest.mark.slow
def test_moccasin_beside_highs_wins_when_faster(monkeypatch):
    """With Checkmate's searches out of the way, the schedule Moccasin found beside HiGHS is the
    answer when it beats the warm start; it is simulator-checked and its bound is the HiGHS-side one."""
    import time

    from remat.solver.deadline import TimeUp
    from remat.solver.graph.ilp.highs_search import BranchAndCut

    profile, budget = _chain_graph()
    baseline = best_baseline_plan(profile, budget)

    def slow_highs(model, start, bytes_, deadline, *rest):
        time.sleep(min(4.0, deadline.left()))  # Moccasin searches meanwhile
        return BranchAndCut("killed", None, None, 4.0, "it ran past its time")

    def no_search(*args, **kwargs):
        raise TimeUp("the cp-sat search")

    monkeypatch.setattr(ilp, "branch_and_cut", slow_highs)
    monkeypatch.setattr(ilp, "search", no_search)
    # no providers: the hierarchical plan is often as good as Moccasin's on this chain
    schedule = ilp.solve(profile, budget, time_limit=20, workers=2, warm_starts=())
    check_schedule(profile, schedule)
    assert schedule.extra["source"] == "moccasin search beside HiGHS"
    assert schedule.extra["highs"] == "killed: it ran past its time"
    assert schedule.predicted.compute_ms < baseline[1].cost_ms(profile)
    assert profile.store_all_compute_ms <= schedule.extra["lower_bound_ms"] <= schedule.predicted.compute_ms


@pytest.mark.slow
def test_default_providers_start_from_the_hierarchical_schedule(monkeypatch):
    """With no HiGHS and no CP-SAT search, the default warm starts alone decide: the answer is never
    slower than the hierarchical solver's own schedule at that budget."""
    from remat.solver import solve
    from remat.solver.deadline import TimeUp
    from remat.solver.graph.ilp.highs_search import BranchAndCut

    profile, budget = _chain_graph()

    def no_highs(model, start, bytes_, deadline, *rest):
        return BranchAndCut("not run", None, None, 0.0, "no time was left for it")

    def no_search(*args, **kwargs):
        raise TimeUp("the cp-sat search")

    monkeypatch.setattr(ilp, "branch_and_cut", no_highs)
    monkeypatch.setattr(ilp, "search", no_search)
    hierarchical = solve(profile, budget, "hierarchical")
    schedule = ilp.solve(profile, budget, time_limit=20, workers=1)
    check_schedule(profile, schedule)
    assert schedule.predicted.compute_ms <= hierarchical.predicted.compute_ms * (1 + 1e-12)
