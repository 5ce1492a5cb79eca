"""``optimal``: the cheapest persistent schedule of a heterogeneous chain, over the whole front.

This is the persistent-schedule dynamic program of Beaumont et al. (rotor, "Optimal
checkpointing for heterogeneous chains", 2019), derived here from the op semantics of
docs/model.md; the recurrence and its derivation are in :mod:`remat.solver.chain.optimal_table`. What
is claimed:

* **optimal among persistent schedules, up to discretization**: memory is counted in slots and
  every size is rounded *up*, so a returned schedule is always within the real budget and no
  persistent schedule is faster at the budget as seen in slots (exact with one-byte slots). A
  non-persistent schedule (one that drops a stored checkpoint before its backward and
  recomputes it) can be faster: over every integer budget of 120 random 3-6 stage chains
  (1,305 chain-budget pairs with a schedule, ``python tests/test_exhaustive.py 60 1`` and ``60 2``)
  the persistent optimum was slower in 15 pairs (11 chains), by 4.9% on average and 13.8% at
  most, and never infeasible where some schedule existed.
* **right at both ends** (:func:`optimal_front`): tables at several scales (the store-all
  budget's free memory, an eighth of it, ... down to the minimum, each with its own slot size)
  merged with store-all and the exact least-memory persistent schedule
  (:mod:`remat.solver.chain.optimal_minimum`, no slots), dominated points dropped.
* :func:`minimum_budget` is exact; :func:`solve` returns the fastest of the front's point within
  the budget, the budget's own table's best and the earlier answers for the profile within the
  budget, so it is monotone in the budget (over rising budgets across calls, too), resolves a
  budget between two of the front's tables in its own slots, and succeeds at every budget from
  the minimum on.

A profile whose stages have recording options (docs/model.md) is solved by
:mod:`remat.solver.chain.optimal_options` (the same claims, over every choice of options).

Every schedule goes through :func:`remat.solver.common.make_schedule`: the DP's claimed step time
(from the recurrence) and peak (from the DP's own memory model, walked in bytes) must equal the
simulator's, or it raises ``SolverBug``.

Units: bytes and milliseconds.
"""

from __future__ import annotations

import bisect
import math
import os
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from remat.schedules import ChainProfile, InfeasibleBudgetError, Op, RematError, Schedule
from remat.solver.chain.optimal_minimum import MinimumMemory, exact_minimum
from remat.solver.chain.optimal_table import INFEASIBLE, STORE_ALL, Table, build_table, slot_size
from remat.solver.chain.store_all import store_all_ops, store_all_peak
from remat.solver.common import Strategy, make_schedule, require_chain
from remat.solver.front import FrontPoint

NAME = "optimal"
DEFAULT_SLOTS = 500


@dataclass(frozen=True)
class Plan:
    """A schedule read from the table, with what the DP's model says about it.

    Attributes:
        ops: the op list.
        compute_ms: step time from the recurrence (float64 sum along the chosen decisions), ms.
        peak_memory: peak from the DP's memory model walked in bytes.
        checkpoints: most activations ``a[i]`` (i >= 1) held at once.
    """

    ops: tuple[Op, ...]
    compute_ms: float
    peak_memory: int
    checkpoints: int


_CACHE: OrderedDict[tuple[str, int, int], Table] = OrderedDict()
_CACHE_BYTES = 640 << 20  # a 1000-stage front: 3 tables, ~410 MB of decisions (int16) in all


def _check_slots(slots: object) -> None:
    if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
        raise RematError(f"slots: must be a positive integer, got {slots!r}")


