"""The ``optimal`` strategy on long chains: the persistent-schedule DP restricted to a blocked
family, so that 10,000 stages solve in seconds with a few hundred MB.

Why: the flat DP (:mod:`remat.solver.chain.dp.table`) has a cell per segment (s, t) and memory
level, O(n**2 * K) of them, each trying O(n) split points: at 10,000 stages its bounds alone are
five (n+1)**2 int64 arrays (4 GB) and its fill O(n**3 * K). Above :data:`FLAT_LIMIT` stages
:mod:`remat.solver.chain.optimal` sends a chain here instead, and the schedule says so
(``extra["claim"]``, ``extra["blocks"]``).

The family. Cut the chain at boundaries ``0 = P_0 < P_1 < ... < P_N = n`` into blocks of at most
``b`` stages (:func:`block_size`). The flat recurrence of :mod:`remat.solver.chain.dp.table`,
``C(s, t, m)``, is kept unchanged for every segment inside one block (``P_B <= s < t <= P_{B+1}``:
every option, every split point). A segment ``(P_S, P_T)`` spanning two or more blocks has three
options, each a composition of the flat recurrence's own options:

1. store it whole (the flat store-all shortcut, its exact byte requirement ``X``);
2. record its whole first block: flat option 1 at ``P_S``, then at ``P_S + 1``, ..., up to
   ``P_{S+1} - 1`` (each stage i needs ``prefix_i + req1(i, P_T)`` slots, ``prefix_i`` the
   slots of the block's stages recorded before it), then ``C(P_{S+1}, P_T, m - saved of the
   block)``, then the block's backwards; cost ``sum (f_i + b_i)`` over the block plus that;
3. checkpoint a block boundary ``P_J``, ``S < J < T``: flat option 2 with ``j = P_J``, its two
   parts again coarse segments.

So the coarse table has (N+1)N/2 segments and N split points, and each block's table b**2/2
segments: O((N**3 + n * b**2) * K) work and O((N**2 + n * b) * K) memory instead of O(n**3 * K)
and O(n**2 * K). With ``b = ceil(n / 200)``: about 2 s and 250 MB a table at 10,000 stages.

What is claimed (proofs in one line each, tests in tests/solver/chain/test_blocked.py):

* **valid and within the budget**: every schedule goes through
  :func:`remat.solver.common.make_schedule` (the simulator), and the claimed time, the table's
  value, must match it.
* **optimal over the family, up to discretization**: the recurrence above is exact over the
  family with the flat DP's rounding (requirements up, the gift ``g'_t`` down); exact at one-byte
  slots, and :func:`least_free` is the family's exact least memory (bytes, no slots).
* **never better than the flat DP** (the bound in one direction, exact): every option above is
  one of the flat recurrence's options or a chain of them, with the same slot rounding, so at the
  same slot size the flat table's value is at most the blocked one at every level:
  ``flat(M) <= blocked(M)``.
* **the flat DP itself at blocks of one stage** (``b = 1``): option 2 records stage ``P_S`` (flat
  option 1), option 3 is any split point, a block's table is a single stage: the recurrences are
  the same, so the values are equal (tested).
* **no a-priori bound on the loss in the other direction** for ``b > 1``: a chain whose only
  small activation sits inside a block forces the family to checkpoint a larger one, and the
  loss grows with that size ratio. The loss is *measured* instead, against the flat DP at 1,000
  stages where both run (benchmarks/front_speed.py, docs/benchmarks.md), and at every solve the
  schedule carries its recomputation over store-all (``predicted.recompute_ms``), an upper bound
  on its loss against any schedule.

Unlike the flat front door, :func:`solve` answers from the budget's own table and the family's
least-memory schedule only (no front; like it, no memory of earlier calls): optimal over the
family at the budget up to its slots, not guaranteed monotone across budgets finer than a slot.

Units: bytes and milliseconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from remat.schedules import ChainProfile, InfeasibleBudgetError, RematError, Schedule
from remat.schedules.fast_chain import CODES, chain_costs, profile_arrays
from remat.solver.chain.dp import blocked_kernel as kernel
from remat.solver.chain.dp.cache import CACHE
from remat.solver.chain.dp.table import chain_sizes, check_limits, slot_size
from remat.solver.chain.store_all import store_all_ops, store_all_peak
from remat.solver.common import make_schedule
from remat.solver.front import FrontPoint, pareto_order

NAME = "optimal"
FLAT_LIMIT = 1000  # stages: the flat DP up to here (its front takes ~30 s at 1,000), blocked above
MAX_STAGES = 20_000  # blocked: O(N**3 K + n b**2 K) with N = 200 blocks, ~20 s a table here
TARGET_BLOCKS = 200
MAX_BLOCK = 127  # a block's split points are stored as int8
SCALE_RATIO = 8
_NAMES = {code: name for name, code in CODES.items()}


def block_size(n: int) -> int:
    """Stages per block for an ``n``-stage chain: ``ceil(n / 200)`` (at most 127)."""
    return max(1, min(MAX_BLOCK, math.ceil(n / TARGET_BLOCKS)))


def boundaries(n: int, block: int) -> np.ndarray:
    """Block boundaries 0 = P_0 < ... < P_N = n, blocks of ``block`` stages (the last may be shorter)."""
    return np.array(sorted({*range(0, n, block), n}), dtype=np.int64)


def check_long(profile: ChainProfile, block: int) -> None:
    """A one-line error for a chain the blocked DP does not take."""
    if profile.has_options:
        raise RematError(
            f"optimal: {profile.length} stages with several recording options are beyond the options DP "
            f"(at most {FLAT_LIMIT} stages); use sequential, revolve or chen-sqrt"
        )
    if profile.length > MAX_STAGES:
        raise RematError(
            f"optimal: {profile.length} stages exceed the blocked DP's limit of {MAX_STAGES} (its time grows as "
            f"N**3 + n*b**2 per memory level); use revolve, sequential or chen-sqrt, or profile the chain in blocks"
        )
    if not 1 <= block <= MAX_BLOCK:
        raise RematError(f"optimal: blocks of {block} stages: must be 1 to {MAX_BLOCK}")
    check_limits(profile)


@dataclass(frozen=True)
class _Arrays:
    """The chain's sizes in one unit (slots of ``slot`` bytes; bytes when ``slot`` is 1) as the kernel takes them."""

    slot: int
    A: np.ndarray
    G: np.ndarray
    SV: np.ndarray
    FF: np.ndarray
    FN: np.ndarray
    act: np.ndarray
    rec_fwd: np.ndarray
    rec_bwd: np.ndarray
    saved: np.ndarray
    fcum: np.ndarray
    fbcum: np.ndarray


