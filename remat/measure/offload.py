"""Autograd's saved tensors kept off the device while a whole training step runs, bit for bit.

A whole training step holds every activation its backward needs until that backward runs: for the
user whose step does not fit, running it once (the proof does, remat/trace/proof.py) needs the
memory remat is asked to save. :func:`saved_off_device` moves each tensor autograd saves off the
device as it is saved and brings it back when the backward asks for it, so the step peaks at the
forward's live values plus the backward's transient, and computes exactly what it computes without
it (NOTE [Saved tensors off the device, bit for bit]).

:class:`OffDevice` keeps copies of chosen tensors off the device the same way (a step's gradients,
to compare with another step's: NOTE [Copies kept off the device]).

Usage::

    with saved_off_device(existing_storages(model, x)):
        model(x).sum().backward()

    place = OffDevice()
    kept = place.put(model.weight.grad)   # the bytes go to a file (CPU) or host memory (CUDA)
    kept.equal(other.weight.grad)         # torch.equal, read back 1 MiB at a time
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._pytree import tree_leaves

from remat.measure.memory import storage_key

# NOTE [Saved tensors off the device, bit for bit]
# ``pack`` (torch.autograd.graph.saved_tensors_hooks) copies the *whole untyped storage* of a
# saved tensor off the device, as bytes: a CPU storage into a file of a temporary directory, a
# device storage (CUDA) into host memory. ``unpack`` allocates a storage of the same size from
# torch's own allocator on the same device (never an mmap: the allocator's alignment is what the
# kernels saw), reads the bytes back and rebuilds the tensor over it with the same dtype, size,
# stride and storage offset. Every kernel of the backward therefore reads the same bytes at the
# same layout and alignment as without the hooks, so it picks the same code path and gives the
# same bits (the tests compare gradients with torch.equal). Bytes, not values: every dtype goes
# through a uint8 view of the storage (bf16 has no numpy dtype), zero-size storages are no file.
#
# One copy per storage and version: views of one storage saved by several ops (a Linear's input
# is the Tanh before it's output) share one copy, and are rebuilt over one storage while any of
# them is alive. A storage changed in place moves its version counter (shared by its views), so a
# later save of it makes a new copy. Autograd does not check the version of a tensor a hook
# packed; ``unpack`` does, as autograd would, while the saved tensor is still alive: a step that
# changes a saved tensor in place fails here as it fails without the hooks.
#
# Left on the device: storages that existed before the step (``keep``: parameters, buffers, the
# inputs; copying them would save nothing), meta tensors (no data), and what has no plain strided
# storage (sparse, quantized, conjugate or negative views, tensor subclasses).
#
# Cost: the activations' bytes written once and read once (file I/O on CPU, which the page cache
# mostly absorbs; a device-to-host and a host-to-device copy on CUDA), plus one allocation per
# restored storage. Host memory (CUDA) and disk (CPU) hold at most what the step saves at once.


@dataclass(eq=False)
class _Copy:
    """One storage's bytes off the device: a file (CPU) or a host tensor (other devices)."""

    device: torch.device
    nbytes: int
    path: str | None
    host: torch.Tensor | None
    directory: Any = None  # the TemporaryDirectory of ``path``: removed after its last file
    restored: weakref.ref | None = None  # the storage the last unpack rebuilt, while it lives
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)  # backward threads unpack too

    def __post_init__(self) -> None:
        if self.path is not None:
            weakref.finalize(self, _remove, self.path)

    def storage(self) -> torch.UntypedStorage:
        """The bytes back on the device, in a storage from torch's allocator (shared while alive)."""
        with self.lock:
            live = self.restored() if self.restored is not None else None
            if live is not None:
                return live
            buffer = torch.empty(self.nbytes, dtype=torch.uint8, device=self.device)
            if self.host is not None:
                buffer.copy_(self.host)
            elif self.path is not None:
                _read(self.path, buffer)
            storage = buffer.untyped_storage()
            self.restored = weakref.ref(storage)
            return storage

    def piece(self, start: int, nbytes: int) -> torch.Tensor:
        """Bytes ``start`` to ``start + nbytes`` back on the device: a new uint8 tensor."""
        buffer = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
        if self.host is not None:
            buffer.copy_(self.host[start : start + nbytes])
        elif self.path is not None and nbytes:
            _read(self.path, buffer, start)
        return buffer


