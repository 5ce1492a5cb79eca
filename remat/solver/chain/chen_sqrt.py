"""``chen-sqrt``: Chen et al. 2016's sqrt(n) checkpointing.

The chain is cut into segments of ``L = round(sqrt(n))`` stages (at least 1): segment starts
``0, L, 2L, ...``; the boundaries are stored during the forward, everything inside a segment is
recomputed once during the backward (:func:`remat.solver.chain.segments.segment_ops`; the last
segment is recorded right away, as its backward follows). This gives O(sqrt(n)) activation memory
on a homogeneous chain for about one extra forward pass. The cut points count stages, not
bytes: on heterogeneous chains it ignores where activations are small (``chen-greedy`` does not).
It does not look at the budget except to refuse it: the smallest budget it can meet is the peak
of its one schedule.
"""

from __future__ import annotations

import math

from remat.schedules import ChainProfile, InfeasibleBudgetError, Schedule
from remat.solver.chain.segments import segment_arrays, segment_costs, segment_ops
from remat.solver.common import Strategy, make_schedule, require_chain

NAME = "chen-sqrt"


def sqrt_segment_starts(length: int) -> tuple[int, ...]:
    """Starts of segments of ``round(sqrt(length))`` stages."""
    size = max(1, round(math.sqrt(length)))
    return tuple(range(0, length, size))


def _peak(profile: ChainProfile) -> int:
    return segment_costs(segment_arrays(profile), sqrt_segment_starts(profile.length))[0]


def choose(profile: ChainProfile, budget: int) -> str | None:
    """``"sqrt"`` if the one schedule fits ``budget`` bytes, else None."""
    return "sqrt" if _peak(require_chain(profile, NAME)) <= budget else None


def solve(profile: ChainProfile, budget: int) -> Schedule:
    """The sqrt(n)-segment schedule; raise :class:`InfeasibleBudgetError` if its peak exceeds ``budget`` bytes."""
    profile = require_chain(profile, NAME)
    starts = sqrt_segment_starts(profile.length)
    peak = _peak(profile)
    if peak > budget:
        raise InfeasibleBudgetError(NAME, budget, peak)
    return make_schedule(
        profile, budget, NAME, segment_ops(profile.length, starts), extra={"segment_starts": list(starts)}
    )


STRATEGY = Strategy(
    name=NAME,
    kind="chain",
    description="Chen et al. 2016: segments of about sqrt(n) stages, boundaries stored, one extra forward",
    solve=solve,
    reference="Chen, Xu, Zhang, Guestrin 2016, Training Deep Nets with Sublinear Memory Cost",
    choose=choose,
)
