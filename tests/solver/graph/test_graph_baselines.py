"""Graph baselines: store-all, chen-sqrt, chen-greedy (kind "graph")."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remat.schedules import ChainProfile, GraphNode, GraphProfile, InfeasibleBudgetError, Stage, simulate
from remat.schedules.simulator import check_schedule
from remat.solver import get_strategy, solve
from remat.solver.graph.baselines import checkpoint_plan, forward_articulation_points, sqrt_checkpoints
from remat.solver.graph.chain_to_graph import chain_to_graph
from remat.solver.graph.stages import plan_ops, plan_peak
from tests.solver.graph._graph_bruteforce import frontier_optimum, random_graph


def _naive_store_all_ops(profile: GraphProfile) -> list[tuple[str, int]]:
    """Compute in order; free each output right after its last consumer (sinks right away)."""
    ops = []
    for v in range(profile.size):
        ops.append(("compute", v))
        for u in (*profile.predecessors[v], v):
            if max(profile.successors[u], default=u) == v:
                ops.append(("free", u))
    return ops


@pytest.mark.parametrize("seed", range(8))
def test_store_all_graph(seed):
    profile = random_graph(12, seed)
    expected = simulate(profile, _naive_store_all_ops(profile))
    schedule = solve(profile, 2**40, "store-all")
    check_schedule(profile, schedule)
    assert [v for op, v in schedule.ops if op == "compute"] == list(range(profile.size))
    assert schedule.predicted.peak_memory == expected.peak_memory
    assert schedule.predicted.recompute_ms == 0.0
    with pytest.raises(InfeasibleBudgetError) as error:
        solve(profile, expected.peak_memory - 1, "store-all")
    assert error.value.min_budget == expected.peak_memory


def _components(nodes: set[int], edges: list[tuple[int, int]]) -> int:
    parent = {v: v for v in nodes}

    def find(v):
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    for u, v in edges:
        if u in nodes and v in nodes:
            parent[find(u)] = find(v)
    return len({find(v) for v in nodes})


@pytest.mark.parametrize("seed", range(10))
def test_articulation_points_match_definition(seed):
    """A forward node is a cut vertex iff removing it increases the number of components."""
    profile = random_graph(14, seed, density=0.12, backward_from=0.7)
    forward = {v for v in range(profile.size) if not profile.nodes[v].backward}
    base = _components(forward, list(profile.edges))
    expected = [v for v in sorted(forward) if _components(forward - {v}, list(profile.edges)) > base]
    assert forward_articulation_points(profile) == expected


def test_articulation_points_of_a_skip_connection():
    """0-1-2-3-4 with a skip 1 -> 3: node 2 is bypassed, 1 and 3 still cut the graph."""
    nodes = tuple(GraphNode(f"f{i}", 1.0, 8) for i in range(5))
    profile = GraphProfile("skip", nodes, ((0, 1), (1, 2), (2, 3), (1, 3), (3, 4)))
    assert forward_articulation_points(profile) == [1, 3]


def _uniform_chain_graph(n: int) -> GraphProfile:
    stages = tuple(Stage(f"s{i}", 1.0, 2.0, 100, 100) for i in range(n))
    return chain_to_graph(ChainProfile(f"uniform{n}", 100, stages))


def test_chen_sqrt_recomputes_one_forward_pass():
    """Chen's scheme recomputes every non-checkpoint forward exactly once (one extra forward pass
    minus the checkpoints) and needs far less memory than store-all."""
    profile = _uniform_chain_graph(16)
    checkpoints = sqrt_checkpoints(profile)
    schedule = solve(profile, 2**40, "chen-sqrt")
    check_schedule(profile, schedule)
    assert schedule.predicted.recompute_ms == pytest.approx(16 - len(checkpoints))
    store_all = solve(profile, 2**40, "store-all").predicted.peak_memory
    assert schedule.predicted.peak_memory <= store_all / 2
    with pytest.raises(InfeasibleBudgetError) as error:
        solve(profile, schedule.predicted.peak_memory - 1, "chen-sqrt")
    assert error.value.min_budget == schedule.predicted.peak_memory


def test_chen_greedy_fits_budgets_store_all_cannot():
    profile = _uniform_chain_graph(20)
    top = solve(profile, 2**40, "store-all").predicted.peak_memory
    previous = 0.0
    for fraction in (0.9, 0.7, 0.5):
        schedule = solve(profile, int(top * fraction), "chen-greedy")
        check_schedule(profile, schedule)
        assert schedule.predicted.peak_memory <= int(top * fraction)
        assert schedule.predicted.recompute_ms >= previous  # tighter budget, never cheaper
        previous = schedule.predicted.recompute_ms
    with pytest.raises(InfeasibleBudgetError) as error:
        solve(profile, 1, "chen-greedy")
    assert error.value.min_budget is not None and error.value.min_budget > 1


@pytest.mark.parametrize("seed", range(4))
def test_baselines_never_beat_the_optimum(seed):
    """On tiny graphs, every baseline schedule that fits costs at least the brute-force optimum."""
    profile = random_graph(6, seed)
    top = solve(profile, 2**40, "store-all").predicted.peak_memory
    for budget, name in itertools.product((top, int(top * 0.8)), ("store-all", "chen-sqrt", "chen-greedy")):
        try:
            schedule = solve(profile, budget, name)
        except InfeasibleBudgetError:
            continue
        check_schedule(profile, schedule)
        assert schedule.predicted.compute_ms >= frontier_optimum(profile, budget) - 1e-9


def test_graph_strategies_registered_and_reject_chains():
    for name in ("store-all", "chen-sqrt", "chen-greedy", "ilp", "lp-rounding"):
        assert get_strategy(name, "graph").kind == "graph"
    chain = ChainProfile("c", 8, (Stage("s", 1.0, 1.0, 8, 8),))
    from remat.schedules import ProfileError
    from remat.solver.graph.baselines import solve_chen_sqrt

    with pytest.raises(ProfileError):
        solve_chen_sqrt(chain, 100)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.integers(3, 14), st.floats(0.0, 1.0))
def test_any_checkpoint_set_gives_a_valid_plan(seed, n, fraction):
    """Chen's schedule for ANY checkpoint set is a valid stage plan whose Checkmate memory is the
    simulator's peak, and it computes every node at least once."""
    import random

    profile = random_graph(n, seed)
    rng = random.Random(seed)
    checkpoints = {v for v in range(n) if rng.random() < fraction}
    plan = checkpoint_plan(profile, checkpoints)
    plan.check(profile)
    result = simulate(profile, plan_ops(profile, plan))
    assert result.peak_memory == plan_peak(profile, plan)
    assert result.compute_ms == pytest.approx(plan.cost_ms(profile))
    assert result.compute_ms >= profile.store_all_compute_ms - 1e-9
