"""The ``ilp`` strategy: optimal on tiny graphs (checked against brute force), exact memory
accounting (Checkmate's U equals the simulator's peak), clean infeasibility errors, and a
feasible answer under a short time limit."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remat.cli import main
from remat.schedules import ChainProfile, GraphNode, GraphProfile, InfeasibleBudgetError, Stage, simulate
from remat.schedules.simulator import check_schedule
from remat.solver import solve
from remat.solver.deadline import Deadline
from remat.solver.graph.baselines import best_baseline_plan, store_all_plan
from remat.solver.graph.chain_to_graph import chain_to_graph
from remat.solver.graph.ilp.checkmate_search import solve_model
from remat.solver.graph.stages import memory_lower_bound, plan_from_s, plan_memory, plan_ops, plan_peak
from tests.solver.graph._graph_bruteforce import frontier_optimum, general_optimum, random_graph


def _budgets(profile: GraphProfile) -> list[int]:
    low, high = memory_lower_bound(profile), plan_peak(profile, store_all_plan(profile))
    step = 64
    return list(range(low, high + step, step))


def test_hand_graph_optimum():
    """A diamond a -> (b, c) -> d, and e reads a and d; every output is 100 bytes.

    Store-all holds a, b, c, d at once (400 bytes) and costs 9 ms. At 300 bytes, a must be
    dropped before d (computing d holds b, c, d = 300) and recomputed for e: 9 + 5 = 14 ms.
    Below 300 nothing fits (d and its two inputs alone are 300 bytes)."""
    nodes = (
        GraphNode("a", 5.0, 100),
        GraphNode("b", 1.0, 100),
        GraphNode("c", 1.0, 100),
        GraphNode("d", 1.0, 100),
        GraphNode("e", 1.0, 100, True),
    )
    profile = GraphProfile("diamond", nodes, ((0, 1), (0, 2), (1, 3), (2, 3), (0, 4), (3, 4)))
    # 400: store-all, nothing recomputed: 9 ms. 300: drop a after b and c, recompute it for e:
    # compute d with b, c held (300), free b, c, recompute a (d + a = 200), e (300): 9 + 5 ms.
    assert solve(profile, 400, "ilp", time_limit=10).predicted.compute_ms == pytest.approx(9.0)
    tight = solve(profile, 300, "ilp", time_limit=10)
    assert tight.predicted.compute_ms == pytest.approx(14.0)
    assert tight.predicted.peak_memory <= 300
    check_schedule(profile, tight)
    with pytest.raises(InfeasibleBudgetError) as error:
        solve(profile, 299, "ilp", time_limit=10)
    assert error.value.min_budget == 300


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(6))
def test_ilp_equals_brute_force(seed):
    """On random 6-node DAGs at every budget step: the ILP's optimum equals the brute-force
    optimum over frontier-advancing schedules (its search space), is never below the optimum
    over all op orders, and infeasible budgets report the smallest feasible one."""
    profile = random_graph(6, seed)
    smallest = None
    for budget in _budgets(profile):
        expected = frontier_optimum(profile, budget)
        if expected is None:
            with pytest.raises(InfeasibleBudgetError) as error:
                solve(profile, budget, "ilp", time_limit=10)
            assert error.value.min_budget is not None and error.value.min_budget > budget
            continue
        if smallest is None:
            smallest = budget
        schedule = solve(profile, budget, "ilp", time_limit=10)
        check_schedule(profile, schedule)
        assert schedule.predicted.compute_ms == pytest.approx(expected, abs=1e-6)
        assert schedule.extra["status"] == "optimal"
        assert schedule.extra["lower_bound_ms"] <= schedule.predicted.compute_ms + 1e-9
        assert schedule.extra["gap"] < 1e-6
        anywhere = general_optimum(profile, budget)
        assert anywhere is not None and anywhere <= schedule.predicted.compute_ms + 1e-9
    # The error's min_budget is exact: the first feasible budget step (sizes are multiples of 64).
    assert smallest is not None
    if smallest - 64 >= memory_lower_bound(profile):
        with pytest.raises(InfeasibleBudgetError) as error:
            solve(profile, smallest - 1, "ilp", time_limit=10)
        assert error.value.min_budget == smallest


def test_below_node_plus_inputs_bound():
    """Below max(node + its inputs) the error gives that provable lower bound, without solving."""
    profile = random_graph(8, 3)
    floor = memory_lower_bound(profile)
    with pytest.raises(InfeasibleBudgetError) as error:
        solve(profile, floor - 1, "ilp", time_limit=10)
    assert error.value.min_budget == floor


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.integers(4, 9), st.floats(0.0, 1.0))
def test_checkmate_memory_is_the_simulator_peak(seed, n, keep_probability):
    """For any plan (random wish list S, then the cheapest R), Checkmate's U[t, k] equals the
    simulator's memory right after each compute, op by op, so max U is the simulated peak."""
    import random

    profile = random_graph(n, seed)
    rng = random.Random(seed)
    wish = [frozenset(i for i in range(t) if rng.random() < keep_probability) for t in range(n)]
    plan = plan_from_s(profile, wish)
    plan.check(profile)
    ops = plan_ops(profile, plan)
    result = simulate(profile, ops)
    after_compute = [record.memory_after for record in result.timeline if record.op == "compute"]
    memory = plan_memory(profile, plan)
    expected = [memory[(t, k)] for t in range(n) for k in sorted(plan.R[t])]
    assert after_compute == expected
    assert result.peak_memory == plan_peak(profile, plan)
    assert result.compute_ms == pytest.approx(plan.cost_ms(profile))


