"""Graph baselines (kind ``"graph"``): ``store-all``, ``chen-sqrt`` and ``chen-greedy``.

As in Checkmate's baselines (Jain et al. 2020, section 6), Chen et al.'s (2016) segment
heuristics are applied to a DAG through the *articulation points* of its forward part (the
undirected forward graph's cut vertices): only they separate the network into segments, so
only they are checkpoint candidates.

Every baseline is a keep policy run stage by stage (:func:`plan_from_policy`): stage t
computes node t and whatever inputs it lacks (recursively, from what is held); afterwards a
node stays held while it still has consumers if

* store-all: always (nothing is ever recomputed);
* Chen: it is a backward node, a checkpoint, still needed by a later forward node while the
  forward pass runs, or anything once the backward pass runs (a segment recomputed for a
  backward node is kept until its last consumer, as Chen's scheme does).

Each plan's memory is Checkmate's exact accounting (:func:`plan_peak`) and is checked against
the simulator by :func:`make_schedule`. Units: bytes, milliseconds.
"""

from __future__ import annotations

import math

from remat.schedules import GraphProfile, InfeasibleBudgetError, Schedule
from remat.solver.common import Strategy, make_schedule, require_graph
from remat.solver.deadline import Deadline
from remat.solver.graph.stages import StagePlan, plan_from_policy, plan_ops, plan_peak

REFERENCE = "Chen et al. 2016, applied to DAGs via articulation points as in Jain et al. 2020 (Checkmate)"


def store_all_plan(profile: GraphProfile) -> StagePlan:
    """Compute every node once, in order; free each output after its last consumer."""
    return plan_from_policy(profile)


def forward_articulation_points(profile: GraphProfile) -> list[int]:
    """Cut vertices of the undirected graph on the forward nodes (``backward`` false), ascending
    (networkx's ``articulation_points``: Hopcroft and Tarjan's depth-first search)."""
    import networkx as nx  # here, not at the top: ~0.3 s of import that only the graph strategies pay

    forward = [v for v in range(profile.size) if not profile.nodes[v].backward]
    inside = set(forward)
    graph = nx.Graph()
    graph.add_nodes_from(forward)
    graph.add_edges_from((u, v) for u, v in profile.edges if u in inside and v in inside)
    return sorted(nx.articulation_points(graph))


def checkpoint_plan(profile: GraphProfile, checkpoints: set[int] | frozenset[int], lean: bool = False) -> StagePlan:
    """Chen's segment schedule with the given forward checkpoints (see the module docstring).

    ``lean``: during the backward pass keep a recomputed (non-checkpoint) forward node only if
    the next stage reads it, recomputing it otherwise: slower, less memory (used only as an
    extra warm start for the ILP, not by the Chen baselines)."""
    nodes = profile.nodes
    succs = profile.successors
    forward_consumers_after = [
        max((k for k in succs[i] if not nodes[k].backward), default=-1) for i in range(profile.size)
    ]

    def keep(i: int, t: int, computed: frozenset[int]) -> bool:
        if nodes[i].backward or i in checkpoints:
            return True
        if nodes[t].backward:
            return not lean or (t + 1) in succs[i]
        return forward_consumers_after[i] > t

    return plan_from_policy(profile, keep)


def sqrt_checkpoints(profile: GraphProfile) -> set[int]:
    """Every floor(sqrt(m))-th of the m articulation points (Checkmate's ``solve_chen_sqrtn``)."""
    candidates = forward_articulation_points(profile)
    if not candidates:
        return set()
    step = max(1, math.isqrt(len(candidates)))
    return {v for index, v in enumerate(candidates) if (index + 1) % step == 0}


def greedy_checkpoints(profile: GraphProfile, threshold: float, anywhere: bool = False) -> set[int]:
    """Chen's greedy: walk the forward nodes accumulating output bytes; at an articulation point
    (any forward node if ``anywhere``) whose running total exceeds ``threshold`` bytes,
    checkpoint it and restart the total."""
    if anywhere:
        candidates = {v for v in range(profile.size) if not profile.nodes[v].backward}
    else:
        candidates = set(forward_articulation_points(profile))
    chosen: set[int] = set()
    running = 0
    for v in range(profile.size):
        if profile.nodes[v].backward:
            continue
        running += profile.nodes[v].size
        if v in candidates and running > threshold:
            chosen.add(v)
            running = 0
    return chosen


def greedy_thresholds(profile: GraphProfile, count: int = 24) -> list[float]:
    """Thresholds swept by ``chen-greedy`` (bytes): 0 (all candidates), a geometric grid up to the
    forward bytes, and infinity (no checkpoint: everything recomputed from the inputs)."""
    total = sum(n.size for n in profile.nodes if not n.backward)
    smallest = max(1, min((n.size for n in profile.nodes if n.size > 0), default=1))
    grid = [0.0, math.inf]
    if total > smallest:
        ratio = (total / smallest) ** (1.0 / max(1, count - 1))
        grid += [smallest * ratio**k for k in range(count)]
    return grid


