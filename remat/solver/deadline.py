"""One wall-clock deadline shared by every phase of a time-limited solve (seconds).

``--time-limit`` bounds the whole solve: building the models, the LP, the rounding, CP-SAT and
the fallbacks all draw on one :class:`Deadline`, each phase getting what is left (or a share of
it), and the model builders check it as they go, so no phase can run past the end. What is not
interruptible (one solver call past its own limit, decoding, the final simulator check) is
covered by the stated margin, :data:`MARGIN_SECONDS` + :data:`MARGIN_FRACTION` of the limit.

A deadline can also be cancelled (:meth:`Deadline.cancel`: Ctrl-C, SIGTERM), which ends it for
every phase sharing it; :func:`interruptible` runs one native solver call so that a signal stops
it at once (NOTE [No solver takes a signal]).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from remat.schedules import RematError

# The promise: a solve given L seconds ends within L * (1 + MARGIN_FRACTION) + MARGIN_SECONDS.
MARGIN_SECONDS = 1.0
MARGIN_FRACTION = 0.05
# After a signal, how long :func:`interruptible` keeps asking a native call to stop before it
# leaves it running in its (daemon) thread and lets the signal's exception go on (seconds).
STOP_WAIT_SECONDS = 1.0

T = TypeVar("T")


class TimeUp(Exception):
    """The deadline passed during ``phase``; the caller falls back to what it already has."""

    def __init__(self, phase: str):
        super().__init__(f"the time limit ran out during {phase}")
        self.phase = phase


@dataclass(frozen=True)
class Deadline:
    """Ends ``limit`` seconds after ``start`` (a ``clock()`` reading; default: now), or when it is
    cancelled (``cancelled``: one event shared with every :meth:`share` of it)."""

    limit: float
    clock: Callable[[], float] = field(default=time.monotonic, repr=False, compare=False)
    start: float | None = None
    cancelled: threading.Event = field(default_factory=threading.Event, repr=False, compare=False)

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
        """Seconds until the end (0 once it has passed or was cancelled)."""
        return 0.0 if self.cancelled.is_set() else max(0.0, self.end - self.clock())

    def check(self, phase: str) -> None:
        """Raise :class:`TimeUp` naming ``phase`` if the deadline has passed or was cancelled."""
        if self.cancelled.is_set() or self.clock() >= self.end:
            raise TimeUp(phase)

    def cancel(self) -> None:
        """End this deadline now, for every phase sharing it (each stops at its next check)."""
        self.cancelled.set()

    def share(self, fraction: float, at_most: float = float("inf")) -> Deadline:
        """A deadline ending after ``fraction`` of the time left now, and after at most ``at_most``
        seconds (never after this one)."""
        now = self.clock()
        end = min(self.end, now + min(fraction * self.left(), at_most))
        return Deadline(end - now, self.clock, now, self.cancelled)

    def within_margin(self, seconds: float) -> bool:
        """Whether ``seconds`` of wall time keeps the promise made for this limit."""
        return seconds <= self.limit * (1 + MARGIN_FRACTION) + MARGIN_SECONDS


# NOTE [No solver takes a signal]: CP-SAT, by default, installs its own SIGINT handler for each
# solve (``catch_sigint_signal``) and sets SIGINT back to SIG_DFL when the solve ends. That handler
# is not async-signal-safe: a SIGINT to `remat solve ... &` (started with SIGINT ignored, which
# CP-SAT overrode) deadlocked it in malloc, deaf to SIGTERM and to its time limit (issue 43); and
# in the foreground it replaced the CLI's Ctrl-C with a silent SIG_DFL after the first solve. So
# no solver of remat ever takes a signal: CP-SAT runs with ``catch_sigint_signal`` off, SCIP with
# ``misc/catchctrlc`` off (HiGHS installs none), and the signals stay the process's owner's (the
# CLI's main, remat/cli/__init__.py; Python's own handler for a program importing remat). Python
# runs a signal's handler only in the main thread between bytecodes, never inside a native call,
# so each native solve runs in a helper thread (:func:`interruptible`) while the main thread
# waits, where a signal's exception (KeyboardInterrupt, the CLI's SIGTERM) interrupts the wait;
# the solve is then told to stop (CP-SAT's StopSearch, the solve's deadline cancelled) and the
# exception goes on. A HiGHS child process is killed (remat/solver/graph/ilp/highs_search.py).
def interruptible(call: Callable[[], T], stop: Callable[[], object]) -> T:
    """``call()``, run so that a signal handled in the main thread (Ctrl-C, SIGTERM) stops it at
    once: in a helper thread while this one waits (NOTE [No solver takes a signal]). On any
    exception during the wait, ``stop()`` is called until ``call`` returns (it may ask before
    ``call`` has started listening; at most :data:`STOP_WAIT_SECONDS`), then the exception goes
    on. Off the main thread (no signal is handled there) it is just ``call()``."""
    if threading.current_thread() is not threading.main_thread():
        return call()
    outcome: list = []
    done = threading.Event()  # not Thread.join: an interrupted join marks a running thread ended (bpo-45274)

    def target() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as error:  # noqa: BLE001 - re-raised in the waiting thread
            outcome.append((False, error))
        finally:
            done.set()

    try:
        threading.Thread(target=target, name="remat-solve", daemon=True).start()
        while not done.wait(0.1):  # a signal's exception is raised here, between two waits
            pass
    except BaseException:
        _stop_until_done(done, stop)
        raise
    finished, value = outcome[0]
    if not finished:
        raise value
    return value


def _stop_until_done(done: threading.Event, stop: Callable[[], object]) -> None:
    """Ask ``stop()`` every 20 ms until ``done`` is set, for at most :data:`STOP_WAIT_SECONDS`;
    a second Ctrl-C meanwhile ends the waiting."""
    give_up = time.monotonic() + STOP_WAIT_SECONDS
    try:
        while not done.is_set() and time.monotonic() < give_up:
            stop()
            done.wait(0.02)
    except BaseException:  # noqa: BLE001 - the first signal's exception is the one that goes on
        pass


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