def _table_key(profile: ChainProfile, free_bytes: int, slots: int) -> tuple[str, int, int]:
    slot = slot_size(free_bytes, slots)
    return profile.sha256, slot, min(slots, free_bytes // slot)


def _keep(key: tuple[str, int, int], table: Table) -> None:
    _CACHE[key] = table
    while len(_CACHE) > 1 and sum(t.flat.nbytes for t in _CACHE.values()) > _CACHE_BYTES:
        _CACHE.popitem(last=False)


def table_for(profile: ChainProfile, free_bytes: int, slots: int = DEFAULT_SLOTS) -> Table:
    """The DP table covering ``free_bytes`` of free memory (budget minus the input a_0) in
    ``slots`` slots; the last few (up to ~640 MB of decisions, at least one) are cached."""
    _check_slots(slots)
    key = _table_key(profile, free_bytes, slots)
    table = _CACHE.get(key)
    if table is None:
        table = build_table(profile, key[1], key[2])
        _keep(key, table)
    else:
        _CACHE.move_to_end(key)
    return table


def _filled(profile: ChainProfile, scales: list[tuple[int, int]]) -> Iterator[None]:
    """Yield once per scale (free bytes, slots), in order, when its table is cached. The missing
    tables are filled several at once: the kernel releases the GIL and the tables are independent,
    so on c cores they take about the time of the c-th largest instead of their sum, and the
    caller reads a table's points while the later ones are still being filled."""
    keys = [_table_key(profile, free, levels) for free, levels in scales]
    missing = [key for key in dict.fromkeys(keys) if key not in _CACHE]
    workers = min(len(missing), len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1)
    if workers < 2:
        yield from (None for _ in scales)  # table_for fills them one by one
        return
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {key: pool.submit(build_table, profile, key[1], key[2]) for key in missing}
        for key in keys:
            future = futures.pop(key, None)
            if future is not None:
                _keep(key, future.result())
            yield None


def plan(profile: ChainProfile, table: Table, k: int) -> Plan:
    """Read the schedule for ``k`` free slots from ``table`` (iteratively: no recursion limit).

    Walks the DP's memory model in bytes alongside, which gives the claimed peak."""
    n = profile.length
    st = profile.stages
    sizes = table.sizes
    act = sizes.act
    if table.decision(0, n, k) == INFEASIBLE:
        raise ValueError(f"no schedule in the table at {k} slots")
    ops: list[Op] = []
    held = act[0]
    peak = held
    a_count = 0
    max_a = 0
    compute = 0.0
    # Stack items: ("seg", s, t, k, holds_a) or ("B", s, holds_a) or ("F", name, i).
    stack: list[tuple] = [("seg", 0, n, k, True)]
    while stack:
        item = stack.pop()
        kind = item[0]
        if kind == "seg":
            _, s, t, kk, holds_a = item
            d = table.decision(s, t, kk)
            if d == INFEASIBLE:
                raise AssertionError(f"optimal: table has no decision for segment [{s}, {t}) at {kk} slots")
            if d == STORE_ALL:
                stack.append(("B", s, holds_a))
                stack.extend(("B", i, False) for i in range(s + 1, t))
                stack.extend(("F", "F_all", i) for i in range(t - 1, s - 1, -1))
            elif d == 0:
                stack.append(("B", s, holds_a))
                if s + 1 < t:
                    stack.append(("seg", s + 1, t, kk - int(sizes.saved_slots[s]), False))
                stack.append(("F", "F_all", s))
            else:
                j = d
                left_k = min(table.slots, kk + int(sizes.g_slots[t]) - int(sizes.act_slots[j]))
                stack.append(("seg", s, j, left_k, holds_a))
                stack.append(("seg", j, t, kk - int(sizes.act_slots[j]), True))
                for i in range(j - 1, s, -1):
                    stack.append(("F", "F_n", i))
                stack.append(("F", "F_ck", s))
        elif kind == "F":
            _, name, i = item
            stage = st[i]
            if name == "F_all":
                added, transient = stage.saved_size, stage.forward_overhead
            else:
                added, transient = act[i + 1], stage.nograd_overhead
            peak = max(peak, held + added + transient)
            held += added
            if name != "F_all":
                a_count += 1
            if name == "F_n":
                held -= act[i]
                a_count -= 1
            max_a = max(max_a, a_count)
            compute += stage.forward_ms
            ops.append((name, i))
        else:
            _, s, holds_a = item
            stage = st[s]
            if s == n - 1:
                held += act[n]  # g[n] appears just before the first backward
            peak = max(peak, held + act[s] + stage.backward_overhead)
            held += act[s] - stage.saved_size - act[s + 1]
            if holds_a and s != 0:
                held -= act[s]
                a_count -= 1
            compute += stage.backward_ms
            ops.append(("B", s))
    return Plan(tuple(ops), compute, peak, max_a)


@dataclass(frozen=True)
class _Summary:
    """What one segment's schedule does, relative to the memory held when it starts (bytes, ms)."""

    time: float
    peak: int  # largest op peak minus the memory held at the start
    delta: int  # memory held at the end minus at the start
    a_peak: int  # most extra a[i] held at once
    a_delta: int


def front_summaries(profile: ChainProfile, table: Table, levels: Iterable[int]) -> list[Plan]:
    """:func:`plan` for many levels at once, without op lists: each (segment, level, form) is
    summarized once and reused by every level whose schedule contains it (iterative, memoized).

    Returns Plans with empty ``ops``; the tests check them against :func:`plan` and the simulator.
    """
    n = profile.length
    st = profile.stages
    sizes = table.sizes
    act = sizes.act
    saved_slots = sizes.saved_slots.tolist()
    act_slots = sizes.act_slots.tolist()
    g_slots = sizes.g_slots.tolist()
    memo: dict[tuple[int, int, int, bool], _Summary] = {}

    def children(key):
        s, t, k, holds_a = key
        d = table.decision(s, t, k)
        if d == INFEASIBLE:
            raise AssertionError(f"optimal: table has no decision for segment [{s}, {t}) at {k} slots")
        if d == STORE_ALL:
            return d, []
        if d == 0:
            return d, [(s + 1, t, k - saved_slots[s], False)] if s + 1 < t else []
        left_k = min(table.slots, k + g_slots[t] - act_slots[d])
        return d, [(d, t, k - act_slots[d], True), (s, d, left_k, holds_a)]

    def combine(key, d, subs):
        s, t, _, holds_a = key
        if d == STORE_ALL:
            time = 0.0
            peak = held = 0
            for i in range(s, t):
                stage = st[i]
                peak = max(peak, held + stage.saved_size + stage.forward_overhead)
                held += stage.saved_size
                time += stage.forward_ms + stage.backward_ms
            for i in range(t - 1, s - 1, -1):
                stage = st[i]
                if i == n - 1:
                    held += act[n]
                peak = max(peak, held + act[i] + stage.backward_overhead)
                held += act[i] - stage.saved_size - act[i + 1]
            a_held = 0
            if holds_a and s != 0:
                held -= act[s]
                a_held = -1
            return _Summary(time, peak, held, 0, a_held)
        if d == 0:
            stage = st[s]
            time = stage.forward_ms + stage.backward_ms
            peak = stage.saved_size + stage.forward_overhead
            held = stage.saved_size
            a_peak = a_held = 0
            if subs:
                sub = subs[0]
                time += sub.time
                peak = max(peak, held + sub.peak)
                a_peak = max(a_peak, sub.a_peak)
                held += sub.delta
                a_held += sub.a_delta
            if s == n - 1:
                held += act[n]
            peak = max(peak, held + act[s] + stage.backward_overhead)
            held += act[s] - stage.saved_size - act[s + 1]
            if holds_a and s != 0:
                held -= act[s]
                a_held -= 1
            return _Summary(time, peak, held, a_peak, a_held)
        j = d
        time = 0.0
        peak = held = 0
        for i in range(s, j):
            stage = st[i]
            peak = max(peak, held + act[i + 1] + stage.nograd_overhead)
            held += act[i + 1] - (act[i] if i > s else 0)
            time += stage.forward_ms
        a_held = a_peak = 1
        for sub in subs:
            time += sub.time
            peak = max(peak, held + sub.peak)
            a_peak = max(a_peak, a_held + sub.a_peak)
            held += sub.delta
            a_held += sub.a_delta
        return _Summary(time, peak, held, a_peak, a_held)

    plans = []
    for level in levels:
        root = (0, n, level, True)
        stack = [root]
        while stack:
            key = stack[-1]
            if key in memo:
                stack.pop()
                continue
            d, kids = children(key)
            missing = [kid for kid in kids if kid not in memo]
            if missing:
                stack.extend(missing)
                continue
            stack.pop()
            memo[key] = combine(key, d, [memo[kid] for kid in kids])
        top = memo[root]
        plans.append(Plan((), top.time, act[0] + top.peak, top.a_peak))
    return plans


def _store_all_schedule(profile: ChainProfile, budget: int) -> Schedule:
    return make_schedule(
        profile,
        budget,
        NAME,
        store_all_ops(profile),
        claimed_compute_ms=profile.store_all_compute_ms,
        extra={"claim": "optimal (store-all fits)"},
    )


SCALE_RATIO = 8  # each table of the front covers an eighth of the previous one's free memory
_MINIMUM = -1  # source "level" of the exact minimum-memory schedule
_STORE_ALL_SOURCE = -2


@dataclass(frozen=True)
class _Front:
    """The merged front, sorted by peak (time strictly falling), and where each point comes from:
    ``(free bytes of its table, its levels, level)``, or ``(0, 0, _MINIMUM)`` / ``(0, 0, _STORE_ALL_SOURCE)``."""

    points: tuple[FrontPoint, ...]
    sources: tuple[tuple[int, int, int], ...]


_MINIMA: OrderedDict[str, MinimumMemory] = OrderedDict()
_FRONTS: OrderedDict[tuple[str, int], _Front] = OrderedDict()
_SMALL_CACHE = 4  # profiles whose minimum / front are kept (each O(n**2) bytes at most)


def _remember(cache: OrderedDict, key: object, value: object) -> None:
    cache[key] = value
    while len(cache) > _SMALL_CACHE:
        cache.popitem(last=False)


def _minimum(profile: ChainProfile) -> MinimumMemory:
    found = _MINIMA.get(profile.sha256)
    if found is None:
        found = exact_minimum(profile)
        _remember(_MINIMA, profile.sha256, found)
    return found


def minimum_budget(profile: ChainProfile, slots: int = DEFAULT_SLOTS) -> int:
    """The exact smallest budget (bytes) of any persistent schedule: :func:`solve` returns a
    schedule at this budget and at every larger one (``slots`` does not change it; it is kept for
    callers that pass it)."""
    profile = require_chain(profile, NAME)
    _check_slots(slots)
    if profile.has_options:  # stages with several recording options: remat.solver.chain.optimal_options
        from remat.solver.chain.optimal_options import least_budget

        return least_budget(profile, slots)
    return profile.input_size + _minimum(profile).free


def _scales(profile: ChainProfile, minimum_free: int, slots: int) -> list[tuple[int, int]]:
    """Free memory (bytes) of each table of the front: the store-all budget's, then an eighth
    of it, ... while that is still above the minimum, stopping once slots are one byte (a table with
    one-byte slots is exact for every smaller budget too); and a one-byte-slot table (``slots``
    bytes free) when the minimum is within its reach. Returns ``(free bytes, levels)`` per table:
    ``slots`` levels for the first and the one-byte table, half as many for the others (an eighth
    of the free memory in half the levels: slots a quarter of the previous table's, at about
    half its cost)."""
    free = max(1, store_all_peak(profile) - profile.input_size)
    lower = max(1, slots // 2)
    scales = [(free, slots)]
    while slot_size(free, scales[-1][1]) > 1 and free // SCALE_RATIO > minimum_free:
        free //= SCALE_RATIO
        scales.append((free, lower))
    if slot_size(free, scales[-1][1]) > 1 and minimum_free <= slots:
        scales.append((slots, slots))  # one-byte slots: exact at every budget up to input + slots bytes
    return scales


def _table_points(
    profile: ChainProfile, free: int, above: int, slots: int, progress: bool
) -> tuple[list[FrontPoint], list[tuple[int, int, int]]]:
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
        from tqdm import tqdm

        iterator = tqdm(levels, desc=f"optimal front ({free} B)", unit="level", leave=False)
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


def _build_front(profile: ChainProfile, slots: int, progress: bool) -> _Front:
    minimum = _minimum(profile)
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
    scales = _scales(profile, minimum.free, slots)
    for index, ((free, levels), _) in enumerate(zip(scales, _filled(profile, scales), strict=True)):
        above = scales[index + 1][0] if index + 1 < len(scales) else -1
        more, where = _table_points(profile, free, above, levels, progress)
        points.extend(more)
        sources.extend(where)
    order = pareto_order(points)
    return _Front(tuple(points[i] for i in order), tuple(sources[i] for i in order))


def _front(profile: ChainProfile, slots: int, progress: bool = False) -> _Front:
    key = (profile.sha256, slots)
    found = _FRONTS.get(key)
    if found is None:
        found = _build_front(profile, slots, progress)
        _remember(_FRONTS, key, found)
    return found


def _plan_of(profile: ChainProfile, source: tuple[int, int, int]) -> Plan:
    free, levels, level = source
    if level == _MINIMUM:
        minimum = _minimum(profile)
        return plan(profile, minimum, minimum.free)
    return plan(profile, table_for(profile, free, levels), level)


_Answer = tuple[int, float, tuple[int, int, int]]  # (peak bytes, compute ms of its Plan, source as in _Front)
_KNOWN: OrderedDict[tuple[str, int], tuple[_Answer, ...]] = OrderedDict()
_MAX_KNOWN = 4096  # answers kept per profile (only undominated ones are kept at all)


def _answer(profile: ChainProfile, source: tuple[int, int, int]) -> tuple[_Answer, Plan]:
    found = _plan_of(profile, source)
    return (found.peak_memory, found.compute_ms, source), found


def _own_source(profile: ChainProfile, budget: int, slots: int) -> tuple[int, int, int] | None:
    """The best level of the budget's own table (``slots`` levels over its free memory)."""
    free = budget - profile.input_size
    top = table_for(profile, free, slots).top
    level = int(np.argmin(np.where(np.isfinite(top), top, np.inf)))  # the first level with the least time
    return (free, slots, level) if math.isfinite(top[level]) else None


def _best(profile: ChainProfile, budget: int, slots: int) -> tuple[Plan, tuple[int, int, int]]:
    """The fastest schedule within ``budget`` among the front's, the budget's own table's and the
    answers of earlier calls for this profile and ``slots``; remembered for later calls. Times are
    compared as their Plans sum them (what the simulator checks), ties going to the front."""
    front = _front(profile, slots)
    index = bisect.bisect_right([p.peak_memory for p in front.points], budget) - 1
    if index < 0:
        detail = "the least memory of any persistent schedule, exact"
        raise InfeasibleBudgetError(NAME, budget, minimum_budget(profile), detail)
    best, chosen = _answer(profile, front.sources[index])
    own = _own_source(profile, budget, slots)
    if own is not None and own != best[2]:
        answer, found = _answer(profile, own)
        if answer[1] < best[1]:
            best, chosen = answer, found
    key = (profile.sha256, slots)
    known = _KNOWN.get(key, ())
    earlier = [answer for answer in known if answer[0] <= budget and answer[1] < best[1]]
    if earlier:
        best = min(earlier, key=lambda answer: answer[1])
        chosen = _plan_of(profile, best[2])
    if best[2] != front.sources[index] and best not in known:
        _remember(_KNOWN, key, _undominated((*known, best))[-_MAX_KNOWN:])
    return chosen, best[2]


def _undominated(answers: tuple[_Answer, ...]) -> tuple[_Answer, ...]:
    kept: list[_Answer] = []
    for answer in sorted(answers, key=lambda a: (a[0], a[1])):
        if not kept or answer[1] < kept[-1][1]:
            kept.append(answer)
    return tuple(kept)


def solve(profile: ChainProfile, budget: int, slots: int = DEFAULT_SLOTS) -> Schedule:
    """The fastest schedule within ``budget`` bytes among the multi-scale front (see
    :func:`optimal_front`) and the budget's own table (``slots`` levels over its free memory, which
    resolves a budget between two of the front's tables finely), and every schedule that an
    earlier call returned for this profile and ``slots``: optimal among persistent schedules up
    to each table's discretization; monotone in the budget (a larger budget never gets a slower
    schedule than the front gives, or than a call before it got at a smaller budget); a schedule at
    every budget from :func:`minimum_budget` (exact) on."""
    profile = require_chain(profile, NAME)
    _check_slots(slots)
    if profile.has_options:  # stages with several recording options: remat.solver.chain.optimal_options
        from remat.solver.chain.optimal_options import solve_options

        return solve_options(profile, budget, slots)
    if budget >= store_all_peak(profile):
        return _store_all_schedule(profile, budget)
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


def optimal_front(profile: ChainProfile, slots: int = DEFAULT_SLOTS, progress: bool = False) -> list[FrontPoint]:
    """The memory/compute front of persistent schedules, right at both ends.

    Tables at several scales: the store-all budget's free memory, then an eighth of it, and so on
    down to the exact minimum (:data:`SCALE_RATIO`), each with its own ``slots`` levels, so that
    a budget near the minimum is seen with slots as fine as one near store-all; plus the exact
    least-memory schedule (:mod:`remat.solver.chain.optimal_minimum`) and store-all. Each point's peak
    and time are the DP model's (which :func:`solve` checks against the simulator for every
    schedule it returns; the tests check them for the front). Points are sorted by peak memory
    and dominated ones (another point no larger and no slower) are dropped. Its least memory is
    the least of any persistent schedule, so no baseline (all persistent) goes below it.
    """
    profile = require_chain(profile, NAME)
    _check_slots(slots)
    if profile.has_options:  # stages with several recording options: remat.solver.chain.optimal_options
        from remat.solver.chain.optimal_options import options_front

        return options_front(profile, slots)
    return list(_front(profile, slots, progress).points)


def pareto_order(points: list[FrontPoint]) -> list[int]:
    """Indices of the points no other point beats in both peak and time, sorted by peak."""
    order = sorted(range(len(points)), key=lambda i: (points[i].peak_memory, points[i].compute_ms))
    kept: list[int] = []
    best = math.inf
    for i in order:
        if points[i].compute_ms < best - 1e-9 * max(1.0, points[i].compute_ms):
            kept.append(i)
            best = points[i].compute_ms
    return kept


def pareto_filter(points: list[FrontPoint]) -> list[FrontPoint]:
    """Sort by peak memory, keep the points that no other point beats in both peak and time."""
    return [points[i] for i in pareto_order(points)]


STRATEGY = Strategy(
    name=NAME,
    kind="chain",
    description="persistent-schedule DP (rotor), tables at several memory scales: fastest persistent schedule",
    solve=solve,
    options=("slots",),
    reference="Beaumont et al. 2019, Optimal checkpointing for heterogeneous chains (rotor)",
)
