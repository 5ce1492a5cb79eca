"""The hierarchical graph strategy: blocks, block options, the chain DP over blocks, the strategy.

Graphs: random autograd-shaped graphs built here (blocks of 1-3 forward nodes with internal
skips, each ``bwd:X`` reading X, X's inputs and the gradients from X's consumers, a seed gradient
that cannot be recomputed), random DAGs from tests/solver/graph/_graph_bruteforce.py, and the bundled examples.
"""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remat.schedules import GraphNode, GraphProfile, InfeasibleBudgetError, load_profile, simulate
from remat.solver import solve
from remat.solver.graph import hierarchical
from remat.solver.graph.baselines import store_all_plan
from remat.solver.graph.hierarchical.blocks import cut_blocks, forward_cuts
from remat.solver.graph.hierarchical.dp import CHECK, fill, read_ops
from remat.solver.graph.stages import plan_peak
from tests.conftest import EXAMPLES
from tests.solver.graph._graph_bruteforce import general_optimum, random_graph


def autograd_graph(seed: int, blocks: int = 3, overheads: bool = True) -> GraphProfile:
    """Forward blocks of 1-3 nodes (a node reads the one before it and sometimes an earlier one
    of its block or the block input), then the seed gradient and ``bwd:X`` for every forward X in
    reverse order, reading X, X's inputs and the backward nodes of X's consumers."""
    rng = random.Random(seed)
    nodes: list[GraphNode] = []
    preds: list[list[int]] = []
    block_input = None
    for _ in range(blocks):
        members: list[int] = []
        for _ in range(rng.randint(1, 3)):
            v = len(nodes)
            inputs = {members[-1]} if members else ({block_input} if block_input is not None else set())
            earlier = members[:-1] + ([block_input] if block_input is not None else [])
            if earlier and rng.random() < 0.5:
                inputs.add(rng.choice(earlier))
            overhead = rng.choice([0, 0, 32]) if overheads else 0
            nodes.append(GraphNode(f"fwd{v}", rng.choice([1.0, 2.0, 3.0]), rng.randint(1, 5) * 32, False, overhead))
            preds.append(sorted(inputs))
            members.append(v)
        block_input = members[-1]
    forward = len(nodes)
    consumers: dict[int, list[int]] = {v: [w for w in range(forward) if v in preds[w]] for v in range(forward)}
    seed_node = len(nodes)
    nodes.append(GraphNode("grad:output", 0.0, nodes[forward - 1].size, True, recompute=False))
    preds.append([forward - 1])
    backward: dict[int, int] = {}
    for v in reversed(range(forward)):
        b = len(nodes)
        size = sum(nodes[u].size for u in preds[v])  # gradients of X's inputs
        overhead = rng.choice([0, 16]) if overheads else 0
        nodes.append(GraphNode(f"bwd{v}", rng.choice([1.0, 2.0, 4.0]), size, True, overhead))
        grads = [backward[w] for w in consumers[v]] or [seed_node]
        preds.append(sorted({v, *preds[v], *grads}))
        backward[v] = b
    edges = tuple(sorted((u, v) for v, ps in enumerate(preds) for u in ps))
    return GraphProfile(f"autograd-{seed}-{blocks}", tuple(nodes), edges)


def store_all_peak(profile: GraphProfile) -> int:
    return plan_peak(profile, store_all_plan(profile))


# -- blocks ----------------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), blocks=st.integers(1, 5))
def test_blocks_partition_the_graph_and_read_only_their_chain_neighbours(seed, blocks):
    profile = autograd_graph(seed, blocks)
    chain = cut_blocks(profile)
    owner = {}
    for i, block in enumerate(chain.blocks):
        for v in (*block.forward, *block.backward):
            assert v not in owner
            owner[v] = i
    assert sorted(owner) == list(range(profile.size))
    assert owner[profile.size - 1] == 0  # the last node is block 0's
    for i, block in enumerate(chain.blocks):
        source = chain.input_node(i)
        for v in block.forward:
            assert all(owner[u] == i or u == source for u in profile.predecessors[v])
        for v in block.backward:
            for u in profile.predecessors[v]:
                if profile.nodes[u].backward:
                    assert owner[u] in (i, i + 1)
                    assert owner[u] == i or u in block.grads_in
                else:
                    assert owner[u] == i or u == source
    # the generator's blocks end where its forward spine has no skip over a node
    assert len(chain.blocks) == len(forward_cuts(profile))


