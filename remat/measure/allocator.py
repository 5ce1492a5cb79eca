"""What the allocator saw: bytes allocated on a device inside a block, their peak, and per-phase readings.

This is the "measured" memory of remat (docs/executor.md, "Measurement"): it includes what kernels
allocate inside themselves (oneDNN convolution buffers on CPU, cuDNN workspaces and matmul scratch
on CUDA), which a live-tensor tracker (:class:`~remat.measure.memory.StorageTracker`) cannot see.

* **CPU**: c10's CPU allocator reports every allocation and free to the profiler while memory
  profiling is on (``ProfiledCPUMemoryReporter``). :class:`AllocatorMeter` runs
  ``torch.autograd.profiler.profile(profile_memory=True)`` over the block and replays the reported
  events in order. Torch 2.13 has no lighter CPU hook (no ``torch.cpu`` memory statistics; the
  pluggable allocators are CUDA/XPU only), and the profiler's events carry each block's pointer,
  so a free is counted only for a block allocated inside the block: memory that existed before
  (parameters, their gradients, the input) is outside the count, exactly as for the tracker.
  Readings are available once the block has ended (the profiler's events are read at exit).
  Allocations inside :func:`~remat.measure.memory.untracked` (remat's own bookkeeping: RNG
  snapshots, buffer copies) are set apart in ``bookkeeping_peak``, as the tracker leaves them out.
  Meters nest (NOTE [Nested allocator meters]); one cannot run inside a profiler session that
  is not a meter's (it would end that one) and says so (:func:`cpu_meter_available`).
* **CUDA**: ``torch.cuda.memory_allocated`` / ``max_memory_allocated`` (the caching allocator
  rounds every block up to 512 bytes), read at every :meth:`AllocatorMeter.mark`; nested meters
  keep the outer's high-water mark across an inner one's resets.
* **meta**: nothing is allocated; the meter counts meta storages with the tracker (exact sizes).

All readings are bytes relative to what was allocated when the block was entered.

Usage::

    with AllocatorMeter("cpu") as meter:
        out = stage(x)
        meter.mark("backward")          # ends the phase "" and starts the phase "backward"
        out.backward(g)
    meter.peak_bytes                    # the largest total seen in the block (bytes)
    meter.phases                        # (Phase("", 0, peak, live), Phase("backward", live, peak, end))
"""

from __future__ import annotations

import functools
import os
import sys
import warnings
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import torch

from remat.measure.memory import UNTRACKED_SCOPE, CudaMeter, StorageTracker, profiler_scope
from remat.schedules import RematError

_MARK = "remat.mark."


@dataclass(frozen=True)
class Phase:
    """One stretch of a metered block between two marks (bytes, relative to the block's start):
    ``start`` live when it began, ``peak`` the most live at any moment in it, ``end`` live when it ended."""

    label: str
    start: int
    peak: int
    end: int


class _Phased:
    """Readings shared by the meters: ``phases`` (set when the block ends) and what follows from them."""

    phases: tuple[Phase, ...] = ()

    @property
    def peak_bytes(self) -> int:
        """The largest number of bytes allocated at once in the block (bytes; after it ended)."""
        return max((p.peak for p in self.phases), default=0)

    @property
    def final_bytes(self) -> int:
        """Bytes still allocated when the block ended (bytes; after it ended)."""
        return self.phases[-1].end if self.phases else 0


class LivePhases(_Phased):
    """Phases of a meter that can be read while it runs (:class:`~remat.measure.memory.CudaMeter`,
    :class:`~remat.measure.memory.StorageTracker`): at each mark, the bytes now and the peak since
    the previous mark."""

    def __init__(self, meter: CudaMeter | StorageTracker) -> None:
        self.meter = meter
        self._labels: list[str] = [""]
        self._closed: list[Phase] = []
        self._start = 0

    def __enter__(self) -> LivePhases:
        self._labels, self._closed, self._start, self.phases = [""], [], 0, ()
        self.meter.__enter__()
        return self

    def mark(self, label: str) -> None:
        """End the current phase here and start one called ``label``."""
        now = self.meter.current_bytes
        self._closed.append(Phase(self._labels[-1], self._start, self.meter.peak_bytes, now))
        self.meter.reset_peak()
        self._start = now
        self._labels.append(label)

    def __exit__(self, *exc) -> None:
        self.mark("")
        self._labels.pop()
        self.meter.__exit__(*exc)
        self.phases = tuple(self._closed)


def tensor_meter(device: str | torch.device) -> LivePhases:
    """The live-tensor tracker with phases (bytes of tensor storages; no kernel-internal buffers)."""
    return LivePhases(StorageTracker(torch.device(device).type))


