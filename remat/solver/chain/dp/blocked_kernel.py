"""The compiled parts of the blocked DP for long chains (:mod:`remat.solver.chain.dp.blocked` has
the family, the recurrence and what is claimed): the tables of every block, the coarse table over
block boundaries, the exact least memory of the family, and reading a schedule back as op arrays.

Memory is in slots of ``slot`` bytes (the rounding rules of :mod:`remat.solver.chain.dp.table`:
requirements rounded up, the one gift ``g'_t`` rounded down), or in bytes for the least-memory
pass. Times are float64. Op codes are :data:`remat.schedules.fast_chain.CODES` (0 ``F_ck``,
1 ``F_n``, 2 ``F_all``, 3 ``B``).

Decision codes: -1 infeasible, -2 store-all of the segment, 0 record its first stage (block
tables) or its first block (coarse table, code -3), j > 0 checkpoint a split point (a stage inside
the block, local index, in a block table; a block boundary index in the coarse table), -4 the
coarse segment is one block (read its block table).
"""

from __future__ import annotations

import numpy as np

from remat.schedules.jit import njit_cached

INFEASIBLE = -1
STORE_ALL = -2
RECORD_BLOCK = -3
ONE_BLOCK = -4


@njit_cached
def _cdiv(value, slot):
    """ceil(value / slot) for any sign (slot > 0)."""
    if value >= 0:
        return (value + slot - 1) // slot
    return -((-value) // slot)


@njit_cached
def _tri(s, t):
    """Index of segment (s, t), 0 <= s < t, in a triangular layout (t outer)."""
    return t * (t - 1) // 2 + s


@njit_cached
def _req1(s, t, n, slot, act, rec_fwd, rec_bwd):
    """Slots (or bytes, slot 1) option 1 needs at its own ops F_all s and B s in segment (s, t)."""
    g = act[t] if t < n else 0
    return max(_cdiv(rec_fwd[s], slot), _cdiv(rec_bwd[s] - g, slot))


@njit_cached(nogil=True)
def block_tables(n, K, slot, P, A, G, SV, FF, FN, act, rec_fwd, rec_bwd, saved, fcum, fbcum):
    """Fill every block's table (the flat recurrence inside the block, all levels 0..K).

    Returns ``(dec, base, top)``: ``dec`` int8 decisions of all blocks, block ``B``'s segment
    (s, t) (local, 0 <= s < t <= q - p) at level k at ``base[B] + _tri(s, t) * (K + 1) + k``;
    ``top[B, k]`` = C(p_B, p_{B+1}, k), the block as one segment of the whole chain (its end
    gradient g'_{p_{B+1}} counted as in the flat DP)."""
    N = P.shape[0] - 1
    W = K + 1
    base = np.zeros(N + 1, dtype=np.int64)
    for B in range(N):
        m = P[B + 1] - P[B]
        base[B + 1] = base[B] + (m * (m + 1) // 2) * W
    dec = np.empty(base[N], dtype=np.int8)
    top = np.empty((N, W), dtype=np.float64)
    mmax = 0
    for B in range(N):
        mmax = max(mmax, P[B + 1] - P[B])
    V = np.empty(((mmax * (mmax + 1)) // 2, W), dtype=np.float64)
    inf = np.inf
    for B in range(N):
        p = P[B]
        m = P[B + 1] - p
        d0 = base[B]
        for lt in range(1, m + 1):
            t = p + lt
            g_b = act[t] if t < n else 0
            x = 0  # bytes free the store-all of (s, t) needs, built as s goes down
            for ls in range(lt - 1, -1, -1):
                s = p + ls
                x = max(rec_fwd[s], max(saved[s] + x, rec_bwd[s] - g_b))
                kh = min(_cdiv(x, slot), W)
                row = _tri(ls, lt)
                sa = fbcum[t] - fbcum[s]
                for k in range(kh, W):
                    V[row, k] = sa
                    dec[d0 + row * W + k] = STORE_ALL
                for k in range(kh):
                    V[row, k] = inf
                    dec[d0 + row * W + k] = INFEASIBLE
                if kh == 0 or ls + 1 == lt:
                    continue  # a single stage is store-all or infeasible
                fb = fbcum[s + 1] - fbcum[s]
                r1 = _req1(s, t, n, slot, act, rec_fwd, rec_bwd)
                nxt = _tri(ls + 1, lt)
                for k in range(max(r1, SV[s]), kh):
                    c = fb + V[nxt, k - SV[s]]
                    if c < V[row, k]:
                        V[row, k] = c
                        dec[d0 + row * W + k] = 0
                fr = FF[s]
                for lj in range(ls + 1, lt):
                    j = p + lj
                    if lj > ls + 1:
                        fr = max(fr, FN[j - 1])
                    if fr >= kh:
                        break
                    f = fcum[j] - fcum[s]
                    right = _tri(lj, lt)
                    left = _tri(ls, lj)
                    for k in range(max(fr, A[j]), kh):
                        c = f + V[right, k - A[j]] + V[left, min(K, k + G[t] - A[j])]
                        if c < V[row, k]:
                            V[row, k] = c
                            dec[d0 + row * W + k] = lj
        for k in range(W):
            top[B, k] = V[_tri(0, m), k]
    return dec, base, top


@njit_cached(nogil=True)
def coarse_table(n, K, slot, P, A, G, SV, FF, FN, act, rec_fwd, rec_bwd, saved, fcum, fbcum, top):
    """Fill the coarse table over block boundaries P (see the module doc of ``blocked``).

    Returns ``(value, dec)``: (N(N+1)/2, K+1) arrays, segment (S, T) of boundaries at row
    ``_tri(S, T)``."""
    N = P.shape[0] - 1
    W = K + 1
    rows = N * (N + 1) // 2
    V = np.empty((rows, W), dtype=np.float64)
    D = np.empty((rows, W), dtype=np.int16)
    inf = np.inf
    for T in range(1, N + 1):
        t = P[T]
        g_b = act[t] if t < n else 0
        x = 0
        for S in range(T - 1, -1, -1):
            # store-all bytes of (P[S], t) and the record-the-whole-block requirement
            q = P[S + 1]
            need = 0
            for s in range(q - 1, P[S] - 1, -1):
                x = max(rec_fwd[s], max(saved[s] + x, rec_bwd[s] - g_b))
            row = _tri(S, T)
            if T == S + 1:
                for k in range(W):
                    V[row, k] = top[S, k]
                    D[row, k] = ONE_BLOCK if top[S, k] < inf else INFEASIBLE
                continue
            s0 = P[S]
            kh = min(_cdiv(x, slot), W)
            sa = fbcum[t] - fbcum[s0]
            for k in range(kh, W):
                V[row, k] = sa
                D[row, k] = STORE_ALL
            for k in range(kh):
                V[row, k] = inf
                D[row, k] = INFEASIBLE
            if kh == 0:
                continue
            prefix = 0
            for s in range(s0, q):
                need = max(need, prefix + _req1(s, t, n, slot, act, rec_fwd, rec_bwd))
                prefix += SV[s]
            fb = fbcum[q] - fbcum[s0]
            nxt = _tri(S + 1, T)
            for k in range(max(need, prefix), kh):
                c = fb + V[nxt, k - prefix]
                if c < V[row, k]:
                    V[row, k] = c
                    D[row, k] = RECORD_BLOCK
            fr = FF[s0]
            for J in range(S + 1, T):
                j = P[J]
                for i in range(P[J - 1], j):
                    if i > s0:
                        fr = max(fr, FN[i])
                if fr >= kh:
                    break
                f = fcum[j] - fcum[s0]
                right = _tri(J, T)
                left = _tri(S, J)
                for k in range(max(fr, A[j]), kh):
                    c = f + V[right, k - A[j]] + V[left, min(K, k + G[t] - A[j])]
                    if c < V[row, k]:
                        V[row, k] = c
                        D[row, k] = J
    return V, D


@njit_cached(nogil=True)
def least_memory(n, P, act, rec_fwd, rec_bwd, saved, fwd_first, fwd_next):
    """The exact least free memory (bytes) of any schedule of the blocked family, and the
    decisions that reach it: ``(lo_coarse, dec_coarse, lo_blocks, dec_blocks, base)``, the same
    layouts as the tables with one level (the decision holds at every free memory from ``lo``
    on). ``fwd_first``/``fwd_next`` are in bytes here (slot 1)."""
    N = P.shape[0] - 1
    big = np.int64(1) << 62
    base = np.zeros(N + 1, dtype=np.int64)
    for B in range(N):
        m = P[B + 1] - P[B]
        base[B + 1] = base[B] + m * (m + 1) // 2
    lo_b = np.empty(base[N], dtype=np.int64)
    dec_b = np.empty(base[N], dtype=np.int8)
    top = np.empty(N, dtype=np.int64)
    for B in range(N):
        p = P[B]
        m = P[B + 1] - p
        d0 = base[B]
        for lt in range(1, m + 1):
            t = p + lt
            g_b = act[t] if t < n else 0
            x = 0
            for ls in range(lt - 1, -1, -1):
                s = p + ls
                x = max(rec_fwd[s], max(saved[s] + x, rec_bwd[s] - g_b))
                best = x
                arg = STORE_ALL
                if ls + 1 < lt:
                    need = max(_req1(s, t, n, 1, act, rec_fwd, rec_bwd), saved[s] + lo_b[d0 + _tri(ls + 1, lt)])
                    if need < best:
                        best, arg = need, 0
                    fr = fwd_first[s]
                    for lj in range(ls + 1, lt):
                        j = p + lj
                        if lj > ls + 1:
                            fr = max(fr, fwd_next[j - 1])
                        need = max(max(fr, act[j] + lo_b[d0 + _tri(lj, lt)]), lo_b[d0 + _tri(ls, lj)] + act[j] - g_b)
                        if need < best:
                            best, arg = need, lj
                lo_b[d0 + _tri(ls, lt)] = best
                dec_b[d0 + _tri(ls, lt)] = arg
        top[B] = lo_b[d0 + _tri(0, m)]
    rows = N * (N + 1) // 2
    lo_c = np.full(rows, big, dtype=np.int64)
    dec_c = np.empty(rows, dtype=np.int16)
    for T in range(1, N + 1):
        t = P[T]
        g_b = act[t] if t < n else 0
        x = 0
        for S in range(T - 1, -1, -1):
            q = P[S + 1]
            for s in range(q - 1, P[S] - 1, -1):
                x = max(rec_fwd[s], max(saved[s] + x, rec_bwd[s] - g_b))
            row = _tri(S, T)
            if T == S + 1:
                lo_c[row] = top[S]
                dec_c[row] = ONE_BLOCK
                continue
            s0 = P[S]
            best = x
            arg = STORE_ALL
            need = 0
            prefix = 0
            for s in range(s0, q):
                need = max(need, prefix + _req1(s, t, n, 1, act, rec_fwd, rec_bwd))
                prefix += saved[s]
            need = max(need, prefix + lo_c[_tri(S + 1, T)])
            if need < best:
                best, arg = need, RECORD_BLOCK
            fr = fwd_first[s0]
            for J in range(S + 1, T):
                j = P[J]
                for i in range(P[J - 1], j):
                    if i > s0:
                        fr = max(fr, fwd_next[i])
                need = max(max(fr, act[j] + lo_c[_tri(J, T)]), lo_c[_tri(S, J)] + act[j] - g_b)
                if need < best:
                    best, arg = need, J
            lo_c[row] = best
            dec_c[row] = arg
    return lo_c, dec_c, lo_b, dec_b, base


@njit_cached
def _push(stack, top, a, b, c, d, e):
    if top == stack.shape[0]:
        grown = np.empty((2 * stack.shape[0], 5), dtype=np.int64)
        grown[:top] = stack[:top]
        stack = grown
    stack[top, 0] = a
    stack[top, 1] = b
    stack[top, 2] = c
    stack[top, 3] = d
    stack[top, 4] = e
    return stack, top + 1


@njit_cached
def _emit(kinds, indices, count, kind, i):
    if count == kinds.shape[0]:
        k2 = np.empty(2 * kinds.shape[0], dtype=np.int64)
        i2 = np.empty(2 * kinds.shape[0], dtype=np.int64)
        k2[:count] = kinds[:count]
        i2[:count] = indices[:count]
        kinds, indices = k2, i2
    kinds[count] = kind
    indices[count] = i
    return kinds, indices, count + 1


@njit_cached(nogil=True)
def read_back(n, K, level, exact, P, A, G, SV, dec_c, dec_b, base):
    """The op list (codes, stage indices) of the schedule at ``level`` (slots; bytes when
    ``exact``, the least-memory decisions then have one level and no clamp at K), or an empty
    list when the table has none. A, G, SV are in the level's unit."""
    W = dec_c.shape[1]
    N = P.shape[0] - 1
    kinds = np.empty(4 * n + 16, dtype=np.int64)
    indices = np.empty(4 * n + 16, dtype=np.int64)
    count = 0
    stack = np.empty((64, 5), dtype=np.int64)
    sp = 0
    # items: (0, S, T, k, -) coarse segment; (1, B, ls, lt, k) block segment; (2, kind, i, -, -) op
    stack, sp = _push(stack, sp, 0, 0, N, level, 0)
    while sp > 0:
        sp -= 1
        tag = stack[sp, 0]
        a, b, c, d = stack[sp, 1], stack[sp, 2], stack[sp, 3], stack[sp, 4]
        if tag == 2:
            kinds, indices, count = _emit(kinds, indices, count, a, b)
            continue
        if tag == 0:
            S, T, k = a, b, c
            s, t = P[S], P[T]
            code = dec_c[_tri(S, T), 0 if exact else k]
        else:
            blk, ls, lt, k = a, b, c, d
            s, t = P[blk] + ls, P[blk] + lt
            code = dec_b[base[blk] + (_tri(ls, lt) if exact else _tri(ls, lt) * W + k)]
        if code == INFEASIBLE:
            return kinds[:0], indices[:0]
        if code == STORE_ALL:
            for i in range(s, t):
                stack, sp = _push(stack, sp, 2, 3, i, 0, 0)
            for i in range(t - 1, s - 1, -1):
                stack, sp = _push(stack, sp, 2, 2, i, 0, 0)
        elif tag == 0 and code == ONE_BLOCK:
            stack, sp = _push(stack, sp, 1, S, 0, t - s, k)
        elif tag == 0 and code == RECORD_BLOCK:
            q = P[S + 1]
            used = 0
            for i in range(s, q):
                stack, sp = _push(stack, sp, 2, 3, i, 0, 0)
                used += SV[i]
            stack, sp = _push(stack, sp, 0, S + 1, T, k - used, 0)
            for i in range(q - 1, s - 1, -1):
                stack, sp = _push(stack, sp, 2, 2, i, 0, 0)
        elif tag == 1 and code == 0:
            stack, sp = _push(stack, sp, 2, 3, s, 0, 0)
            stack, sp = _push(stack, sp, 1, blk, ls + 1, lt, k - SV[s])
            stack, sp = _push(stack, sp, 2, 2, s, 0, 0)
        else:
            j = P[code] if tag == 0 else P[blk] + code
            right = k - A[j]
            left = k + G[t] - A[j]
            if not exact:
                left = min(K, left)
            if tag == 0:
                stack, sp = _push(stack, sp, 0, S, code, left, 0)
                stack, sp = _push(stack, sp, 0, code, T, right, 0)
            else:
                stack, sp = _push(stack, sp, 1, blk, ls, code, left)
                stack, sp = _push(stack, sp, 1, blk, code, lt, right)
            for i in range(j - 1, s, -1):
                stack, sp = _push(stack, sp, 2, 1, i, 0, 0)
            stack, sp = _push(stack, sp, 2, 0, s, 0, 0)
    return kinds[:count], indices[:count]