def test_blocks_merge_where_a_backward_node_reads_across_blocks():
    profile = autograd_graph(3, blocks=4, overheads=False)
    nodes = list(profile.nodes)
    # a backward node of block 0 that also reads the last forward node: blocks 0..last merge
    last_forward = max(v for v, n in enumerate(nodes) if not n.backward)
    edges = tuple(sorted({*profile.edges, (last_forward, profile.size - 1)}))
    merged = cut_blocks(GraphProfile("merged", profile.nodes, edges))
    assert len(cut_blocks(profile).blocks) > 1
    assert len(merged.blocks) == 1


# -- the DP against a brute force over the same block schedules -----------------------------------


def _segment_schedules(chain, s: int, t: int):
    """Every block-level op list of the recurrence's space for blocks [s, t) (both branches, every
    option, every checkpoint), written out without the DP."""
    if s == t:
        yield []
        return
    for o, option in enumerate(chain.options[s]):
        u = option[0]
        if u > t:
            continue
        for rest in _segment_schedules(chain, u, t):
            yield [("Fall", s, o), *rest, ("B", s, o)]
    for j in range(s + 1, t):
        sweep = [("Fck", s)] + [("Fn", k) for k in range(s + 1, j)]
        for right in _segment_schedules(chain, j, t):
            for left in _segment_schedules(chain, s, j):
                yield [*sweep, *right, ("drop", j), *left]


def _best_by_simulation(profile, solved, budget):
    best = None
    for ops in _segment_schedules(solved.chain, 0, solved.chain.n):
        result = simulate(profile, hierarchical.expand(solved, ops), timeline=False)
        if result.peak_memory <= budget and (best is None or result.compute_ms < best - 1e-9):
            best = result.compute_ms
    return best


@pytest.mark.slow
@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_dp_equals_brute_force_over_block_schedules_with_one_byte_slots(seed):
    profile = autograd_graph(seed, blocks=3)
    solved = hierarchical._solved(profile)
    total = sum(1 for _ in _segment_schedules(solved.chain, 0, solved.chain.n))
    if total > 3000:
        return
    low = hierarchical.least_budget(profile)
    high = store_all_peak(profile)
    for budget in sorted({low, (low + high) // 2, high, low + 7}):
        table = fill(solved.chain, budget, slots=budget)  # one-byte slots: no discretization
        ops = read_ops(solved.chain, table)
        brute = _best_by_simulation(profile, solved, budget)
        if ops is None:
            assert brute is None
            continue
        result = simulate(profile, hierarchical.expand(solved, ops), timeline=False)
        assert result.peak_memory <= budget
        assert result.compute_ms == pytest.approx(brute, abs=1e-9)
        assert result.compute_ms == pytest.approx(float(table.cost[(0, solved.chain.n)][table.levels]), abs=1e-9)


# -- the strategy -------------------------------------------------------------------------------------


def _check(profile: GraphProfile, budget: int) -> float | None:
    """Solve; return the step time (None when refused), asserting the schedule's properties."""
    try:
        schedule = solve(profile, budget, "hierarchical")
    except InfeasibleBudgetError as error:
        assert error.bound == "exact"
        assert error.min_budget == hierarchical.least_budget(profile) > budget
        return None
    result = simulate(profile, schedule.ops, timeline=False)  # valid: it raises otherwise
    assert result.peak_memory <= budget
    assert result.compute_ms == pytest.approx(schedule.predicted.compute_ms)
    assert [op for op in schedule.ops if op[0] == "compute"].count(("compute", profile.size - 1)) >= 1
    for v, node in enumerate(profile.nodes):
        if not node.recompute:
            assert schedule.ops.count(("compute", v)) == 1
    return result.compute_ms


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), blocks=st.integers(1, 6), fraction=st.floats(0.0, 1.2))
def test_valid_within_budget_and_store_all_when_it_fits(seed, blocks, fraction):
    profile = autograd_graph(seed, blocks)
    low, high = hierarchical.least_budget(profile), store_all_peak(profile)
    budget = int(low + fraction * (high - low))
    ms = _check(profile, budget)
    assert ms is not None  # every budget from its least one up fits
    if budget >= high:
        assert ms == pytest.approx(profile.store_all_compute_ms)
    assert ms >= profile.store_all_compute_ms - 1e-9
    assert _check(profile, low - 1) is None  # and one byte less does not


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), blocks=st.integers(1, 6), fraction=st.floats(0.0, 1.0))
def test_without_local_search_the_dp_schedule_is_valid_and_never_faster(seed, blocks, fraction):
    """``local_search=False`` (what remat.compile asks) returns the DP's own schedule: valid, within
    the budget, refused below the same least, and never faster than with the searches, which only
    take strictly faster plans."""
    profile = autograd_graph(seed, blocks)
    low, high = hierarchical.least_budget(profile), store_all_peak(profile)
    budget = int(low + fraction * (high - low))
    plain = hierarchical.solve(profile, budget, local_search=False)
    result = simulate(profile, plain.ops, timeline=False)
    assert result.peak_memory <= budget
    assert result.compute_ms == pytest.approx(plain.predicted.compute_ms)
    assert "flat search" not in plain.extra["source"] and "refined" not in plain.extra["source"]
    assert plain.predicted.compute_ms >= hierarchical.solve(profile, budget).predicted.compute_ms - 1e-9
    with pytest.raises(InfeasibleBudgetError):
        hierarchical.solve(profile, low - 1, local_search=False)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(4, 7))
