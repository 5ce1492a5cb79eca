"""The chain simulator's arithmetic, compiled: peak, step time and validity of a chain op list
held in integer arrays, with no timeline and no messages.

It follows :func:`remat.schedules.simulator.simulate_chain` (the reference, which also builds the
timeline and words every error) step for step: the same state, the same checks, the float64 times
added in the same order, so results are identical (tests/solver/chain/test_fast_chain.py checks both on random
valid and invalid schedules). :func:`simulate_chain` calls it for long op lists when no timeline is
asked for; on any invalid op it reruns the reference to get the error message.

Op codes: 0 ``F_ck``, 1 ``F_n``, 2 ``F_all``, 3 ``B``. Units: bytes (int64: the caller keeps every
total below 2**62) and milliseconds.
"""

from __future__ import annotations

from operator import itemgetter

import numpy as np

from remat.schedules.jit import njit_cached

CODES = {"F_ck": 0, "F_n": 1, "F_all": 2, "B": 3}


@njit_cached
def chain_costs(kinds, indices, act, saved, fo, fn, bo, fms, bms):  # pragma: no cover - compiled
    """Return ``(valid, peak, compute_ms, recompute_ms)``; ``valid`` is False at the first op the
    reference simulator would reject (the other values are then meaningless)."""
    n = saved.shape[0]
    a_held = np.zeros(n + 1, dtype=np.bool_)
    abar_held = np.zeros(n + 1, dtype=np.bool_)
    runs = np.zeros(n, dtype=np.int64)
    a_held[0] = True
    memory = act[0]
    peak = memory
    compute = 0.0
    next_backward = n - 1
    for position in range(kinds.shape[0]):
        op = kinds[position]
        i = indices[position]
        if i < 0 or i >= n or next_backward < 0:
            return False, peak, compute, 0.0
        before = memory
        if op <= 2:
            if op == 1 and not a_held[i]:
                return False, peak, compute, 0.0
            if not (a_held[i] or abar_held[i]):
                return False, peak, compute, 0.0
            if op == 2:
                if abar_held[i + 1]:
                    return False, peak, compute, 0.0
                added = saved[i]
                transient = fo[i]
                abar_held[i + 1] = True
            else:
                if a_held[i + 1]:
                    return False, peak, compute, 0.0
                added = act[i + 1]
                transient = fn[i]
                a_held[i + 1] = True
            op_peak = before + added + transient
            memory = before + added
            if op == 1 and i != 0:
                a_held[i] = False
                memory -= act[i]
            compute += fms[i]
            runs[i] += 1
        elif op == 3:
            if i != next_backward:
                return False, peak, compute, 0.0
            if i == n - 1:
                memory += act[n]
                before = memory
            if not abar_held[i + 1] or not (a_held[i] or abar_held[i]):
                return False, peak, compute, 0.0
            op_peak = before + act[i] + bo[i]
            memory = before + act[i] - saved[i] - act[i + 1]
            abar_held[i + 1] = False
            if a_held[i] and i != 0:
                a_held[i] = False
                memory -= act[i]
            compute += bms[i]
            next_backward -= 1
        else:
            return False, peak, compute, 0.0
        if op_peak > peak:
            peak = op_peak
    if next_backward >= 0:
        return False, peak, compute, 0.0
    recompute = 0.0
    for i in range(n):
        recompute += (runs[i] - 1) * fms[i]
    return True, peak, compute, recompute


def profile_arrays(profile) -> tuple[np.ndarray, ...] | None:
    """``(act, saved, fo, fn, bo, fms, bms)`` of a chain, or None when its sizes could overflow
    int64 arithmetic or a stage hands tensors on (then only the reference simulator, in Python
    integers, is used)."""
    stages = profile.stages
    if any(s.handed_on for s in stages):
        return None  # the F_n rule of handed-on tensors lives in the reference simulator only
    act = [profile.activation_size(i) for i in range(profile.length + 1)]
    total = sum(act) + sum(
        s.saved_size + s.forward_overhead + s.nograd_overhead + abs(s.backward_overhead) for s in stages
    )
    if total >= 1 << 62:
        return None
    return (
        np.array(act, dtype=np.int64),
        np.array([s.saved_size for s in stages], dtype=np.int64),
        np.array([s.forward_overhead for s in stages], dtype=np.int64),
        np.array([s.nograd_overhead for s in stages], dtype=np.int64),
        np.array([s.backward_overhead for s in stages], dtype=np.int64),
        np.array([s.forward_ms for s in stages], dtype=np.float64),
        np.array([s.backward_ms for s in stages], dtype=np.float64),
    )


def encode(ops) -> tuple[np.ndarray, np.ndarray] | None:
    """Op codes and indices as arrays, or None if some op has no code or an index past int64, or
    records with an option (``("F_all", i, k)``: only the reference simulator knows options)."""
    if set(map(len, ops)) - {2}:
        return None
    try:
        kinds = np.fromiter(map(CODES.get, map(_FIRST, ops)), dtype=np.int64, count=len(ops))  # None: TypeError
        indices = np.fromiter(map(_SECOND, ops), dtype=np.int64, count=len(ops))
    except (OverflowError, TypeError, ValueError):
        return None
    return kinds, indices


_FIRST, _SECOND = itemgetter(0), itemgetter(1)


@njit_cached
def most_held(kinds, indices):  # pragma: no cover - compiled
    """The most activations ``a[i]`` (i >= 1) held at once by a valid chain op list: F_ck and F_n
    of stage i add a[i+1]; F_n of i drops a[i]; B of i drops a[i] if held (the simulator's rules)."""
    n = 0
    for position in range(indices.shape[0]):
        n = max(n, indices[position] + 2)
    held = np.zeros(n, dtype=np.bool_)
    count = 0
    most = 0
    for position in range(kinds.shape[0]):
        op = kinds[position]
        i = indices[position]
        if op == 0 or op == 1:
            if not held[i + 1]:
                held[i + 1] = True
                count += 1
            if op == 1 and i != 0 and held[i]:
                held[i] = False
                count -= 1
        elif op == 3 and i != 0 and held[i]:
            held[i] = False
            count -= 1
        most = max(most, count)
    return most
