"""Brute-force optima of tiny graph schedules, written independently of remat.solver, for tests.

* :func:`frontier_optimum`: the best frontier-advancing schedule (the ILP's search space: stage t
  computes a subset of nodes < t in index order, then t; frees as early as possible), by a
  shortest path over (stage, held set), enumerating every recomputation set and keep set.
* :func:`general_optimum`: the best schedule of ANY order of compute/free ops (DESIGN's graph
  model), by Dijkstra over (held set, computed-once set).

Both return (milliseconds, None) or (None, None) when no schedule fits; memory semantics are
DESIGN's: the peak is measured right after each compute and includes everything held.
"""

from __future__ import annotations

import heapq
import itertools
import random

from remat.schedules import GraphNode, GraphProfile


def random_graph(n: int, seed: int, density: float = 0.3, backward_from: float = 0.5) -> GraphProfile:
    """A random DAG in topological order with a spine edge v-1 -> v (so every node is reachable)."""
    rng = random.Random(seed)
    nodes = tuple(
        GraphNode(f"n{v}", rng.choice([1.0, 2.0, 3.5, 5.0]), rng.randint(1, 6) * 64, v >= n * backward_from)
        for v in range(n)
    )
    edges = {(v - 1, v) for v in range(1, n)}
    for v in range(2, n):
        for u in range(v - 1):
            if rng.random() < density:
                edges.add((u, v))
    return GraphProfile(f"random-{n}-{seed}", nodes, tuple(sorted(edges)))


def _subsets(items):
    items = list(items)
    for r in range(len(items) + 1):
        yield from itertools.combinations(items, r)


def frontier_optimum(profile: GraphProfile, budget: int) -> float | None:
    n = profile.size
    preds = [set(p) for p in profile.predecessors]
    succs = [set(s) for s in profile.successors]
    size = [node.size for node in profile.nodes]
    time = [node.time_ms for node in profile.nodes]
    last_descendant = list(range(n))
    for v in reversed(range(n)):
        last_descendant[v] = max([v, *(last_descendant[k] for k in succs[v])])
    best: dict[tuple[int, frozenset], float] = {(0, frozenset()): 0.0}
    queue = [(0.0, 0, frozenset())]
    while queue:
        cost, t, held = heapq.heappop(queue)
        if best.get((t, held), float("inf")) < cost:
            continue
        if t == n:
            return cost
        for extra in _subsets(v for v in range(t) if v not in held):
            computed = sorted(set(extra) | {t})
            if any(not preds[v] <= (held | set(computed)) for v in computed):
                continue
            present = held | set(computed)
            # worth keeping: a node some later stage may need, directly or to recompute a node
            # that one needs (a descendant after t; not only a direct consumer after t)
            useful = [i for i in present if last_descendant[i] > t]
            for keep in _subsets(useful):
                keep = frozenset(keep)
                # Walk the stage: compute in index order, free non-kept nodes after their last use.
                memory = sum(size[i] for i in held)
                alive = set(held)
                ok = True
                for position, k in enumerate(computed):
                    alive.add(k)
                    memory += size[k]
                    if memory > budget:
                        ok = False
                        break
                    later = set(computed[position + 1 :])
                    for i in list(alive):
                        if i not in keep and not (succs[i] & later) and (i == k or k in succs[i]):
                            alive.discard(i)
                            memory -= size[i]
                if not ok:
                    continue
                new_cost = cost + sum(time[v] for v in computed)
                state = (t + 1, keep if t + 1 < n else frozenset())
                if new_cost < best.get(state, float("inf")) - 1e-12:
                    best[state] = new_cost
                    heapq.heappush(queue, (new_cost, *state))
    return None


def general_optimum(profile: GraphProfile, budget: int) -> float | None:
    n = profile.size
    preds = [frozenset(p) for p in profile.predecessors]
    size = [node.size for node in profile.nodes]
    time = [node.time_ms for node in profile.nodes]
    everything = frozenset(range(n))
    start = (frozenset(), frozenset())
    best = {start: 0.0}
    queue = [(0.0, 0, start)]
    counter = itertools.count(1)
    while queue:
        cost, _, state = heapq.heappop(queue)
        if best.get(state, float("inf")) < cost:
            continue
        held, done = state
        memory = sum(size[i] for i in held)
        moves = []
        for v in range(n):
            if v in held:
                moves.append(((held - {v}, done), 0.0))
            elif preds[v] <= held and memory + size[v] <= budget:
                if v == n - 1 and done | {v} == everything:
                    if cost + time[v] <= min(best.get("end", float("inf")), float("inf")):
                        best["end"] = min(best.get("end", float("inf")), cost + time[v])
                    continue
                moves.append(((held | {v}, done | {v}), time[v]))
        for nxt, step in moves:
            if cost + step < best.get(nxt, float("inf")) - 1e-12:
                best[nxt] = cost + step
                heapq.heappush(queue, (cost + step, next(counter), nxt))
    return best.get("end")


def smallest_budget(profile: GraphProfile, optimum, candidates) -> int | None:
    """The smallest of ``candidates`` (ascending) at which ``optimum`` finds a schedule."""
    for budget in candidates:
        if optimum(profile, budget) is not None:
            return budget
    return None
