"""Shared by ``sequential``, ``chen-sqrt`` and ``chen-greedy``: "segments with stored boundaries".

A segmentation of a chain of ``n`` stages is a list of segment starts ``0 = s_0 < s_1 < ... <
s_{m-1} < n``; segment j holds stages ``s_j .. s_{j+1}-1`` (the last one ends at ``n-1``). The
schedule, in the ops of docs/model.md ("Chains"), is what ``torch.utils.checkpoint`` does with such segments:

* forward, every segment but the last: ``F_ck s_j`` (keeps its input ``a[s_j]`` as the stored
  boundary) then ``F_n`` for the other stages (each drops its input, so only the segment's
  output survives, as ``a[s_{j+1}]``, the next boundary);
* forward, last segment: recorded (``F_all``), because its backward comes right away; running it
  unrecorded and recomputing it would hold the same memory and cost one more forward;
* backward, last segment: ``B n-1 .. B s_{m-1}``;
* backward, every other segment (last to first): recompute it recorded from its stored input
  (``F_all s_j .. s_{j+1}-1``) then ``B s_{j+1}-1 .. B s_j``; ``B s_j`` releases ``a[s_j]``.

Each non-final stage is thus run forward twice (once unrecorded, once recorded): the recompute
cost is the forward time of every stage outside the last segment.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from remat.schedules import ChainProfile, Op, SimulationResult, simulate


def check_starts(length: int, starts: Sequence[int]) -> tuple[int, ...]:
    """Validate segment starts for a chain of ``length`` stages and return them as a tuple."""
    starts = tuple(int(s) for s in starts)
    if not starts or starts[0] != 0:
        raise ValueError(f"segment starts must begin with 0, got {starts}")
    if any(b <= a for a, b in zip(starts, starts[1:], strict=False)) or starts[-1] >= length:
        raise ValueError(f"segment starts must increase strictly and stay below {length}, got {starts}")
    return starts


def segment_ops(length: int, starts: Sequence[int]) -> list[Op]:
    """The op list of the segmentation ``starts`` (see the module docstring) of a chain of ``length`` stages."""
    starts = check_starts(length, starts)
    ends = starts[1:] + (length,)
    ops: list[Op] = []
    for start, end in zip(starts[:-1], ends[:-1], strict=True):
        ops.append(("F_ck", start))
        ops.extend(("F_n", i) for i in range(start + 1, end))
    last = starts[-1]
    ops.extend(("F_all", i) for i in range(last, length))
    ops.extend(("B", i) for i in reversed(range(last, length)))
    for start, end in reversed(list(zip(starts[:-1], ends[:-1], strict=True))):
        ops.extend(("F_all", i) for i in range(start, end))
        ops.extend(("B", i) for i in reversed(range(start, end)))
    return ops


def simulate_segments(profile: ChainProfile, starts: Sequence[int]) -> SimulationResult:
    """Simulated cost (bytes, milliseconds) of a segmentation of ``profile``."""
    return simulate(profile, segment_ops(profile.length, starts), timeline=False)


@dataclass(frozen=True)
class SegmentArrays:
    """Per-stage quantities of a chain from which any segmentation's peak follows in closed form
    (bytes; see :func:`segment_costs`). int64 arrays, or Python-int object arrays for chains whose
    sizes could overflow int64."""

    act: np.ndarray  # a_0 .. a_n
    prefix: np.ndarray  # P[i] = saved_0 + ... + saved_{i-1}
    unrecorded: np.ndarray  # u[i] = a_i + a_{i+1} + fn_i (F_n i), and a_{s+1} + fn_s at a start (F_ck s)
    recorded: np.ndarray  # w[i] = P[i+1] + fo_i (F_all i, before the block's offset)
    backward: np.ndarray  # v[i] = a_i + a_{i+1} + P[i+1] + bo_i (B i, before the block's offset)
    forward_prefix: np.ndarray  # float64 cumulative forward_ms
    store_all_ms: float


def segment_arrays(profile: ChainProfile) -> SegmentArrays:
    """The arrays of :class:`SegmentArrays` for ``profile``."""
    st = profile.stages
    act_list = [profile.activation_size(i) for i in range(profile.length + 1)]
    total = sum(act_list) + sum(
        s.saved_size + s.forward_overhead + s.nograd_overhead + abs(s.backward_overhead) for s in st
    )
    dtype = np.int64 if total < 1 << 61 else object
    act = np.array(act_list, dtype=dtype)
    saved = np.array([s.saved_size for s in st], dtype=dtype)
    prefix = np.concatenate([np.zeros(1, dtype=dtype), np.cumsum(saved)]).astype(dtype)
    fn = np.array([s.nograd_overhead for s in st], dtype=dtype)
    fo = np.array([s.forward_overhead for s in st], dtype=dtype)
    bo = np.array([s.backward_overhead for s in st], dtype=dtype)
    pair = act[:-1] + act[1:]
    forward = np.array([s.forward_ms for s in st], dtype=np.float64)
    return SegmentArrays(
        act=act,
        prefix=prefix,
        unrecorded=pair + fn,
        recorded=prefix[1:] + fo,
        backward=pair + prefix[1:] + bo,
        forward_prefix=np.concatenate([[0.0], np.cumsum(forward)]),
        store_all_ms=profile.store_all_compute_ms,
    )


def segment_costs(arrays: SegmentArrays, starts: Sequence[int]) -> tuple[int, float]:
    """Peak (bytes) and step time (ms) of the segmentation ``starts`` without building its ops.

    With ``H_j = a_0 + a_{s_1} + ... + a_{s_j}`` (the boundaries held while segment j runs), segment
    j = [s, e) peaks at ``H_j + max(a_{s+1} + fn_s, a_i + a_{i+1} + fn_i for s < i < e)`` in its
    unrecorded forward (every segment but the last), at ``H_j + g - P[s] + max(P[i+1] + fo_i)`` in
    its recorded forward (g = a_e, held then, except for the last segment, where g = 0) and at
    ``H_j - P[s] + max(a_i + a_{i+1} + P[i+1] + bo_i)`` in its backward, the maxima over i in
    [s, e). The time is store-all's plus one forward of every stage before the last segment.
    tests/solver/chain/test_fast_baselines.py checks both against the simulator."""
    idx = np.asarray(starts, dtype=np.intp)
    act, prefix = arrays.act, arrays.prefix
    held = act[0] + np.concatenate([np.zeros(1, dtype=act.dtype), np.cumsum(act[idx[1:]])])
    gradient = act[np.append(idx[1:], 0)]
    gradient[-1] = 0
    unrecorded = arrays.unrecorded.copy()
    unrecorded[idx] -= act[idx]  # F_ck s: a_s is the stored boundary, already in H_j
    peaks = [
        held - prefix[idx] + np.maximum.reduceat(arrays.backward, idx),
        held + gradient - prefix[idx] + np.maximum.reduceat(arrays.recorded, idx),
    ]
    if len(idx) > 1:
        peaks.append(held[:-1] + np.maximum.reduceat(unrecorded, idx)[:-1])
    peak = max(int(act[0]), *(int(p.max()) for p in peaks))
    return peak, arrays.store_all_ms + float(arrays.forward_prefix[idx[-1]])


@dataclass(frozen=True)
class Candidate:
    """One segmentation with its closed-form cost (bytes, ms)."""

    starts: tuple[int, ...]
    peak: int
    compute_ms: float


def evaluate(profile: ChainProfile, candidates: Sequence[Sequence[int]]) -> list[Candidate]:
    """Distinct candidate segmentations (first occurrence kept) with their costs."""
    arrays = segment_arrays(profile)
    seen: set[tuple[int, ...]] = set()
    out = []
    for raw in candidates:
        starts = check_starts(profile.length, raw)
        if starts not in seen:
            seen.add(starts)
            out.append(Candidate(starts, *segment_costs(arrays, starts)))
    if not out:
        raise ValueError("no candidate segmentation")
    return out


def pick(candidates: Sequence[Candidate], budget: int) -> tuple[tuple[int, ...] | None, int]:
    """The fastest candidate whose peak fits ``budget`` bytes (ties: lower peak, then fewer
    segments), and the smallest peak over all candidates (the strategy's minimum budget)."""
    fitting = [c for c in candidates if c.peak <= budget]
    min_peak = min(c.peak for c in candidates)
    if not fitting:
        return None, min_peak
    best = min(fitting, key=lambda c: (c.compute_ms, c.peak, len(c.starts)))
    return best.starts, min_peak


def best_segmentation(
    profile: ChainProfile, candidates: Sequence[Sequence[int]], budget: int
) -> tuple[tuple[int, ...] | None, int]:
    """Among candidate segmentations, the fastest whose peak fits ``budget`` bytes.

    Returns ``(starts or None, smallest peak over all candidates)``; ties on time go to the lower
    peak, then to fewer segments. Costs are the closed form of :func:`segment_costs`, not a
    simulation of each candidate: only the schedule a strategy returns is simulated.
    """
    return pick(evaluate(profile, candidates), budget)
