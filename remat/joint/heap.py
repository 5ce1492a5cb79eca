"""Python's garbage collector while remat solves a joint graph inside a compile.

NOTE [The solve's garbage collection]: the solve builds thousands of fx nodes and graphs
(torch's min-cuts; :func:`remat.joint.plan.realize` for a candidate whose order is not read off
the joint graph, NOTE [Costing a save set without building its graphs]) inside a
``torch.compile`` whose heap holds about a million objects (dynamo's and AOTAutograd's). With the
collector left as it was, a realize on an 8-layer Llama's 1069-node graph took 0.8-1.3 s inside
the compile, against 0.23 s for the same call after it. Inside :func:`paused_collector` (the
whole partition of a joint graph: timing, min-cuts, solve and the graphs handed to inductor), the
compile's objects are frozen (:func:`gc.freeze`), automatic collections are off, and
:func:`collect_garbage`, called after the min-cuts and after each candidate built, collects what
they dropped, scanning only the solve's own objects: the same realizes took 0.33-0.55 s. Before
freezing, only the young generations are collected (``gc.collect(1)``): a full collection scans
the whole heap, 0.46 s at 0.7 million objects and 1.9 s at 2.5 million (a process that compiled
GPT-2 and Llama before, profiled 2026-12-05), every region again; older garbage waits, frozen,
for the first full collection after the solve. Afterwards the collector is as it was
(``gc.unfreeze``, ``gc.enable``). A process that disabled its collector or froze objects itself
is left as it is.
"""

from __future__ import annotations

import contextlib
import contextvars
import gc
from collections.abc import Iterator

_PAUSED: contextvars.ContextVar[bool] = contextvars.ContextVar("remat_joint_collector_paused", default=False)


@contextlib.contextmanager
def paused_collector() -> Iterator[None]:
    """Collect once, freeze what exists and turn automatic collections off for the block."""
    if not gc.isenabled() or gc.get_freeze_count():  # the caller's collector, or a pause already on
        yield
        return
    gc.collect(1)  # the young generations only: a full collection scans the whole heap
    gc.freeze()
    gc.disable()
    token = _PAUSED.set(True)
    try:
        yield
    finally:
        _PAUSED.reset(token)
        gc.enable()
        gc.unfreeze()


def collect_garbage() -> None:
    """Inside :func:`paused_collector`: collect the garbage made since it began (the frozen heap
    is not scanned). Elsewhere: nothing."""
    if _PAUSED.get():
        gc.collect()


__all__ = ["collect_garbage", "paused_collector"]