def _arrays(profile: ChainProfile, slot: int) -> _Arrays:
    sizes = chain_sizes(profile, slot)
    f = np.array([s.forward_ms for s in profile.stages], dtype=np.float64)
    b = np.array([s.backward_ms for s in profile.stages], dtype=np.float64)
    return _Arrays(
        slot=slot,
        A=sizes.act_slots,
        G=sizes.g_slots,
        SV=sizes.saved_slots,
        FF=np.ascontiguousarray(sizes.forward_slots[:, 0]),
        FN=np.ascontiguousarray(sizes.forward_slots[:, 1]),
        act=np.array(sizes.act, dtype=np.int64),
        rec_fwd=np.ascontiguousarray(sizes.record_bytes[:, 0]),
        rec_bwd=np.ascontiguousarray(sizes.record_bytes[:, 1]),
        saved=np.array([s.saved_size for s in profile.stages], dtype=np.int64),
        fcum=np.concatenate([[0.0], np.cumsum(f)]),
        fbcum=np.concatenate([[0.0], np.cumsum(f + b)]),
    )


@dataclass(frozen=True)
class BlockedTable:
    """A filled blocked DP: ``top[k]`` = the family's least time (ms) at ``k`` free slots of
    ``arrays.slot`` bytes (inf where infeasible), and the decisions to read schedules back."""

    block: int
    slots: int
    bounds: np.ndarray
    arrays: _Arrays
    top: np.ndarray
    coarse: np.ndarray
    blocks: np.ndarray
    base: np.ndarray


