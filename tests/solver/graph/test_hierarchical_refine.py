"""The local search over the kept sets of large blocks (remat/solver/graph/hierarchical/refine_blocks.py).

Graphs: random autograd-shaped graphs whose long skips make one block of more than
``EXHAUSTIVE_NODES + 1`` forward nodes (so its kept sets are sampled and the search runs), and
the bundled U-Net, whose skips do the same.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remat.schedules import GraphNode, GraphProfile, load_profile, simulate
from remat.solver import solve
from remat.solver.graph import hierarchical
from remat.solver.graph.baselines import store_all_plan
from remat.solver.graph.hierarchical import flat as hierarchical_flat
from remat.solver.graph.hierarchical import refine_blocks as hierarchical_refine
from remat.solver.graph.hierarchical.block_options import EXHAUSTIVE_NODES, block_model, merged
from remat.solver.graph.hierarchical.dp import chain_of, fill, read_ops, walk
from remat.solver.graph.stages import plan_peak
from tests.conftest import EXAMPLES


def skip_graph(seed: int, forward: int) -> GraphProfile:
    """A forward chain with an edge from node 0 to the last node and a few random long skips,
    then the seed gradient and ``bwd:X`` for every X in reverse order (reading X, X's inputs and
    the backward nodes of X's consumers), as the profiler's graphs are."""
    rng = random.Random(seed)
    preds = [[]] + [[v - 1] for v in range(1, forward)]
    preds[forward - 1].append(0)
    for _ in range(rng.randint(1, 4)):
        u = rng.randrange(0, forward - 3)
        v = rng.randrange(u + 2, forward)
        if u not in preds[v]:
            preds[v].append(u)
    nodes = [GraphNode(f"fwd{v}", rng.choice([1.0, 2.0, 5.0]), rng.randint(1, 6) * 32, False) for v in range(forward)]
    consumers = {v: [w for w in range(forward) if v in preds[w]] for v in range(forward)}
    nodes.append(GraphNode("grad:output", 0.0, nodes[-1].size, True, recompute=False))
    preds.append([forward - 1])
    backward: dict[int, int] = {}
    for v in reversed(range(forward)):
        b = len(nodes)
        nodes.append(GraphNode(f"bwd{v}", rng.choice([1.0, 3.0]), sum(nodes[u].size for u in preds[v]), True))
        grads = [backward[w] for w in consumers[v]] or [forward]
        preds.append(sorted({v, *preds[v], *grads}))
        backward[v] = b
    edges = tuple((u, v) for v in range(len(nodes)) for u in sorted(preds[v]))
    return GraphProfile(f"skip{seed}", tuple(nodes), edges)


def store_all_peak(profile: GraphProfile) -> int:
    return plan_peak(profile, store_all_plan(profile))


def dp_alone(profile: GraphProfile, budget: int) -> float | None:
    """The chain DP's time over the sampled options, without the local search."""
    chain = hierarchical._solved(profile).chain
    ops = read_ops(chain, fill(chain, budget, hierarchical.SLOTS))
    if ops is None:
        return None
    peak, ms = walk(chain, ops)
    return ms if peak <= budget else None


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), forward=st.integers(EXHAUSTIVE_NODES + 3, EXHAUSTIVE_NODES + 5))
def test_neighbours_keep_the_output_and_differ_by_one_or_two_nodes(seed, forward):
    rng = random.Random(seed)
    nodes = tuple(range(forward))
    kept = frozenset({v for v in nodes[:-1] if rng.random() < 0.5} | {nodes[-1]})
    found = list(hierarchical_refine.neighbours(kept, nodes))
    assert len(found) == len(set(found))
    for other in found:
        assert nodes[-1] in other and other <= frozenset(nodes)
        assert len(other ^ kept) in (1, 2)
    assert [len(other ^ kept) for other in found[: forward - 1]] == [1] * (forward - 1)  # toggles first


