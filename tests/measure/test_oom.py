"""Out of memory named as such (remat/measure/oom.py): the allocator's failures, the bytes they
asked for, and the one line a phase turns them into."""

from __future__ import annotations

import pytest
import torch

from remat.measure.oom import OutOfMemory, is_out_of_memory, memory_phase, requested_bytes
from remat.schedules import RematError

HUGE = 2**60  # bytes no allocator serves


def _cpu_failure() -> RuntimeError:
    try:
        torch.empty(HUGE, dtype=torch.uint8)
    except RuntimeError as error:
        return error
    raise AssertionError("the allocator served 1 EiB")


def test_the_allocators_failures_are_out_of_memory_and_say_what_they_asked_for():
    error = _cpu_failure()
    assert is_out_of_memory(error) and requested_bytes(error) == HUGE
    assert is_out_of_memory(MemoryError("std::bad_alloc"))
    assert is_out_of_memory(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0)"))
    assert requested_bytes(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0)")) == 2 << 30
    assert requested_bytes(RuntimeError("CUDA out of memory. Tried to allocate 20.50 MiB")) == round(20.5 * 2**20)
    assert not is_out_of_memory(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))
    assert requested_bytes(MemoryError("std::bad_alloc")) is None


def test_a_failure_wrapped_by_other_code_is_still_out_of_memory():
    """A tracer's "cannot trace" raised while handling the allocator's failure (its context)."""
    try:
        try:
            torch.empty(HUGE, dtype=torch.uint8)
        except RuntimeError:
            raise RematError("model: TorchDynamo cannot trace M as one graph (...)") from None
    except RematError as wrapped:
        assert is_out_of_memory(wrapped) and requested_bytes(wrapped) == HUGE
    try:
        try:
            raise ValueError("not memory")
        except ValueError as inner:
            raise RematError("model: something else") from inner
    except RematError as other:
        assert not is_out_of_memory(other)


def test_a_phase_turns_a_failed_allocation_into_one_line_naming_phase_bytes_budget():
    budget = 3 << 20
    with pytest.raises(OutOfMemory) as info:
        with memory_phase("profiling the cut stage by stage", budget):
            torch.empty(HUGE, dtype=torch.uint8)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("out of memory while profiling the cut stage by stage (")
    assert f"{HUGE} bytes" in message and f"budget {budget} bytes = 3.00 MiB" in message
    assert "no schedule avoids it" in message  # one tensor above the budget: what to do says so
    assert info.value.__suppress_context__ and info.value.__cause__ is None  # no traceback chained
    assert (info.value.requested, info.value.budget, info.value.phase) == (
        HUGE,
        budget,
        "profiling the cut stage by stage",
    )
    with (
        pytest.raises(OutOfMemory, match="budget 40% of the store-all peak"),
        memory_phase("tracing", "40% of the store-all peak"),
    ):
        raise MemoryError("std::bad_alloc")
    with pytest.raises(ValueError, match="not memory"), memory_phase("tracing", budget):
        raise ValueError("not memory")


def test_an_inner_phase_is_named_not_the_outer():
    with pytest.raises(OutOfMemory, match="while proving"), memory_phase("the first call", 1 << 20):
        with memory_phase("proving", 1 << 20):
            raise MemoryError("std::bad_alloc")


def _checking() -> None:
    torch.empty(HUGE, dtype=torch.uint8)


def test_the_innermost_part_of_a_phase_is_named():
    with pytest.raises(OutOfMemory, match=r"^out of memory while proving, checking the stages \("):
        with memory_phase("proving", 1 << 20, parts={"_checking": "checking the stages", "other": "x"}):
            _checking()
