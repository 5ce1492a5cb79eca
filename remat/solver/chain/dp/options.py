"""The ``optimal`` chain DP's table when stages have several recording options (docs/model.md,
"Several recording options per stage"): the recurrence, the table and reading a schedule back.

:mod:`remat.solver.chain.optimal` dispatches to :mod:`remat.solver.chain.dp.options_front` (this
table's front and its answer at a budget) for a profile with :attr:`Stage.options`; a profile
without them never reaches this module. The claim is the same as the single-option DP's:
**optimal among persistent schedules, up to the memory discretization**, now over every choice of
option for every recording forward.

Derivation. The single-option recurrence (:mod:`remat.solver.chain.dp.table`, same notation:
``C(s, t, m)`` the least time of segment ``[s, t)`` with ``m`` bytes free, ``g'_t = a_t`` for
``t < n`` and 0 for ``t = n``) starts a segment in one of two ways. Options change only the
first: the op that records stage s may be any ``F_all s o``, and the ``B s`` that consumes
``abar[s+1]`` then frees option o's ``sv_{s,o}`` and costs its ``b_{s,o}`` and ``bo_{s,o}``
(the forward, its time ``f_s`` and output, and the non-recording forwards are the stage's).
Following the ops exactly as there, with option o's numbers:

1o. Record stage s with option o: ``F_all s o`` peaks at ``sv_{s,o} + fo_{s,o}`` over the free
    memory; the subsegment runs with ``m - sv_{s,o}`` free; ``B s`` peaks at
    ``sv_{s,o} + a_{s+1} - g'_t + a_s + bo_{s,o}``. Cost ``f_s + b_{s,o} + C(s+1, t, m - sv_{s,o})``.

2. Checkpoint a[j]: unchanged (no recording op of its own; the subsegments choose their options).

::

    C(s, t, m) = min( min_o f_s + b_{s,o} + C(s+1, t, m - sv_{s,o})
                          if max(sv_{s,o} + fo_{s,o}, sv_{s,o} + a_{s+1} - g'_t + a_s + bo_{s,o}) <= m,
                      min_{s<j<t} F(s, j) + C(j, t, m - a_j) + C(s, j, m + g'_t - a_j)  (as before) )

The persistence argument is the single-option one: the first op on stage s is an ``F_all s o``
or ``F_ck s``, and ``B s`` needs a final ``F_all s o`` for some o, so the option is the only new
choice. Store-all shortcut: every option's backward is at least the stage's own
(:class:`~remat.schedules.StageOption` refuses less), so recording the whole segment with option 0
is still the least possible time ``SA(s, t)`` and is taken as soon as it fits, exactly as before.
With one option per stage the recurrence *is* the single-option one (the tests compare the
tables); the rounding to slots is the same (requirements rounded up once per op, subtractions up,
the one addition down), so every schedule fits its real budget.

The table is dense (every segment at every level, float64, :mod:`remat.solver.chain.dp.options_kernel`):
fine for the block-level chains options are for (tens of stages); the slots are lowered so that
it stays within :data:`MAX_CELLS` cells. The front merges tables at several memory scales (as the
single-option DP does) with the single-option DP's own front (every single-option schedule is a
multi-option one): so it is never worse than without options at any budget, and keeps the
single-option DP's exact least-memory schedule.

Units: bytes and milliseconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from remat.schedules import ChainProfile, Op, RematError
from remat.solver.chain.dp.options_kernel import INFEASIBLE, RECORD, STORE_ALL, fill_options
from remat.solver.chain.dp.table import chain_sizes, check_limits, slot_size

MAX_CELLS = 12_000_000  # (n+1)**2 * (levels+1) cells of 12 bytes while filling: ~150 MB at most


@dataclass(frozen=True)
class OptionsTable:
    """The filled multi-option DP for one chain, slot size and number of levels.

    Attributes:
        slot: bytes per slot; levels: K (k = 0..K slots free).
        top: C(0, n, k) for k = 0..K, milliseconds (inf where infeasible).
        decisions: (n+1, n+1, K+1) int32: j > s checkpoint a[j]; ``RECORD - o`` record stage s
            with option o; ``STORE_ALL``; ``INFEASIBLE``.
        act_slots, g_slots: ceil(a_i / S) and floor(g'_t / S), as in :class:`remat.solver.chain.dp.table.Sizes`.
    """

    slot: int
    levels: int
    top: np.ndarray
    decisions: np.ndarray
    act_slots: tuple[int, ...]
    g_slots: tuple[int, ...]


def _option_arrays(profile: ChainProfile) -> tuple[np.ndarray, ...]:
    """(counts, saved, rec_fwd, rec_bwd, backward_ms) per stage and option, padded (bytes, ms)."""
    n = profile.length
    width = max(stage.option_count for stage in profile.stages)
    counts = np.array([stage.option_count for stage in profile.stages], dtype=np.int64)
    saved = np.zeros((n, width), dtype=np.int64)
    rec_fwd = np.zeros((n, width), dtype=np.int64)
    rec_bwd = np.zeros((n, width), dtype=np.int64)
    bms = np.zeros((n, width))
    for s, stage in enumerate(profile.stages):
        around = profile.activation_size(s) + profile.activation_size(s + 1)
        for o in range(stage.option_count):
            option = stage.recording(o)
            saved[s, o] = option.saved_size
            rec_fwd[s, o] = option.saved_size + option.forward_overhead
            rec_bwd[s, o] = option.saved_size + around + option.backward_overhead
            bms[s, o] = option.backward_ms
    return counts, saved, rec_fwd, rec_bwd, bms


def _check_option_limits(profile: ChainProfile) -> None:
    check_limits(profile)
    extra = sum(o.saved_size + o.forward_overhead + abs(o.backward_overhead) for s in profile.stages for o in s.options)
    if extra >= 1 << 60:
        raise RematError("optimal: the stages' options add up to more bytes than the DP table's integers hold")


def levels_for(n: int, slots: int) -> int:
    """The levels a dense table of ``n`` stages gets: ``slots``, fewer where it would pass MAX_CELLS."""
    if 2 * (n + 1) ** 2 > MAX_CELLS:
        raise RematError(
            f"optimal: {n} stages with recording options exceed the dense multi-option table "
            f"(at most {math.isqrt(MAX_CELLS // 2) - 1} stages); cut the model into fewer stages"
        )
    return max(1, min(slots, MAX_CELLS // ((n + 1) ** 2) - 1))


def build_options_table(profile: ChainProfile, free_bytes: int, slots: int) -> OptionsTable:
    """The multi-option DP covering ``free_bytes`` (budget minus a_0) in at most ``slots`` levels."""
    _check_option_limits(profile)
    n = profile.length
    slots = levels_for(n, slots)
    slot = slot_size(free_bytes, slots)
    levels = min(slots, free_bytes // slot)
    sizes = chain_sizes(profile, slot)
    fms = np.array([s.forward_ms for s in profile.stages])
    bms0 = np.array([s.backward_ms for s in profile.stages])
    top, decisions = fill_options(
        n,
        levels,
        slot,
        sizes.act_slots,
        sizes.g_slots,
        np.ascontiguousarray(sizes.forward_slots[:, 0]),
        np.ascontiguousarray(sizes.forward_slots[:, 1]),
        np.array(sizes.act, dtype=np.int64),
        fms,
        bms0,
        *_option_arrays(profile),
    )
    return OptionsTable(slot, levels, top, decisions, tuple(sizes.act_slots.tolist()), tuple(sizes.g_slots.tolist()))


@dataclass(frozen=True)
class OptionsPlan:
    """A schedule read from an :class:`OptionsTable`, with the DP model's peak (bytes, walked
    independently of the simulator) and step time (ms)."""

    ops: tuple[Op, ...]
    compute_ms: float
    peak_memory: int


def read_plan(profile: ChainProfile, table: OptionsTable, k: int) -> OptionsPlan:
    """The schedule for ``k`` free slots (iterative), walking the DP's memory model in bytes."""
    n = profile.length
    if table.decisions[0, n, k] == INFEASIBLE:
        raise ValueError(f"no schedule in the table at {k} slots")
    ops: list[Op] = []
    stack: list[tuple] = [("seg", 0, n, k)]
    while stack:
        item = stack.pop()
        if item[0] == "op":
            ops.append(item[1])
            continue
        _, s, t, kk = item
        d = int(table.decisions[s, t, kk])
        if d == INFEASIBLE:
            raise AssertionError(f"optimal: options table has no decision for [{s}, {t}) at {kk} slots")
        if d == STORE_ALL:
            stack.extend(("op", ("B", i)) for i in range(s, t))
            stack.extend(("op", ("F_all", i)) for i in range(t - 1, s - 1, -1))
        elif d <= RECORD:
            option = RECORD - d
            stack.append(("op", ("B", s)))
            if s + 1 < t:
                saved = profile.stages[s].recording(option).saved_size
                stack.append(("seg", s + 1, t, kk - -(-saved // table.slot)))
            stack.append(("op", ("F_all", s, option) if option else ("F_all", s)))
        else:
            j = d
            left = min(table.levels, kk + table.g_slots[t] - table.act_slots[j])
            stack.append(("seg", s, j, left))
            stack.append(("seg", j, t, kk - table.act_slots[j]))
            stack.extend(("op", ("F_n", i)) for i in range(j - 1, s, -1))
            stack.append(("op", ("F_ck", s)))
    compute, peak = _walk(profile, ops)
    return OptionsPlan(tuple(ops), compute, peak)


def _walk(profile: ChainProfile, ops: list[Op]) -> tuple[float, int]:
    """Step time (ms) and peak (bytes) of a persistent schedule by the DP's model: every op adds
    its item, ``F_n`` drops its input, ``B i`` swaps ``abar[i+1]``, ``g[i+1]`` and ``a[i]`` for
    ``g[i]``. (The simulator checks this claim for every schedule returned.)"""
    act = [profile.activation_size(i) for i in range(profile.length + 1)]
    held = act[0]
    peak = held
    compute = 0.0
    recorded: dict[int, int] = {}
    kept: set[int] = set()
    for op in ops:
        name, i = op[0], op[1]
        stage = profile.stages[i]
        if name == "B":
            option = stage.recording(recorded.pop(i))
            if i == profile.length - 1:
                held += act[-1]
            peak = max(peak, held + act[i] + option.backward_overhead)
            held += act[i] - option.saved_size - act[i + 1]
            if i in kept and i != 0:
                held -= act[i]
                kept.discard(i)
            compute += option.backward_ms
            continue
        if name == "F_all":
            recorded[i] = op[2] if len(op) == 3 else 0
            option = stage.recording(recorded[i])
            added, transient = option.saved_size, option.forward_overhead
        else:
            added, transient = act[i + 1], stage.nograd_overhead
            kept.add(i + 1)
        peak = max(peak, held + added + transient)
        held += added
        if name == "F_n" and i != 0:
            held -= act[i]
            kept.discard(i)
        compute += stage.forward_ms
    return compute, peak