@dataclass(frozen=True, eq=False)
class _Packed:
    """What ``pack`` keeps of one saved tensor: its copy and its layout over that copy."""

    copy: _Copy
    dtype: torch.dtype
    size: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int
    version: int
    origin: weakref.ref  # the saved tensor, to check its version as autograd would


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)


def _bytes(storage: torch.UntypedStorage) -> torch.Tensor:
    """A uint8 tensor over the whole of ``storage`` (no copy)."""
    return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)


def _write(path: str, data: torch.Tensor) -> None:
    view = memoryview(data.numpy()).cast("B")
    with open(path, "wb", buffering=0) as file:
        done = 0
        while done < len(view):
            done += file.write(view[done:])


def _read(path: str, buffer: torch.Tensor, start: int = 0) -> None:
    """Fill ``buffer`` (uint8, CPU) from the file's bytes ``start`` onwards."""
    view = memoryview(buffer.numpy()).cast("B")
    with open(path, "rb", buffering=0) as file:
        file.seek(start)
        done = 0
        while done < len(view):
            got = file.readinto(view[done:])
            if not got:
                raise RuntimeError(f"remat: saved tensor file {path} ended after {done} of {len(view)} bytes")
            done += got


def existing_storages(*values: Any) -> set[StorageWeakRef]:
    """Storage keys of the tensors in ``values`` (pytrees) and of every parameter, gradient and
    buffer of the modules among them: what a step finds already allocated."""
    keys: set[StorageWeakRef] = set()
    for value in tree_leaves(values):
        found = [value] if isinstance(value, torch.Tensor) else []
        if isinstance(value, nn.Module):
            found = [*value.parameters(), *value.buffers()]
            found += [p.grad for p in value.parameters() if p.grad is not None]
        keys.update(k for t in found if (k := storage_key(t)) is not None)
    return keys


def _movable(t: torch.Tensor) -> bool:
    return (
        type(t) in (torch.Tensor, nn.Parameter) and t.layout == torch.strided and t.device.type != "meta"
        and not t.is_quantized and not t.is_conj() and not t.is_neg()
    )  # fmt: skip


# NOTE [Copies kept off the device]
# The proof compares two whole steps' results (output, every parameter gradient, every buffer);
# cloning the first step's results on the device would hold a second set of parameter gradients
# beside the second step's own. ``OffDevice.put`` writes a tensor's values off the device instead,
# with the byte copy of NOTE [Saved tensors off the device, bit for bit] (a file on CPU, host
# memory on CUDA), as contiguous row-major bytes of its own span (a view of a larger storage
# costs only its elements; a non-contiguous tensor is made contiguous on the device first, one
# tensor's transient). ``Kept.equal`` is ``torch.equal`` (NaN unequal, -0.0 equal to 0.0) read
# back ``PIECE_BYTES`` at a time against a flat view of the live tensor, so a comparison holds at
# most one piece beyond the tensors it compares; ``Kept.get`` reads the whole tensor back.
# Tensors with no plain strided storage (sparse, quantized, subclasses) and meta tensors are
# kept as clones where they are (rare; meta holds no bytes).

PIECE_BYTES = 1 << 20
"""What :meth:`Kept.equal` reads back onto the device at once (bytes)."""


