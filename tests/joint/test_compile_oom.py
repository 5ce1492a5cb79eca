"""remat.compile names out of memory as such: one line (phase, bytes, budget), never std::bad_alloc."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import remat
from remat.joint.compile import RematCompiled
from remat.measure.oom import OutOfMemory

HUGE = 2**60  # bytes no allocator serves


def _no_memory(*_args, **_kwargs):
    return torch.empty(HUGE, dtype=torch.uint8)  # the allocator refuses, as a device that is full does


@pytest.mark.slow
def test_an_allocation_failure_in_the_first_call_or_a_step_is_one_line(monkeypatch):
    compiled = remat.compile(nn.Linear(4, 4).train(), budget=1 << 20)
    monkeypatch.setattr(RematCompiled, "_first_call", _no_memory)
    with pytest.raises(OutOfMemory) as info:
        compiled(torch.randn(2, 4))
    message = str(info.value)
    assert "\n" not in message and message.startswith("out of memory while remat.compile's first call"), message
    assert f"{HUGE} bytes" in message and "budget 1048576 bytes" in message, message
    monkeypatch.setattr(RematCompiled, "_run", _no_memory)
    compiled._calls[("seen",)] = None  # a signature already compiled: its step runs
    monkeypatch.setattr("remat.joint.compile.input_signature", lambda args, kwargs: ("seen",))
    with pytest.raises(OutOfMemory, match="while a compiled training step's forward .* budget 1048576 bytes"):
        compiled(torch.randn(2, 4))
    fraction = remat.compile(nn.Linear(4, 4).train(), budget=0.5)
    with pytest.raises(OutOfMemory, match=r"budget 0\.5 of the store-all peak\)"):
        fraction(torch.randn(2, 4))