class AllocatorMeter(_Phased):
    """Bytes the device's allocator handed out inside the ``with`` block; see the module docstring.

    Meters nest (NOTE [Nested allocator meters]): a meter opened inside another's block reads its
    own block, and the outer one still reads everything its block allocated, the inner block's
    allocations included.

    Attributes (valid after the block ends):
        phases: one :class:`Phase` per stretch between marks (the first is labelled ``""``).
        peak_bytes: the largest live total in the block (bytes).
        final_bytes: bytes still allocated at the end of the block (bytes).
        bookkeeping_peak: CPU: the most bytes remat's own bookkeeping (tensors made inside
            :func:`~remat.measure.memory.untracked`: RNG snapshots, buffer copies) held at once;
            they are not in the other readings, as the tracker does not count them (bytes).
    """

    def __init__(self, device: str | torch.device = "cpu") -> None:
        self.device = torch.device(device)
        self.bookkeeping_peak = 0
        self._labels: list[str] = [""]
        self._live: LivePhases | None = None
        self._replay: _Replay | None = None

    def __enter__(self) -> AllocatorMeter:
        self._labels, self.phases, self.bookkeeping_peak = [""], (), 0
        if self.device.type == "cpu":
            open_meters = _OPEN_CPU.get()
            if not cpu_meter_available():
                raise RematError("a torch profiler is already running; measure CPU memory outside it")
            if not open_meters:  # before any session of the meters' own: it runs one
                _spend_unknown_block_warning()
            self._replay = _Replay(self._labels, self.device, token=f"{id(self)}.")
            _switch_session(open_meters, (*open_meters, self))
        else:
            live = CudaMeter(self.device) if self.device.type == "cuda" else StorageTracker(self.device)
            self._live = LivePhases(live).__enter__()
        return self

    def mark(self, label: str) -> None:
        """End the current phase here and start one called ``label``."""
        if self._replay is not None:
            with profiler_scope(f"{_MARK}{self._replay.token}{len(self._labels)}"):
                pass
        elif self._live is not None:
            self._live.mark(label)
        self._labels.append(label)

    def __exit__(self, *exc) -> None:
        if self._replay is not None:
            open_meters = _OPEN_CPU.get()
            _switch_session(open_meters, tuple(m for m in open_meters if m is not self))
            self.phases, self.bookkeeping_peak = self._replay.close()
            self._replay = None
        elif self._live is not None:
            self._live.__exit__(*exc)
            self.phases = self._live.phases
            self._live = None


# NOTE [The profiler's unknown-block warning]
# Freeing, inside a memory-profiling session, a CPU block allocated before it makes torch print
# "Memory block of unknown size was allocated before the profiling started, profiler results will
# not include the deallocation event" (c10's CPUAllocator, TORCH_WARN_ONCE): a C++ line on stderr
# (or a UserWarning inside a bound call) that a user of .report() cannot act on; the meter counts
# only blocks allocated inside it by design. torch has no switch for it, but it is printed once per
# process: the first CPU meter spends that once on a block of its own, with stderr (fd 2) on
# /dev/null for that one free, so no later session prints it and nothing else is silenced.
_UNKNOWN_BLOCK = "Memory block of unknown size was allocated before the profiling started"


@functools.cache
def _spend_unknown_block_warning() -> None:
    """Make torch print NOTE [The profiler's unknown-block warning] once, into /dev/null (once per process)."""
    # kineto reads its log level when its first session starts, and this is the first: set it here
    # (see _switch_session), or every later session prints "profiler_start/stop" lines.
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    block = torch.empty(1)
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_UNKNOWN_BLOCK)
            with torch.autograd.profiler.profile(profile_memory=True, use_cpu=True):
                del block
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def cpu_meter_available() -> bool:
    """Whether a CPU :class:`AllocatorMeter` can start now: no torch profiler runs, or only the
    meters' own session (meters nest; a user's profiler would be ended by a new session)."""
    return bool(_OPEN_CPU.get()) or not torch.autograd.profiler._is_profiler_enabled


# NOTE [Nested allocator meters]: the CPU allocator reports to the profiler, and the profiler runs
# one session per process; its events are read when the session ends. So the CPU meters open at a
# time (outermost first, in ``_OPEN_CPU``) share one session, and every time a meter opens or
# closes, the session ends, its events are replayed in time order into each meter that was open
# through it, and a new session starts for the meters open now. Each meter keeps its own count
# across sessions (its live blocks by pointer, its peak, its phases), so an outer meter sees the
# inner blocks' allocations and frees as if it ran alone, and a block allocated in one session and
# freed in a later one is freed in its count. Between two sessions only the profiler runs. An
# outer meter's records never grow past one stretch between two inner meters (each session's are
# dropped once replayed). On CUDA the caching allocator keeps one high-water mark per device,
# which every meter's reset lowers: a reset first folds it into every open meter's floor
# (:class:`~remat.measure.memory.CudaMeter`), so an outer meter's peak survives an inner one's.
_OPEN_CPU: ContextVar[tuple[AllocatorMeter, ...]] = ContextVar("remat_open_cpu_meters", default=())


