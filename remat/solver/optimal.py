"""``optimal``: the cheapest persistent schedule of a heterogeneous chain, for every budget at once.

This is the persistent-schedule dynamic program of Beaumont et al. (rotor, "Optimal
checkpointing for heterogeneous chains", 2019), derived here from DESIGN.md's op semantics; the
recurrence and its derivation are in :mod:`remat.solver.optimal_table`. What is claimed:

* **optimal among persistent schedules, up to discretization**: memory is counted in slots
  (``slots`` levels, default 500) and every size is rounded *up*, so the returned schedule is
  always within the real budget and no persistent schedule is faster at the budget as seen in
  slots. With sizes that are multiples of the slot size the result is the exact persistent
  optimum. A non-persistent schedule (one that drops a stored checkpoint before its backward and
  recomputes it) can be faster: over every integer budget of 120 random 3-6 stage chains
  (1,305 chain-budget pairs with a schedule, ``python tests/test_exhaustive.py 60 1`` and ``60 2``)
  the persistent optimum was slower in 15 pairs (11 chains), by 4.9% on average and 13.8% at
  most, and never infeasible where some schedule existed.
* one table, filled once for the largest budget, gives the optimum for every smaller budget:
  :func:`optimal_front` reads the whole memory/compute front from it.

Every schedule goes through :func:`remat.solver.common.make_schedule`: the DP's claimed step time
(from the recurrence) and peak (from the DP's own memory model, walked in bytes) must equal the
simulator's, or it raises ``SolverBug``.

Units: bytes and milliseconds.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

from remat.schedules import ChainProfile, InfeasibleBudgetError, Op, RematError, Schedule
from remat.solver.common import Strategy, make_schedule, require_chain
from remat.solver.front import FrontPoint
from remat.solver.optimal_table import INFEASIBLE, STORE_ALL, Table, build_table, slot_size
from remat.solver.store_all import store_all_ops, store_all_peak

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
_CACHE_SIZE = 2  # a 1000-stage table at 500 slots holds ~160 MB of decisions (int16)


def _check_slots(slots: object) -> None:
    if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
        raise RematError(f"slots: must be a positive integer, got {slots!r}")


def table_for(profile: ChainProfile, free_bytes: int, slots: int = DEFAULT_SLOTS) -> Table:
    """The DP table covering ``free_bytes`` of free memory (budget minus the input a_0) in
    ``slots`` slots; cached for the last two (profile, slot size, slots)."""
    _check_slots(slots)
    slot = slot_size(free_bytes, slots)
    levels = min(slots, free_bytes // slot)
    key = (profile.sha256, slot, levels)
    table = _CACHE.get(key)
    if table is None:
        table = build_table(profile, slot, levels)
        _CACHE[key] = table
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    else:
        _CACHE.move_to_end(key)
    return table


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


def _front_table(profile: ChainProfile, slots: int) -> tuple[Table, int]:
    """The table for the store-all budget (the largest that matters) and its slot size."""
    free = max(1, store_all_peak(profile) - profile.input_size)
    table = table_for(profile, free, slots)
    return table, table.sizes.slot


def _first_feasible(table: Table) -> int | None:
    for k in range(table.slots + 1):
        if math.isfinite(table.top[k]):
            return k
    return None


def minimum_budget(profile: ChainProfile, slots: int = DEFAULT_SLOTS) -> int:
    """Smallest budget (bytes) at which :func:`solve` is known to return a schedule with these
    slots: the peak of the front table's least-memory schedule when solving at that peak works
    (checked), else the budget of that table level (which works by construction)."""
    table, slot = _front_table(profile, slots)
    k = _first_feasible(table)
    if k is None:
        return store_all_peak(profile)
    level_budget = min(profile.input_size + k * slot, store_all_peak(profile))
    peak = plan(profile, table, k).peak_memory
    if peak < level_budget and _attempt(profile, peak, slots) is not None:
        return peak
    return level_budget


def _schedule_from(profile: ChainProfile, budget: int, table: Table, k: int, slots: int) -> Schedule:
    chosen = plan(profile, table, k)
    return make_schedule(
        profile,
        budget,
        NAME,
        chosen.ops,
        claimed_compute_ms=chosen.compute_ms,
        claimed_peak_memory=chosen.peak_memory,
        extra={
            "claim": "optimal among persistent schedules (up to discretization)",
            "slots": slots,
            "slot_bytes": table.sizes.slot,
            "checkpoints": chosen.checkpoints,
        },
    )


def solve(profile: ChainProfile, budget: int, slots: int = DEFAULT_SLOTS) -> Schedule:
    """The fastest persistent schedule within ``budget`` bytes (up to the ``slots`` discretization).

    Fills the table for this budget (``slots`` levels between 0 and ``budget - a_0``). If that
    finds nothing, the table of the store-all budget (the one :func:`optimal_front` reads) is
    tried too, and if it fails as well the error names :func:`minimum_budget`, a budget at which
    this function does return a schedule (the front table's first feasible level).
    """
    profile = require_chain(profile, NAME)
    _check_slots(slots)
    if budget >= store_all_peak(profile):
        return _store_all_schedule(profile, budget)
    schedule = _attempt(profile, budget, slots)
    if schedule is None:
        raise InfeasibleBudgetError(NAME, budget, minimum_budget(profile, slots), f"at {slots} slots")
    return schedule


def _attempt(profile: ChainProfile, budget: int, slots: int) -> Schedule | None:
    """The schedule for ``budget`` from its own table, else from the front table, else None."""
    free = budget - profile.input_size
    if free < 0:
        return None
    table = table_for(profile, max(1, free), slots)
    k = min(table.slots, free // table.sizes.slot)
    if math.isfinite(table.top[k]):
        return _schedule_from(profile, budget, table, k, slots)
    front_table, slot = _front_table(profile, slots)
    k = min(front_table.slots, free // slot)
    if math.isfinite(front_table.top[k]):
        return _schedule_from(profile, budget, front_table, k, slots)
    return None


def optimal_front(profile: ChainProfile, slots: int = DEFAULT_SLOTS, progress: bool = False) -> list[FrontPoint]:
    """The memory/compute front of persistent schedules from one table, store-all included.

    One point per level where the table's optimum improves, plus store-all; each point's peak and
    time are the DP model's (which :func:`solve` checks against the simulator for every schedule
    it returns; the tests check them for the front). Points are sorted by peak memory and
    dominated ones (another point no larger and no slower) are dropped.
    """
    profile = require_chain(profile, NAME)
    _check_slots(slots)
    table, slot = _front_table(profile, slots)
    levels = []
    previous = math.inf
    for k in range(table.slots + 1):
        value = table.top[k]
        if math.isfinite(value) and value < previous - 1e-9 * max(1.0, abs(previous) if math.isfinite(previous) else 1):
            levels.append(k)
            previous = value
    iterator = levels
    if progress:
        from tqdm import tqdm

        iterator = tqdm(levels, desc="optimal front", unit="level", leave=False)
    points = []
    for k, chosen in zip(levels, front_summaries(profile, table, iterator), strict=True):
        base = profile.store_all_compute_ms
        points.append(
            FrontPoint(
                strategy=NAME,
                budget=profile.input_size + k * slot,
                peak_memory=chosen.peak_memory,
                compute_ms=chosen.compute_ms,
                recompute_ms=max(0.0, chosen.compute_ms - base),
                checkpoints=chosen.checkpoints,
            )
        )
    peak_all = store_all_peak(profile)
    points.append(FrontPoint(NAME, peak_all, peak_all, profile.store_all_compute_ms, 0.0, checkpoints=0))
    return pareto_filter(points)


def pareto_filter(points: list[FrontPoint]) -> list[FrontPoint]:
    """Sort by peak memory, keep the points that no other point beats in both peak and time."""
    ordered = sorted(points, key=lambda p: (p.peak_memory, p.compute_ms))
    kept: list[FrontPoint] = []
    best = math.inf
    for point in ordered:
        if point.compute_ms < best - 1e-9 * max(1.0, point.compute_ms):
            kept.append(point)
            best = point.compute_ms
    return kept


STRATEGY = Strategy(
    name=NAME,
    kind="chain",
    description="persistent-schedule DP (rotor): fastest persistent schedule under the budget, up to --slots",
    solve=solve,
    options=("slots",),
    reference="Beaumont et al. 2019, Optimal checkpointing for heterogeneous chains (rotor)",
)
