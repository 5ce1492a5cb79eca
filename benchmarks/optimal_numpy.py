"""The numpy-vectorized filling of the ``optimal`` chain DP: a baseline for benchmarks and tests.

This was the implementation of :func:`remat.solver.chain.dp.table.build_table` before the numba
kernel replaced it; it is kept, unchanged, so that ``benchmarks/solver_speed.py`` can time it
against the kernel in the same run and ``tests/solver/chain/test_optimal_kernel.py`` can check that the kernel
fills the same table (same float32 values, same decisions). The recurrence, rounding rules and
pruning are documented in :mod:`remat.solver.chain.dp.table`.

Layout: cells are computed for ``s`` from ``n-1`` down to 0 and, for each ``s``, ``t`` from
``s+1`` up; all ``k`` and all ``j`` of a segment at once with numpy. ``C(j, t, k - A_j)`` for all
``j`` is one slice of the per-``t`` array ``col[t]`` stored pre-shifted by ``A_j`` (the slots of
``a_j``), and ``C(s, j, k + G_t - A_j)`` one slice of the per-``s`` array ``row`` pre-shifted by
``A_j``. Split points ``j`` are taken in blocks of ``_BLOCK``, and a block is only evaluated at the
levels where ``SA(s, t) + F(s, j)`` is still below the best found (with a 1e-5 relative slack,
which can skip a split point that ties the bound to within 1e-5: only in segments longer than 97
stages, and the kernel, which keeps a margin the other way, would then find an equal or better cell).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from remat.schedules import ChainProfile
from remat.solver.chain.dp.table import INF, Sizes, chain_sizes

_BLOCK = 96  # candidates j per numpy step: small enough for the bound to prune, large enough to vectorize


@dataclass
class NumpyTable:
    """The filled table: ``top`` = C(0, n, k) (float64, ms), ``lo``/``hi`` as in
    :class:`remat.solver.chain.dp.table.Table`, ``decisions[(s, t)]`` an int16 array over
    ``k`` in ``[lo, min(hi, K+1))`` (0 = record stage s, j = checkpoint a[j], -1 = infeasible)."""

    n: int
    slots: int
    sizes: Sizes
    top: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    decisions: dict[tuple[int, int], np.ndarray]


def build_table_numpy(profile: ChainProfile, slot: int, slots: int) -> NumpyTable:
    """Fill the DP for ``profile`` with ``slots`` levels of ``slot`` bytes each, vectorized with numpy."""
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
    return NumpyTable(n=n, slots=K, sizes=sizes, top=top, lo=lo, hi=hi, decisions=decisions)
