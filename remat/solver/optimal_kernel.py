"""The compiled kernel that fills the ``optimal`` DP table (see :mod:`remat.solver.optimal_table`
for the recurrence, the rounding rules, the bounds ``lo``/``hi`` and the pruning of split points).

Compiled on the first call on a machine (a few seconds) and loaded from numba's on-disk cache
afterwards (:mod:`remat.solver.jit` falls back to an uncached compile where no cache can be
written). Integers are int64; times float64, except the table values, which are float32 formed
exactly as the numpy implementation this replaced formed them (benchmarks/optimal_numpy.py;
tests/test_optimal_kernel.py checks that both fill identical tables). The caller scales every
time by one power of two first (exact), so float32 neither overflows nor underflows.
"""

from __future__ import annotations

import numpy as np

# numba (a pip-installable dependency): the table filling is a triple loop over segments, memory
# levels and split points with data-dependent skipping; compiled it is several times faster than the
# numpy-vectorized version at 400 stages and up (benchmarks/solver_speed.py measures both).
from remat.schedules.jit import njit_cached


@njit_cached
def _ceil_div_any(value, slot):
    """ceil(value / slot) for a value of any sign (slot > 0), as Python's ``-(-value // slot)``."""
    if value >= 0:
        return (value + slot - 1) // slot
    return -((-value) // slot)


@njit_cached
def bounds(n, K, slot, A, G, SV, fwd_first, fwd_next, act, rec_fwd, rec_bwd, saved):
    """Pass 1: lo[s, t], hi[s, t], req1[s, t] (slots option 1 needs at its own ops) and arg[s, t],
    the option that attains lo (0: record stage s, j: checkpoint a[j], -2: store-all the segment).

    With ``slot = 1`` every quantity is in bytes and nothing is rounded: ``lo[0, n]`` is then the
    exact least free memory of any persistent schedule, and ``arg`` describes one that needs it.
    The callers keep every byte total below 2**60 (:func:`remat.solver.optimal_table.chain_sizes`),
    so sums of a few of them never overflow int64."""
    big = np.int64(1) << 62  # "never": only on the diagonal's other side, never added to
    lo = np.full((n + 1, n + 1), big, dtype=np.int64)
    hi = np.full((n + 1, n + 1), big, dtype=np.int64)
    req1 = np.zeros((n + 1, n + 1), dtype=np.int64)
    arg = np.zeros((n + 1, n + 1), dtype=np.int64)
    x_bytes = np.zeros((n + 1, n + 1), dtype=np.int64)  # bytes free the store-all of [s, t) needs
    fwd_req = np.zeros(n + 1, dtype=np.int64)
    for t in range(n + 1):
        lo[t, t] = 0
        hi[t, t] = 0
    for s in range(n - 1, -1, -1):
        # fwd_req[j] = slots needed by F_ck s, F_n s+1 .. F_n j-1 (prefix maximum over j)
        running = fwd_first[s]
        for j in range(s + 1, n + 1):
            fwd_req[j] = running
            if j < n:
                running = max(running, fwd_next[j])
        req_fwd_s = _ceil_div_any(rec_fwd[s], slot)
        for t in range(s + 1, n + 1):
            g_bytes = act[t] if t < n else 0
            r1 = max(req_fwd_s, _ceil_div_any(rec_bwd[s] - g_bytes, slot))
            req1[s, t] = r1
            x = max(rec_fwd[s], saved[s] + x_bytes[s + 1, t], rec_bwd[s] - g_bytes)
            x_bytes[s, t] = x
            hi_st = _ceil_div_any(x, slot)
            lo_st = max(r1, SV[s] + lo[s + 1, t])
            best = 0
            if hi_st < lo_st:
                lo_st = hi_st
                best = -2
            g_t = G[t]
            for j in range(s + 1, t):
                a_j = A[j]
                need = max(max(fwd_req[j], a_j + lo[j, t]), lo[s, j] + a_j - g_t)
                if need < lo_st:
                    lo_st = need
                    best = j
            lo[s, t] = lo_st
            hi[s, t] = hi_st
            arg[s, t] = best
    return lo, hi, req1, arg


# The four loops below set chosen[k] = min(chosen[k], right + (left + f32)) and dec[k] = j where it
# improves for k in [k0, k1), with right/left read from values[base + k] (v) or constant (c).
# Indices are unsigned, so that no negative-index check blocks vectorization, and nothing is
# sliced (no reference counting per call). Selects, not branches: equal values are kept, so
# ties still go to the earlier candidate.
@njit_cached
def _relax_vv(ch, dc, k0, k1, values, r_base, l_base, f32, j16):
    for k in range(k0, k1):
        c = values[np.uint64(r_base + k)] + (values[np.uint64(l_base + k)] + f32)
        i = np.uint64(k)
        best = ch[i]
        better = c < best
        ch[i] = c if better else best
        dc[i] = j16 if better else dc[i]


@njit_cached
def _relax_cv(ch, dc, k0, k1, rc, values, l_base, f32, j16):
    for k in range(k0, k1):
        c = rc + (values[np.uint64(l_base + k)] + f32)
        i = np.uint64(k)
        best = ch[i]
        better = c < best
        ch[i] = c if better else best
        dc[i] = j16 if better else dc[i]


@njit_cached
def _relax_vc(ch, dc, k0, k1, values, r_base, lc, f32, j16):
    left = lc + f32
    for k in range(k0, k1):
        c = values[np.uint64(r_base + k)] + left
        i = np.uint64(k)
        best = ch[i]
        better = c < best
        ch[i] = c if better else best
        dc[i] = j16 if better else dc[i]


@njit_cached
def _relax_cc(ch, dc, k0, k1, c, j16):
    for k in range(k0, k1):
        i = np.uint64(k)
        best = ch[i]
        better = c < best
        ch[i] = c if better else best
        dc[i] = j16 if better else dc[i]


@njit_cached
def fill(n, K, A, G, SV, fwd_first, fwd_next, fcum, fb_cum, fb32, lo, hi, req1, kind):
    """Pass 2: the cells of every segment at levels [lo, hi) (see the module doc).

    ``kind`` is a one-element array of the decisions' integer type (int16, or int32 for chains
    too long for int16: split points are stage indices). Returns (offsets, decisions, top).

    The float32 sums are formed exactly as the numpy baseline
    forms them, ``C(j, t, .) + (C(s, j, .) + float32(F(s, j)))`` and ``C(s+1, t, .) + float32(f_s + b_s)``,
    and ties go to option 1, then to the smallest j, so the tables are identical."""
    W = K + 1
    inf = np.float32(np.inf)
    offsets = np.zeros((n + 1, n + 1), dtype=np.int64)
    total = 0
    # column-major runs (t outer, then s): a segment (s, t) reads the runs of (s+1, t) .. (t-1, t)
    # one after the other, a stream the hardware prefetches; the runs of (s, j) it also reads
    # were written while filling row s and are still in cache
    for t in range(1, n + 1):
        for s in range(t):
            offsets[s, t] = total
            width = min(hi[s, t], W) - min(lo[s, t], W)
            if width > 0:
                total += width
    values = np.empty(total, dtype=np.float32)
    decisions = np.empty(total, dtype=kind.dtype)
    top = np.full(W, np.inf)
    chosen = np.empty(W, dtype=np.float32)
    dec = np.empty(W, dtype=kind.dtype)
    box = np.empty(1, dtype=kind.dtype)  # j converted to the decisions' type
    fwd_req = np.zeros(n + 1, dtype=np.int64)
    for s in range(n - 1, -1, -1):
        running = fwd_first[s]
        for j in range(s + 1, n + 1):
            fwd_req[j] = running
            if j < n:
                running = max(running, fwd_next[j])
        fb_s = fb32[s]
        sv_s = SV[s]
        for t in range(s + 1, n + 1):
            start = min(lo[s, t], W)
            stop = min(hi[s, t], W)
            seg_all = fb_cum[t] - fb_cum[s]
            if start < stop:  # never for a single stage: there lo = hi = req1
                g_t = G[t]
                # option 1: F_all s, C(s+1, t, k - SV_s), B s
                first = max(start, req1[s, t])
                lo_r = lo[s + 1, t]
                hi_r = hi[s + 1, t]
                off_r = offsets[s + 1, t]
                sa_r = np.float32(fb_cum[t] - fb_cum[s + 1])
                for k in range(start, stop):
                    dec[k] = 0
                    c = inf
                    if k >= first:
                        x = k - sv_s
                        if x >= hi_r:
                            c = sa_r + fb_s
                        elif x >= lo_r:
                            c = values[off_r + x - lo_r] + fb_s
                    chosen[k] = c
                # option 2: checkpoint a[j]. Any split at j costs at least SA(s, t) + F(s, j) (both
                # subsegments at store-all speed), a bound growing with j: a level whose best is
                # already at or below it cannot improve at this j or any later one. The bound is
                # lowered by 1e-3 of itself, far more than the float32 rounding of a sum of up to
                # 2n terms, so that no candidate the plain recurrence would take is skipped. The
                # band [kb, ke) of levels that can still improve only shrinks.
                kb = start
                ke = stop
                for j in range(s + 1, t):
                    f_sj = fcum[j] - fcum[s]
                    if j > s + 1:
                        bound = seg_all + f_sj
                        thr = bound - 1e-3 * bound
                        while ke > kb and chosen[ke - 1] <= thr:
                            ke -= 1
                        while kb < ke and chosen[kb] <= thr:
                            kb += 1
                        if kb >= ke:
                            break
                    else:
                        thr = -1.0
                    if fwd_req[j] >= ke:
                        break  # the forwards up to j (and any later j) need more than any level left
                    a_j = A[j]
                    lo_r = lo[j, t]
                    lo_l = lo[s, j]
                    if lo_r > K or lo_l > K:
                        continue
                    hi_r = hi[j, t]
                    hi_l = hi[s, j]
                    off_r = offsets[j, t]
                    off_l = offsets[s, j]
                    sa_r = np.float32(fb_cum[t] - fb_cum[j])
                    sa_l = np.float32(fb_cum[j] - fb_cum[s])
                    f32 = np.float32(f_sj)
                    k0 = max(max(kb, fwd_req[j]), max(lo_r + a_j, lo_l + a_j - g_t))
                    if k0 >= ke:
                        continue
                    # C(j, t, k - A_j) is read from the stored run below k_r and is SA(j, t) from k_r on;
                    # C(s, j, min(k + G_t - A_j, K)) likewise below k_l and constant (SA, or its value
                    # at K when the clamp comes first) from k_l on. Splitting [k0, ke) there leaves
                    # branch-free loops that the compiler vectorizes.
                    k_r = hi_r + a_j
                    r_base = off_r - lo_r - a_j  # values[r_base + k] = C(j, t, k - A_j) below k_r
                    l_base = off_l - lo_l + g_t - a_j  # values[l_base + k] = C(s, j, k + G_t - A_j) below k_l
                    if hi_l <= K:
                        k_l = hi_l + a_j - g_t
                        l_const = sa_l
                    else:
                        k_l = K + 1 + a_j - g_t
                        l_const = values[off_l + K - lo_l]
                    box[0] = j
                    j16 = box[0]
                    k1 = min(max(k0, min(k_r, k_l)), ke)
                    k2 = min(max(k0, max(k_r, k_l)), ke)
                    _relax_vv(chosen, dec, k0, k1, values, r_base, l_base, f32, j16)
                    if k_r <= k_l:
                        _relax_cv(chosen, dec, k1, k2, sa_r, values, l_base, f32, j16)
                    else:
                        _relax_vc(chosen, dec, k1, k2, values, r_base, l_const, f32, j16)
                    _relax_cc(chosen, dec, k2, ke, sa_r + (l_const + f32), j16)
                off = offsets[s, t]
                for k in range(start, stop):
                    values[off + k - start] = chosen[k]
                    decisions[off + k - start] = dec[k] if chosen[k] < inf else -1
            if s == 0 and t == n:
                for k in range(start):
                    top[k] = np.inf
                for k in range(start, stop):
                    top[k] = chosen[k]
                sa = np.float32(seg_all)
                for k in range(stop, W):
                    top[k] = sa
    return offsets, decisions, top
