"""The table of the ``optimal`` chain strategy: the persistent-schedule dynamic program.

Derivation (from the op semantics of docs/model.md, "Chains"; see :mod:`remat.solver.chain.optimal`
for the user side).

Notation: ``a_i`` bytes of activation i (``a_0`` the input, ``a_n`` the output), ``sv_i`` the
``saved_size`` of stage i, ``fo_i``/``bo_i`` its transients (recording forward, backward),
``fn_i`` the transient of its non-recording forward (``F_ck``/``F_n``; ``fo_i`` unless the
profile gives ``forward_nograd_overhead``), ``f_i``/``b_i`` its times. Write
``g'_t = a_t`` if ``t < n`` and ``g'_n = 0``: the gradient ``g[t]`` is held during the forwards
of a segment ending at ``t < n``, while ``g[n]`` only appears just before ``B n-1``.

Subproblem ``C(s, t, m)``, ``0 <= s < t <= n``: the state holds ``a_s`` (as ``a[s]`` or inside
``abar[s]``), ``g[t]`` (when ``t < n``) and nothing of stages ``s..t-1``; ``m`` bytes are free
(budget minus everything held). Run ``B t-1 .. B s`` with every op peak within the budget,
never dropping ``a_s`` before ``B s`` (persistence). ``C`` is the least time (ms); ``inf`` if
impossible. The whole problem is ``C(0, n, budget - a_0)``. Two ways to start a segment:

1. Record stage s: ``F_all s`` (peak ``sv_s + fo_s <= m``), solve ``C(s+1, t, m - sv_s)`` with
   ``a_{s+1}`` inside ``abar[s+1]``, then ``B s``. When the subsegment is done, ``g[s+1]`` replaced
   ``g[t]`` (``g[n]`` came and went), so ``B s`` starts with ``m - sv_s + g'_t - a_{s+1}`` free
   and adds ``g[s]`` plus its transient: ``sv_s + a_{s+1} - g'_t + a_s + bo_s <= m``.
   Cost ``f_s + b_s + C(s+1, t, m - sv_s)`` with ``C(t, t, x) = 0`` for ``x >= 0``.

2. Checkpoint: ``F_ck s, F_n s+1 .. F_n j-1`` for some ``s < j < t`` leaves ``a[j]`` held (each
   ``F_n i`` peaks at ``a_i + a_{i+1} + fn_i``, ``F_ck s`` at ``a_{s+1} + fn_s``); solve
   ``C(j, t, m - a_j)``; its ``B j`` frees ``a[j]`` and leaves ``g[j]`` in place of ``g[t]``, so
   ``C(s, j, m + g'_t - a_j)`` finishes the segment (``g'_j = a_j`` as ``j < n``).
   Cost ``sum_{i=s}^{j-1} f_i + C(j, t, m - a_j) + C(s, j, m + g'_t - a_j)``.

::

    C(s, t, m) = min( f_s + b_s + C(s+1, t, m - sv_s)
                          if max(sv_s + fo_s, sv_s + a_{s+1} - g'_t + a_s + bo_s) <= m,
                      min_{s<j<t} F(s, j) + C(j, t, m - a_j) + C(s, j, m + g'_t - a_j)
                          if max(a_{s+1} + fn_s, max_{s<i<j} a_i + a_{i+1} + fn_i) <= m )

Nothing else can start a persistent segment: ``a_s`` must stay until ``B s``, so the first op
on stage s is ``F_all s`` or ``F_ck s``; after ``F_ck s`` the chain of ``F_n`` up to the next
kept activation ``a[j]`` is forced; ``B s`` needs ``abar[s+1]``, i.e. a final ``F_all s``.

Store-all shortcut: recording the whole segment (``F_all s .. t-1``, ``B t-1 .. s``) is option 1 all
the way down and takes the least possible time ``SA(s, t) = sum f_i + b_i``. It needs
``X(s, t) = max(sv_s + fo_s, sv_s + X(s+1, t), sv_s + a_{s+1} - g'_t + a_s + bo_s)`` bytes free
(``X(t, t) = 0``), counted exactly; so ``C(s, t, k) = SA(s, t)`` for ``k >= ceil(X(s, t) / S)``
(decision ``STORE_ALL``), which also spares the rounding of each ``sv_i`` separately.

Discretization: memory is counted in slots of ``S`` bytes; ``k`` slots means "at least ``k*S``
bytes free". Every requirement (a sum of bytes) is rounded up, every subtraction from the free
memory is rounded up and the one addition (``g'_t``) rounded down, so every schedule the table
describes fits in the real budget; with sizes that are multiples of ``S`` the table is exact.

Layout and speed: the table is filled by a numba kernel (:mod:`remat.solver.chain.dp.kernel`,
compiled on first use and cached on disk), in two passes. Pass 1 computes, for every segment, the
integer bounds ``lo <= hi``: below ``lo`` the segment is infeasible, from ``hi = ceil(X(s, t) /
S)`` on it is store-all -- both follow from the recurrence in O(L) per segment. Pass 2 computes
cells for rows ``s`` in blocks of 16 from the last block up and, in each block, for ``t`` going up
and the block's rows from the bottom (every cell's inputs are then done, and each column's runs are
read once per block), only for ``k`` in ``[lo, hi)``; those values (float32) and decisions (int16)
are stored flat, one run per segment (runs ordered by ``t``, then ``s``), so reading ``C(j, t, x)``
is a lookup: ``inf`` below ``lo``, ``SA`` from ``hi`` on, else the stored run (the values are
also kept in a second, row-by-row copy while the table fills, so that a cell's reads of
``C(s, j, .)`` for j = s+1, s+2, ... are one stream too). At each level a split point ``j`` is
evaluated only while ``SA(s, t) + F(s, j)`` (a lower bound on any split at j, growing with j),
lowered by a margin far above float32 rounding, is still below the best found there, and only
if its value at the band's top level (a lower bound at every lower level, both parts being
non-increasing in the memory) is, less such a margin, below the best so far at the band's first
level (the largest there): no candidate the plain recurrence would choose is skipped. Levels
are relaxed in whole chunks of 16; the few past the band get true candidate values that cannot
improve them. Sums are formed in float32 in the
same order as the numpy implementation this replaced (kept as a baseline in
``benchmarks/optimal_numpy.py``), ties go to option 1 and then to the smallest ``j``, and
tests/solver/chain/test_optimal_kernel.py checks that both fill identical tables. After the fill only the
decisions are kept (what read-back needs), not the values.

Exactness: before the fill every time is multiplied by one power of two (:func:`time_scale`), so
that float32 holds any profile's times (1e38 ms stages included) and the sums are the exact
scaled images of the unscaled ones; ``top`` is scaled back (exactly). Byte totals must stay below
2**60 and decisions are int16, or int32 from 32,767 stages on (:func:`check_limits` refuses
larger chains with a one-line error rather than letting numpy overflow).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from remat.schedules import ChainProfile, RematError
from remat.solver.chain.dp.kernel import bounds, fill

INF = np.float32(np.inf)
INFEASIBLE = -1  # decision: no schedule for this segment at this level
STORE_ALL = -2  # decision: record the whole segment (F_all s .. t-1, then B t-1 .. s)


@dataclass(frozen=True)
class Sizes:
    """A chain's sizes in bytes (exact) and in slots (rounded so that schedules stay in budget).

    Attributes:
        slot: bytes per slot S.
        act: a_0 .. a_n, bytes.
        act_slots: ceil(a_i / S), what holding a[i] takes from the free memory.
        g_slots: floor(g'_t / S) for t = 0..n (0 for t = n), what B t-1 gives back in place of g[t].
        saved_slots: ceil(sv_s / S), what holding abar[s+1] takes.
        record_bytes: (n, 2) int array: [s, 0] = sv_s + fo_s (peak of F_all s over the free
            memory), [s, 1] = sv_s + a_{s+1} + a_s + bo_s (peak of B s, before subtracting g'_t).
        forward_slots: (n, 2) int array: [i, 0] = ceil((a_{i+1} + fn_i) / S) (F_ck i),
            [i, 1] = ceil((a_i + a_{i+1} + fn_i) / S) (F_n i with a[i] still counted), where
            fn_i is the stage's non-recording transient (``Stage.nograd_overhead``).
    """

    slot: int
    act: tuple[int, ...]
    act_slots: np.ndarray
    g_slots: np.ndarray
    saved_slots: np.ndarray
    record_bytes: np.ndarray
    forward_slots: np.ndarray


def _ceil_div(value: int, slot: int) -> int:
    return max(0, -(-value // slot))


MAX_TOTAL_BYTES = 1 << 60  # the kernel adds a few byte totals in int64: keep each far below 2**63
MAX_STAGES = (1 << 31) - 2  # split points are stored as int32 decisions


def check_limits(profile: ChainProfile) -> None:
    """Raise :class:`RematError` for a chain the table's integers cannot hold (sizes in bytes)."""
    total = profile.input_size + sum(
        s.output_size + s.saved_size + s.forward_overhead + abs(s.backward_overhead) + s.nograd_overhead
        for s in profile.stages
    )
    if total >= MAX_TOTAL_BYTES:
        raise RematError(
            f"optimal: the chain's sizes add up to {total} bytes, more than the DP table's integers "
            f"hold (2**60 bytes); the simulator and the other strategies take any size"
        )
    if profile.length > MAX_STAGES:
        raise RematError(f"optimal: {profile.length} stages exceed the DP table's limit of {MAX_STAGES}")


def chain_sizes(profile: ChainProfile, slot: int) -> Sizes:
    """Exact byte sizes and their conservative slot counts for slot size ``slot`` bytes."""
    check_limits(profile)
    n = profile.length
    act = tuple(profile.activation_size(i) for i in range(n + 1))
    st = profile.stages
    act_slots = np.array([_ceil_div(a, slot) for a in act], dtype=np.int64)
    g_slots = np.array([act[t] // slot for t in range(n)] + [0], dtype=np.int64)
    saved_slots = np.array([_ceil_div(s.saved_size, slot) for s in st], dtype=np.int64)
    record_bytes = np.array(
        [
            [
                st[s].saved_size + st[s].forward_overhead,
                st[s].saved_size + act[s + 1] + act[s] + st[s].backward_overhead,
            ]
            for s in range(n)
        ],
        dtype=np.int64,
    ).reshape(n, 2)
    forward_slots = np.array(
        [
            [
                _ceil_div(act[i + 1] + st[i].nograd_overhead, slot),
                _ceil_div(act[i] + act[i + 1] + st[i].nograd_overhead, slot),
            ]
            for i in range(n)
        ],
        dtype=np.int64,
    ).reshape(n, 2)
    return Sizes(slot, act, act_slots, g_slots, saved_slots, record_bytes, forward_slots)


def record_requirement(sizes: Sizes, s: int, t: int, n: int) -> int:
    """Slots that option 1 (``F_all s`` ... ``B s``) needs at its own ops in segment ``[s, t)``:
    the combined byte amounts are rounded up once (tighter than rounding each size)."""
    g = sizes.act[t] if t < n else 0
    return max(
        _ceil_div(int(sizes.record_bytes[s, 0]), sizes.slot),
        _ceil_div(int(sizes.record_bytes[s, 1]) - g, sizes.slot),
    )


@dataclass
class Table:
    """The filled dynamic program for one chain, slot size and number of slots.

    Attributes:
        n: stages.
        slots: K; memory levels are k = 0..K slots of free memory.
        sizes: the chain's sizes (bytes and slots).
        top: C(0, n, k) for k = 0..K (milliseconds; inf where infeasible), float64.
        lo, hi: (n+1, n+1) int arrays; for segment [s, t): infeasible below lo[s, t], store-all
            of the segment from hi[s, t] on (both may exceed K).
        offsets: (n+1, n+1) int array: where segment (s, t)'s decisions start in ``flat``.
        flat: int16 (int32 from 32,767 stages on) decisions of every segment, over k in
            [lo, min(hi, K+1)) each: 0 = record
            stage s (option 1), j > s = checkpoint a[j] (option 2), -1 = infeasible.
    """

    n: int
    slots: int
    sizes: Sizes
    top: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    offsets: np.ndarray
    flat: np.ndarray

    def decision(self, s: int, t: int, k: int) -> int:
        """0 to record stage s, j to checkpoint a[j], STORE_ALL to record the whole segment;
        -1 if (s, t, k) is infeasible."""
        lo = int(self.lo[s, t])
        if k < lo:
            return -1
        if t == s + 1:
            return 0
        if k >= self.hi[s, t]:
            return STORE_ALL
        return int(self.flat[self.offsets[s, t] + k - lo])

    def segment_decisions(self, s: int, t: int) -> np.ndarray:
        """The decisions of segment (s, t) over k in [lo, min(hi, K+1)) (a view)."""
        start = min(int(self.lo[s, t]), self.slots + 1)
        stop = min(int(self.hi[s, t]), self.slots + 1)
        offset = int(self.offsets[s, t])
        return self.flat[offset : offset + max(0, stop - start)]


def build_table(profile: ChainProfile, slot: int, slots: int) -> Table:
    """Fill the DP for ``profile`` with ``slots`` levels of ``slot`` bytes each (see module doc)."""
    n = profile.length
    K = int(slots)
    sizes = chain_sizes(profile, slot)
    scale = time_scale(profile)
    f = np.array([s.forward_ms for s in profile.stages], dtype=np.float64) * scale
    b = np.array([s.backward_ms for s in profile.stages], dtype=np.float64) * scale
    fcum = np.concatenate([[0.0], np.cumsum(f)])
    fb_cum = np.concatenate([[0.0], np.cumsum(f + b)])
    fb32 = (f + b).astype(np.float32)
    act = np.array(sizes.act, dtype=np.int64)
    rec_fwd = np.ascontiguousarray(sizes.record_bytes[:, 0])
    rec_bwd = np.ascontiguousarray(sizes.record_bytes[:, 1])
    saved = np.array([st.saved_size for st in profile.stages], dtype=np.int64)
    fwd_first = np.ascontiguousarray(sizes.forward_slots[:, 0])
    fwd_next = np.ascontiguousarray(sizes.forward_slots[:, 1])
    A, G, SV = sizes.act_slots, sizes.g_slots, sizes.saved_slots
    lo, hi, req1, _ = bounds(n, K, int(slot), A, G, SV, fwd_first, fwd_next, act, rec_fwd, rec_bwd, saved)
    kind = np.zeros(1, dtype=decision_dtype(n))
    offsets, flat, top = fill(n, K, A, G, SV, fwd_first, fwd_next, fcum, fb_cum, fb32, lo, hi, req1, kind)
    top = top / scale  # exact: the scale is a power of two
    return Table(n=n, slots=K, sizes=sizes, top=top, lo=lo, hi=hi, offsets=offsets, flat=flat)


def decision_dtype(n: int) -> type:
    """The decisions' integer type: int16 while split points (stage indices up to n) fit, else int32."""
    return np.int16 if n < np.iinfo(np.int16).max else np.int32


def time_scale(profile: ChainProfile) -> float:
    """A power of two that brings the largest stage time to [0.5, 1) ms-units: the table's float32
    values (at most about n**2 such times) then neither overflow nor lose small stages to
    underflow, and, the factor being a power of two, every float32 sum is the scaled image of the
    unscaled one (same decisions as without scaling whenever that does not overflow)."""
    largest = max(max(s.forward_ms, s.backward_ms) for s in profile.stages)
    if largest == 0.0:
        return 1.0
    return math.ldexp(1.0, -math.frexp(largest)[1])


def slot_size(free_bytes: int, slots: int) -> int:
    """Bytes per slot so that ``slots`` slots cover ``free_bytes`` (at least 1 byte)."""
    return max(1, math.ceil(free_bytes / max(1, slots)))
