"""Shared by ``sequential``, ``chen-sqrt`` and ``chen-greedy``: "segments with stored boundaries".

A segmentation of a chain of ``n`` stages is a list of segment starts ``0 = s_0 < s_1 < ... <
s_{m-1} < n``; segment j holds stages ``s_j .. s_{j+1}-1`` (the last one ends at ``n-1``). The
schedule, in DESIGN.md's ops, is what ``torch.utils.checkpoint`` does with such segments:

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


def best_segmentation(
    profile: ChainProfile, candidates: Sequence[Sequence[int]], budget: int
) -> tuple[tuple[int, ...] | None, int]:
    """Among candidate segmentations, the fastest whose simulated peak fits ``budget`` bytes.

    Returns ``(starts or None, smallest peak over all candidates)``; ties on time go to the lower
    peak, then to fewer segments. The smallest peak is what the strategy reports as its minimum
    feasible budget when nothing fits.
    """
    best: tuple[float, int, int] | None = None
    chosen: tuple[int, ...] | None = None
    min_peak: int | None = None
    seen: set[tuple[int, ...]] = set()
    for raw in candidates:
        starts = check_starts(profile.length, raw)
        if starts in seen:
            continue
        seen.add(starts)
        result = simulate_segments(profile, starts)
        min_peak = result.peak_memory if min_peak is None else min(min_peak, result.peak_memory)
        if result.peak_memory <= budget:
            key = (result.compute_ms, result.peak_memory, len(starts))
            if best is None or key < best:
                best, chosen = key, starts
    if min_peak is None:
        raise ValueError("no candidate segmentation")
    return chosen, min_peak
