"""The table of the ``optimal`` chain strategy: the persistent-schedule dynamic program.

Derivation (from DESIGN.md's op semantics; see :mod:`remat.solver.optimal` for the user side).

Notation: ``a_i`` bytes of activation i (``a_0`` the input, ``a_n`` the output), ``sv_i`` the
``saved_size`` of stage i, ``fo_i``/``bo_i`` its transients, ``f_i``/``b_i`` its times. Write
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
   ``F_n i`` peaks at ``a_i + a_{i+1} + fo_i``, ``F_ck s`` at ``a_{s+1} + fo_s``); solve
   ``C(j, t, m - a_j)``; its ``B j`` frees ``a[j]`` and leaves ``g[j]`` in place of ``g[t]``, so
   ``C(s, j, m + g'_t - a_j)`` finishes the segment (``g'_j = a_j`` as ``j < n``).
   Cost ``sum_{i=s}^{j-1} f_i + C(j, t, m - a_j) + C(s, j, m + g'_t - a_j)``.

::

    C(s, t, m) = min( f_s + b_s + C(s+1, t, m - sv_s)
                          if max(sv_s + fo_s, sv_s + a_{s+1} - g'_t + a_s + bo_s) <= m,
                      min_{s<j<t} F(s, j) + C(j, t, m - a_j) + C(s, j, m + g'_t - a_j)
                          if max(a_{s+1} + fo_s, max_{s<i<j} a_i + a_{i+1} + fo_i) <= m )

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

Layout and speed: cells are computed for ``s`` from ``n-1`` down to 0 and, for each ``s``, ``t``
from ``s+1`` up; all ``k`` and all ``j`` of a segment at once with numpy. ``C(j, t, k - A_j)``
for all ``j`` is one slice of the per-``t`` array ``col[t]`` stored pre-shifted by ``A_j`` (the
slots of ``a_j``), and ``C(s, j, k + G_t - A_j)`` one slice of the per-``s`` array ``row``
pre-shifted by ``A_j``. For each segment only ``k`` in ``[lo, hi)`` is computed: below ``lo``
it is infeasible, from ``hi = ceil(X(s, t) / S)`` on it is store-all -- both bounds follow from
the recurrence in O(L) per segment. Split points ``j`` are taken in blocks, and a block is only
evaluated at the levels where ``SA(s, t) + F(s, j)`` (a lower bound on any split at j) is still
below the best found: an exact pruning.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from remat.schedules import ChainProfile

INF = np.float32(np.inf)
INFEASIBLE = -1  # decision: no schedule for this segment at this level
STORE_ALL = -2  # decision: record the whole segment (F_all s .. t-1, then B t-1 .. s)
_BLOCK = 96  # candidates j per numpy step: small enough for the bound to prune, large enough to vectorize


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
        forward_slots: (n, 2) int array: [i, 0] = ceil((a_{i+1} + fo_i) / S) (F_ck i),
            [i, 1] = ceil((a_i + a_{i+1} + fo_i) / S) (F_n i with a[i] still counted).
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


def chain_sizes(profile: ChainProfile, slot: int) -> Sizes:
    """Exact byte sizes and their conservative slot counts for slot size ``slot`` bytes."""
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
                _ceil_div(act[i + 1] + st[i].forward_overhead, slot),
                _ceil_div(act[i] + act[i + 1] + st[i].forward_overhead, slot),
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
        decisions: per segment (s, t), int16 array over k in [lo, min(hi, K+1)): 0 = record
            stage s (option 1), j > s = checkpoint a[j] (option 2).
    """

    n: int
    slots: int
    sizes: Sizes
    top: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    decisions: dict[tuple[int, int], np.ndarray]

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
        return int(self.decisions[(s, t)][k - lo])