@pytest.mark.parametrize("seed", range(3))
def test_solver_memory_variables_match_simulator(seed):
    """The solver's own U values (not recomputed) equal the simulator's memory after each compute,
    and its FREE values are exactly where the decoded schedule frees."""
    profile = random_graph(9, seed)
    budget = (memory_lower_bound(profile) + plan_peak(profile, store_all_plan(profile))) // 2
    result = solve_model(profile, budget, time_limit=10, workers=1)
    if result.plan is None:
        assert result.status == "infeasible"
        return
    ops = plan_ops(profile, result.plan)
    timeline = simulate(profile, ops).timeline
    after_compute = [record.memory_after for record in timeline if record.op == "compute"]
    assert after_compute == [result.memory[(t, k)] for t in range(profile.size) for k in sorted(result.plan.R[t])]
    assert max(result.memory.values()) <= budget
    assert result.free_matches  # the solver's FREE is where the decoded ops free


@pytest.mark.slow
def test_time_limited_solve_returns_a_feasible_schedule():
    """A 40-node graph with a tiny time limit: still a valid schedule no worse than the warm start,
    with a lower bound not above it."""
    import random

    rng = random.Random(5)
    stages = []
    for i in range(30):
        size = rng.randint(1, 8) * 1024
        stages.append(Stage(f"s{i}", rng.uniform(1, 3), rng.uniform(2, 6), size, size))
    profile = chain_to_graph(ChainProfile("chain30", 4096, tuple(stages)))
    budget = int(plan_peak(profile, store_all_plan(profile)) * 0.5)
    # the baselines that always run, whatever the time (the greedy variants may be cut short on a loaded machine)
    warm = best_baseline_plan(profile, budget, Deadline(0.0))
    assert warm is not None
    schedule = solve(profile, budget, "ilp", time_limit=0.5, workers=1)
    check_schedule(profile, schedule)
    assert schedule.predicted.compute_ms <= warm[1].cost_ms(profile) + 1e-9
    assert schedule.extra["status"] in ("optimal", "feasible")
    assert schedule.extra["lower_bound_ms"] <= schedule.predicted.compute_ms + 1e-9
    assert 0.0 <= schedule.extra["gap"] <= 1.0


@pytest.mark.slow
def test_cli_solve_ilp(tmp_path, capsys):
    stages = tuple(Stage(f"s{i}", 1.0 + i % 2, 2.0, 64 * (1 + i % 3), 64 * (1 + i % 3)) for i in range(6))
    profile = chain_to_graph(ChainProfile("c6", 64, stages))
    path = tmp_path / "graph.json"
    path.write_text(json.dumps(profile.to_dict()))
    out = tmp_path / "schedule.json"
    assert main(["solve", str(path), "--strategy", "ilp", "--budget", "70%", "--time-limit", "5", "-o", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["strategy"] == "ilp" and "lower_bound_ms" in data and "gap" in data
    capsys.readouterr()
    assert main(["solve", str(path), "--strategy", "ilp", "--budget", "1", "--time-limit", "5"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("remat: error: strategy 'ilp' cannot fit") and "\n" not in err
