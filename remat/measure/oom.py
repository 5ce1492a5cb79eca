"""Whether an exception is the allocator running out of memory (docs/executor.md, "Measurement").

An allocation failure reaches remat in several forms: Python's ``MemoryError``, torch's
``OutOfMemoryError`` (CUDA), and a ``RuntimeError`` from c10's CPU allocator ("can't allocate
memory", ``DefaultCPUAllocator``) or from C++ (``std::bad_alloc``); TorchDynamo wraps any of them
in its own exception types, so the cause chain is read too. Such an error is a memory failure,
never a model that cannot be traced or run, and is reported as such.
"""

from __future__ import annotations

import torch

_TEXTS = ("can't allocate memory", "out of memory", "defaultcpuallocator", "std::bad_alloc")


def is_out_of_memory(error: BaseException) -> bool:
    """True when ``error``, or an exception it was raised from (``__cause__``/``__context__``), is
    an allocation failure: ``MemoryError``, ``torch.OutOfMemoryError``, or a ``RuntimeError`` whose
    text names the allocator failing."""
    seen: set[int] = set()
    stack: list[BaseException | None] = [error]
    while stack:
        current = stack.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, (MemoryError, torch.OutOfMemoryError)):
            return True
        if isinstance(current, RuntimeError) and any(text in str(current).lower() for text in _TEXTS):
            return True
        # dynamo's BackendCompilerFailed keeps the original as inner_exception
        inner = getattr(current, "inner_exception", None)
        stack += [current.__cause__, current.__context__, inner if isinstance(inner, BaseException) else None]
    return False


__all__ = ["is_out_of_memory"]
