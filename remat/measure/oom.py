"""Out of memory, named as such: an allocation failure as one line naming the phase, the bytes
asked for, the budget and what to do (docs/models.md, "The first call's memory").

An allocator that cannot serve a request raises ``torch.OutOfMemoryError`` (CUDA: "CUDA out of
memory. Tried to allocate 2.00 GiB ..."), a ``RuntimeError`` (CPU: "DefaultCPUAllocator: can't
allocate memory: you tried to allocate 134217728 bytes") or ``MemoryError`` ("std::bad_alloc",
from C++ code). Code between the allocator and the user often turns it into another error (a
tracer's "cannot trace", a one-line model error): :func:`is_out_of_memory` and
:func:`requested_bytes` read the whole chain of causes, so the failure is still named for what it is.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping

import torch

from remat.schedules import RematError, format_size

_PHRASES = ("can't allocate memory", "out of memory", "std::bad_alloc", "not enough memory", "defaultcpuallocator")
_CPU_BYTES = re.compile(r"tried to allocate (\d+) bytes", re.IGNORECASE)
_CUDA_SIZE = re.compile(r"tried to allocate ([\d.]+) ?(bytes|B|KiB|MiB|GiB|TiB)\b", re.IGNORECASE)
_UNITS = {"bytes": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}


class OutOfMemory(RematError):  # noqa: N818 - named for what the user reads, as RematError is
    """An allocation failed while remat ran a phase: one line (phase, bytes asked for, budget, what to do)."""

    def __init__(self, message: str, phase: str, requested: int | None, budget: int | None) -> None:
        super().__init__(message)
        self.phase = phase
        self.requested = requested
        self.budget = budget


def _chain(error: BaseException | None) -> Iterator[BaseException]:
    """``error``, then every exception it was raised from or while handling (``__cause__``,
    ``__context__``, and dynamo's ``inner_exception`` of ``BackendCompilerFailed``), each once."""
    seen: set[int] = set()
    stack: list[BaseException | None] = [error]
    while stack:
        current = stack.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        inner = getattr(current, "inner_exception", None)
        stack += [inner if isinstance(inner, BaseException) else None, current.__context__, current.__cause__]


def _says_out_of_memory(error: BaseException) -> bool:
    if isinstance(error, (MemoryError, torch.OutOfMemoryError)):
        return True
    if not isinstance(error, RuntimeError):
        return False
    text = str(error).lower()
    return any(phrase in text for phrase in _PHRASES)


def is_out_of_memory(error: BaseException) -> bool:
    """True when ``error`` is an allocation failure, or was raised while handling one (its
    ``__cause__``/``__context__`` chain holds ``MemoryError``, ``torch.OutOfMemoryError`` or a
    ``RuntimeError`` saying "can't allocate memory", "out of memory", "std::bad_alloc" or naming
    ``DefaultCPUAllocator``)."""
    return any(_says_out_of_memory(e) for e in _chain(error))


def requested_bytes(error: BaseException) -> int | None:
    """Bytes the failed allocation asked for, read off the allocator's message anywhere in
    ``error``'s chain (CPU: "you tried to allocate 134217728 bytes"; CUDA: "Tried to allocate
    2.00 GiB", rounded as torch printed it); None when no message says."""
    for e in _chain(error):
        text = str(e)
        found = _CPU_BYTES.search(text)
        if found:
            return int(found.group(1))
        found = _CUDA_SIZE.search(text)
        if found:
            return round(float(found.group(1)) * _UNITS[found.group(2).lower()])
    return None


def _budget_text(budget: int | str | None) -> str:
    if budget is None:
        return "budget not yet known"
    if isinstance(budget, str):
        return f"budget {budget}"
    return f"budget {budget} bytes = {format_size(budget)}"


def _advice(requested: int | None, budget: int | str | None) -> str:
    """What to do, from the numbers: one tensor above the budget no schedule avoids; else the
    device has less free than the budget asks, beside what the model holds."""
    if requested is not None and isinstance(budget, int) and requested > budget:
        return "one tensor of that size is above the budget itself, so no schedule avoids it: use a smaller input"
    return (
        "the device has less memory free than this needs beside the parameters, gradients and optimizer state:"
        " free memory (other tensors, other processes), or pass a smaller budget or a smaller batch"
    )


def out_of_memory(error: BaseException, phase: str, budget: int | str | None, hint: str | None = None) -> OutOfMemory:
    """The one-line :class:`OutOfMemory` for ``error`` (an allocation failure) raised while ``phase``."""
    asked = requested_bytes(error)
    what = "the allocator refused a request" if asked is None else f"{asked} bytes = {format_size(asked)} asked for"
    budget_bytes = budget if isinstance(budget, int) else None
    message = f"out of memory while {phase} ({what}; {_budget_text(budget)}): {hint or _advice(asked, budget)}"
    return OutOfMemory(message, phase, asked, budget_bytes)


def _innermost(error: BaseException, parts: Mapping[str, str]) -> str | None:
    """The part (``parts``: function name -> what it does) innermost on ``error``'s tracebacks."""
    found = None
    for e in _chain(error):
        tb = e.__traceback__
        while tb is not None:
            found = parts.get(tb.tb_frame.f_code.co_name, found)
            tb = tb.tb_next
    return found


@contextlib.contextmanager
def memory_phase(
    phase: str, budget: int | str | None, hint: str | None = None, parts: Mapping[str, str] | None = None
) -> Iterator[None]:
    """Inside: an allocation failure (anywhere in an error's chain, :func:`is_out_of_memory`)
    leaves as one :class:`OutOfMemory` line: ``out of memory while <phase> (<bytes> asked for;
    budget <bytes> = <size>): <what to do>`` (``hint``, else advice from the numbers). ``budget``:
    bytes, a text for a budget not yet in bytes ("40% of the store-all peak"), or None.
    ``parts``: function name -> the part of the phase it is; the one innermost on the failure's
    traceback is named after the phase ("proving the cut, checking each stage's forward kinds"). An
    :class:`OutOfMemory` of an inner phase passes unchanged; any other error too. The failure's
    traceback (and the tensors its frames hold) is dropped: only the line is kept."""
    try:
        yield
    except OutOfMemory:
        raise
    except Exception as error:  # noqa: BLE001 - only allocation failures are turned into the line
        if not is_out_of_memory(error):
            raise
        part = _innermost(error, parts) if parts else None
        failure = out_of_memory(error, phase if part is None else f"{phase}, {part}", budget, hint)
        for e in _chain(error):  # the failed frames (and the tensors they hold) go now
            e.__traceback__ = None
        raise failure from None


__all__ = ["OutOfMemory", "is_out_of_memory", "memory_phase", "out_of_memory", "requested_bytes"]