def test_random_dags_never_beat_the_true_optimum(seed, n):
    profile = random_graph(n, seed)
    low, high = hierarchical.least_budget(profile), store_all_peak(profile)
    for budget in sorted({low, (low + high) // 2, high}):
        ms = _check(profile, budget)
        assert ms is not None
        optimum = general_optimum(profile, budget)
        assert optimum is not None and ms >= optimum - 1e-9


@pytest.mark.slow
@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), blocks=st.integers(2, 6), fraction=st.floats(0.0, 0.9))
def test_warm_start_plan_is_a_valid_rs_plan_of_the_same_cost(seed, blocks, fraction):
    profile = autograd_graph(seed, blocks)
    low, high = hierarchical.least_budget(profile), store_all_peak(profile)
    budget = int(low + fraction * (high - low))
    schedule = solve(profile, budget, "hierarchical")
    plan = hierarchical.hierarchical_plan(profile, budget)
    assert plan is not None  # autograd-ordered graphs: backward nodes are first computed in index order
    plan.check(profile)
    assert plan_peak(profile, plan) <= schedule.predicted.peak_memory
    assert plan.cost_ms(profile) == pytest.approx(schedule.predicted.compute_ms)
    assert hierarchical.hierarchical_plan(profile, low - 1) is None


def test_budget_monotone_on_an_autograd_graph():
    profile = autograd_graph(11, blocks=6)
    low, high = hierarchical.least_budget(profile), store_all_peak(profile)
    times = [_check(profile, b) for b in range(low, high + 1, max(1, (high - low) // 12))]
    assert all(a >= b - 1e-9 for a, b in itertools.pairwise(times))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["vgg16", "resnet50"])
def test_bundled_graphs_beat_chen_greedy_and_give_an_ilp_warm_start(name):
    profile = load_profile(EXAMPLES / f"graph_{name}.json")
    budget = int(0.85 * store_all_peak(profile))
    schedule = solve(profile, budget, "hierarchical")
    greedy = solve(profile, budget, "chen-greedy")
    assert schedule.predicted.compute_ms <= greedy.predicted.compute_ms
    assert schedule.extra["blocks"] > 10
    plan = hierarchical.hierarchical_plan(profile, budget)
    assert plan is not None
    plan.check(profile)
    assert plan_peak(profile, plan) <= budget
    assert plan.cost_ms(profile) == pytest.approx(schedule.predicted.compute_ms)


def test_recomputes_a_block_input_inside_a_merged_block():
    """On VGG16 at 90% the best schedule drops the first activation and recomputes it in the
    backward (what the flat ILP finds): only a merged block's option can do that."""
    profile = load_profile(EXAMPLES / "graph_vgg16.json")
    schedule = solve(profile, int(0.9 * store_all_peak(profile)), "hierarchical")
    assert schedule.predicted.recompute_ms == pytest.approx(profile.nodes[0].time_ms)
    assert hierarchical.hierarchical_plan(profile, 1) is None  # infeasible: no warm start


def test_refuses_graphs_it_cannot_cut_with_one_line():
    from remat.schedules import RematError

    nodes = (GraphNode("a", 1.0, 8, False), GraphNode("b", 1.0, 8, True), GraphNode("c", 1.0, 8, False))
    with pytest.raises(RematError, match="last node is a forward node"):
        solve(GraphProfile("bad", nodes, ((0, 1), (1, 2))), 100, "hierarchical")
    nodes += (GraphNode("d", 1.0, 8, True),)
    with pytest.raises(RematError, match="forward node 2 .* reads backward node 1"):
        solve(GraphProfile("bad", nodes, ((0, 1), (1, 2), (2, 3))), 100, "hierarchical")
    with pytest.raises(RematError, match="chain"):
        solve(load_profile(EXAMPLES / "homogeneous.json"), 10**9, "hierarchical")


def test_dp_decisions_encode_checkpoints_above_options():
    assert CHECK > max(len(o) for o in hierarchical._solved(autograd_graph(1, 6)).options)


# -- CLI, pareto, executor ---------------------------------------------------------------------------


@pytest.mark.slow
def test_cli_solve_and_refusal(tmp_path):
    import json
    import subprocess
    import sys

    profile_path = EXAMPLES / "graph_resnet50.json"
    profile = load_profile(profile_path)
    budget = int(0.7 * store_all_peak(profile))
    out = tmp_path / "s.json"
    command = [sys.executable, "-m", "remat.cli", "solve", str(profile_path), "--strategy", "hierarchical"]
    done = subprocess.run([*command, "--budget", str(budget), "-o", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    schedule = json.loads(out.read_text())
    assert schedule["strategy"] == "hierarchical"
    assert simulate(profile, [tuple(op) for op in schedule["ops"]]).peak_memory <= budget
    low = hierarchical.least_budget(profile)
    refused = subprocess.run([*command, "--budget", str(low - 1)], capture_output=True, text=True)
    assert refused.returncode == 2
    assert len(refused.stderr.strip().splitlines()) == 1
    assert "the smallest budget it can meet is" in refused.stderr and f"({low} bytes)" in refused.stderr


def test_pareto_front_lists_hierarchical():
    from remat.solver.pareto.graph import graph_front

    profile = autograd_graph(5, blocks=5)
    front = graph_front(profile, ["hierarchical", "store-all"], workers=1, progress=False)
    points = [p for p in front.points if p.strategy == "hierarchical"]
    assert len(points) >= 2
    assert min(p.peak_memory for p in points) < min(p.peak_memory for p in front.points if p.strategy == "store-all")
    assert all(
        f.message.startswith("strategy 'hierarchical' cannot fit") for f in front.failed if f.strategy == "hierarchical"
    )


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet", "transformer"])
def test_replays_on_a_real_model_with_equal_gradients_and_predicted_peak(name):
    import copy

    from remat.replay.graph import GraphReplay, measure_graph
    from tests.replay.test_graph_replay import _assert_matches, _check_against_plain, _setup

    base, x, profile = _setup(name)
    low, high = hierarchical.least_budget(profile), store_all_peak(profile)
    budget = low + (high - low) // 5  # tight: recomputation inside blocks and across them
    schedule = solve(profile, budget, "hierarchical")
    assert schedule.predicted.recompute_ms > 0
    _check_against_plain(name, schedule.ops)
    m = measure_graph(GraphReplay(copy.deepcopy(base), schedule, profile), [x])
    assert m.predicted_peak == schedule.predicted.peak_memory <= budget
    _assert_matches(profile, schedule.ops, m)