def build_table(profile: ChainProfile, slot: int, slots: int) -> Table:
    """Fill the DP for ``profile`` with ``slots`` levels of ``slot`` bytes each (see module doc)."""
    n = profile.length
    K = int(slots)
    W = K + 1
    sizes = chain_sizes(profile, slot)
    A = sizes.act_slots
    G = sizes.g_slots
    SV = sizes.saved_slots
    f = np.array([s.forward_ms for s in profile.stages], dtype=np.float64)
    b = np.array([s.backward_ms for s in profile.stages], dtype=np.float64)
    fcum = np.concatenate([[0.0], np.cumsum(f)])
    fb_cum = np.concatenate([[0.0], np.cumsum(f + b)])
    gmax = int(G.max()) if n > 0 else 0
    big = 1 << 40  # "never" for lo/hi arithmetic

    lo = np.full((n + 1, n + 1), big, dtype=np.int64)
    hi = np.full((n + 1, n + 1), big, dtype=np.int64)
    for t in range(n + 1):
        lo[t, t] = 0
        hi[t, t] = 0
    # col[t][k, j] = C(j, t, k - A_j): the right subproblems of segments ending at t (transposed
    # so that the minimum over j of one memory level k reads contiguous memory).
    col = [np.full((W, t), INF, dtype=np.float32) for t in range(n + 1)]
    decisions: dict[tuple[int, int], np.ndarray] = {}
    top = np.full(W, np.inf)
    ks = np.arange(W, dtype=np.int64)
    fwd_first = sizes.forward_slots[:, 0].tolist()
    fwd_next = sizes.forward_slots[:, 1].tolist()
    A_list = A.tolist()
    G_list = G.tolist()
    SV_list = SV.tolist()
    width_all = W + gmax
    # x_bytes[s][t]: bytes of free memory the store-all schedule of segment [s, t) needs
    x_bytes = [[0] * (n + 1) for _ in range(n + 1)]
    act = sizes.act
    rec_fwd = sizes.record_bytes[:, 0].tolist()  # sv_s + fo_s
    rec_bwd = sizes.record_bytes[:, 1].tolist()  # sv_s + a_{s+1} + a_s + bo_s
    stage_fo = [st.forward_overhead for st in profile.stages]
    fb_list = fb_cum.tolist()
    for s in range(n - 1, -1, -1):
        # row[k', j] = C(s, j, k' - A_j) + F(s, j), k' up to K + gmax, where F(s, j) is the time
        # of F_ck s, F_n s+1 .. F_n j-1. Values past K clamp to C(s, j, K): using less memory
        # than is free is always allowed, so the clamp stays valid.
        row = np.full((width_all, n + 1), INF, dtype=np.float32)
        # fwd_req[j] = slots needed by F_ck s, F_n s+1 .. F_n j-1 (prefix maximum over j).
        fwd_req = np.zeros(n + 1, dtype=np.int64)
        running = fwd_first[s]
        for j in range(s + 1, n + 1):
            fwd_req[j] = running
            if j < n:
                running = max(running, fwd_next[j])
        fwd_req_list = fwd_req.tolist()
        fsum = (fcum - fcum[s]).tolist()
        lo_row = lo[s]
        x_row = x_bytes[s]
        x_next = x_bytes[s + 1]
        lo_next = lo[s + 1].tolist()
        fb_s = np.float32(f[s] + b[s])
        fb_s_cum = fb_list[s]
        rec_fwd_s = rec_fwd[s]
        rec_bwd_s = rec_bwd[s]
        req_fwd_s = max(0, -(-rec_fwd_s // slot))
        saved_s = rec_fwd_s - stage_fo[s]
        a_s = A_list[s]
        sv_s = SV_list[s]
        for t in range(s + 1, n + 1):
            g_bytes = act[t] if t < n else 0
            # record_requirement(sizes, s, t, n), inlined: this loop runs n^2/2 times
            req1 = max(req_fwd_s, -(-(rec_bwd_s - g_bytes) // slot))
            seg_all = fb_list[t] - fb_s_cum
            lo1 = max(req1, sv_s + lo_next[t])
            # store-all of the segment needs x bytes free, counted exactly then rounded up once
            x = max(rec_fwd_s, saved_s + x_next[t], rec_bwd_s - g_bytes)
            x_row[t] = x
            hi_st = -(-x // slot)
            g_t = G_list[t]
            if t > s + 1:
                aj = A[s + 1 : t]
                lo2 = np.maximum(np.maximum(fwd_req[s + 1 : t], aj + lo[s + 1 : t, t]), lo_row[s + 1 : t] + (aj - g_t))
                lo_st = min(lo1, int(lo2.min()), hi_st)
            else:
                lo_st = min(lo1, hi_st)
            lo_row[t] = lo_st
            hi[s, t] = hi_st
            start = min(lo_st, W)
            stop = min(hi_st, W)
            values = np.empty(W, dtype=np.float32)
            values[:start] = INF
            values[stop:] = seg_all
            if start < stop:  # never for a single stage: there lo = hi = req1
                width = stop - start
                # option 1: C(s+1, t, k - SV_s), read from col[t][:, s+1] (shifted by A_{s+1})
                opt1 = np.full(width, INF, dtype=np.float32)
                first = max(start, req1)
                shift = A_list[s + 1] - sv_s
                if first < stop:
                    opt1[first - start :] = col[t][first + shift : stop + shift, s + 1]
                    opt1 += fb_s
                # option 2, blocks of j at once: cand[k, j]. Any candidate j costs at least
                # SA(s, t) + F(s, j) (both subsegments at store-all speed), so once that bound
                # reaches the best found at level k, no later j can win there: later blocks only
                # visit the levels that can still improve (an exact pruning).
                chosen = opt1
                dec = np.zeros(width, dtype=np.int16)
                j0 = s + 1
                while j0 < t:
                    j1 = min(t, j0 + _BLOCK)
                    kstop = stop
                    if j0 > s + 1:
                        bound = seg_all + fsum[j0]
                        improvable = np.flatnonzero(chosen > bound + 1e-5 * bound)
                        if improvable.size == 0:
                            break
                        kstop = start + int(improvable[-1]) + 1
                    span = kstop - start
                    cand = col[t][start:kstop, j0:j1] + row[start + g_t : kstop + g_t, j0:j1]
                    need_top = fwd_req_list[j1 - 1]
                    if need_top > start:
                        # forwards F_ck s .. F_n j-1 must fit too: mask j whose requirement exceeds k
                        low = min(need_top, kstop) - start
                        cand[:low][ks[start : start + low, None] < fwd_req[None, j0:j1]] = INF
                    best = cand.argmin(axis=1)
                    found = cand[ks[:span], best]
                    better = found < chosen[:span]
                    chosen[:span][better] = found[better]
                    dec[:span][better] = best[better] + j0
                    j0 = j1
                dec[chosen == INF] = -1
                decisions[(s, t)] = dec
                values[start:stop] = chosen
            # store shifted copies: col[t][k, s] = C(s, t, k - A_s); row[k', t] = C(s, t, k' - A_t) + F(s, t)
            if a_s < W:
                col[t][a_s:, s] = values[: W - a_s]
            if t < n:
                a_t = A_list[t]
                end1 = min(width_all, a_t + W)
                ft = np.float32(fsum[t])
                if a_t < end1:
                    row[a_t:end1, t] = values[: end1 - a_t] + ft
                if a_t + W < width_all:
                    row[a_t + W :, t] = values[W - 1] + ft
            if s == 0 and t == n:
                top = values.astype(np.float64)
    # lo/hi can exceed K; clamp the sentinel for readability
    return Table(n=n, slots=K, sizes=sizes, top=top, lo=lo, hi=hi, decisions=decisions)


def slot_size(free_bytes: int, slots: int) -> int:
    """Bytes per slot so that ``slots`` slots cover ``free_bytes`` (at least 1 byte)."""
    return max(1, math.ceil(free_bytes / max(1, slots)))
