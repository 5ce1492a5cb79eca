"""Chains as graphs: the graph ILP on ``chain_to_graph(chain)`` against the chain models.

Mapping (see :mod:`remat.solver.graph.chain_to_graph`): F{i} = recorded forward (saved_size bytes),
loss_grad = g_n, B{i} = backward (|g_i| bytes), transients as zero-cost nodes read by their op;
the input a_0 is a constant (chain peak = graph peak + input_size). The models coincide op for
op when saved_size == output_size (F_ck and F_all then hold the same bytes), so the random
chains here have that property; overheads are kept (they map exactly).

Both directions of the comparison with the chain models:

* graph ILP <= chain: every chain schedule of these chains translates
  (``chain_ops_to_graph_ops``) into a graph schedule with the same time and peak; the DP's
  schedules (forward recomputations in ascending order) are frontier-advancing, i.e. in the
  ILP's search space (checked by reading them back as a stage plan), so ILP <= DP, up to the
  ILP's time discretization (costs scaled to 10^6 steps of the slowest node). The test also
  checks ILP <= the brute-force optimum over ALL chain schedules.
* graph ILP < chain, often: the graph model can free any output at any time, the chain model
  cannot. A chain frees a[i] only by ``F_n i`` (which records nothing) or ``B i``, and abar only
  by its ``B``; it has no "record stage i and drop a_i" op. Found on ``random_chain(4, 0)`` at
  256 bytes: the ILP recomputes F0, F1, F2 for B2, frees F0 right after F1 (keeping F1 as
  abar[2] for B1) and recomputes F0 for B1 (29 ms); the chain needs either F_ck 0 + F_n 1 and
  later F_all 1 again, or F_all 1 while a[1] stays held (over budget): 32 ms. On the seeded
  chains below this happens at most budgets between the smallest and the store-all peak. So the
  optima coincide only where these freedoms do not matter (at the store-all budget, checked),
  and the DP's optimum is an upper bound on the graph's, never below it (an ILP result above
  the DP would be a bug in one of them; the test would catch it).
* The DP's memory discretization (slots) can only raise the DP's value, never the ILP's.

Measured once (not asserted) on the six 5-stage chains of ``test_graph_ilp_against_chain_dp``
at its four budgets: ILP == DP in 6 of 24 cases (the store-all budgets), ILP < DP in the other
18 (by 3 to 17%); the DP equalled the brute-force optimum over all chain schedules in all 24.
So the gap is the chain model's missing frees, not a solver's error, and the optimum the issue
asked to match is matched only at budgets where those frees do not help.
"""

from __future__ import annotations

import heapq
import itertools
import random

import pytest

from remat.schedules import ChainProfile, Stage, simulate
from remat.schedules.simulator import check_schedule
from remat.solver import solve, strategy_names
from remat.solver.chain.store_all import store_all_ops
from remat.solver.graph.chain_to_graph import chain_ops_to_graph_ops, chain_to_graph
from remat.solver.graph.stages import memory_lower_bound, plan_from_ops


def random_chain(n: int, seed: int, overheads: bool = False) -> ChainProfile:
    rng = random.Random(seed)
    stages = []
    for i in range(n):
        size = rng.randint(1, 5) * 16
        stages.append(
            Stage(
                f"s{i}",
                rng.choice([1.0, 2.0, 3.0]),
                rng.choice([2.0, 3.0, 5.0]),
                size,
                size,
                rng.randint(0, 2) * 16 if overheads else 0,
                rng.randint(0, 2) * 16 if overheads else 0,
            )
        )
    return ChainProfile(f"chain-{n}-{seed}", rng.randint(1, 4) * 16, tuple(stages))


def recompute_all_ops(chain: ChainProfile) -> list[tuple[str, int]]:
    """For each backward, rerun the forward from the input (memory-light, quadratic time)."""
    ops: list[tuple[str, int]] = []
    for i in reversed(range(chain.length)):
        ops += [("F_n", j) for j in range(i)] + [("F_all", i), ("B", i)]
    return ops


