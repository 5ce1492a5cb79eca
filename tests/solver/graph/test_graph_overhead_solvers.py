"""Graph strategies with node overheads (transient bytes) and nodes that cannot be recomputed.

The brute force (tests/solver/graph/_graph_bruteforce.py) knows neither field; an overhead is expressed there
the old way: a zero-cost source node of ``overhead`` bytes just before its node and read only by
it (computed right before it, freed right after), which has the same optimum.
"""

from __future__ import annotations

import random

import pytest

from remat.schedules import GraphNode, GraphProfile, InfeasibleBudgetError, simulate
from remat.solver.graph.stages import memory_lower_bound, plan_from_s, plan_ops
from remat.solver.registry import solve
from tests.solver.graph._graph_bruteforce import frontier_optimum, random_graph


def with_overheads(profile: GraphProfile, seed: int) -> GraphProfile:
    rng = random.Random(seed)
    nodes = tuple(
        GraphNode(n.name, n.time_ms, n.size, n.backward, overhead=rng.choice([0, 0, 64, 192, 448]))
        for n in profile.nodes
    )
    return GraphProfile(profile.name + "-overheads", nodes, profile.edges)


def tmp_expansion(profile: GraphProfile) -> GraphProfile:
    """Each overhead as a zero-cost node of that size placed just before its node, read only by it."""
    index: list[int] = []
    nodes: list[GraphNode] = []
    tmp_of: dict[int, int] = {}
    for v, node in enumerate(profile.nodes):
        if node.overhead:
            tmp_of[v] = len(nodes)
            nodes.append(GraphNode(f"{node.name}.tmp", 0.0, node.overhead, node.backward))
        index.append(len(nodes))
        nodes.append(GraphNode(node.name, node.time_ms, node.size, node.backward))
    edges = [(index[u], index[v]) for u, v in profile.edges] + [(t, index[v]) for v, t in tmp_of.items()]
    return GraphProfile(profile.name + "-tmp", tuple(nodes), tuple(sorted(edges)))


def _store_all_peak(profile: GraphProfile) -> int:
    return solve(profile, 2**62, "store-all").predicted.peak_memory


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(6))
def test_ilp_with_overheads_equals_brute_force(seed):
    profile = with_overheads(random_graph(6, seed), seed)
    expanded = tmp_expansion(profile)
    low, high = memory_lower_bound(profile), _store_all_peak(profile)
    checked = 0
    # not at store-all (fraction 1.0): trivial for the ILP, and the brute force's slowest budget
    for fraction in (0.0, 0.35, 0.7):
        budget = int(low + fraction * (high - low))
        expected = frontier_optimum(expanded, budget)
        if expected is None:
            with pytest.raises(InfeasibleBudgetError):
                solve(profile, budget, "ilp", time_limit=20.0, workers=1)
            continue
        schedule = solve(profile, budget, "ilp", time_limit=20.0, workers=1)
        assert schedule.extra["status"] == "optimal"
        assert schedule.predicted.compute_ms == pytest.approx(expected, rel=1e-9)
        assert simulate(profile, schedule.ops, timeline=False).peak_memory <= budget
        checked += 1
    assert checked >= 2


def test_overhead_raises_the_smallest_feasible_budgets():
    profile = with_overheads(random_graph(7, 3), 3)
    peak = _store_all_peak(profile)
    plain = GraphProfile(
        "plain", tuple(GraphNode(n.name, n.time_ms, n.size, n.backward) for n in profile.nodes), profile.edges
    )
    assert peak > _store_all_peak(plain)
    with pytest.raises(InfeasibleBudgetError) as error:
        solve(profile, peak - 1, "store-all")
    assert error.value.min_budget == peak
    floor = memory_lower_bound(profile)
    for strategy in ("ilp", "lp-rounding"):
        with pytest.raises(InfeasibleBudgetError) as error:
            solve(profile, floor - 1, strategy, time_limit=5.0)
        assert error.value.min_budget is None or error.value.min_budget >= floor


def once_graph(seed: int) -> GraphProfile:
    """A random graph whose first backward node (a zero-cost, large 'seed') cannot be recomputed
    and is read by several later backward nodes, so recomputing it would be tempting."""
    base = with_overheads(random_graph(8, seed, density=0.35), seed)
    first = next(v for v, node in enumerate(base.nodes) if node.backward)
    nodes = list(base.nodes)
    nodes[first] = GraphNode("seed", 0.0, 512, True, recompute=False)
    edges = set(base.edges) | {(first, v) for v in range(first + 1, base.size)}
    return GraphProfile(f"once-{seed}", tuple(nodes), tuple(sorted(edges)))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(5))
def test_strategies_never_recompute_a_node_that_cannot_be(seed):
    profile = once_graph(seed)
    seed_node = next(v for v, node in enumerate(profile.nodes) if not node.recompute)
    free = GraphProfile(
        "free",
        tuple(GraphNode(n.name, n.time_ms, n.size, n.backward, overhead=n.overhead) for n in profile.nodes),
        profile.edges,
    )
    low, high = memory_lower_bound(profile), _store_all_peak(profile)
    solved = 0
    for fraction in (0.2, 0.5, 0.8, 1.0):
        budget = int(low + fraction * (high - low))
        for strategy in ("store-all", "chen-sqrt", "chen-greedy", "lp-rounding", "ilp"):
            options = {"time_limit": 10.0} if strategy in ("ilp", "lp-rounding") else {}
            try:
                schedule = solve(profile, budget, strategy, **options)
            except InfeasibleBudgetError:
                continue
            # make_schedule simulated it, and the simulator refuses a second compute of the seed
            assert schedule.ops.count(("compute", seed_node)) == 1
            assert schedule.predicted.peak_memory <= budget
            solved += 1
            if strategy == "ilp" and schedule.extra["status"] == "optimal":
                unconstrained = solve(free, budget, "ilp", time_limit=10.0)
                assert schedule.predicted.compute_ms >= unconstrained.predicted.compute_ms - 1e-9
    assert solved > 0


def test_rounding_an_empty_wish_list_never_recomputes_it():
    """Phase two of LP rounding with S empty everywhere recomputes everything a stage needs,
    except the node that cannot be recomputed and its consumer, whose recomputation would need it
    again (here b1 is read by b1's consumers b2 and b3 long after the seed's last reader)."""
    nodes = (
        GraphNode("f0", 1.0, 64, False),
        GraphNode("f1", 1.0, 64, False),
        GraphNode("seed", 0.0, 64, True, recompute=False),
        GraphNode("b1", 1.0, 64, True),
        GraphNode("b2", 1.0, 64, True),
        GraphNode("b3", 1.0, 64, True),
    )
    edges = ((0, 1), (1, 2), (1, 3), (2, 3), (0, 4), (3, 4), (3, 5), (4, 5))
    profile = GraphProfile("pinned", nodes, edges)
    plan = plan_from_s(profile, [frozenset()] * profile.size)
    plan.check(profile)
    ops = plan_ops(profile, plan)
    assert ops.count(("compute", 2)) == 1 and ops.count(("compute", 3)) == 1
    simulate(profile, ops, timeline=False)
    assert ops.count(("compute", 0)) > 1  # the plan does recompute: the test is not vacuous