@dataclass(frozen=True, eq=False)
class Kept:
    """A copy of one tensor's values, off its device (NOTE [Copies kept off the device])."""

    dtype: torch.dtype
    shape: tuple[int, ...]
    copy: _Copy | None  # contiguous row-major bytes; None: ``held`` keeps the values
    held: torch.Tensor | None = None

    def get(self) -> torch.Tensor:
        """The values back on the device: a new contiguous tensor."""
        if self.copy is None:
            assert self.held is not None
            return self.held
        return self.copy.piece(0, self.copy.nbytes).view(self.dtype).view(self.shape)

    def equal(self, t: torch.Tensor) -> bool:
        """``torch.equal(self.get(), t)``, reading back at most :data:`PIECE_BYTES` at a time."""
        if tuple(t.shape) != self.shape or t.dtype != self.dtype:
            return False
        if self.copy is None:
            assert self.held is not None
            return torch.equal(self.held, t)
        flat = t.detach().reshape(-1)  # a view, unless ``t`` is not contiguous (then one copy)
        size = flat.element_size()
        step = max(1, PIECE_BYTES // max(size, 1))
        for start in range(0, flat.numel(), step):
            part = flat[start : start + step]
            back = self.copy.piece(start * size, part.numel() * size).view(self.dtype)
            same = torch.equal(back.to(part.device), part)
            del back  # freed before the next piece is read back: one piece at a time
            if not same:
                return False
        return True


class OffDevice:
    """Copies of tensors kept off their device: files of one temporary directory (CPU tensors) or
    host memory (other devices), removed as the copies are freed (NOTE [Copies kept off the device])."""

    def __init__(self, prefix: str = "remat-kept-") -> None:
        self.directory = tempfile.TemporaryDirectory(prefix=prefix)
        self.count = 0
        self.nbytes = 0  # bytes copied off the device so far (bytes)

    def _keep_bytes(self, data: torch.Tensor) -> _Copy:
        """A copy of ``data`` (uint8, contiguous, on its device) off the device."""
        nbytes = data.numel()
        self.nbytes += nbytes
        if data.device.type == "cpu":
            path = None
            if nbytes:
                self.count += 1
                path = os.path.join(self.directory.name, f"{self.count}.bin")
                _write(path, data)
            return _Copy(data.device, nbytes, path, None, self.directory)
        host = torch.empty(nbytes, dtype=torch.uint8)
        host.copy_(data)
        return _Copy(data.device, nbytes, None, host)

    def put(self, t: torch.Tensor) -> Kept:
        """A copy of ``t``'s values off its device."""
        shape, t = tuple(t.shape), t.detach().resolve_conj().resolve_neg()  # the values, not a lazy view
        if not _movable(t):
            return Kept(t.dtype, shape, None, t.clone())
        return Kept(t.dtype, shape, self._keep_bytes(t.contiguous().reshape(-1).view(torch.uint8)))


class _Hooks(OffDevice):
    """The pack and unpack of one :func:`saved_off_device` block."""

    def __init__(self, keep: set[StorageWeakRef]) -> None:
        super().__init__(prefix="remat-saved-")
        self.keep = keep
        self.copies: weakref.WeakValueDictionary = weakref.WeakValueDictionary()

    @property
    def saved_bytes(self) -> int:
        """Bytes copied off the device so far (bytes)."""
        return self.nbytes

    def pack(self, t: torch.Tensor) -> Any:
        key = storage_key(t) if _movable(t) else None
        if key is None or key in self.keep:
            return t.detach()  # detached: a saved output must not hold its own grad_fn (a cycle)
        version = t._version
        copy = self.copies.get((key, version))
        if copy is None:
            copy = self._keep_bytes(_bytes(t.untyped_storage()))
            self.copies[(key, version)] = copy
        return _Packed(copy, t.dtype, tuple(t.shape), t.stride(), t.storage_offset(), version, weakref.ref(t))

    @staticmethod
    def unpack(packed: Any) -> torch.Tensor:
        if isinstance(packed, torch.Tensor):
            return packed
        origin = packed.origin()
        if origin is not None and origin._version != packed.version:
            raise RuntimeError(
                "one of the variables needed for gradient computation has been modified by an inplace operation:"
                f" [{origin.type()} {list(origin.shape)}] is at version {origin._version}; expected version"
                f" {packed.version} instead (remat.measure.offload, as autograd checks it without the hooks)"
            )
        storage = packed.copy.storage()
        out = torch.empty(0, dtype=packed.dtype, device=storage.device)
        return out.set_(storage, packed.offset, packed.size, packed.stride)


@contextlib.contextmanager
def saved_off_device(keep: Iterable[StorageWeakRef] = ()) -> Iterator[_Hooks]:
    """Inside the block, every tensor autograd saves for a backward is kept off its device until
    the backward reads it, and restored bit for bit (NOTE [Saved tensors off the device, bit for
    bit]): CPU tensors in files of a temporary directory, CUDA tensors in host memory. ``keep``:
    storage keys (:func:`~remat.measure.memory.storage_key`, e.g. :func:`existing_storages`) left
    where they are. The graph should be run backward (or freed) inside the block; one that outlives
    it still works, its files removed as its saved tensors are freed. Yields the hooks
    (``saved_bytes``: bytes copied off the device so far)."""
    hooks = _Hooks(set(keep))
    with torch.autograd.graph.saved_tensors_hooks(hooks.pack, hooks.unpack):
        yield hooks


__all__ = ["PIECE_BYTES", "Kept", "OffDevice", "existing_storages", "saved_off_device"]
