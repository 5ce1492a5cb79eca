"""Reading schedules back from a single-option DP table: one level's op list (:func:`plan`), or
many levels' costs at once without op lists (:func:`front_summaries`).

Both walk the DP's own memory model in bytes (docs/model.md, "Chains"), independently of the
simulator, which gives the claimed peak that :func:`remat.solver.common.make_schedule` checks.
A table here is a :class:`~remat.solver.chain.dp.table.Table` or a
:class:`~remat.solver.chain.dp.minimum.MinimumMemory` (same ``decision`` and ``sizes``).

Units: bytes and milliseconds.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from remat.schedules import ChainProfile, Op
from remat.solver.chain.dp.table import INFEASIBLE, STORE_ALL, Table


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


_Key = tuple[int, int, int, bool]  # (s, t, free slots k, whether the segment's a[s] is its to drop)


def front_summaries(profile: ChainProfile, table: Table, levels: Iterable[int]) -> list[Plan]:
    """:func:`plan` for many levels at once, without op lists: each (segment, level, form) is
    summarized once and reused by every level whose schedule contains it (iterative, memoized).

    Returns Plans with empty ``ops``; the tests check them against :func:`plan` and the simulator.
    """
    summaries = _Summaries(profile, table)
    act0 = table.sizes.act[0]
    plans = []
    for level in levels:
        top = summaries.of((0, profile.length, level, True))
        plans.append(Plan((), top.time, act0 + top.peak, top.a_peak))
    return plans


class _Summaries:
    """The memoized :class:`_Summary` of every segment schedule the table's levels reach: a
    segment's summary combines its sub-segments' (the same decisions :func:`plan` follows)."""

    def __init__(self, profile: ChainProfile, table: Table) -> None:
        self.n = profile.length
        self.st = profile.stages
        self.table = table
        sizes = table.sizes
        self.act = sizes.act
        self.saved_slots = sizes.saved_slots.tolist()
        self.act_slots = sizes.act_slots.tolist()
        self.g_slots = sizes.g_slots.tolist()
        self.memo: dict[_Key, _Summary] = {}

    def of(self, root: _Key) -> _Summary:
        """The summary of ``root``, filling the memo depth first with an explicit stack."""
        memo = self.memo
        stack = [root]
        while stack:
            key = stack[-1]
            if key in memo:
                stack.pop()
                continue
            d, kids = self.children(key)
            missing = [kid for kid in kids if kid not in memo]
            if missing:
                stack.extend(missing)
                continue
            stack.pop()
            memo[key] = self.combine(key, d, [memo[kid] for kid in kids])
        return memo[root]

    def children(self, key: _Key) -> tuple[int, list[_Key]]:
        """The segment's decision and the sub-segments it runs (the later one first)."""
        s, t, k, holds_a = key
        d = self.table.decision(s, t, k)
        if d == INFEASIBLE:
            raise AssertionError(f"optimal: table has no decision for segment [{s}, {t}) at {k} slots")
        if d == STORE_ALL:
            return d, []
        if d == 0:
            return d, [(s + 1, t, k - self.saved_slots[s], False)] if s + 1 < t else []
        left_k = min(self.table.slots, k + self.g_slots[t] - self.act_slots[d])
        return d, [(d, t, k - self.act_slots[d], True), (s, d, left_k, holds_a)]

    def combine(self, key: _Key, d: int, subs: list[_Summary]) -> _Summary:
        """The segment's summary from its decision ``d`` and its sub-segments' summaries."""
        s, t, _, holds_a = key
        if d == STORE_ALL:
            return self._store_all(s, t, holds_a)
        if d == 0:
            return self._record(s, holds_a, subs)
        return self._checkpoint(s, d, subs)

    def _store_all(self, s: int, t: int, holds_a: bool) -> _Summary:
        """``F_all s .. t-1`` then ``B t-1 .. s``."""
        n, st, act = self.n, self.st, self.act
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

    def _record(self, s: int, holds_a: bool, subs: list[_Summary]) -> _Summary:
        """``F_all s``, the rest of the segment (``subs``, if any), ``B s``."""
        n, act = self.n, self.act
        stage = self.st[s]
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

    def _checkpoint(self, s: int, j: int, subs: list[_Summary]) -> _Summary:
        """``F_ck s``, ``F_n s+1 .. j-1`` (a[j] kept), then the two sub-segments ``subs``."""
        st, act = self.st, self.act
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
