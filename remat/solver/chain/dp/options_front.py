"""The ``optimal`` DP's front and its answer at a budget when stages have several recording options.

The front merges options tables (:mod:`remat.solver.chain.dp.options`) at several memory scales
(as the single-option DP does) with the single-option DP's own front
(:mod:`remat.solver.chain.dp.single`; every single-option schedule is a multi-option one): so it
is never worse than without options at any budget, and keeps the single-option DP's exact
least-memory schedule. Tables and fronts are kept in :data:`remat.solver.chain.dp.cache.CACHE`.

Units: bytes and milliseconds.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

from remat.schedules import ChainProfile, InfeasibleBudgetError, Schedule
from remat.solver.chain.checkpoints import chain_checkpoints
from remat.solver.chain.dp import single
from remat.solver.chain.dp.cache import CACHE
from remat.solver.chain.dp.options import OptionsTable, build_options_table, read_plan
from remat.solver.chain.store_all import store_all_peak
from remat.solver.common import make_schedule
from remat.solver.front import FrontPoint, pareto_order

NAME = single.NAME
SCALE_RATIO = single.SCALE_RATIO


@dataclass(frozen=True)
class _Source:
    """Where a front point comes from: an options table (free bytes, levels, level) or the
    single-option DP (``single`` true; then the point's budget is solved there)."""

    free: int
    levels: int
    level: int
    single: bool = False


@dataclass(frozen=True)
class _Front:
    points: tuple[FrontPoint, ...]
    sources: tuple[_Source, ...]


def _table(profile: ChainProfile, free: int, slots: int) -> OptionsTable:
    key = (profile.sha256, free, slots)
    return CACHE.get_or_put("options table", key, lambda: build_options_table(profile, free, slots))


def _scales(profile: ChainProfile, minimum_free: int) -> list[int]:
    """Free memory (bytes) of each table: the store-all budget's, then an eighth of it, ...
    while that is above a quarter of the single-option minimum (options can go lower)."""
    free = max(1, store_all_peak(profile) - profile.input_size)
    scales = [free]
    while free // SCALE_RATIO > minimum_free // 4 and free // SCALE_RATIO > 0:
        free //= SCALE_RATIO
        scales.append(free)
    return scales


def _build_front(profile: ChainProfile, slots: int) -> _Front:
    plain = profile.without_options()
    base = profile.store_all_compute_ms
    points = [
        FrontPoint(NAME, p.budget, p.peak_memory, p.compute_ms, p.recompute_ms, p.checkpoints)
        for p in single.front(plain, slots).points
    ]
    sources = [_Source(0, 0, 0, single=True) for _ in points]
    minimum_free = single.minimum_budget(plain) - profile.input_size
    for free in _scales(profile, minimum_free):
        table = _table(profile, free, slots)
        previous = math.inf
        for k in range(table.levels + 1):
            value = float(table.top[k])
            if math.isfinite(value) and value < previous - 1e-9 * max(1.0, value):
                previous = value
                found = read_plan(profile, table, k)
                budget = profile.input_size + k * table.slot
                points.append(
                    FrontPoint(
                        NAME,
                        budget,
                        found.peak_memory,
                        found.compute_ms,
                        max(0.0, found.compute_ms - base),
                        chain_checkpoints(found.ops),
                    )
                )
                sources.append(_Source(free, slots, k))
    order = pareto_order(points)
    return _Front(tuple(points[i] for i in order), tuple(sources[i] for i in order))


def _front(profile: ChainProfile, slots: int) -> _Front:
    return CACHE.get_or_put("options front", (profile.sha256, slots), lambda: _build_front(profile, slots))


def options_front(profile: ChainProfile, slots: int) -> list[FrontPoint]:
    """The front over every option (sorted by peak, dominated points dropped); it contains or
    dominates every point of the single-option DP's front."""
    return list(_front(profile, slots).points)


def least_budget(profile: ChainProfile, slots: int) -> int:
    """The least peak (bytes) on the multi-option front: the least the DP found (options may allow
    less than the single-option exact minimum; this one is not proven minimal)."""
    return _front(profile, slots).points[0].peak_memory


def solve_options(profile: ChainProfile, budget: int, slots: int) -> Schedule:
    """The fastest front schedule within ``budget`` bytes (monotone in the budget)."""
    if budget >= store_all_peak(profile):
        return single.store_all_schedule(profile, budget)
    front = _front(profile, slots)
    index = bisect.bisect_right([p.peak_memory for p in front.points], budget) - 1
    if index < 0:
        least = least_budget(profile, slots)
        raise InfeasibleBudgetError(NAME, budget, least, "the least memory the multi-option DP found", bound="found")
    source = front.sources[index]
    table = None if source.single else _table(profile, source.free, source.levels)
    found = None if table is None else read_plan(profile, table, source.level)
    plain = _single_option_solve(profile, budget, slots)
    if plain is not None and (found is None or plain.predicted.compute_ms <= found.compute_ms):
        # the single-option DP's best at the user's budget (its own table included) can beat the
        # options front's point there: options only add choices, so take whichever is faster
        ops, compute, peak = plain.ops, plain.predicted.compute_ms, plain.predicted.peak_memory
        extra = dict(plain.extra)
    else:
        ops, compute, peak = found.ops, found.compute_ms, found.peak_memory
        extra = {
            "claim": "optimal among persistent schedules over every stage option (up to discretization)",
            "slots": table.levels,
            "slot_bytes": table.slot,
            "table_free_bytes": source.free,
        }
    extra["options_used"] = sum(1 for op in ops if len(op) == 3)
    return make_schedule(profile, budget, NAME, ops, claimed_compute_ms=compute, claimed_peak_memory=peak, extra=extra)


def _single_option_solve(profile: ChainProfile, budget: int, slots: int) -> Schedule | None:
    """The single-option DP's schedule at ``budget`` (options dropped), or None when it has none."""
    try:
        return single.solve(profile.without_options(), budget, slots)
    except InfeasibleBudgetError:
        return None
