"""One wall-clock deadline shared by every phase of a time-limited solve (seconds).

``--time-limit`` bounds the whole solve: building the models, the LP, the rounding, CP-SAT and
the fallbacks all draw on one :class:`Deadline`, each phase getting what is left (or a share of
it), and the model builders check it as they go, so no phase can run past the end. What is not
interruptible (one solver call past its own limit, decoding, the final simulator check) is
covered by the stated margin, :data:`MARGIN_SECONDS` + :data:`MARGIN_FRACTION` of the limit.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from remat.schedules import RematError

# The promise: a solve given L seconds ends within L * (1 + MARGIN_FRACTION) + MARGIN_SECONDS.
MARGIN_SECONDS = 1.0
MARGIN_FRACTION = 0.05


class TimeUp(Exception):
    """The deadline passed during ``phase``; the caller falls back to what it already has."""

    def __init__(self, phase: str):
        super().__init__(f"the time limit ran out during {phase}")
        self.phase = phase


@dataclass(frozen=True)
class Deadline:
    """Ends ``limit`` seconds after ``start`` (a ``clock()`` reading; default: now)."""

    limit: float
    clock: Callable[[], float] = field(default=time.monotonic, repr=False, compare=False)
    start: float | None = None

    def __post_init__(self) -> None:
        if self.start is None:
            object.__setattr__(self, "start", self.clock())

    @property
    def end(self) -> float:
        return self.start + self.limit

    def elapsed(self) -> float:
        """Seconds since the start."""
        return self.clock() - self.start

    def left(self) -> float:
        """Seconds until the end (0 once it has passed)."""
        return max(0.0, self.end - self.clock())

    def check(self, phase: str) -> None:
        """Raise :class:`TimeUp` naming ``phase`` if the deadline has passed."""
        if self.clock() >= self.end:
            raise TimeUp(phase)

    def share(self, fraction: float, at_most: float = float("inf")) -> Deadline:
        """A deadline ending after ``fraction`` of the time left now, and after at most ``at_most``
        seconds (never after this one)."""
        now = self.clock()
        return Deadline(min(self.end, now + min(fraction * self.left(), at_most)) - now, self.clock, now)

    def within_margin(self, seconds: float) -> bool:
        """Whether ``seconds`` of wall time keeps the promise made for this limit."""
        return seconds <= self.limit * (1 + MARGIN_FRACTION) + MARGIN_SECONDS


def check_time_limit(value: float, strategy: str) -> float:
    """``value`` if it is a usable time limit (finite, > 0 seconds), else a one-line error."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise RematError(
            f"strategy '{strategy}': time_limit must be a finite positive number of seconds, not {value!r}"
        )
    return float(value)


def as_deadline(time_limit: float | Deadline) -> Deadline:
    """A deadline from a number of seconds (starting now), or the deadline itself."""
    return time_limit if isinstance(time_limit, Deadline) else Deadline(float(time_limit))
