"""The trace and the fuse pass of a first call hold no more than one stage's activations
(NOTE [A trace runs nothing], remat/trace/capture.py; NOTE [The fuse pass holds one stage],
remat/trace/fuse.py): both are measured by the allocator against the plain step on the same model."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from remat.measure.allocator import AllocatorMeter
from remat.measure.oom import is_out_of_memory
from remat.schedules import RematError
from remat.trace.capture import TrainingStep, trace
from remat.trace.cut import cut_step
from remat.trace.fuse import fuse_unsaved_handoffs, unsaved_handoffs


def _deep_mlp(depth: int = 16, width: int = 256) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.Tanh()) for _ in range(depth)])


def _plain_peak(model: nn.Module, x: torch.Tensor) -> int:
    """The allocator peak of the plain recording step (forward and backward), in bytes."""
    with AllocatorMeter("cpu") as meter:
        model(x).sum().backward()
    model.zero_grad(set_to_none=True)
    return meter.peak_bytes


@pytest.mark.slow
def test_the_trace_allocates_no_activations():
    model, x = _deep_mlp(), torch.randn(512, 256)  # 512 KiB per activation, 32 of them
    plain = _plain_peak(model, x)
    with AllocatorMeter("cpu") as meter:
        gm, _, _ = trace(TrainingStep(model), (x,), {}, None)
    assert sum(n.op == "call_module" or n.op == "call_function" for n in gm.graph.nodes) >= 32
    # before: the kept graph ran on the real input, a whole recording forward (~ the plain step)
    assert meter.peak_bytes < plain / 4, (meter.peak_bytes, plain)


@pytest.mark.slow
def test_the_fuse_pass_holds_one_stage_at_a_time_and_keeps_nothing():
    model, x = _deep_mlp(), torch.randn(512, 256)
    plain = _plain_peak(model, x)
    step = TrainingStep(model)
    chain = cut_step(step, (x,), {})
    assert len(chain) >= 16
    with AllocatorMeter("cpu") as meter:
        fused = unsaved_handoffs(chain, chain.bind(x))
    # a Linear's output is saved by neither it nor the Tanh (which saves its own output); a Tanh's
    # output is saved by both it and the next Linear
    assert chain.names[:2] == ["0.0", "0.1"]
    assert fused == list(range(0, len(chain) - 1, 2))
    # before: every stage's graph stayed alive through the pass (the store-all forward), and after
    # it (a reference cycle through each tanh's saved output)
    assert meter.peak_bytes < plain / 4, (meter.peak_bytes, plain)
    assert meter.final_bytes < plain / 16, (meter.final_bytes, plain)


class _Head(nn.Module):
    """A linear head feeding a cross-entropy: the logits are saved by neither side."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh())
        self.head = nn.Linear(16, 40)

    def forward(self, x, labels):
        return nn.functional.cross_entropy(self.head(self.body(x)), labels)


def test_the_fuse_pass_still_fuses_an_unsaved_handoff():
    torch.manual_seed(0)
    model, x, labels = _Head(), torch.randn(8, 16), torch.randint(0, 40, (8,))
    chain = cut_step(TrainingStep(model), (x, labels), {})
    fused = fuse_unsaved_handoffs(chain, (x, labels), {})
    assert any("head" in name and "+" in name for name in fused.names), fused.names
    assert len(fused) < len(chain)


def test_out_of_memory_is_told_apart_from_other_errors():
    assert is_out_of_memory(MemoryError())
    assert is_out_of_memory(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert is_out_of_memory(RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: no room"))
    assert is_out_of_memory(RuntimeError("you tried to allocate 134217728 bytes: can't allocate memory"))
    assert is_out_of_memory(RuntimeError("std::bad_alloc"))
    try:  # wrapped, as dynamo re-raises a backend's or a traced call's error
        try:
            raise MemoryError
        except MemoryError as inner:
            raise RuntimeError("backend compiler failed") from inner
    except RuntimeError as outer:
        assert is_out_of_memory(outer)
    assert not is_out_of_memory(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))
    assert not is_out_of_memory(ValueError("out of range"))


class _Starved(nn.Module):
    """A model whose forward fails as the allocator does when it runs out of memory."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x):
        if x.shape[0] > 0:
            raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory")
        return self.linear(x)


def test_an_allocation_failure_in_the_trace_is_not_called_a_tracing_failure():
    with pytest.raises(RuntimeError, match="can't allocate memory") as raised:
        trace(TrainingStep(_Starved()), (torch.randn(2, 4),), {}, None)
    assert not isinstance(raised.value, RematError)
    assert "TorchDynamo cannot trace" not in str(raised.value)