def chain_optimum(chain: ChainProfile, budget: int) -> float | None:
    """Brute force over ALL chain op sequences (DESIGN's chain model, via the simulator's rules
    re-implemented on a compact state): Dijkstra over (a held, abar held, next backward)."""
    n = chain.length
    act = [chain.activation_size(i) for i in range(n + 1)]
    start = (frozenset({0}), frozenset(), n - 1)
    best = {start: 0.0}
    queue = [(0.0, 0, start)]
    tie = itertools.count(1)
    while queue:
        cost, _, state = heapq.heappop(queue)
        if best.get(state, float("inf")) < cost:
            continue
        a, abar, nb = state
        if nb < 0:
            return cost
        memory = sum(act[i] for i in a) + sum(chain.stages[i - 1].saved_size for i in abar)
        if nb < n - 1:
            memory += act[nb + 1]  # g[nb+1]
        moves = []
        for i in range(nb + 1):
            stage = chain.stages[i]
            present = i in a or i in abar
            if not present:
                continue
            if i + 1 not in a:
                peak = memory + act[i + 1] + stage.forward_overhead
                if peak <= budget:
                    moves.append(((a | {i + 1}, abar, nb), stage.forward_ms))
                    if i in a and i != 0:
                        moves.append(((a - {i} | {i + 1}, abar, nb), stage.forward_ms))
            if i + 1 not in abar and memory + stage.saved_size + stage.forward_overhead <= budget:
                moves.append(((a, abar | {i + 1}, nb), stage.forward_ms))
        i = nb
        stage = chain.stages[i]
        if i + 1 in abar and (i in a or i in abar):
            before = memory + (act[n] if i == n - 1 else 0)
            if before + act[i] + stage.backward_overhead <= budget:
                new_a = a - {i} if i != 0 else a
                moves.append(((new_a, abar - {i + 1}, nb - 1), stage.backward_ms))
        for nxt, step in moves:
            if cost + step < best.get(nxt, float("inf")) - 1e-12:
                best[nxt] = cost + step
                heapq.heappush(queue, (cost + step, next(tie), nxt))
    return None


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("make_ops", [store_all_ops, recompute_all_ops])
def test_corresponding_operations_cost_the_same(seed, make_ops):
    """Chain ops and their graph translation: same time; same peak once the input is added."""
    chain = random_chain(5, seed, overheads=True)
    graph = chain_to_graph(chain)
    ops = make_ops(chain)
    on_chain = simulate(chain, ops)
    on_graph = simulate(graph, chain_ops_to_graph_ops(chain, graph, ops))
    assert on_graph.compute_ms == pytest.approx(on_chain.compute_ms)
    assert on_graph.peak_memory + graph.metadata["memory_offset"] == on_chain.peak_memory
    assert plan_from_ops(graph, chain_ops_to_graph_ops(chain, graph, ops)) is not None


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(5))
def test_graph_ilp_at_most_chain_optimum(seed):
    """At every feasible budget step the ILP on the chain's graph is at most the brute-force
    optimum over all chain schedules (same value at the store-all peak); every ILP schedule is
    simulator-checked with its peak + input within the chain budget."""
    chain = random_chain(4, seed, overheads=seed % 2 == 1)
    graph = chain_to_graph(chain)
    offset = chain.input_size
    top = simulate(chain, store_all_ops(chain)).peak_memory
    for budget in range(memory_lower_bound(graph) + offset, top + 16, 16):
        schedule = solve(graph, budget - offset, "ilp", time_limit=10)
        check_schedule(graph, schedule)
        assert schedule.predicted.peak_memory + offset <= budget
        expected = chain_optimum(chain, budget)
        if expected is not None:
            assert schedule.predicted.compute_ms <= expected + 1e-5
    assert solve(graph, top - offset, "ilp", time_limit=10).predicted.compute_ms == pytest.approx(
        chain_optimum(chain, top)
    )


@pytest.mark.slow
@pytest.mark.skipif("optimal" not in strategy_names("chain"), reason="the chain DP 'optimal' is not on this branch")
@pytest.mark.parametrize("seed", range(6))
def test_graph_ilp_against_chain_dp(seed):
    """ILP <= DP at every budget the DP meets (its schedule is in the ILP's space, same cost)."""
    chain = random_chain(5, seed)
    graph = chain_to_graph(chain)
    offset = chain.input_size
    top = simulate(chain, store_all_ops(chain)).peak_memory
    low = memory_lower_bound(graph) + offset
    for budget in sorted({low, (low + top) // 2, (low + 3 * top) // 4, top}):
        try:
            dp = solve(chain, budget, "optimal")
        except Exception:  # noqa: BLE001 - the DP may need more than the bound; the ILP is then free
            continue
        ilp = solve(graph, budget - offset, "ilp", time_limit=10)
        graph_ops = chain_ops_to_graph_ops(chain, graph, dp.ops)
        assert plan_from_ops(graph, graph_ops) is not None  # the DP's schedule is in the ILP's space
        assert simulate(graph, graph_ops).compute_ms == pytest.approx(dp.predicted.compute_ms)
        assert simulate(graph, graph_ops).peak_memory + offset == dp.predicted.peak_memory
        assert ilp.predicted.compute_ms <= dp.predicted.compute_ms + 1e-5
        assert chain_optimum(chain, budget) <= dp.predicted.compute_ms + 1e-9
