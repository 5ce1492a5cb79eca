"""The compiled kernel that fills the ``optimal`` DP table (see :mod:`remat.solver.chain.dp.table`
for the recurrence, the rounding rules, the bounds ``lo``/``hi`` and the pruning of split points).

Compiled on the first call on a machine (a few seconds) and loaded from numba's on-disk cache
afterwards (:mod:`remat.schedules.jit` falls back to an uncached compile where no cache can be
written). Integers are int64; times float64, except the table values, which are float32 formed
exactly as the numpy implementation this replaced formed them (benchmarks/optimal_numpy.py;
tests/solver/chain/test_optimal_kernel.py checks that both fill identical tables). The caller scales every
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


@njit_cached(nogil=True)  # the front builds its tables in threads
def bounds(n, K, slot, A, G, SV, fwd_first, fwd_next, act, rec_fwd, rec_bwd, saved):
    """Pass 1: lo[s, t], hi[s, t], req1[s, t] (slots option 1 needs at its own ops) and arg[s, t],
    the option that attains lo (0: record stage s, j: checkpoint a[j], -2: store-all the segment).

    With ``slot = 1`` every quantity is in bytes and nothing is rounded: ``lo[0, n]`` is then the
    exact least free memory of any persistent schedule, and ``arg`` describes one that needs it.
    The callers keep every byte total below 2**60 (:func:`remat.solver.chain.dp.table.chain_sizes`),
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


# One loop per split point: chosen[k] = min(chosen[k], right + (left + f32)) and dec[k] = j where it
# improves, for k in [k0, k1). right is C(j, t, k - A_j), read from values[r_base + k] below k_r and
# SA(j, t) from k_r on; left is C(s, j, k + G_t - A_j), read from rows[l_base + k] (the same cells
# stored row by row, see fill) below k_l and constant from k_l on. The reads happen at every k and
# selects pick the constant (a read past a run stays within W + _CHUNK cells of it, inside the
# arrays' padding; _segment makes sure of it): one branch-free loop that the compiler vectorizes,
# instead of four loops with four set-ups and four scalar tails, which cost more than the
# arithmetic for the ~40-250 levels of a typical split. Levels go in whole chunks of _CHUNK (one
# vector each, no scalar tail), so up to _CHUNK - 1 levels past k1 are relaxed too: there every
# read is still the right value (or a scratch level at or past W), and a level past the band
# cannot improve (that is why it left the band), so nothing that is kept changes. The sums are
# formed exactly as before, right + (left + f32). Indices are unsigned, so that no negative-index
# check blocks vectorization; ties keep the earlier candidate.
@njit_cached
def _relax(ch, dc, k0, k1, values, r_base, k_r, r_const, rows, l_base, k_l, l_const, f32, j16):
    for first in range(k0, k1, _CHUNK):
        for q in range(_CHUNK):
            k = first + q
            i = np.uint64(k)
            right = values[np.uint64(r_base + k)]
            right = r_const if k >= k_r else right
            left = rows[np.uint64(l_base + k)]
            left = l_const if k >= k_l else left
            c = right + (left + f32)
            best = ch[i]
            better = c < best
            ch[i] = c if better else best
            dc[i] = j16 if better else dc[i]


_ROWS = 16  # rows s filled together (see fill)
_CHUNK = 16  # levels relaxed together (see _relax); 8 was twice as slow, 32 no faster


@njit_cached
def _layout(n, W, lo, hi):
    """Where each segment's run of cells starts (column-major: t outer, then s), and the total.

    A segment (s, t) reads the runs of (s+1, t) .. (t-1, t) one after the other, a stream the
    hardware prefetches; ``col[t, j]`` = (lo, hi, offset) of segment (j, t), so that walking j down
    that column reads contiguous memory too. It also reads (s, s+1) .. (s, t-1), scattered over
    the columns: ``row_offsets`` places a second copy of every run row by row (s outer, then t),
    where those reads are one stream as well (it matters once a table is larger than the caches)."""
    offsets = np.zeros((n + 1, n + 1), dtype=np.int64)
    total = 0
    for t in range(1, n + 1):
        for s in range(t):
            offsets[s, t] = total
            width = min(hi[s, t], W) - min(lo[s, t], W)
            if width > 0:
                total += width
    row_offsets = np.zeros((n + 1, n + 1), dtype=np.int64)
    row_total = 0
    for s in range(n):
        for t in range(s + 1, n + 1):
            row_offsets[s, t] = row_total
            width = min(hi[s, t], W) - min(lo[s, t], W)
            if width > 0:
                row_total += width
    col = np.empty((n + 1, n + 1, 3), dtype=np.int64)
    for t in range(n + 1):
        for j in range(n + 1):
            col[t, j, 0] = lo[j, t]
            col[t, j, 1] = hi[j, t]
            col[t, j, 2] = offsets[j, t]
    return offsets, row_offsets, col, total


