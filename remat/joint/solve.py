"""Choosing the save set of a joint graph under a byte budget (docs/compile.md, "How it solves").

The graph solvers work on the joint profile and return general schedules; a forward/backward
pair realizes only part of what they can express (:mod:`remat.joint.plan`), so every schedule is
turned into its save set (:func:`~remat.joint.plan.held_at_backward`) and judged by the realized
partition's own simulated peak and time, costed from the joint graph's order without building
its graphs (:mod:`remat.joint.order`). The candidates:

1. store-all (save everything the backward reads) and save-nothing (only pinned values and the
   primals: the backward recomputes the whole forward); then the seeds, torch's own min-cut
   partitions at its ``activation_memory_budget`` ratios (:mod:`remat.joint.min_cut`), each
   also with the outputs of the attention it recomputes saved (attention without dropout);
2. the ``hierarchical`` solver at :data:`GRID` budgets from its least budget to the store-all
   peak, and at the caller's budget lowered by each overshoot (:data:`REPAIRS` times): a
   realized partition can peak above the solver's schedule (its recomputations all live until
   their last use, its gradients until the backward returns);
3. the ``ilp`` (Checkmate's) at the solver budget of the best hierarchical candidate, for
   ``ilp_seconds`` seconds, on graphs of at most :data:`ILP_NODES` nodes (its model grows with
   the square of the node count). It is called with its default warm starts
   (``remat.solver.graph.ilp.WARM_STARTS``), which run the hierarchical solver again at that
   same budget: the best hierarchical candidate's plan is among its starts.

Among the candidates within the budget, the fastest wins (ties: the lower peak). The least budget
is the least realized peak among the candidates; below it the refusal names it.

Units: bytes (int), milliseconds (float), seconds for ``ilp_seconds``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from torch import fx

from remat.joint.heap import collect_garbage
from remat.joint.joint_profile import JointProfile, seeded_without_dropout
from remat.joint.order import JointOrder, Uncovered
from remat.joint.plan import Realized, held_at_backward, realize
from remat.schedules import RematError, simulate_graph
from remat.schedules.units import format_size
from remat.solver.graph import hierarchical, ilp
from remat.solver.graph.baselines import store_all_plan
from remat.solver.graph.stages import plan_ops

GRID = 12
REPAIRS = 4
ILP_NODES = 300


class BelowLeast(RematError):
    """A budget below the least simulated peak the graphs can meet (one line naming that least).
    ``remat.compile`` measures the least plans before it refuses such a budget (NOTE [A budget
    below the least simulated is measured at the least])."""


@dataclass(frozen=True)
class Front:
    """Every realized candidate of one joint graph (deduplicated by save set) and where each came
    from; ``torch_cuts``: ``(ratio, save set)`` of torch.compile's own partition at each
    ``activation_memory_budget`` ratio computed (:mod:`remat.joint.min_cut`), as realized (each
    is one of the candidates)."""

    candidates: tuple[Realized, ...]
    sources: tuple[str, ...]
    torch_cuts: tuple[tuple[float, frozenset[int]], ...] = ()

    @property
    def least(self) -> int:
        """The least realized peak (bytes)."""
        return min(c.peak for c in self.candidates)

    @property
    def store_all(self) -> Realized:
        """The store-all partition (the first candidate)."""
        return self.candidates[0]

    def replaced(self, index: int, candidate: Realized) -> Front:
        """This front with candidate ``index`` replaced (the same save set, costed again)."""
        candidates = list(self.candidates)
        candidates[index] = candidate
        return replace(self, candidates=tuple(candidates))

    def candidate(self, saved: frozenset[int]) -> Realized:
        """The candidate whose (realized) save set is ``saved``."""
        return next(c for c in self.candidates if c.saved == saved)

    def choose(self, budget: int) -> tuple[Realized, str]:
        """The fastest candidate within ``budget`` bytes and its source; a one-line
        :class:`BelowLeast` naming the least budget below it."""
        fitting = [(c, s) for c, s in zip(self.candidates, self.sources, strict=True) if c.peak <= budget]
        if not fitting:
            raise BelowLeast(
                f"remat.compile: budget {format_size(budget)} ({budget} bytes) is below the least this graph "
                f"can meet, {format_size(self.least)} ({self.least} bytes)"
            )
        return min(fitting, key=lambda item: (item[0].ms, item[0].peak))


class _Collector:
    def __init__(self, jp: JointProfile, gm: fx.GraphModule, static_inputs: Sequence[fx.Node]) -> None:
        self.jp, self.gm, self.static = jp, gm, static_inputs
        self.graph_order = JointOrder(jp, gm)
        self.by_saved: dict[frozenset[int], tuple[Realized, str]] = {}
        self.order: list[frozenset[int]] = []

    def add(self, saved: frozenset[int], source: str) -> Realized:
        key = frozenset(saved)
        if key not in self.by_saved:
            try:  # NOTE [Costing a save set without building its graphs]
                realized = self.graph_order.cost(key)
            except Uncovered:
                realized = replace(realize(self.jp, self.gm, key, self.static), forward=None, backward=None)
                collect_garbage()  # NOTE [The solve's garbage collection]
            self.by_saved[key] = (realized, source)
            self.order.append(key)
        return self.by_saved[key][0]

    def schedule(self, budget: int, source: str) -> Realized | None:
        try:
            # no local searches: only the save set is kept (held_at_backward), and on GPT-2 and
            # Llama they changed no candidate's while taking 70% of the solve (docs/compile.md)
            found = hierarchical.solve(self.jp.profile, int(budget), local_search=False)
        except RematError:
            return None
        return self.add(held_at_backward(self.jp, found.ops), f"{source} at {budget} bytes")

    def front(self, torch_cuts: Sequence[tuple[float, frozenset[int]]] = ()) -> Front:
        items = [self.by_saved[k] for k in self.order]
        return Front(tuple(r for r, _ in items), tuple(s for _, s in items), tuple(torch_cuts))


def solve_front(
    jp: JointProfile,
    gm: fx.GraphModule,
    budget: int | Callable[[int], int] | None,
    static_inputs: Sequence[fx.Node] = (),
    ilp_seconds: float = 0.0,
    torch_cuts: Sequence[tuple[float, frozenset[int]]] = (),
) -> tuple[Front, int | None]:
    """The realized candidates of ``jp`` (see the module docstring), ``torch_cuts`` among them
    (``(ratio, save set)``: torch's min-cut partitions, :mod:`remat.joint.min_cut`), and the
    budget (bytes) they were steered by: ``budget`` itself, or ``budget(store-all peak)`` when it
    is a function (a fraction of it), or None for none in particular (no repairs, no ILP)."""
    profile = jp.profile
    found = _Collector(jp, gm, static_inputs)
    store_all = found.add(jp.forward, "store-all")
    if callable(budget):
        budget = int(budget(store_all.peak))
    found.add(frozenset(), "save-nothing")
    # realized, a save set gains the pinned values torch's partitioner also keeps
    torch_cuts = [(ratio, found.add(saved, f"torch min-cut at {ratio:g}").saved) for ratio, saved in torch_cuts]
    # torch recomputes attention without dropout in its backward; saving its outputs instead can
    # measure less (a 4-layer decoder's 0.1 partition: 8273544 bytes against 9245320), so each
    # torch partition is also a candidate with them saved
    forward = jp.forward
    attention = frozenset(
        jp.group[n.name]
        for n in gm.graph.nodes
        if n.op == "call_function" and seeded_without_dropout(n) and jp.group.get(n.name) in forward
    )
    for ratio, saved in torch_cuts if attention else ():
        found.add(saved | attention, f"torch min-cut at {ratio:g}, attention saved")
    top = simulate_graph(profile, plan_ops(profile, store_all_plan(profile)), timeline=False).peak_memory
    try:
        low = hierarchical.least_budget(profile)
    except RematError:  # a graph the hierarchical solver cannot cut: the two extremes only
        return found.front(torch_cuts), budget
    for k in range(GRID):
        found.schedule(low + (top - low) * k // max(1, GRID - 1), "hierarchical")
    if budget is not None:
        target = int(budget)
        for _ in range(REPAIRS):
            if target < low:
                break
            got = found.schedule(target, "hierarchical, repaired")
            if got is None or got.peak <= budget:
                break
            target -= got.peak - int(budget)
    if ilp_seconds > 0 and profile.size <= ILP_NODES and budget is not None:
        _ilp(found, budget, low, ilp_seconds)
    return found.front(torch_cuts), budget


def _ilp(found: _Collector, budget: int, low: int, seconds: float) -> None:
    """The ILP at the solver budget of the best hierarchical candidate within ``budget``."""
    try:
        best, source = found.front().choose(budget)
    except RematError:
        return
    solver_budget = int(source.rsplit(" at ", 1)[1].split()[0]) if " at " in source else budget
    try:
        plan = ilp.solve(found.jp.profile, max(low, solver_budget), time_limit=float(seconds))
    except RematError:
        return
    found.add(held_at_backward(found.jp, plan.ops), f"ilp at {solver_budget} bytes ({seconds:g} s)")
