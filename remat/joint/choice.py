"""The choice among the plans one call measured: their step times from interleaved rounds, and
the plan kept under the budget (docs/compile.md, "Measured truth" step 6).

Pure: no torch. Units: bytes (int), milliseconds (float).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

TIMED_ROUNDS = 15  # interleaved rounds of one unmetered step per measured plan
TIE_FRACTION = 0.02  # steps this close to the fastest count as as fast: NOTE [A tie goes to the plan with more memory]


@dataclass(frozen=True)
class Measured:
    """One plan as the choice sees it: the allocator's peak of its step (bytes; None where not
    measured), its timed step (ms, :func:`round_step_ms`; None where not timed) and its
    simulated time (ms, the sum of its regions' simulated times)."""

    peak: int | None
    step_ms: float | None
    simulated_ms: float


def interleaved(count: int, rounds: int = TIMED_ROUNDS) -> list[int]:
    """The order ``count`` plans are timed in: one step of each per round, the order reversed
    every other round (so that each plan sees the machine as the others do: timed one after
    the other, a later plan ran 2-7% faster or slower than in a run of its own, enough to flip
    the choice)."""
    order = list(range(count))
    return [k for r in range(rounds) for k in (order if r % 2 == 0 else order[::-1])]


def round_step_ms(samples: Sequence[Sequence[float]]) -> list[float]:
    """Each plan's step time (ms) from its timed steps, ``samples[plan][round]``: the median over
    the rounds of its step divided by the round's least step, times the median least step.

    NOTE [Timed plans are compared round by round]: the machine drifts within one call's rounds
    (the 8-layer GPT-2's steps went from 40 to 48 ms over 15 rounds), and the least of a plan's
    steps is a single sample. Divided by its round's least, a step loses what the round shared
    with the others (drift, steady load), and the median over the rounds drops the rounds a
    plan lost to a burst of load (the least, not the mean, so that one plan's burst leaves the
    others' shares alone). Twelve repeats of one call's timing of three plans, beside
    benchmarks/compile_models.py (2026-12-06): on the 8-layer Llama, the ratio of two plans'
    times varied by 0.5-0.9% (standard deviation) from repeat to repeat against 1.6-2.7% for
    the least steps; on the 8-layer GPT-2, 0.6-1.3% against 1.4-2.3% in eleven of them. No estimate
    survives a machine busy through all the rounds: in the twelfth GPT-2 repeat every step took
    1.5-2.3 times its usual time, and the plans' order was lost either way."""
    rounds = min(len(s) for s in samples)
    least = [min(s[r] for s in samples) for r in range(rounds)]
    typical = statistics.median(least)
    return [typical * statistics.median(s[r] / least[r] for r in range(rounds)) for s in samples]


def kept_index(plans: Sequence[Measured], budget: int) -> int:
    """The index of the plan kept under ``budget`` (bytes): of those measured within it (or not
    measured), the fastest by their timed steps, else by their simulated times; none fitting,
    the least measured peak (the caller refuses it).

    NOTE [A tie goes to the plan with more memory]: timed steps within :data:`TIE_FRACTION` of
    the fastest are as fast, and of those the larger measured peak is kept: it recomputes less,
    and the budget allows it. Each budget is its own call timing its own plans, so a tie decided
    the other way (the lesser peak, until 2026-12-06) put two plans on either side of the tie's
    edge from one call to the next wherever the plan with more memory is a little faster (the
    usual case: it recomputes less), and a larger budget kept less memory than a smaller one
    (issue 26's target (b): on the 8-layer GPT-2, torch's 0.7 partition, 16747656 bytes, against
    torch's 0.4 save set beside store-all, 15350408, 3-5% slower; on the 8-layer Llama, 16441372
    against 15109136 bytes, 2.4% slower; benchmarks/compile_front.py, 2026-12-06). With the tie
    going to more memory, a larger budget keeps less only where the plan with less memory is the
    faster by about the tie itself. The price: a budget that admits store-all keeps store-all
    where it is as fast as torch's own partition."""
    fitting = [k for k, p in enumerate(plans) if p.peak is None or p.peak <= budget]
    if not fitting:
        return min(range(len(plans)), key=lambda k: plans[k].peak or 0)
    timed = [plans[k].step_ms for k in fitting]
    if any(ms is None for ms in timed):
        return min(fitting, key=lambda k: plans[k].simulated_ms)
    fastest = min(ms for ms in timed if ms is not None)
    tied = [k for k in fitting if (plans[k].step_ms or 0.0) <= fastest * (1.0 + TIE_FRACTION)]
    return max(tied, key=lambda k: (plans[k].peak or 0, -(plans[k].step_ms or 0.0)))
