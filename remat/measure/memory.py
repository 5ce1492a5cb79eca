"""Live-storage accounting: how many bytes of tensor storage are alive, and the peak.

On CUDA the caching allocator answers that (``torch.cuda.max_memory_allocated``). On CPU nothing
does, so :class:`StorageTracker` counts it: a ``TorchDispatchMode`` sees the output of every
aten op run inside it (forward *and* autograd backward), registers each distinct untyped storage
it has not seen (views share a storage and count once), and a ``weakref.finalize`` on the storage
object tells it the moment the storage is freed. Storages created before the tracker started
(parameters, their pre-allocated gradients, the optimizer state) are not counted unless passed
to :meth:`StorageTracker.track`.

Usage::

    with StorageTracker() as tracker:
        tracker.track(x)              # count the input too (the simulator counts a[0])
        loss = model(x).sum()
        loss.backward()
    tracker.peak_bytes                # largest number of live bytes seen (bytes)
    tracker.current_bytes             # bytes still alive now

Bookkeeping tensors that must not be counted (RNG snapshots, ...) are created inside
``with untracked(): ...``; :meth:`StorageTracker.ignore` drops a storage from the count.

Sizes are storage sizes (``UntypedStorage.nbytes()``), i.e. exact bytes, with no allocator
rounding. Only storages on ``device`` (default: CPU) are counted. ``device="meta"`` works the same
way on meta tensors (storages with a size and no data): autograd runs on them, so a training step
of a model too large to compute is sized exactly.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

_ACTIVE: list[StorageTracker] = []
_LOCK = threading.RLock()


@dataclass(frozen=True)
class MemoryEvent:
    """One change of the live byte count: ``delta`` bytes (+ allocation, - free), ``live`` after it."""

    sequence: int
    storage_id: int
    delta: int
    live: int
    label: str


class StorageTracker(TorchDispatchMode):
    """Count live tensor storages created inside the ``with`` block; see the module docstring.

    Attributes:
        peak_bytes: the largest live byte count seen so far (bytes).
        current_bytes: live bytes now (bytes).
        events: every allocation/free, in order (only if ``record_events``).
    """

    def __init__(self, device: str | torch.device = "cpu", record_events: bool = False) -> None:
        super().__init__()
        self.device = torch.device(device).type
        self.record_events = record_events
        self.peak_bytes = 0
        self.current_bytes = 0
        self.events: list[MemoryEvent] = []
        self._live: dict[int, tuple[int, int]] = {}  # storage cdata -> (id, nbytes)
        self._ignored: set[int] = set()  # storage cdata of ignored storages still alive
        self._next_id = 0
        self._paused = 0
        self._label = ""

    # -- context management -------------------------------------------------------------
    def __enter__(self) -> StorageTracker:
        super().__enter__()
        _ACTIVE.append(self)
        return self

    def __exit__(self, *exc) -> None:
        if _ACTIVE and _ACTIVE[-1] is self:
            _ACTIVE.pop()
        elif self in _ACTIVE:
            _ACTIVE.remove(self)
        super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if not self._paused:
            # an output whose storage belongs to an input (a view, an in-place or out= op) is not a
            # new allocation: count it only if that storage is already counted (a resize shows up)
            inputs = {
                s._cdata
                for t in tree_leaves((args, kwargs))
                if isinstance(t, torch.Tensor) and (s := _storage(t)) is not None
            }
            for leaf in tree_leaves(out):
                if isinstance(leaf, torch.Tensor):
                    self._register(leaf, inputs)
        return out

    # -- public API -----------------------------------------------------------------------
    def track(self, *tensors: torch.Tensor) -> None:
        """Count these (already existing) tensors' storages from now on, until they are freed."""
        for tensor in tensors:
            self._register(tensor)

    def ignore(self, *tensors: torch.Tensor) -> None:
        """Stop counting these tensors' storages (and never count them again)."""
        for tensor in tensors:
            storage = _storage(tensor)
            if storage is None:
                continue
            key = storage._cdata
            with _LOCK:
                entry = self._live.pop(key, None)
                self._ignored.add(key)
                if entry is not None:
                    self._change(entry[0], -entry[1])
            weakref.finalize(storage, self._ignored.discard, key)

    def reset_peak(self) -> None:
        """Set the peak to the current live bytes (like ``torch.cuda.reset_peak_memory_stats``)."""
        self.peak_bytes = self.current_bytes

    def mark(self, label: str) -> None:
        """Label the following events (e.g. with the op being run); only used with ``record_events``."""
        self._label = label

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Tensors created in this block are not counted."""
        self._paused += 1
        try:
            yield
        finally:
            self._paused -= 1

    # -- internals ------------------------------------------------------------------------
    def _register(self, tensor: torch.Tensor, inputs: set[int] | frozenset[int] = frozenset()) -> None:
        storage = _storage(tensor)
        if storage is None or storage.device.type != self.device:
            return
        key = storage._cdata
        nbytes = storage.nbytes()
        with _LOCK:
            if key in self._ignored:
                return
            entry = self._live.get(key)
            if entry is not None:
                if entry[1] != nbytes:  # resized in place (resize_, out= ops)
                    self._live[key] = (entry[0], nbytes)
                    self._change(entry[0], nbytes - entry[1])
                return
            if key in inputs:  # a view of / in-place on a storage allocated before the tracker started
                return
            ident = self._next_id
            self._next_id += 1
            self._live[key] = (ident, nbytes)
            self._change(ident, nbytes)
        weakref.finalize(storage, self._free, key, ident)

    def _free(self, key: int, ident: int) -> None:
        with _LOCK:
            entry = self._live.get(key)
            if entry is None or entry[0] != ident:
                return
            del self._live[key]
            self._change(ident, -entry[1])

    def _change(self, ident: int, delta: int) -> None:
        self.current_bytes += delta
        if self.current_bytes > self.peak_bytes:
            self.peak_bytes = self.current_bytes
        if self.record_events:
            self.events.append(MemoryEvent(len(self.events), ident, delta, self.current_bytes, self._label))


def _storage(tensor: torch.Tensor) -> torch.UntypedStorage | None:
    # meta tensors have storages too (a size, no data): a tracker on "meta" counts them exactly as
    # on CPU, which sizes a full-size model's step with no compute; other trackers skip them by device
    if tensor.is_sparse:
        return None
    try:
        return tensor.untyped_storage()
    except (RuntimeError, NotImplementedError):  # tensor subclasses without storage
        return None


def storage_key(tensor: torch.Tensor) -> StorageWeakRef | None:
    """The identity of ``tensor``'s storage (views share it), or None for a tensor without one
    (sparse, storage-less subclasses): the one storage identity of remat, which the profilers, the
    graph recorder and the checks all key storages by. A weak reference, hashed and compared by the
    storage's address, that keeps the address from being reused while the key is held: a storage
    freed meanwhile can never be taken for a new one at the same address. (The trackers of this
    module key their live storages by the bare address, dropped by a finalizer when the storage
    dies, so that they hold nothing.)"""
    storage = _storage(tensor)
    return None if storage is None else StorageWeakRef(storage)


class CudaMeter:
    """The same interface as :class:`StorageTracker` for CUDA, from the caching allocator.

    ``current_bytes``/``peak_bytes`` are relative to ``torch.cuda.memory_allocated()`` when the
    block was entered (bytes; the allocator rounds every block up to 512 bytes). Meters nest: the
    allocator keeps one high-water mark per device, which each meter resets when it starts and at
    :meth:`reset_peak`; before any reset the mark is folded into every open meter's floor, so an
    outer meter's peak is not lost to an inner one's reset (NOTE [Nested allocator meters] in
    :mod:`remat.measure.allocator`).
    """

    def __init__(self, device: str | torch.device = "cuda") -> None:
        self.device = torch.device(device)
        self.base = 0
        self._peak_floor = 0

    def __enter__(self) -> CudaMeter:
        torch.cuda.synchronize(self.device)
        self.base = torch.cuda.memory_allocated(self.device)
        _reset_cuda_peak(self.device)
        self._peak_floor = 0
        _OPEN_CUDA.set((*_OPEN_CUDA.get(), self))
        return self

    def __exit__(self, *exc) -> None:
        torch.cuda.synchronize(self.device)
        self._peak_floor = self.peak_bytes  # readable after the block, whatever later meters reset
        _OPEN_CUDA.set(tuple(m for m in _OPEN_CUDA.get() if m is not self))

    @property
    def current_bytes(self) -> int:
        return torch.cuda.memory_allocated(self.device) - self.base

    @property
    def peak_bytes(self) -> int:
        if self not in _OPEN_CUDA.get():  # closed: the reading at its end
            return self._peak_floor
        torch.cuda.synchronize(self.device)
        return max(self._peak_floor, torch.cuda.max_memory_allocated(self.device) - self.base)

    def reset_peak(self) -> None:
        torch.cuda.synchronize(self.device)
        _reset_cuda_peak(self.device)
        self._peak_floor = 0

    def track(self, *tensors: torch.Tensor) -> None:  # noqa: D102 - existing memory is in ``base`` already
        return None

    def ignore(self, *tensors: torch.Tensor) -> None:  # noqa: D102 - the allocator cannot exclude
        return None

    def mark(self, label: str) -> None:  # noqa: D102
        return None


# the CUDA meters open now, outermost first (NOTE [Nested allocator meters] in remat.measure.allocator)
_OPEN_CUDA: ContextVar[tuple[CudaMeter, ...]] = ContextVar("remat_open_cuda_meters", default=())


def _reset_cuda_peak(device: torch.device) -> None:
    """Reset ``device``'s high-water mark, first folding the marks into every open meter's floor
    (each meter its own device's: folding another device's mark changes nothing, and "cuda" and
    "cuda:0" need no telling apart)."""
    for meter in _OPEN_CUDA.get():
        mark = torch.cuda.max_memory_allocated(meter.device) - meter.base
        meter._peak_floor = max(meter._peak_floor, mark)
    torch.cuda.reset_peak_memory_stats(device)


def memory_meter(device: str | torch.device) -> StorageTracker | CudaMeter:
    """A meter of live bytes allocated on ``device`` after entering it: allocator on CUDA, tracker on CPU."""
    device = torch.device(device)
    if device.type == "cuda":
        return CudaMeter(device)
    return StorageTracker(device)


def allocation_size(nbytes: int, device: str | torch.device) -> int:
    """Bytes a storage of ``nbytes`` occupies: CUDA's allocator rounds up to 512 bytes; CPU is exact."""
    if torch.device(device).type == "cuda" and nbytes > 0:
        return ((nbytes + 511) // 512) * 512
    return nbytes


def allocated_bytes(tensor: torch.Tensor, device: str | torch.device | None = None) -> int:
    """Bytes ``tensor``'s whole storage occupies on ``device`` (default: the tensor's own):
    :func:`allocation_size` of the storage's ``nbytes()``."""
    return allocation_size(tensor.untyped_storage().nbytes(), tensor.device if device is None else device)


def active_trackers() -> tuple[StorageTracker, ...]:
    """The trackers currently counting (innermost last)."""
    return tuple(_ACTIVE)


UNTRACKED_SCOPE = "remat.untracked"


def profiler_scope(name: str) -> contextlib.AbstractContextManager:
    """A named profiler scope (a no-op when no profiler runs). The C++ fast path, not
    ``record_function``: that one is an aten op, which an active ``TorchDispatchMode`` (the
    tracker) intercepts, and the profiler then no longer nests allocations inside the scope."""
    return torch._C._profiler._RecordFunctionFast(name)


@contextlib.contextmanager
def untracked() -> Iterator[None]:
    """Tensors created in this block are remat's own bookkeeping (RNG snapshots, buffer copies):
    counted by no active tracker, and set apart by :class:`~remat.measure.allocator.AllocatorMeter`
    (the profiler scope named ``UNTRACKED_SCOPE`` marks them)."""
    with contextlib.ExitStack() as stack:
        for tracker in list(_ACTIVE):
            stack.enter_context(tracker.paused())
        stack.enter_context(profiler_scope(UNTRACKED_SCOPE))
        yield


def notify_resized(tensor: torch.Tensor) -> None:
    """Tell the active trackers that ``tensor``'s storage was resized outside an aten op
    (``untyped_storage().resize_``), which the dispatch mode cannot see."""
    for tracker in list(_ACTIVE):
        tracker.track(tensor)


def storage_bytes(*tensors: torch.Tensor) -> int:
    """Bytes of the distinct storages behind ``tensors`` (views of one storage count once)."""
    seen: dict[int, int] = {}
    for tensor in tensors:
        storage = _storage(tensor)
        if storage is not None:
            seen[storage._cdata] = storage.nbytes()
    return sum(seen.values())


__all__ = [
    "storage_key",
    "UNTRACKED_SCOPE",
    "CudaMeter",
    "MemoryEvent",
    "StorageTracker",
    "allocated_bytes",
    "allocation_size",
    "memory_meter",
    "notify_resized",
    "profiler_scope",
    "active_trackers",
    "storage_bytes",
    "untracked",
]
