"""A local search on the flat R/S plan of the block schedule, for one budget (``hierarchical``).

The block DP records each block with one of its options and keeps a block's kept outputs until
the backward that reads them: it cannot drop a value before a backward memory peak *inside*
another block and recompute it after. On U-Net (most of the network one block, its skips held
across the decoder's backward) that is where the flat ILP's schedules are faster: at 50% of
store-all the DP's plan recomputes ``down.3.0`` and ``down.3.3`` in the decoder's backward, where
keeping them (64 MB) through the peak of ``bwd:up_conv.3.3`` fits once ``up_conv.1.3``'s output is
dropped there and recomputed where it is read again (+0.78 s against -1.16 s).

This search makes exactly such moves on the plan's S (the kept sets; R follows as the cheapest
recomputation, :func:`~remat.solver.graph.stages.plan_from_s`):

* **keep**: for a stage that recomputes nodes, keep one to :data:`KEEP_AT_MOST` of them from
  their previous use instead (their recomputation, and whatever it needed, is saved);
* **make room**: if that goes over the budget at some stages, drop one node that is held but
  unread across all of them, from its use before the first to its use after the last (it is
  recomputed there), taking the fastest such pair that stays within the budget.

A move is taken when the plan gets strictly faster (first improvement, stages and subsets in
index order), so the result is never slower than the plan it starts from, and every plan is
within the budget (the simulator checks the schedule made from it). The search stops when no
move helps, after :data:`MAX_FLAT_WORK` (evaluated plans x nodes**2: deterministic whatever the
machine; ~1 s on this 2-core machine's slowest graph), or when the deadline passes (it returns
the best plan so far). A local search: no optimality.

Units: bytes and milliseconds.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from remat.schedules import GraphProfile
from remat.solver.deadline import Deadline
from remat.solver.graph.stages import StagePlan, plan_from_s, plan_peak, stage_peaks

KEEP_AT_MOST = 3  # recomputed nodes of one stage kept together in one move
MAX_FLAT_WORK = 6_000_000  # evaluated plans x nodes**2 (at most ~1500 plans on U-Net, ~45 on DenseNet-121)

Wish = list[set[int]]


class _Search:
    """The plan being improved and the work spent (one evaluation costs ``nodes**2`` units)."""

    def __init__(self, profile: GraphProfile, budget: int, plan: StagePlan) -> None:
        self.profile = profile
        self.budget = budget
        self.plan = plan
        self.cost = plan.cost_ms(profile)
        self.work = 0
        self.unit = profile.size**2

    def spent(self, deadline: Deadline | None) -> bool:
        """The work cap reached or the deadline passed: the search stops where it is."""
        return self.work >= MAX_FLAT_WORK or (deadline is not None and deadline.left() <= 0)

    def evaluate(self, wish: Wish) -> StagePlan:
        self.work += self.unit
        return plan_from_s(self.profile, wish)

    def uses(self, plan: StagePlan, i: int) -> list[int]:
        """The stages that compute node i or one of its consumers, ascending."""
        succs = self.profile.successors[i]
        return [t for t in range(i, self.profile.size) if i in plan.R[t] or any(k in plan.R[t] for k in succs)]


def _keeps(search: _Search) -> Iterator[tuple[tuple[int, ...], Wish]]:
    """Each keep move on the current plan: the nodes and the wish list (S) that keeps them."""
    plan = search.plan
    uses: dict[int, list[int]] = {}  # per node, on this plan (a move ends the walk)
    for t in range(search.profile.size):
        again = sorted(plan.R[t] - {t})
        for i in again:
            if i not in uses:
                uses[i] = search.uses(plan, i)
        for count in range(1, min(KEEP_AT_MOST, len(again)) + 1):
            for nodes in itertools.combinations(again, count):
                wish = [set(s) for s in plan.S]
                for i in nodes:
                    before = max(s for s in uses[i] if s < t)
                    for s in range(before + 1, t + 1):
                        wish[s].add(i)
                yield nodes, wish


def _drops(search: _Search, plan: StagePlan, over: list[int], need: int) -> Iterator[Wish]:
    """Wish lists that drop one node held and unread across every stage in ``over`` (at least
    ``need`` bytes), from its use before the first of them to its use after the last."""
    nodes = search.profile.nodes
    common = set.intersection(*(set(plan.S[t]) for t in over))
    for i in sorted(common):
        if nodes[i].size < need or not nodes[i].recompute:
            continue
        uses = search.uses(plan, i)
        before = max((s for s in uses if s < over[0]), default=None)
        after = min((s for s in uses if s > over[-1]), default=None)
        if before is None or after is None or any(before < s < after for s in uses):
            continue
        wish = [set(s) for s in plan.S]
        for s in range(before + 1, after + 1):
            wish[s].discard(i)
        yield wish


def _fitted(search: _Search, plan: StagePlan, deadline: Deadline | None) -> StagePlan | None:
    """``plan`` if within the budget, else the fastest plan one drop makes fit that is still
    faster than the current one (None if there is none)."""
    peaks = stage_peaks(search.profile, plan)
    over = [t for t, peak in enumerate(peaks) if peak > search.budget]
    if not over:
        return plan
    best = None
    for wish in _drops(search, plan, over, max(peaks) - search.budget):
        if search.spent(deadline):
            break
        fitted = search.evaluate(wish)
        cost = fitted.cost_ms(search.profile)
        if (
            cost < search.cost
            and (best is None or cost < best[0])
            and plan_peak(search.profile, fitted) <= search.budget
        ):
            best = (cost, fitted)
    return None if best is None else best[1]


def flat_search(profile: GraphProfile, budget: int, plan: StagePlan, deadline: Deadline | None = None) -> StagePlan:
    """The fastest plan the moves of the module doc reach from ``plan`` (within ``budget`` bytes,
    as ``plan`` must be); ``plan`` itself if none is faster."""
    search = _Search(profile, budget, plan)
    improved = True
    while improved:
        improved = False
        for _, wish in _keeps(search):
            if search.spent(deadline):
                return search.plan
            kept = search.evaluate(wish)
            if kept.cost_ms(profile) >= search.cost:
                continue
            fitted = _fitted(search, kept, deadline)
            if fitted is not None:
                search.plan, search.cost = fitted, fitted.cost_ms(profile)
                improved = True
                break
    return search.plan
