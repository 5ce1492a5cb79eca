"""The ``optimal`` DP for chains whose stages have one recording option: its multi-scale front and
its answer at a budget (the claims are in :mod:`remat.solver.chain.optimal`).

The front merges tables at several scales (:func:`scales`: the store-all budget's free memory,
an eighth of it, ... down to the minimum, each with its own slot size) with store-all and the
exact least-memory persistent schedule (:mod:`remat.solver.chain.dp.minimum`, no slots), dominated
points dropped. :func:`solve` returns the faster of the front's point within the budget and the
budget's own table's best (tables and fronts kept in :data:`remat.solver.chain.dp.cache.CACHE`):
a function of the profile, the budget and the slots alone, whatever the process solved before.

Units: bytes and milliseconds.
"""

from __future__ import annotations

import bisect
import math
import os
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from remat.schedules import ChainProfile, InfeasibleBudgetError, RematError, Schedule
from remat.solver.chain.dp.cache import CACHE
from remat.solver.chain.dp.minimum import MinimumMemory, exact_minimum
from remat.solver.chain.dp.readback import Plan, front_summaries, plan
from remat.solver.chain.dp.table import Table, build_table, slot_size
from remat.solver.chain.store_all import store_all_ops, store_all_peak
from remat.solver.common import make_schedule
from remat.solver.front import FrontPoint, pareto_order

NAME = "optimal"
DEFAULT_SLOTS = 500
SCALE_RATIO = 8  # each table of the front covers an eighth of the previous one's free memory
_MINIMUM = -1  # source "level" of the exact minimum-memory schedule
_STORE_ALL_SOURCE = -2

_Source = tuple[int, int, int]  # (free bytes of its table, its levels, level), or (0, 0, _MINIMUM / _STORE_ALL_SOURCE)
_Answer = tuple[int, float, _Source]  # (peak bytes, compute ms of its Plan, source)


def check_slots(slots: object) -> None:
    """A one-line error unless ``slots`` is a positive integer."""
    if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
        raise RematError(f"slots: must be a positive integer, got {slots!r}")


