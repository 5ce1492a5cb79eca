"""``optimal``: the cheapest persistent schedule of a heterogeneous chain, over the whole front.

This is the persistent-schedule dynamic program of Beaumont et al. (rotor, "Optimal
checkpointing for heterogeneous chains", 2019), derived here from the op semantics of
docs/model.md ("Chains"); the recurrence and its derivation are in :mod:`remat.solver.chain.dp.table`. What
is claimed:

* **optimal among persistent schedules, up to discretization**: memory is counted in slots and
  every size is rounded *up*, so a returned schedule is always within the real budget and no
  persistent schedule is faster at the budget as seen in slots (exact with one-byte slots). A
  non-persistent schedule (one that drops a stored checkpoint before its backward and
  recomputes it) can be faster: over every integer budget of 120 random 3-6 stage chains
  (1,305 chain-budget pairs with a schedule, ``python tests/solver/chain/test_exhaustive.py 60 1`` and ``60 2``)
  the persistent optimum was slower in 15 pairs (11 chains), by 4.9% on average and 13.8% at
  most, and never infeasible where some schedule existed.
* **right at both ends** (:func:`optimal_front`): tables at several scales (the store-all
  budget's free memory, an eighth of it, ... down to the minimum, each with its own slot size)
  merged with store-all and the exact least-memory persistent schedule
  (:mod:`remat.solver.chain.dp.minimum`, no slots), dominated points dropped.
* :func:`minimum_budget` is exact; :func:`solve` returns the faster of the front's point within
  the budget and the budget's own table's best, so it is never slower than the front at any
  smaller budget, resolves a budget between two of the front's tables in its own slots, succeeds
  at every budget from the minimum on, and answers alike whatever the process solved before.

A profile whose stages have recording options (docs/model.md, "Several recording options per
stage") is solved by
:mod:`remat.solver.chain.dp.options_front` (the same claims, over every choice of options).

Every schedule goes through :func:`remat.solver.common.make_schedule`: the DP's claimed step time
(from the recurrence) and peak (from the DP's own memory model, walked in bytes) must equal the
simulator's, or it raises ``SolverBug``.

A chain of more than :data:`~remat.solver.chain.dp.blocked.FLAT_LIMIT` (1,000) stages, where the
flat table's O(n**2) cells and O(n**3) work no longer fit seconds and memory, is solved by the
blocked DP (:mod:`remat.solver.chain.dp.blocked`): the same recurrence inside blocks of
``ceil(n / 200)`` stages and block-aligned options across them, optimal over that family, never
faster than the flat DP (proven there), its loss measured at 1,000 stages (docs/benchmarks.md);
its schedules say so in ``extra["claim"]`` and ``extra["blocks"]``. It takes up to
:data:`~remat.solver.chain.dp.blocked.MAX_STAGES` (20,000) stages and refuses longer chains in one line.

This module is the strategy's front door: it checks the arguments and sends a profile to the
single-option DP (:mod:`remat.solver.chain.dp.single`) or the multi-option one; the DP's parts are
in :mod:`remat.solver.chain.dp`, and what it keeps between calls in
:data:`remat.solver.chain.dp.cache.CACHE`.

Units: bytes and milliseconds.
"""

from __future__ import annotations

from remat.schedules import ChainProfile, Schedule
from remat.solver.chain.dp import blocked, options_front, single
from remat.solver.chain.dp.readback import Plan, front_summaries, plan
from remat.solver.chain.dp.single import DEFAULT_SLOTS, NAME, SCALE_RATIO, check_slots, table_for
from remat.solver.common import Strategy, require_chain
from remat.solver.front import FrontPoint, pareto_filter, pareto_order

__all__ = [
    "DEFAULT_SLOTS",
    "NAME",
    "SCALE_RATIO",
    "STRATEGY",
    "Plan",
    "front_summaries",
    "minimum_budget",
    "optimal_front",
    "pareto_filter",
    "pareto_order",
    "plan",
    "solve",
    "table_for",
]


def minimum_budget(profile: ChainProfile, slots: int = DEFAULT_SLOTS) -> int:
    """The exact smallest budget (bytes) of any persistent schedule: :func:`solve` returns a
    schedule at this budget and at every larger one (``slots`` does not change it; it is kept for
    callers that pass it)."""
    profile = require_chain(profile, NAME)
    check_slots(slots)
    if profile.length > blocked.FLAT_LIMIT:
        return blocked.least_budget(profile, blocked.block_size(profile.length))
    if profile.has_options:  # stages with several recording options
        return options_front.least_budget(profile, slots)
    return single.minimum_budget(profile)


def solve(profile: ChainProfile, budget: int, slots: int = DEFAULT_SLOTS) -> Schedule:
    """The fastest schedule within ``budget`` bytes among the multi-scale front (see
    :func:`optimal_front`) and the budget's own table (``slots`` levels over its free memory, which
    resolves a budget between two of the front's tables finely): optimal among persistent
    schedules up to each table's discretization; never slower than the front gives at a smaller
    budget; a schedule at every budget from :func:`minimum_budget` (exact) on. A function of
    (profile, budget, slots) alone: no earlier call's answer takes part."""
    profile = require_chain(profile, NAME)
    check_slots(slots)
    if profile.length > blocked.FLAT_LIMIT:
        return blocked.solve(profile, budget, slots)
    if profile.has_options:  # stages with several recording options
        return options_front.solve_options(profile, budget, slots)
    return single.solve(profile, budget, slots)


def optimal_front(profile: ChainProfile, slots: int = DEFAULT_SLOTS, progress: bool = False) -> list[FrontPoint]:
    """The memory/compute front of persistent schedules, right at both ends.

    Tables at several scales: the store-all budget's free memory, then an eighth of it, and so on
    down to the exact minimum (:data:`SCALE_RATIO`), each with its own ``slots`` levels, so that
    a budget near the minimum is seen with slots as fine as one near store-all; plus the exact
    least-memory schedule (:mod:`remat.solver.chain.dp.minimum`) and store-all. Each point's peak
    and time are the DP model's (which :func:`solve` checks against the simulator for every
    schedule it returns; the tests check them for the front). Points are sorted by peak memory
    and dominated ones (another point no larger and no slower) are dropped. Its least memory is
    the least of any persistent schedule, so no baseline (all persistent) goes below it.
    """
    profile = require_chain(profile, NAME)
    check_slots(slots)
    if profile.length > blocked.FLAT_LIMIT:
        return blocked.front(profile, slots)
    if profile.has_options:  # stages with several recording options
        return options_front.options_front(profile, slots)
    return list(single.front(profile, slots, progress).points)


STRATEGY = Strategy(
    name=NAME,
    kind="chain",
    description="persistent-schedule DP (rotor), tables at several memory scales: fastest persistent schedule",
    solve=solve,
    options=("slots",),
    reference="Beaumont et al. 2019, Optimal checkpointing for heterogeneous chains (rotor)",
)
