"""One budget across the compiled regions of a step (graph breaks): the fastest choice per region.

Region r's forward runs after regions 0..r-1 ran theirs, and its backward before theirs, so what
each earlier region holds after its forward (``Realized.held``: saved values and outputs) is held
through all of region r. The step's peak is ``max_r(sum(held_j, j < r) + peak_r)``.

:func:`split` picks one candidate per region minimising the summed time under that peak: a DP
over the regions in order whose states are (bytes held so far, ms so far), pruned to the Pareto
front of the two (a state holding more and taking longer can never do better). It is exact over
the candidates of each region's front. :func:`least_step_peak` is the same DP minimising the peak.

Units: bytes (int), milliseconds (float).
"""

from __future__ import annotations

from collections.abc import Sequence

from remat.joint.plan import Realized
from remat.joint.solve import BelowLeast, Front
from remat.schedules.units import format_size


def _pareto(states: list[tuple[int, float, tuple[int, ...]]]) -> list[tuple[int, float, tuple[int, ...]]]:
    """States no other state beats on both bytes held and ms (ties: the first)."""
    kept: list[tuple[int, float, tuple[int, ...]]] = []
    best = float("inf")
    for state in sorted(states, key=lambda s: (s[0], s[1])):
        if state[1] < best:
            kept.append(state)
            best = state[1]
    return kept


def split(fronts: Sequence[Front], budget: int) -> tuple[Realized, ...]:
    """The fastest candidate per region whose step peak stays within ``budget`` bytes; a one-line
    :class:`~remat.joint.solve.BelowLeast` naming the least step peak when none does."""
    states: list[tuple[int, float, tuple[int, ...]]] = [(0, 0.0, ())]
    for front in fronts:
        grown = [
            (held + c.held, ms + c.ms, (*picks, k))
            for held, ms, picks in states
            for k, c in enumerate(front.candidates)
            if held + c.peak <= budget
        ]
        states = _pareto(grown)
        if not states:
            least = least_step_peak(fronts)
            raise BelowLeast(
                f"remat.compile: budget {format_size(budget)} ({budget} bytes) is below the least the step's "
                f"{len(fronts)} compiled regions can meet together, {format_size(least)} ({least} bytes)"
            )
    _, _, picks = min(states, key=lambda s: (s[1], s[0]))
    return tuple(front.candidates[k] for front, k in zip(fronts, picks, strict=True))


def least_step_peak(fronts: Sequence[Front]) -> int:
    """The least step peak (bytes) over one candidate per region."""
    states: list[tuple[int, int]] = [(0, 0)]  # (held so far, peak so far)
    for front in fronts:
        grown = sorted({(held + c.held, max(peak, held + c.peak)) for held, peak in states for c in front.candidates})
        states, best = [], None
        for held, peak in grown:
            if best is None or peak < best:
                states.append((held, peak))
                best = peak
    return min(peak for _, peak in states)


def step_peak(choices: Sequence[Realized]) -> int:
    """The step's peak (bytes) for one realized partition per region, in region order."""
    held, peak = 0, 0
    for c in choices:
        peak = max(peak, held + c.peak)
        held += c.held
    return peak
