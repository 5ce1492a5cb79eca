"""revolve's op lists as code arrays, compiled: :func:`remat.solver.chain.revolve.revolve_ops`
step for step, for the per-profile search over slot counts.

Choosing revolve's slot count simulates every count's schedule once per profile (a 400-stage
chain: 399 schedules, 0.65 million ops). Built as Python tuples and encoded for the compiled
simulator, that took ~0.3 s of a 4-s ``remat pareto``; built here as arrays it takes
milliseconds. Only the peaks of candidates come from these arrays: the schedule :func:`solve`
returns is built by ``revolve_ops`` and checked by the simulator like every other
(tests/solver/chain/test_revolve.py checks both builders give equal ops).

Codes are :data:`remat.schedules.fast_chain.CODES` (0 ``F_ck``, 1 ``F_n``, 2 ``F_all``,
3 ``B``).
"""

from __future__ import annotations

import numpy as np

from remat.schedules.jit import njit_cached


@njit_cached
def _beta(c, r):  # pragma: no cover - compiled
    """C(c + r, c) for r >= 0, else 0 (int64: callers stop once it passes the chain's length)."""
    if r < 0:
        return 0
    value = 1
    for k in range(1, r + 1):
        value = value * (c + k) // k  # exact: C(c + k, k) = C(c + k - 1, k - 1) * (c + k) / k
    return value


@njit_cached
def _split(length, slots):  # pragma: no cover - compiled
    r = 0
    while _beta(slots, r) < length:
        r += 1
    return max(1, _beta(slots, r - 2), length - _beta(slots - 1, r))


@njit_cached
def _walk(length, slots, kinds, indices, write):  # pragma: no cover - compiled
    """revolve_ops' recursion on an explicit stack; writes the ops if ``write``; returns their count."""
    count = 0
    stack = np.empty((length + slots + 2, 3), dtype=np.int64)
    stack[0, 0], stack[0, 1], stack[0, 2] = 0, length, slots
    top = 1
    while top > 0:
        top -= 1
        start, end, c = stack[top, 0], stack[top, 1], stack[top, 2]
        if end - start > 1 and c > 1:
            m = _split(end - start, c)
            for i in range(start, start + m):  # advance: F_ck start, F_n start+1 .. start+m-1
                if write:
                    kinds[count] = 0 if i == start else 1
                    indices[count] = i
                count += 1
            if top + 2 > stack.shape[0]:  # never at these sizes (the entries are disjoint ranges): kept safe
                grown = np.empty((2 * stack.shape[0], 3), dtype=np.int64)
                grown[:top] = stack[:top]
                stack = grown
            stack[top, 0], stack[top, 1], stack[top, 2] = start, start + m, c
            stack[top + 1, 0], stack[top + 1, 1], stack[top + 1, 2] = start + m, end, c - 1
            top += 2
            continue
        for i in range(end - 1, start - 1, -1):
            for j in range(start, i):  # advance(start, i) when i > start
                if write:
                    kinds[count] = 0 if j == start else 1
                    indices[count] = j
                count += 1
            if write:
                kinds[count], indices[count] = 2, i
                kinds[count + 1], indices[count + 1] = 3, i
            count += 2
    return count


@njit_cached
def revolve_codes(length, slots):  # pragma: no cover - compiled
    """``(kinds, indices)`` int64 arrays of revolve_ops(length, slots) (``slots >= 1``)."""
    empty = np.empty(0, dtype=np.int64)
    count = _walk(length, slots, empty, empty, False)
    kinds = np.empty(count, dtype=np.int64)
    indices = np.empty(count, dtype=np.int64)
    _walk(length, slots, kinds, indices, True)
    return kinds, indices
