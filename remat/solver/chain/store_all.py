"""``store-all``: no checkpointing. Record every stage's forward, then run every backward.

The fastest schedule (no recomputation) and the memory ceiling every other strategy is
measured against: peak = input + all saved tensors + the output gradient (plus transients).
"""

from __future__ import annotations

from remat.schedules import ChainProfile, InfeasibleBudgetError, Op, Schedule, simulate
from remat.solver.common import Strategy, make_schedule, require_chain

NAME = "store-all"


def store_all_ops(profile: ChainProfile) -> list[Op]:
    """``F_all 0 .. F_all n-1, B n-1 .. B 0``."""
    n = profile.length
    return [("F_all", i) for i in range(n)] + [("B", i) for i in reversed(range(n))]


def store_all_peak(profile: ChainProfile) -> int:
    """Peak memory (bytes) of the store-all schedule."""
    return simulate(profile, store_all_ops(profile), timeline=False).peak_memory


def choose(profile: ChainProfile, budget: int) -> str | None:
    """``"all"`` if store-all fits ``budget`` bytes, else None."""
    return "all" if store_all_peak(require_chain(profile, NAME)) <= budget else None


def solve(profile: ChainProfile, budget: int) -> Schedule:
    """Store everything; raise if the budget (bytes) is below the store-all peak."""
    profile = require_chain(profile, NAME)
    ops = store_all_ops(profile)
    peak = simulate(profile, ops, timeline=False).peak_memory
    if peak > budget:
        raise InfeasibleBudgetError(NAME, budget, peak)
    return make_schedule(profile, budget, NAME, ops, claimed_compute_ms=profile.store_all_compute_ms)


STRATEGY = Strategy(
    name=NAME,
    kind="chain",
    description="no checkpointing: record every forward, fastest, most memory",
    solve=solve,
    choose=choose,
)
