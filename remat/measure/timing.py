"""Wall-clock and CUDA-event timing, in milliseconds: the one device sync, the fastest-of-N timer,
and the per-stage timer of in-sequence passes."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch


def sync(device: torch.device) -> None:
    """Wait for the device (CUDA) so a wall-clock or allocator reading covers finished work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_ms(
    fn: Callable[[], object], device: torch.device, repeats: int, setup: Callable[[], object] | None = None
) -> float:
    """Fastest of ``repeats`` runs of ``fn()``, in milliseconds (``setup()`` runs untimed before each,
    and its result is passed to ``fn``).

    The minimum, not the median: load from other processes only ever adds time, so the fastest run
    is the best estimate of the unloaded cost."""
    samples = []
    for _ in range(max(1, repeats)):
        state = setup() if setup is not None else None
        sync(device)
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn() if state is None else fn(state)
            end.record()
            torch.cuda.synchronize(device)
            samples.append(start.elapsed_time(end))
        else:
            begin = time.perf_counter()
            fn() if state is None else fn(state)
            samples.append((time.perf_counter() - begin) * 1000.0)
        del state
    return float(min(samples))


class StageTimer:
    """Per-stage timer for in-sequence passes: CUDA events (read after one synchronize) or
    perf_counter; ``collect`` appends each pending sample (ms) to ``samples[index]``."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.pending: list[tuple[int, object, object]] = []

    def start(self) -> object:
        if self.device.type == "cuda":
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def stop(self, index: int, begin: object) -> None:
        if self.device.type == "cuda":
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self.pending.append((index, begin, end))
        else:
            self.pending.append((index, begin, time.perf_counter()))

    def collect(self, samples: list[list[float]]) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            for index, begin, end in self.pending:
                samples[index].append(begin.elapsed_time(end))
        else:
            for index, begin, end in self.pending:
                samples[index].append((end - begin) * 1000.0)
        self.pending.clear()


__all__ = ["StageTimer", "sync", "time_ms"]