@njit_cached(nogil=True)
def fill(n, K, A, G, SV, fwd_first, fwd_next, fcum, fb_cum, fb32, lo, hi, req1, kind):
    """Pass 2: the cells of every segment at levels [lo, hi) (see the module doc).

    ``kind`` is a one-element array of the decisions' integer type (int16, or int32 for chains
    too long for int16: split points are stage indices). Returns (offsets, decisions, top).

    Order: a segment (s, t) needs (s, j) for j < t and (j, t) for j > s. Rows s are taken in
    blocks of ``_ROWS`` (from the last block up); inside a block, t goes up and, for each t, s goes
    down the block. Every cell then finds its inputs done, and column t's runs, read by each row
    of the block in turn, are read from memory once per block rather than once per row (at 1000
    stages a table is larger than the caches). Each cell is computed exactly as in a row-by-row
    order, so the table does not depend on the block size."""
    W = K + 1
    offsets, row_offsets, col, total = _layout(n, W, lo, hi)
    values = np.zeros(total + 2 * W + 2 + 2 * _CHUNK, dtype=np.float32)  # padded: see _relax
    rows = np.zeros(total + 2 * W + 2 + 2 * _CHUNK, dtype=np.float32)
    decisions = np.empty(total, dtype=kind.dtype)
    top = np.full(W, np.inf)
    work = np.empty(W + _CHUNK, dtype=np.float32)
    dec = np.empty(W + _CHUNK, dtype=kind.dtype)
    box = np.empty(1, dtype=kind.dtype)  # j converted to the decisions' type
    fwd_req = np.zeros((_ROWS, n + 1), dtype=np.int64)
    # the arrays every segment reads or writes, grouped (tuples cost nothing in compiled code)
    chain = (A, G, SV, fcum, fb_cum, fb32)
    band = (lo, hi, req1)
    layout = (offsets, row_offsets, col)
    store = (values, rows, decisions)
    scratch = (work, dec, box)
    for s_hi in range(n - 1, -1, -_ROWS):
        s_lo = max(0, s_hi - _ROWS + 1)
        for s in range(s_lo, s_hi + 1):
            # fwd_req[., j] = slots needed by F_ck s, F_n s+1 .. F_n j-1 (prefix maximum over j)
            running = fwd_first[s]
            for j in range(s + 1, n + 1):
                fwd_req[s - s_lo, j] = running
                if j < n:
                    running = max(running, fwd_next[j])
        for t in range(s_lo + 1, n + 1):
            for s in range(min(s_hi, t - 1), s_lo - 1, -1):
                _segment(s, t, n, K, fwd_req[s - s_lo], chain, band, layout, store, scratch, top)
    return offsets, decisions, top


@njit_cached
def _segment(s, t, n, K, fwd_req, chain, band, layout, store, scratch, top):
    """Fill the run of segment (s, t) (and ``top`` when it is the whole chain).

    ``chain`` = (A, G, SV, fcum, fb_cum, fb32), ``band`` = (lo, hi, req1), ``layout`` = (offsets,
    row_offsets, col), ``store`` = (values, rows, decisions), ``scratch`` = (chosen, dec, box), as
    in :func:`fill`. The float32 sums are formed exactly as the numpy baseline forms them,
    ``C(j, t, .) + (C(s, j, .) + float32(F(s, j)))`` and ``C(s+1, t, .) + float32(f_s + b_s)``,
    and ties go to option 1, then to the smallest j, so the tables are identical."""
    lo, hi = band[0], band[1]
    W = K + 1
    start = min(lo[s, t], W)
    stop = min(hi[s, t], W)
    if start < stop:  # never for a single stage: there lo = hi = req1
        _record_first(s, t, start, stop, chain, band, layout, store, scratch)
        _checkpoint_first(s, t, n, K, start, stop, fwd_req, chain, band, layout, store, scratch)
        _keep_run(s, t, start, stop, layout, store, scratch)
    if s == 0 and t == n:
        chosen = scratch[0]
        for k in range(start):
            top[k] = np.inf
        for k in range(start, stop):
            top[k] = chosen[k]
        sa = np.float32(chain[4][t] - chain[4][s])
        for k in range(stop, W):
            top[k] = sa


@njit_cached
def _record_first(s, t, start, stop, chain, band, layout, store, scratch):
    """Option 1 at levels [start, stop): F_all s, C(s+1, t, k - SV_s), B s (into ``chosen``, ``dec``)."""
    SV, fb_cum, fb32 = chain[2], chain[4], chain[5]
    lo, hi, req1 = band
    offsets = layout[0]
    values = store[0]
    chosen, dec = scratch[0], scratch[1]
    inf = np.float32(np.inf)
    fb_s = fb32[s]
    sv_s = SV[s]
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


