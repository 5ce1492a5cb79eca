"""``recompute-all``: keep only the input; recompute every activation from it before its backward.

For each backward ``B i`` (i = n-1 .. 0) the schedule walks forward from ``a[0]`` without
keeping anything (``F_n 0 .. F_n i-1``; ``F_n 0`` leaves ``a[0]`` in place because the caller
owns it), records stage i (``F_all i``) and runs ``B i``. Memory holds at most the input, one
activation in flight, one recorded stage and one gradient. That is usually the smallest peak of
the baselines, but not always: every recomputation runs while a gradient g[i+1] is held, so on a
heterogeneous chain a stage with a large forward overhead can peak higher here than in a
segment schedule that runs that forward before any gradient exists (a search over random
chains finds such cases). On identical stages it is the smallest of the baselines (tested).
Forward work is quadratic: stage j runs forward ``n - j`` times, n(n+1)/2 forwards in all; a
chain whose schedule would exceed :data:`remat.solver.chain.limits.MAX_OPS` ops (above 6,322
stages) is refused in one line (:func:`check_length`), and ``choose`` skips it in sweeps.
"""

from __future__ import annotations

from remat.schedules import ChainProfile, InfeasibleBudgetError, Op, RematError, Schedule, simulate
from remat.solver.chain.limits import MAX_OPS, recompute_all_ops_count
from remat.solver.common import ProfileCache, Strategy, make_schedule, require_chain

NAME = "recompute-all"


def recompute_all_ops(length: int) -> list[Op]:
    """Ops of the recompute-all schedule for a chain of ``length`` stages."""
    ops: list[Op] = []
    for i in reversed(range(length)):
        ops.extend(("F_n", j) for j in range(i))
        ops.append(("F_all", i))
        ops.append(("B", i))
    return ops


_PEAK = ProfileCache()


def too_long(length: int) -> bool:
    """Whether the schedule of ``length`` stages exceeds the ops limit."""
    return recompute_all_ops_count(length) > MAX_OPS


def check_length(profile: ChainProfile) -> None:
    """A one-line refusal for a chain whose schedule would exceed the ops limit."""
    if too_long(profile.length):
        raise RematError(
            f"recompute-all: {profile.length} stages make a schedule of {recompute_all_ops_count(profile.length)} ops "
            f"(n(n+3)/2), more than the {MAX_OPS} a schedule may hold (at most 6322 stages); "
            f"use revolve, chen-sqrt or optimal for the least memory"
        )


def _peak(profile: ChainProfile) -> int:
    return _PEAK.get(profile, NAME, lambda: simulate(profile, recompute_all_ops(profile.length), False).peak_memory)


def choose(profile: ChainProfile, budget: int) -> str | None:
    """``"all"`` if the one schedule fits ``budget`` bytes, else None (also for a chain too long for it)."""
    if too_long(require_chain(profile, NAME).length):
        return None
    return "all" if _peak(require_chain(profile, NAME)) <= budget else None


def solve(profile: ChainProfile, budget: int) -> Schedule:
    """The recompute-all schedule; raise :class:`InfeasibleBudgetError` if its peak exceeds ``budget`` bytes."""
    profile = require_chain(profile, NAME)
    check_length(profile)
    # Its only schedule: the smallest budget it meets is that schedule's peak.
    peak = _peak(profile)
    if peak > budget:
        raise InfeasibleBudgetError(NAME, budget, peak)
    ops = recompute_all_ops(profile.length)
    claimed = sum(s.forward_ms * (profile.length - j) + s.backward_ms for j, s in enumerate(profile.stages))
    return make_schedule(profile, budget, NAME, ops, claimed_compute_ms=claimed)


STRATEGY = Strategy(
    name=NAME,
    kind="chain",
    description="keep only the input, recompute from it before every backward: little memory, quadratic time",
    solve=solve,
    reference="the trivial extreme of Chen et al. 2016 / Griewank-Walther with one checkpoint",
    choose=choose,
)
