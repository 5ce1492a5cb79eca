"""``chen-greedy``: Chen et al. 2016's budget-driven greedy segmentation, with a threshold search.

Their memory-planning algorithm walks the network in order with a threshold ``b``::

    temp = 0
    for stage i = 0 .. n-1:
        temp += size of stage i          # here: saved_size, the bytes its recorded forward holds
        if temp > b: store a_{i+1} as a checkpoint; temp = 0

so a new segment starts after the stage that pushes the accumulated memory past ``b``. Each
``b`` gives a segmentation (built into ops by :func:`remat.solver.chain.segments.segment_ops`; the last
segment is recorded right away). Chen et al. search ``b`` on a grid around sqrt(x*y); here the
search covers every threshold that can change the outcome: the greedy's result only changes when
``b`` crosses the sum of ``saved_size`` over some run of consecutive stages, so the candidates are
those sums (and -1, which cuts after every stage). Chains with more than ``MAX_THRESHOLDS``
distinct sums use that many evenly spaced quantiles of them. Every distinct segmentation is
costed in closed form (:func:`remat.solver.chain.segments.segment_costs`, once per profile: a sweep over
budgets reuses them); the fastest within the budget wins (ties: lower peak, then fewer segments). With none
within budget, the error states the smallest simulated peak among the candidates.
"""

from __future__ import annotations

from bisect import bisect_right
from itertools import accumulate

import numpy as np

from remat.schedules import ChainProfile, InfeasibleBudgetError, RematError, Schedule
from remat.solver.chain.segments import Candidate, evaluate, pick, segment_ops
from remat.solver.common import ProfileCache, Strategy, make_schedule, require_chain

NAME = "chen-greedy"
MAX_THRESHOLDS = 4000
MAX_STAGES = 10_000  # the threshold search enumerates n(n+1)/2 sums: 50 million (~1.7 GB at peak) here


def check_length(profile: ChainProfile) -> None:
    """A one-line refusal for a chain too long for the threshold search."""
    if profile.length > MAX_STAGES:
        raise RematError(
            f"chen-greedy: its threshold search enumerates the n(n+1)/2 sums of consecutive stages; "
            f"{profile.length} stages exceed its limit of {MAX_STAGES}; use chen-sqrt, sequential or revolve"
        )


def greedy_starts(sizes: list[int], threshold: int, prefix: list[int] | None = None) -> tuple[int, ...]:
    """Segment starts of Chen's greedy walk with ``threshold`` bytes over per-stage ``sizes``.

    The walk closes a segment at the first stage whose running sum passes the threshold: with
    prefix sums that stage is found by bisection, so the cost is per segment, not per stage."""
    if prefix is None:
        prefix = [0, *accumulate(sizes)]
    n = len(sizes)
    starts = [0]
    start = 0
    while True:
        # first i >= start with prefix[i + 1] - prefix[start] > threshold
        end = bisect_right(prefix, prefix[start] + threshold, lo=start + 1)  # = i + 1
        if end >= n:
            return tuple(starts)
        starts.append(end)
        start = end


def candidate_thresholds(sizes: list[int]) -> list[int]:
    """Thresholds at which the greedy's outcome can change: sums over consecutive stages, and -1."""
    prefix = np.array([0, *accumulate(sizes)], dtype=object if sum(sizes) >= 1 << 62 else np.int64)
    upper = np.triu_indices(len(sizes) + 1, 1)
    sums = np.unique(prefix[upper[1]] - prefix[upper[0]])
    if len(sums) > MAX_THRESHOLDS:
        step = (len(sums) - 1) / (MAX_THRESHOLDS - 1)
        sums = np.unique(sums[[round(k * step) for k in range(MAX_THRESHOLDS)]])
    return [-1, *(int(x) for x in sums)]


_CANDIDATES = ProfileCache()


def _segmentations(profile: ChainProfile) -> tuple[list[Candidate], dict[tuple[int, ...], int]]:
    """Every threshold's segmentation with its closed-form cost, computed once per profile."""

    def compute():
        sizes = [stage.saved_size for stage in profile.stages]
        prefix = [0, *accumulate(sizes)]
        by_starts: dict[tuple[int, ...], int] = {}
        for threshold in candidate_thresholds(sizes):
            by_starts.setdefault(greedy_starts(sizes, threshold, prefix), threshold)
        return evaluate(profile, list(by_starts)), by_starts

    return _CANDIDATES.get(profile, "greedy", compute)


def choose(profile: ChainProfile, budget: int) -> tuple[int, ...] | None:
    """The segment starts :func:`solve` returns at ``budget`` bytes, or None (also for a chain
    longer than :data:`MAX_STAGES`)."""
    if require_chain(profile, NAME).length > MAX_STAGES:
        return None
    return pick(_segmentations(require_chain(profile, NAME))[0], budget)[0]


def solve(profile: ChainProfile, budget: int) -> Schedule:
    """The fastest greedy segmentation within ``budget`` bytes over all thresholds."""
    profile = require_chain(profile, NAME)
    check_length(profile)
    candidates, by_starts = _segmentations(profile)
    starts, min_peak = pick(candidates, budget)
    if starts is None:
        raise InfeasibleBudgetError(NAME, budget, min_peak, f"over {len(by_starts)} greedy segmentations")
    return make_schedule(
        profile,
        budget,
        NAME,
        segment_ops(profile.length, starts),
        extra={"threshold": by_starts[starts], "segment_starts": list(starts)},
    )


STRATEGY = Strategy(
    name=NAME,
    kind="chain",
    description="Chen et al. 2016 greedy: new segment when accumulated memory passes a threshold; threshold searched",
    solve=solve,
    reference="Chen et al. 2016, Training Deep Nets with Sublinear Memory Cost (memory planning with budget)",
    choose=choose,
)