def _finish(profile: GraphProfile, budget: int, name: str, plan: StagePlan, extra: dict) -> Schedule:
    return make_schedule(
        profile,
        budget,
        name,
        plan_ops(profile, plan),
        claimed_compute_ms=plan.cost_ms(profile),
        claimed_peak_memory=plan_peak(profile, plan),
        extra=extra,
    )


def solve_store_all(profile: GraphProfile, budget: int) -> Schedule:
    """Store everything (each output freed after its last consumer); raise below its peak."""
    profile = require_graph(profile, "store-all")
    plan = store_all_plan(profile)
    peak = plan_peak(profile, plan)
    if peak > budget:
        raise InfeasibleBudgetError("store-all", budget, peak)
    return _finish(profile, budget, "store-all", plan, {})


def solve_chen_sqrt(profile: GraphProfile, budget: int) -> Schedule:
    """Chen's sqrt(n) segments over the articulation points; raise if it does not fit."""
    profile = require_graph(profile, "chen-sqrt")
    checkpoints = sqrt_checkpoints(profile)
    plan = checkpoint_plan(profile, checkpoints)
    peak = plan_peak(profile, plan)
    if peak > budget:
        raise InfeasibleBudgetError("chen-sqrt", budget, peak, "its checkpoints are fixed, not chosen for a budget")
    return _finish(profile, budget, "chen-sqrt", plan, {"checkpoints": sorted(checkpoints)})


def greedy_plans(
    profile: GraphProfile, anywhere: bool = False, lean: bool = False
) -> list[tuple[float, frozenset[int], StagePlan, int, float]]:
    """(threshold, checkpoints, plan, peak bytes, cost ms) for every distinct checkpoint set swept."""
    seen: dict[frozenset[int], tuple[float, frozenset[int], StagePlan, int, float]] = {}
    for threshold in greedy_thresholds(profile):
        checkpoints = frozenset(greedy_checkpoints(profile, threshold, anywhere))
        if checkpoints in seen:
            continue
        plan = checkpoint_plan(profile, checkpoints, lean)
        seen[checkpoints] = (threshold, checkpoints, plan, plan_peak(profile, plan), plan.cost_ms(profile))
    return list(seen.values())


def solve_chen_greedy(profile: GraphProfile, budget: int) -> Schedule:
    """Chen's greedy, sweeping its threshold; the cheapest schedule within the budget."""
    profile = require_graph(profile, "chen-greedy")
    plans = greedy_plans(profile)
    fitting = [p for p in plans if p[3] <= budget]
    if not fitting:
        raise InfeasibleBudgetError("chen-greedy", budget, min(p[3] for p in plans))
    threshold, checkpoints, plan, _, _ = min(fitting, key=lambda p: (p[4], p[3]))
    extra = {"checkpoints": sorted(checkpoints), "threshold_bytes": None if math.isinf(threshold) else threshold}
    return _finish(profile, budget, "chen-greedy", plan, extra)


def best_baseline_plan(
    profile: GraphProfile, budget: int, deadline: Deadline | None = None
) -> tuple[str, StagePlan] | None:
    """The cheapest baseline plan within ``budget`` bytes, or None: the ILP's warm start.

    Candidates: store-all, chen-sqrt, the chen-greedy sweep, and the same greedy sweep with any
    forward node as a candidate (much better at loose budgets: on the ResNet-50 graph at 90% of
    store-all, +10% step time instead of chen-greedy's +33%) and/or lean backward recomputation
    (reaches tighter budgets). Past ``deadline`` the remaining greedy variants are skipped (each
    takes about a second on a 400-node graph)."""
    candidates = [("store-all", store_all_plan(profile))]
    candidates.append(("chen-sqrt", checkpoint_plan(profile, sqrt_checkpoints(profile))))
    candidates += [("chen-greedy", p[2]) for p in greedy_plans(profile)]
    for anywhere, lean in ((True, False), (False, True), (True, True)):
        if deadline is not None and deadline.left() <= 0:
            break
        label = "greedy" + (" (any node)" if anywhere else "") + (" (lean)" if lean else "")
        candidates += [(label, p[2]) for p in greedy_plans(profile, anywhere, lean)]
    fitting = [(plan.cost_ms(profile), name, plan) for name, plan in candidates if plan_peak(profile, plan) <= budget]
    if not fitting:
        return None
    cost, name, plan = min(fitting, key=lambda c: c[0])
    return name, plan


STORE_ALL = Strategy(
    name="store-all",
    kind="graph",
    description="no rematerialization: compute every node once, free each output after its last consumer",
    solve=solve_store_all,
)
CHEN_SQRT = Strategy(
    name="chen-sqrt",
    kind="graph",
    description="Chen's sqrt(n) segments over the forward graph's articulation points",
    solve=solve_chen_sqrt,
    reference=REFERENCE,
)
CHEN_GREEDY = Strategy(
    name="chen-greedy",
    kind="graph",
    description="Chen's greedy segments over the articulation points, threshold swept for the budget",
    solve=solve_chen_greedy,
    reference=REFERENCE,
)