def build(profile: ChainProfile, slot: int, slots: int, block: int) -> BlockedTable:
    """Fill the blocked DP with ``slots`` levels of ``slot`` bytes and blocks of ``block`` stages."""
    n, K = profile.length, int(slots)
    P = boundaries(n, block)
    a = _arrays(profile, slot)
    args = (a.A, a.G, a.SV, a.FF, a.FN, a.act, a.rec_fwd, a.rec_bwd, a.saved, a.fcum, a.fbcum)
    dec_b, base, tops = kernel.block_tables(n, K, slot, P, *args)
    value, dec_c = kernel.coarse_table(n, K, slot, P, *args, tops)
    top = value[kernel._tri(0, len(P) - 1)].copy()
    return BlockedTable(block, K, P, a, top, dec_c, dec_b, base)


def table_for(profile: ChainProfile, free: int, slots: int, block: int) -> BlockedTable:
    """The blocked table over ``free`` bytes of free memory (the last two are cached)."""
    slot = slot_size(free, slots)
    levels = max(1, min(slots, free // slot))
    key = (profile.sha256, slot, levels, block)
    return CACHE.get_or_put("blocked table", key, lambda: build(profile, slot, levels, block))


@dataclass(frozen=True)
class Least:
    """The family's exact least free memory (bytes above the input) and its decisions."""

    free: int
    bounds: np.ndarray
    arrays: _Arrays
    coarse: np.ndarray
    blocks: np.ndarray
    base: np.ndarray


def least(profile: ChainProfile, block: int) -> Least:
    """The exact least-memory schedule of the family (cached per profile and block)."""

    def compute() -> Least:
        P = boundaries(profile.length, block)
        a = _arrays(profile, 1)
        lo_c, dec_c, _, dec_b, base = kernel.least_memory(
            profile.length, P, a.act, a.rec_fwd, a.rec_bwd, a.saved, a.FF, a.FN
        )
        return Least(int(lo_c[kernel._tri(0, len(P) - 1)]), P, a, dec_c.reshape(-1, 1), dec_b, base)

    return CACHE.get_or_put("blocked minimum", (profile.sha256, block), compute)


def least_budget(profile: ChainProfile, block: int) -> int:
    """The smallest budget (bytes) of any schedule of the family: exact for the family."""
    check_long(profile, block)
    return profile.input_size + least(profile, block).free


def _ops(profile: ChainProfile, found: BlockedTable | Least, level: int) -> tuple[np.ndarray, np.ndarray]:
    a = found.arrays
    exact = isinstance(found, Least)
    K = 1 << 62 if exact else found.slots
    g = np.concatenate([a.act[:-1], [0]]) if exact else a.G
    A, SV = (a.act, a.saved) if exact else (a.A, a.SV)
    decisions = (found.coarse, found.blocks, found.base)
    return kernel.read_back(profile.length, K, level, exact, found.bounds, A, g, SV, *decisions)


def _costs(profile: ChainProfile, kinds: np.ndarray, indices: np.ndarray) -> tuple[int, float, float]:
    """(peak bytes, compute ms, recompute ms) as the simulator computes them (fast_chain)."""
    arrays = profile_arrays(profile)
    valid, peak, compute, recompute = chain_costs(kinds, indices, *arrays)
    if not valid:
        raise AssertionError("optimal (blocked): the table read back an invalid schedule")
    return int(peak), float(compute), float(recompute)


def _as_ops(kinds: np.ndarray, indices: np.ndarray) -> list[tuple[str, int]]:
    return list(zip(map(_NAMES.__getitem__, kinds.tolist()), indices.tolist(), strict=True))


def solve(profile: ChainProfile, budget: int, slots: int, block: int | None = None) -> Schedule:
    """The fastest schedule of the blocked family within ``budget`` bytes: the budget's own table
    (``slots`` levels over its free memory) or the family's least-memory schedule, whichever is
    faster; store-all when it fits."""
    block = block_size(profile.length) if block is None else block
    check_long(profile, block)
    peak_all = store_all_peak(profile)
    if budget >= peak_all:
        extra = {"claim": "optimal (store-all fits)"}
        return make_schedule(profile, budget, NAME, store_all_ops(profile), profile.store_all_compute_ms, extra=extra)
    lowest = least(profile, block)
    if budget < profile.input_size + lowest.free:
        detail = f"the least memory of the blocked DP's family (blocks of {block} stages), exact for that family"
        raise InfeasibleBudgetError(NAME, budget, profile.input_size + lowest.free, detail)
    candidates = [(lowest, lowest.free)]
    free = budget - profile.input_size
    table = table_for(profile, free, slots, block)
    level = int(np.argmin(table.top))
    if math.isfinite(table.top[level]):
        candidates.append((table, level))
    best = None
    for found, k in candidates:
        kinds, indices = _ops(profile, found, k)
        cost = _costs(profile, kinds, indices)
        if best is None or cost[1] < best[0][1]:
            best = (cost, kinds, indices, found)
    (peak, compute, _), kinds, indices, found = best
    extra = {
        "claim": (
            f"optimal among persistent schedules of the blocked family (blocks of {block} stages, "
            f"chains above {FLAT_LIMIT} stages), up to discretization; never faster than the flat DP"
        ),
        "blocks": {"stages_per_block": block, "count": len(table.bounds) - 1, "flat_limit": FLAT_LIMIT},
        "slots": table.slots,
        "slot_bytes": table.arrays.slot,
        "table_free_bytes": free,
    }
    if found is lowest:
        extra["claim"] = f"least memory of the blocked family (blocks of {block} stages), exact for the family"
    return make_schedule(
        profile,
        budget,
        NAME,
        _as_ops(kinds, indices),
        claimed_compute_ms=compute,
        claimed_peak_memory=peak,
        extra=extra,
    )


def _point(profile: ChainProfile, found: BlockedTable | Least, level: int, budget: int) -> FrontPoint:
    kinds, indices = _ops(profile, found, level)
    peak, compute, recompute = _costs(profile, kinds, indices)
    from remat.schedules.fast_chain import most_held

    return FrontPoint(NAME, budget, peak, compute, recompute, int(most_held(kinds, indices)))


def front(profile: ChainProfile, slots: int, block: int | None = None) -> list[FrontPoint]:
    """The blocked family's front: tables at several scales (the store-all budget's free memory,
    an eighth of it, ... down to the family's least memory), every level where a table improves,
    plus the least-memory schedule and store-all; each point's peak and time are the simulator's
    (:func:`remat.schedules.fast_chain.chain_costs`), dominated points dropped."""
    block = block_size(profile.length) if block is None else block
    check_long(profile, block)
    key = (profile.sha256, slots, block)
    return CACHE.get_or_put("blocked front", key, lambda: _front(profile, slots, block))


def _front(profile: ChainProfile, slots: int, block: int) -> list[FrontPoint]:
    lowest = least(profile, block)
    a0 = profile.input_size
    peak_all = store_all_peak(profile)
    points = [
        _point(profile, lowest, lowest.free, a0 + lowest.free),
        FrontPoint(NAME, peak_all, peak_all, profile.store_all_compute_ms, 0.0, 0),
    ]
    free = max(1, peak_all - a0)
    scales = [free]
    while free // SCALE_RATIO > lowest.free and slot_size(free, slots) > 1:
        free //= SCALE_RATIO
        scales.append(free)
    for index, free in enumerate(scales):
        above = scales[index + 1] if index + 1 < len(scales) else -1
        table = table_for(profile, free, slots if index == 0 else max(1, slots // 2), block)
        previous = math.inf
        for k in range(table.slots + 1):
            value = table.top[k]
            if value < previous * (1 - 1e-12):
                previous = value
                if k * table.arrays.slot > above:
                    points.append(_point(profile, table, k, a0 + k * table.arrays.slot))
    return [points[i] for i in pareto_order(points)]
