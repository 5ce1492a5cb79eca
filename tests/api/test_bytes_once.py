"""Every byte counted once (issue 42, item 3): what the step does not allocate (the call's other
inputs, parameters, buffers, and views of them) costs nothing in the chain model, whether a stage
saves it, hands it on or reads it as a side value; the prediction then meets the allocator."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import remat

TOLERANCE = 0.02  # the promise: predicted within 2% of the allocator


def _within(wrapped: nn.Module) -> tuple[int, int]:
    """(predicted, measured) peak bytes of the wrapped model's step on its example, asserted within 2%."""
    report = wrapped.report(steps=1, warmup=1)
    predicted, measured = report.predicted_peak, report.measured_peak
    assert abs(predicted - measured) <= TOLERANCE * measured, report.table()
    return predicted, measured


class Scaled(nn.Module):
    """Four Linear+Tanh blocks on ``x``, the last output multiplied by a second input ``y``:
    autograd saves ``y`` for the product's backward, in the chain's last stage, whose own input is
    the hidden state."""

    def __init__(self, width: int = 64) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(4))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return (x * y).mean()


@pytest.mark.slow
def test_a_second_input_a_later_stage_saves_is_not_new_memory():
    torch.manual_seed(0)
    x, y = torch.randn(32, 64), torch.randn(32, 64)
    wrapped = remat.checkpoint(Scaled().train(), (x, y), budget=1.0, repeats=1, warmup=0)
    _within(wrapped)
    # the last stage saves its tanh output and y: only the former (and the scalar loss) is new
    assert wrapped.profile.stages[-1].saved_size < x.numel() * x.element_size() + y.element_size() * y.numel()


class PositionalEncoding(nn.Module):
    """The PyTorch tutorial's sin-cos table, a registered buffer sliced to the sequence's length."""

    def __init__(self, width: int, max_len: int = 512) -> None:
        super().__init__()
        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, width, 2) * (-math.log(10000.0) / width))
        pe = torch.zeros(max_len, 1, width)
        pe[:, 0, 0::2] = torch.sin(position * div_term)
        pe[:, 0, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (sequence, batch, width)
        return self.dropout(x + self.pe[: x.size(0)])


class Encoded(nn.Module):
    def __init__(self, width: int = 32) -> None:
        super().__init__()
        self.pos = PositionalEncoding(width)
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pos(x)
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x.mean()


@pytest.mark.slow
def test_a_view_of_a_buffer_read_as_a_side_value_costs_nothing():
    torch.manual_seed(0)
    model = Encoded().train()
    wrapped = remat.checkpoint(model, torch.randn(64, 8, 32), budget=1.0, repeats=1, warmup=0)
    _within(wrapped)
    assert wrapped.plan_for(torch.randn(64, 8, 32)).side_bytes == 0  # pe[:64] is the buffer's storage


class CellLoop(nn.Module):
    """One shared ``nn.LSTMCell`` over the sequence in a Python loop (benchmarks/does_not_fit.py's
    LSTM row, small): every time step is a stage, which saves its slice ``x[t]`` of the input."""

    def __init__(self, features: int = 16, hidden: int = 64) -> None:
        super().__init__()
        self.hidden = hidden
        self.cell = nn.LSTMCell(features, hidden)
        self.head = nn.Linear(hidden, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (time, batch, features)
        h = torch.zeros(x.shape[1], self.hidden, dtype=x.dtype)
        c = torch.zeros(x.shape[1], self.hidden, dtype=x.dtype)
        for t in range(x.shape[0]):
            h, c = self.cell(x[t], (h, c))
        return self.head(h).mean()


@pytest.mark.slow
def test_slices_of_the_input_a_recurrent_loop_saves_are_not_new_memory():
    torch.manual_seed(0)
    model, x = CellLoop().train(), torch.randn(16, 16, 16)
    # below store-all (a fraction of what it measures): some steps recomputed from checkpoints
    wrapped = remat.checkpoint(model, x, budget=0.6, repeats=1, warmup=0)
    assert len(wrapped.profile.stages) >= 16  # cut per time step
    assert any(op[0] != "F_all" and op[0] != "B" for op in wrapped.schedule.ops)
    _within(wrapped)
    # every time step saves what the first does (which reads x as its own input): none counts
    # its slice x[t]; the one that hands x[15] on to the head's stage counts that slice's gradient
    # (its elements), not the sequence it views
    steps, step = wrapped.profile.stages[:-1], x[0].numel() * x.element_size()
    assert {s.saved_size for s in steps} == {steps[0].saved_size}
    assert all(s.output_size <= steps[0].output_size + step for s in steps)