# One flat loop over the split points j, deliberately: the band [kb, ke) of levels that can still
# improve, narrowed at each j, is what the next j starts from, and the skips decide per j.
@njit_cached
def _checkpoint_first(s, t, n, K, start, stop, fwd_req, chain, band, layout, store, scratch):
    """Option 2 at levels [start, stop): checkpoint a[j], for every split point j worth trying.

    Any split at j costs at least SA(s, t) + F(s, j) (both subsegments at store-all speed), a
    bound growing with j: a level whose best is already at or below it cannot improve at this j
    or any later one. The bound is lowered by 1e-3 of itself, far more than the float32 rounding
    of a sum of up to 2n terms, so that no candidate the plain recurrence would take is skipped.
    The band [kb, ke) of levels that can still improve only shrinks."""
    A, G, fcum, fb_cum = chain[0], chain[1], chain[3], chain[4]
    lo, hi = band[0], band[1]
    row_offsets, col = layout[1], layout[2]
    values, rows = store[0], store[1]
    chosen, dec, box = scratch
    W = K + 1
    pad = values.size - W - 1 - _CHUNK  # values[pad:] is padding, W + 1 + _CHUNK cells or more
    seg_all = fb_cum[t] - fb_cum[s]
    g_t = G[t]
    kb = start
    ke = stop
    # Every value is a float32 sum of at most 2n + 3 non-negative terms, within (2n + 3) * 2**-24
    # of its exact value (relative); the split-skip below compares two such values after
    # two uses of monotonicity, so 4 * (2n + 3) * 2**-24 would do: this is about 4 times that.
    margin = max(1e-3, 32.0 * (n + 2) * 2.0**-24)
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
        if fwd_req[j] >= ke:
            break  # the forwards up to j (and any later j) need more than any level left
        a_j = A[j]
        lo_r = col[t, j, 0]
        lo_l = lo[s, j]
        if lo_r > K or lo_l > K:
            continue
        k0 = max(max(kb, fwd_req[j]), max(lo_r + a_j, lo_l + a_j - g_t))
        if k0 >= ke:
            continue
        hi_r = col[t, j, 1]
        hi_l = hi[s, j]
        off_l = row_offsets[s, j]
        # C(j, t, k - A_j) is read from the stored run below k_r and is SA(j, t) from k_r on;
        # C(s, j, min(k + G_t - A_j, K)) likewise below k_l and constant (SA, or its value
        # at K when the clamp comes first) from k_l on.
        r_base = col[t, j, 2] - lo_r - a_j  # values[r_base + k] = C(j, t, k - A_j) below k_r
        l_base = off_l - lo_l + g_t - a_j  # values[l_base + k] = C(s, j, k + G_t - A_j) below k_l
        if hi_l <= K:
            k_l = hi_l + a_j - g_t
            l_const = np.float32(fb_cum[j] - fb_cum[s])
        else:
            k_l = K + 1 + a_j - g_t
            l_const = rows[off_l + K - lo_l]
        box[0] = j
        sa_r = np.float32(fb_cum[t] - fb_cum[j])
        f32 = np.float32(f_sj)
        k_r = hi_r + a_j
        # Both parts only get cheaper with more memory, so the candidate at the band's top
        # level bounds it at every lower level, and the best found so far is largest at the
        # band's first level: when that is already below the bound, no level improves at j.
        # The margin covers float32 rounding (see `margin`), so the skip is exact.
        top_k = ke - 1
        right_top = sa_r if top_k >= k_r else values[r_base + top_k]
        left_top = l_const if top_k >= k_l else rows[l_base + top_k]
        c_top = right_top + (left_top + f32)
        if chosen[k0] <= c_top - margin * c_top:
            continue
        k1 = ke
        if l_base + ke > pad:  # a large a_t: reads past the left run would leave the padding
            k1 = min(max(k0, k_l), ke)
            # from k1 on the left is constant: read (and discard) padding cells instead
            _relax(chosen, dec, k1, ke, values, r_base, k_r, sa_r, rows, pad - k1, k1, l_const, f32, box[0])
        _relax(chosen, dec, k0, k1, values, r_base, k_r, sa_r, rows, l_base, k_l, l_const, f32, box[0])


@njit_cached
def _keep_run(s, t, start, stop, layout, store, scratch):
    """Store the segment's values (both copies) and decisions for levels [start, stop)."""
    offsets, row_offsets = layout[0], layout[1]
    values, rows, decisions = store
    chosen, dec = scratch[0], scratch[1]
    inf = np.float32(np.inf)
    off = offsets[s, t]
    row_off = row_offsets[s, t]
    for k in range(start, stop):
        values[off + k - start] = chosen[k]
        rows[row_off + k - start] = chosen[k]
        decisions[off + k - start] = dec[k] if chosen[k] < inf else -1