def _switch_session(before: tuple[AllocatorMeter, ...], after: tuple[AllocatorMeter, ...]) -> None:
    """End the running profiler session (if meters were open), replay it into ``before``'s meters,
    and start one for ``after``'s (if any): NOTE [Nested allocator meters]."""
    if before:
        session = before[-1]._replay.session  # the session is held by the innermost meter
        session.__exit__(None, None, None)
        events = _events(session.kineto_results, before[0].device)
        for meter in before:
            meter._replay.session = None
            meter._replay.feed(events)
    _OPEN_CPU.set(after)
    if after:
        # kineto prints a "profiler_start/stop" line per session unless its log level is above 5;
        # it reads the variable when the profiler first starts. A user's own setting wins.
        os.environ.setdefault("KINETO_LOG_LEVEL", "6")
        session = torch.autograd.profiler.profile(profile_memory=True, use_cpu=True)
        session.__enter__()
        after[-1]._replay.session = session


def _flatten(nodes) -> list[tuple[object, bool]]:
    """Every node of the profiler's event tree, with whether it ran inside an ``untracked()`` block."""
    out, stack = [], [(node, False) for node in nodes]
    while stack:
        node, hidden = stack.pop()
        out.append((node, hidden))
        hidden = hidden or node.name == UNTRACKED_SCOPE
        stack.extend((child, hidden) for child in node.children)
    return out


class _Count:
    """Live bytes of the blocks allocated inside the metered block, by pointer, and their peak."""

    def __init__(self) -> None:
        self.blocks: dict[int, int] = {}
        self.live = 0
        self.peak = 0

    def allocate(self, ptr: int, size: int) -> None:
        self.blocks[ptr] = size
        self.live += size
        self.peak = max(self.peak, self.live)

    def free(self, ptr: int) -> None:
        self.live -= self.blocks.pop(ptr, 0)


def _events(results, device: torch.device) -> list[tuple[int, int, Any]]:
    """One profiler session's allocations on ``device`` and marks, in time order: (time ns, kind,
    payload), kind 0 a mark (its scope's name after ``_MARK``), 1 an allocation (ptr, bytes, hidden:
    inside ``untracked()``)."""
    events = []
    for node, hidden in _flatten(results.experimental_event_tree()):
        fields = node.extra_fields
        if isinstance(fields, torch._C._profiler._ExtraFields_Allocation):
            if fields.device.type == device.type:
                events.append((node.start_time_ns, 1, (fields.ptr, fields.alloc_size, hidden)))
        elif node.name.startswith(_MARK):
            events.append((node.start_time_ns, 0, node.name[len(_MARK) :]))
    events.sort(key=lambda e: (e[0], e[1]))
    return events


class _Replay:
    """One CPU meter's readings, replayed from the profiler's events session by session: the blocks
    counted and their peak per phase, and remat's own bookkeeping (allocated inside ``untracked()``),
    which is not counted. ``token`` tells its marks from other meters'."""

    def __init__(self, labels: list[str], device: torch.device, token: str) -> None:
        self.labels, self.device, self.token = labels, device, token
        self.session: torch.autograd.profiler.profile | None = None
        self.counted, self.bookkeeping = _Count(), _Count()
        self.phases: list[Phase] = []
        self.start = self.index = 0

    def feed(self, events: list[tuple[int, int, Any]]) -> None:
        """Replay one session's events (:func:`_events`) into the count."""
        counted = self.counted
        for _, kind, payload in events:
            if kind == 0:
                if payload.startswith(self.token):
                    self.phases.append(Phase(self.labels[self.index], self.start, counted.peak, counted.live))
                    self.index, self.start, counted.peak = int(payload[len(self.token) :]), counted.live, counted.live
                continue
            ptr, size, hidden = payload
            if size > 0:
                (self.bookkeeping if hidden else counted).allocate(ptr, size)
            else:  # a free of memory that existed before the block is in neither count
                counted.free(ptr)
                self.bookkeeping.free(ptr)

    def close(self) -> tuple[tuple[Phase, ...], int]:
        """The phases (the last one ended now) and the bookkeeping's peak (bytes)."""
        counted = self.counted
        self.phases.append(Phase(self.labels[self.index], self.start, counted.peak, counted.live))
        return tuple(self.phases), self.bookkeeping.peak


__all__ = ["AllocatorMeter", "LivePhases", "Phase", "cpu_meter_available", "tensor_meter"]