@pytest.mark.slow
@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), forward=st.integers(EXHAUSTIVE_NODES + 3, EXHAUSTIVE_NODES + 4))
@pytest.mark.parametrize("fraction", [0.15, 0.5, 0.85])
def test_search_runs_on_a_big_block_and_never_loses(seed, forward, fraction):
    profile = skip_graph(seed, forward)
    blocks = hierarchical._solved(profile).blocks
    assert any(hierarchical_refine.sampled(blocks, (i, i + 1)) for i in range(len(blocks.blocks)))
    low, high = hierarchical.least_budget(profile), store_all_peak(profile)
    budget = int(low + fraction * (high - low))
    schedule = solve(profile, budget, "hierarchical")  # make_schedule: the simulator agrees
    assert schedule.predicted.peak_memory <= budget
    alone = dp_alone(profile, budget)
    if alone is not None:
        assert schedule.predicted.compute_ms <= alone + 1e-9
    if schedule.extra["source"] == "dp, refined":
        assert alone is not None and schedule.predicted.compute_ms < alone
    plan = hierarchical.hierarchical_plan(profile, budget)
    assert plan is not None and plan_peak(profile, plan) <= budget
    assert plan.cost_ms(profile) == pytest.approx(schedule.predicted.compute_ms)


@pytest.mark.slow
@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_search_from_a_poor_sample_never_loses_and_stays_within_budget(seed):
    """Started from the models of one kept set per block (only the output), at a mid budget."""
    profile = skip_graph(seed, EXHAUSTIVE_NODES + 3)
    solved = hierarchical._solved(profile)
    blocks = solved.blocks
    poor = {
        key: block_model(profile, blocks, key[0], key[1], [frozenset({blocks.blocks[key[1] - 1].output})])
        for key in solved.models
    }
    budget = (hierarchical.least_budget(profile) + store_all_peak(profile)) // 2

    def dp(models):
        chain = chain_of(models)
        ops = read_ops(chain, fill(chain, budget, hierarchical.SLOTS))
        if ops is None:
            return None
        peak, ms = walk(chain, ops)
        return (ops, ms) if peak <= budget else None

    start = dp(poor)
    if start is None:
        return
    models, ops, ms = hierarchical_refine.refine(profile, blocks, poor, dp, start)
    assert ms <= start[1]
    peak, got = walk(chain_of(models), ops)
    assert peak <= budget and got == pytest.approx(ms)
    solved_again = hierarchical.assemble(blocks, models)
    result = simulate(profile, hierarchical.expand(solved_again, ops), timeline=False)
    assert result.compute_ms == pytest.approx(ms)
    for key, model in models.items():
        forward = frozenset(merged(blocks, *key)[0].forward)
        assert model.options and all(o.kept <= forward for o in model.options)


def test_no_work_no_change(monkeypatch):
    profile = skip_graph(3, EXHAUSTIVE_NODES + 3)
    budget = (hierarchical.least_budget(profile) + store_all_peak(profile)) // 2
    monkeypatch.setattr(hierarchical_refine, "MAX_REFINE_WORK", 0)
    monkeypatch.setattr(hierarchical_flat, "MAX_FLAT_WORK", 0)
    schedule = solve(profile, budget, "hierarchical")
    assert schedule.extra["source"] == "dp"
    assert schedule.predicted.compute_ms == pytest.approx(dp_alone(profile, budget))


@pytest.mark.slow
def test_unet_at_half_of_store_all_gets_faster():
    """U-Net's skips make a 26-node block; its sampled kept sets miss what 50% needs."""
    profile = load_profile(EXAMPLES / "graph_unet.json")
    budget = int(0.5 * store_all_peak(profile))
    schedule = solve(profile, budget, "hierarchical")
    assert schedule.extra["source"].startswith("dp, refined")  # then the flat search (its own tests)
    assert schedule.predicted.compute_ms < 0.97 * dp_alone(profile, budget)


@pytest.mark.slow
@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_policy_neighbours_move_one_recomputed_node_or_the_kept_set(seed):
    profile = skip_graph(seed, EXHAUSTIVE_NODES + 3)
    solved = hierarchical._solved(profile)
    key = next(k for k in solved.models if hierarchical_refine.sampled(solved.blocks, k))
    forward = merged(solved.blocks, *key)[0].forward
    option = solved.models[key].options[0]
    pairs = list(hierarchical_refine.policy_neighbours(option, forward))
    assert len(pairs) == len(set(pairs))
    for kept, lean in pairs:
        if kept == option.kept:
            assert len(lean ^ option.lean) == 1 and not (lean ^ option.lean) & kept
        else:
            assert lean in (option.lean, frozenset(), frozenset(forward))
