"""The compiled fill of the multi-option chain DP (:mod:`remat.solver.chain.dp.options` has the
recurrence and its derivation). A dense table: every segment at every level, float64 values.

Compiled on first use and cached on disk (:mod:`remat.schedules.jit`). Integers are int64
(bytes, slots), times float64 (milliseconds).
"""

from __future__ import annotations

import numpy as np

# numba: a triple loop over segments, levels and split points (plus the options); pure Python
# would take minutes on a 30-stage chain at 500 levels
from remat.schedules.jit import njit_cached

INFEASIBLE = -1
STORE_ALL = -2
RECORD = -3  # decision RECORD - o: record stage s with option o (o = 0 the stage's own fields)


@njit_cached
def _ceil(value, slot):
    """ceil(value / slot) for a value of any sign (slot > 0), clamped at 0 (a requirement)."""
    if value <= 0:
        return 0
    return (value + slot - 1) // slot


@njit_cached
def fill_options(n, K, slot, A, G, fwd_first, fwd_next, act, fms, bms0, counts, saved, rec_fwd, rec_bwd, bms):
    """Fill ``C(s, t, k)`` for every segment and k = 0..K slots; return ``(top, decisions)``.

    ``counts[s]`` options of stage s (option 0 first); ``saved``, ``rec_fwd`` (= sv + fo),
    ``rec_bwd`` (= sv + a_{s+1} + a_s + bo) and ``bms`` are (n, max options) arrays in bytes / ms.
    ``decisions[s, t, k]``: j > s checkpoint a[j]; RECORD - o record stage s with option o;
    STORE_ALL; INFEASIBLE. Ties go to the records (lowest option), then to the smallest j."""
    W = K + 1
    inf = np.inf
    C = np.full((n + 1, n + 1, W), inf)
    D = np.full((n + 1, n + 1, W), INFEASIBLE, dtype=np.int32)
    x_bytes = np.zeros((n + 1, n + 1), dtype=np.int64)  # bytes free the store-all of [s, t) needs
    fcum = np.zeros(n + 1)
    fb_cum = np.zeros(n + 1)
    for i in range(n):
        fcum[i + 1] = fcum[i] + fms[i]
        fb_cum[i + 1] = fb_cum[i] + fms[i] + bms0[i]
    for t in range(n + 1):
        C[t, t, :] = 0.0
    fwd_req = np.zeros(n + 1, dtype=np.int64)
    req = np.zeros(counts.max(), dtype=np.int64)
    for s in range(n - 1, -1, -1):
        running = fwd_first[s]
        for j in range(s + 1, n + 1):
            fwd_req[j] = running  # slots F_ck s, F_n s+1 .. F_n j-1 need (prefix maximum)
            if j < n:
                running = max(running, fwd_next[j])
        for t in range(s + 1, n + 1):
            g_bytes = act[t] if t < n else 0
            x = max(rec_fwd[s, 0], saved[s, 0] + x_bytes[s + 1, t], rec_bwd[s, 0] - g_bytes)
            x_bytes[s, t] = x
            hi = _ceil(x, slot)
            sa = fb_cum[t] - fb_cum[s]
            for o in range(counts[s]):
                req[o] = max(_ceil(rec_fwd[s, o], slot), _ceil(rec_bwd[s, o] - g_bytes, slot))
            for k in range(W):
                if k >= hi:
                    C[s, t, k] = sa
                    D[s, t, k] = STORE_ALL
                    continue
                best = inf
                dec = INFEASIBLE
                for o in range(counts[s]):
                    if k < req[o]:
                        continue
                    sub = 0.0 if s + 1 == t else C[s + 1, t, k - _ceil(saved[s, o], slot)]
                    c = fms[s] + bms[s, o] + sub
                    if c < best:
                        best = c
                        dec = RECORD - o
                for j in range(s + 1, t):
                    if fwd_req[j] > k:
                        break  # fwd_req grows with j
                    right = k - A[j]
                    left = min(K, k + G[t] - A[j])
                    if right < 0 or left < 0:
                        continue
                    c = (fcum[j] - fcum[s]) + C[j, t, right] + C[s, j, left]
                    if c < best:
                        best = c
                        dec = j
                C[s, t, k] = best
                D[s, t, k] = dec
    return C[0, n, :].copy(), D