def _table_key(profile: ChainProfile, free_bytes: int, slots: int) -> tuple[str, int, int]:
    slot = slot_size(free_bytes, slots)
    return profile.sha256, slot, min(slots, free_bytes // slot)


def table_for(profile: ChainProfile, free_bytes: int, slots: int = DEFAULT_SLOTS) -> Table:
    """The DP table covering ``free_bytes`` of free memory (budget minus the input a_0) in
    ``slots`` slots; the last few (up to ~640 MB of decisions, at least one) are cached."""
    check_slots(slots)
    key = _table_key(profile, free_bytes, slots)
    return CACHE.get_or_put("table", key, lambda: build_table(profile, key[1], key[2]))


def _filled(profile: ChainProfile, scales: list[tuple[int, int]]) -> Iterator[None]:
    """Yield once per scale (free bytes, slots), in order, when its table is cached. The missing
    tables are filled several at once: the kernel releases the GIL and the tables are independent,
    so on c cores they take about the time of the c-th largest instead of their sum, and the
    caller reads a table's points while the later ones are still being filled."""
    keys = [_table_key(profile, free, levels) for free, levels in scales]
    missing = [key for key in dict.fromkeys(keys) if ("table", key) not in CACHE]
    workers = min(len(missing), len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1)
    if workers < 2:
        yield from (None for _ in scales)  # table_for fills them one by one
        return
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {key: pool.submit(build_table, profile, key[1], key[2]) for key in missing}
        for key in keys:
            future = futures.pop(key, None)
            if future is not None:
                CACHE.put("table", key, future.result())
            yield None


def store_all_schedule(profile: ChainProfile, budget: int) -> Schedule:
    """Store-all, when it fits ``budget`` bytes: no schedule is faster."""
    return make_schedule(
        profile,
        budget,
        NAME,
        store_all_ops(profile),
        claimed_compute_ms=profile.store_all_compute_ms,
        extra={"claim": "optimal (store-all fits)"},
    )


@dataclass(frozen=True)
class Front:
    """The merged front, sorted by peak (time strictly falling), and where each point comes from
    (a :data:`_Source` per point)."""

    points: tuple[FrontPoint, ...]
    sources: tuple[_Source, ...]


def exact(profile: ChainProfile) -> MinimumMemory:
    """The exact least-memory persistent schedule's table (cached per profile)."""
    return CACHE.get_or_put("minimum", profile.sha256, lambda: exact_minimum(profile))


def minimum_budget(profile: ChainProfile) -> int:
    """The exact smallest budget (bytes) of any persistent schedule of ``profile``."""
    return profile.input_size + exact(profile).free


def scales(profile: ChainProfile, minimum_free: int, slots: int) -> list[tuple[int, int]]:
    """Free memory (bytes) of each table of the front: the store-all budget's, then an eighth
    of it, ... while that is still above the minimum, stopping once slots are one byte (a table with
    one-byte slots is exact for every smaller budget too); and a one-byte-slot table (``slots``
    bytes free) when the minimum is within its reach. Returns ``(free bytes, levels)`` per table:
    ``slots`` levels for the first and the one-byte table, half as many for the others (an eighth
    of the free memory in half the levels: slots a quarter of the previous table's, at about
    half its cost)."""
    free = max(1, store_all_peak(profile) - profile.input_size)
    lower = max(1, slots // 2)
    found = [(free, slots)]
    while slot_size(free, found[-1][1]) > 1 and free // SCALE_RATIO > minimum_free:
        free //= SCALE_RATIO
        found.append((free, lower))
    if slot_size(free, found[-1][1]) > 1 and minimum_free <= slots:
        found.append((slots, slots))  # one-byte slots: exact at every budget up to input + slots bytes
    return found


def _table_points(
    profile: ChainProfile, free: int, above: int, slots: int, progress: bool
) -> tuple[list[FrontPoint], list[_Source]]:
    """The points of the table for ``free`` bytes: every level above ``above`` free bytes (the
    next, finer table covers the rest) where the table's optimum improves."""
    table = table_for(profile, free, slots)
    slot = table.sizes.slot
    levels = []
    previous = math.inf
    for k in range(table.slots + 1):
        value = table.top[k]
        if math.isfinite(value) and value < previous - 1e-9 * max(1.0, abs(previous) if math.isfinite(previous) else 1):
            previous = value
            if k * slot > above:
                levels.append(k)
    iterator: Iterable[int] = levels
    if progress:
        iterator = tqdm(levels, desc=f"optimal front ({free} B)", unit="level", leave=False, disable=None)
    base = profile.store_all_compute_ms
    points = [
        FrontPoint(
            NAME,
            profile.input_size + k * slot,
            p.peak_memory,
            p.compute_ms,
            max(0.0, p.compute_ms - base),
            p.checkpoints,
        )
        for k, p in zip(levels, front_summaries(profile, table, iterator), strict=True)
    ]
    return points, [(free, slots, k) for k in levels]


def _build_front(profile: ChainProfile, slots: int, progress: bool) -> Front:
    minimum = exact(profile)
    lowest = plan(profile, minimum, minimum.free)
    base = profile.store_all_compute_ms
    peak_all = store_all_peak(profile)
    points = [
        FrontPoint(
            NAME,
            lowest.peak_memory,
            lowest.peak_memory,
            lowest.compute_ms,
            max(0.0, lowest.compute_ms - base),
            lowest.checkpoints,
        ),
        FrontPoint(NAME, peak_all, peak_all, base, 0.0, checkpoints=0),
    ]
    sources = [(0, 0, _MINIMUM), (0, 0, _STORE_ALL_SOURCE)]
    found = scales(profile, minimum.free, slots)
    for index, ((free, levels), _) in enumerate(zip(found, _filled(profile, found), strict=True)):
        above = found[index + 1][0] if index + 1 < len(found) else -1
        more, where = _table_points(profile, free, above, levels, progress)
        points.extend(more)
        sources.extend(where)
    order = pareto_order(points)
    return Front(tuple(points[i] for i in order), tuple(sources[i] for i in order))


def front(profile: ChainProfile, slots: int, progress: bool = False) -> Front:
    """The multi-scale front of ``profile`` at ``slots`` levels per table (cached)."""
    return CACHE.get_or_put("front", (profile.sha256, slots), lambda: _build_front(profile, slots, progress))


def _plan_of(profile: ChainProfile, source: _Source) -> Plan:
    free, levels, level = source
    if level == _MINIMUM:
        minimum = exact(profile)
        return plan(profile, minimum, minimum.free)
    return plan(profile, table_for(profile, free, levels), level)


def _answer(profile: ChainProfile, source: _Source) -> tuple[_Answer, Plan]:
    found = _plan_of(profile, source)
    return (found.peak_memory, found.compute_ms, source), found


def _own_source(profile: ChainProfile, budget: int, slots: int) -> _Source | None:
    """The best level of the budget's own table (``slots`` levels over its free memory)."""
    free = budget - profile.input_size
    top = table_for(profile, free, slots).top
    level = int(np.argmin(np.where(np.isfinite(top), top, np.inf)))  # the first level with the least time
    return (free, slots, level) if math.isfinite(top[level]) else None


def _best(profile: ChainProfile, budget: int, slots: int) -> tuple[Plan, _Source]:
    """The faster schedule within ``budget`` of the front's and the budget's own table's. Times are
    compared as their Plans sum them (what the simulator checks), ties going to the front. No
    answer of an earlier call takes part: a solve's answer is its arguments' alone (issue 44)."""
    found = front(profile, slots)
    index = bisect.bisect_right([p.peak_memory for p in found.points], budget) - 1
    if index < 0:
        detail = "the least memory of any persistent schedule, exact"
        raise InfeasibleBudgetError(NAME, budget, minimum_budget(profile), detail)
    best, chosen = _answer(profile, found.sources[index])
    own = _own_source(profile, budget, slots)
    if own is not None and own != best[2]:
        answer, candidate = _answer(profile, own)
        if answer[1] < best[1]:
            best, chosen = answer, candidate
    return chosen, best[2]


def solve(profile: ChainProfile, budget: int, slots: int) -> Schedule:
    """The fastest schedule within ``budget`` bytes (see :func:`remat.solver.chain.optimal.solve`)."""
    if budget >= store_all_peak(profile):
        return store_all_schedule(profile, budget)
    chosen, source = _best(profile, budget, slots)
    free, levels, level = source
    if level == _MINIMUM:
        extra = {"claim": "least memory of any persistent schedule", "checkpoints": chosen.checkpoints}
    else:
        extra = {
            "claim": "optimal among persistent schedules (up to discretization)",
            "checkpoints": chosen.checkpoints,
            "slots": levels,
            "slot_bytes": slot_size(free, levels),
            "table_free_bytes": free,
        }
    return make_schedule(
        profile,
        budget,
        NAME,
        chosen.ops,
        claimed_compute_ms=chosen.compute_ms,
        claimed_peak_memory=chosen.peak_memory,
        extra=extra,
    )
