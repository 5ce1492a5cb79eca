"""``chen-greedy``: Chen et al. 2016's budget-driven greedy segmentation, with a threshold search.

Their memory-planning algorithm walks the network in order with a threshold ``b``::

    temp = 0
    for stage i = 0 .. n-1:
        temp += size of stage i          # here: saved_size, the bytes its recorded forward holds
        if temp > b: store a_{i+1} as a checkpoint; temp = 0

so a new segment starts after the stage that pushes the accumulated memory past ``b``. Each
``b`` gives a segmentation (built into ops by :func:`remat.solver.segments.segment_ops`; the last
segment is recorded right away). Chen et al. search ``b`` on a grid around sqrt(x*y); here the
search covers every threshold that can change the outcome: the greedy's result only changes when
``b`` crosses the sum of ``saved_size`` over some run of consecutive stages, so the candidates are
those sums (and -1, which cuts after every stage). Chains with more than ``MAX_THRESHOLDS``
distinct sums use that many evenly spaced quantiles of them. Every distinct segmentation is
simulated; the fastest within the budget wins (ties: lower peak, then fewer segments). With none
within budget, the error states the smallest simulated peak among the candidates.
"""

from __future__ import annotations

from itertools import accumulate

from remat.schedules import ChainProfile, InfeasibleBudgetError, Schedule
from remat.solver.common import Strategy, make_schedule, require_chain
from remat.solver.segments import best_segmentation, segment_ops

NAME = "chen-greedy"
MAX_THRESHOLDS = 4000


def greedy_starts(sizes: list[int], threshold: int) -> tuple[int, ...]:
    """Segment starts of Chen's greedy walk with ``threshold`` bytes over per-stage ``sizes``."""
    starts = [0]
    accumulated = 0
    for i, size in enumerate(sizes):
        accumulated += size
        if accumulated > threshold and i + 1 < len(sizes):
            starts.append(i + 1)
            accumulated = 0
    return tuple(starts)


def candidate_thresholds(sizes: list[int]) -> list[int]:
    """Thresholds at which the greedy's outcome can change: sums over consecutive stages, and -1."""
    prefix = [0, *accumulate(sizes)]
    sums = sorted({prefix[j] - prefix[i] for i in range(len(sizes)) for j in range(i + 1, len(sizes) + 1)})
    if len(sums) > MAX_THRESHOLDS:
        step = (len(sums) - 1) / (MAX_THRESHOLDS - 1)
        sums = sorted({sums[round(k * step)] for k in range(MAX_THRESHOLDS)})
    return [-1, *sums]


def solve(profile: ChainProfile, budget: int) -> Schedule:
    """The fastest greedy segmentation within ``budget`` bytes over all thresholds."""
    profile = require_chain(profile, NAME)
    sizes = [stage.saved_size for stage in profile.stages]
    by_starts: dict[tuple[int, ...], int] = {}
    for threshold in candidate_thresholds(sizes):
        by_starts.setdefault(greedy_starts(sizes, threshold), threshold)
    starts, min_peak = best_segmentation(profile, list(by_starts), budget)
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
)
