"""``sequential``: what ``torch.utils.checkpoint.checkpoint_sequential(functions, k, input)`` does.

torch splits the n modules into k segments of ``size = n // k`` modules each, except the last,
which takes the remainder: segments ``[0, size)``, ``[size, 2 size)``, ...,
``[(k-1) size, n)``, so the last one can be much longer than the others (n = 10, k = 4 gives
sizes 2, 2, 2, 4). The first k-1 segments run under ``checkpoint``: their input is stored, their
forward runs without recording (``F_ck`` on the first stage, ``F_n`` on the rest), and in the
backward each is rerun recorded from its stored input and backpropagated at once. The last
segment runs normally, i.e. recorded (``F_all``). The op list is built by
:func:`remat.solver.chain.segments.segment_ops`. torch requires ``1 <= k <= n`` (k = 1 is plain
store-all).

With ``segments=k`` the strategy uses that k; with only a budget it costs every k in 1..n
(closed form, :func:`count_costs`, once per profile, O(n sqrt(n)) time and O(n) memory) and returns the
fastest that fits (ties: lower peak, then fewer segments). When nothing fits, the error states
the smallest peak over the k it was allowed to use."""

from __future__ import annotations

import numpy as np

from remat.schedules import ChainProfile, InfeasibleBudgetError, RematError, Schedule
from remat.solver.chain.segments import best_segmentation, segment_arrays, segment_ops
from remat.solver.common import ProfileCache, Strategy, make_schedule, require_chain

NAME = "sequential"


def torch_segment_starts(length: int, segments: int) -> tuple[int, ...]:
    """Segment starts of ``checkpoint_sequential`` with ``segments`` segments over ``length`` modules."""
    if isinstance(segments, bool) or not isinstance(segments, int) or not 1 <= segments <= length:
        raise RematError(f"segments: must be an integer between 1 and the number of stages ({length}), got {segments}")
    size = length // segments
    return tuple(range(0, size * (segments - 1) + 1, size))


_COSTS = ProfileCache()


def count_costs(profile: ChainProfile) -> tuple[np.ndarray, np.ndarray]:
    """Peak (bytes) and step time (ms) of every segment count k = 1..n (index k - 1), in closed form.

    :func:`remat.solver.chain.segments.segment_costs` per count would take O(n**2) time and, with
    every count's starts kept, O(n**2) memory (2.4 GB at 10,000 stages). Instead, for each segment
    size ``s = n // k`` (about 2 sqrt(n) distinct sizes) the full segments ``[j s, (j+1) s)`` are
    the same for every k of that size: their peaks (the same three terms as segment_costs) are
    computed once, and a count's peak is the running maximum over its first k - 1 of them and its
    last segment ``[(k-1) s, n)``, whose maxima are suffix maxima of the per-stage arrays.
    O(n sqrt(n)) time, O(n) memory; tests/solver/chain/test_fast_baselines.py checks it against
    segment_costs."""

    def compute():
        arrays = segment_arrays(profile)
        n = profile.length
        act, prefix = arrays.act, arrays.prefix
        suffix = np.maximum(arrays.backward, arrays.recorded)[::-1]
        suffix = np.maximum.accumulate(suffix)[::-1]  # max over i >= L of both recorded-forward and backward terms
        peaks = np.empty(n, dtype=act.dtype)
        times = np.empty(n, dtype=np.float64)
        k = 1
        while k <= n:
            size = n // k
            k_hi = n // size
            M = n // size
            idx = np.arange(0, M * size, size)
            held = act[0] + np.concatenate([np.zeros(1, dtype=act.dtype), np.cumsum(act[idx[1:]])])
            width = M * size
            unrecorded = arrays.unrecorded[:width].copy()
            unrecorded[idx] -= act[idx]
            full = np.maximum(
                np.maximum(
                    held - prefix[idx] + np.maximum.reduceat(arrays.backward[:width], idx),
                    held + act[idx + size] - prefix[idx] + np.maximum.reduceat(arrays.recorded[:width], idx),
                ),
                held + np.maximum.reduceat(unrecorded, idx),
            )
            running = np.maximum.accumulate(full)
            counts = np.arange(k, k_hi + 1)
            last = (counts - 1) * size
            peak = held[counts - 1] - prefix[last] + suffix[last]
            before = np.where(counts >= 2, running[np.maximum(counts - 2, 0)], act[0])
            peaks[k - 1 : k_hi] = np.maximum(np.maximum(peak, before), act[0])
            times[k - 1 : k_hi] = arrays.store_all_ms + arrays.forward_prefix[last]
            k = k_hi + 1
        return peaks, times

    return _COSTS.get(profile, "counts", compute)


def _pick(profile: ChainProfile, budget: int) -> tuple[int | None, int]:
    """(the fastest count within ``budget`` bytes, ties: lower peak, then fewer segments, or None;
    the smallest peak over every count)."""
    peaks, times = count_costs(profile)
    min_peak = int(peaks.min())
    fitting = np.flatnonzero(peaks <= budget)
    if fitting.size == 0:
        return None, min_peak
    order = np.lexsort((fitting, peaks[fitting], times[fitting]))
    return int(fitting[order[0]]) + 1, min_peak


def choose(profile: ChainProfile, budget: int) -> tuple[int, ...] | None:
    """The segment starts :func:`solve` returns at ``budget`` bytes (no ``segments`` option), or None."""
    profile = require_chain(profile, NAME)
    k = _pick(profile, budget)[0]
    return None if k is None else torch_segment_starts(profile.length, k)


def solve(profile: ChainProfile, budget: int, segments: int | None = None) -> Schedule:
    """The fastest torch-style segmentation within ``budget`` bytes (or exactly ``segments`` segments)."""
    profile = require_chain(profile, NAME)
    n = profile.length
    if segments is None:
        k, min_peak = _pick(profile, budget)
    else:
        starts, min_peak = best_segmentation(profile, [torch_segment_starts(n, segments)], budget)
        k = None if starts is None else segments
    if k is None:
        detail = f"with {segments} segments" if segments is not None else "over every segment count 1..n"
        raise InfeasibleBudgetError(NAME, budget, min_peak, detail)
    starts = torch_segment_starts(n, k)
    return make_schedule(
        profile,
        budget,
        NAME,
        segment_ops(n, starts),
        extra={"segments": k, "segment_starts": list(starts)},
    )


STRATEGY = Strategy(
    name=NAME,
    kind="chain",
    description="torch checkpoint_sequential: k equal segments, last one recorded; k forced or the fastest that fits",
    solve=solve,
    options=("segments",),
    reference="torch.utils.checkpoint.checkpoint_sequential",
    choose=choose,
)
