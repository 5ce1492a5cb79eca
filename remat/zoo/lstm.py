"""An LSTM unrolled over T time steps, as a chain: one stage per time step (or per block of steps).

Every stage runs the same ``nn.LSTMCell`` (shared weights) on its slice of the input sequence.
The chain's activation a_t is the recurrent state packed as one tensor, ``cat(h_t, c_t)``
(N x 2H), so a_0 is the initial state (with a gradient, as the chain model wants) and a_T the
final one; the input sequence (T x N x I) is data held by the stages as buffers, like parameters
outside the activation budget. :func:`unrolled_loop` is the plain loop the chain must equal.

The stages are identical, so a T-step profile is one measured stage repeated T times:
:func:`repeated_profile` profiles a few real stages and checks that their sizes agree.
"""

from __future__ import annotations

import dataclasses
import statistics

import torch
from torch import nn

from remat.profile.chain import profile_chain
from remat.schedules import ChainProfile, RematError
from remat.trace.chain import Chain

INPUT_SHAPES = {"lstm": (16, 256), "lstm_small": (4, 32)}


class LSTMSteps(nn.Module):
    """``len(inputs)`` steps of ``cell`` on the packed state ``cat(h, c)``."""

    def __init__(self, cell: nn.LSTMCell, inputs: torch.Tensor) -> None:
        super().__init__()
        self.cell = cell
        self.register_buffer("inputs", inputs, persistent=False)

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        h, c = state.chunk(2, dim=1)
        for x in self.inputs:
            h, c = self.cell(x, (h, c))
        return torch.cat([h, c], dim=1)


class UnrolledLSTM(nn.Module):
    """``steps`` time steps of one LSTMCell, cut into stages of ``steps_per_stage`` steps."""

    def __init__(
        self, steps: int, batch: int, input_size: int, hidden: int, steps_per_stage: int = 1, seed: int = 0
    ) -> None:
        super().__init__()
        if steps < 1 or steps_per_stage < 1 or steps % steps_per_stage:
            raise RematError(
                f"lstm: steps ({steps}) must be a positive multiple of steps_per_stage ({steps_per_stage})"
            )
        generator = torch.Generator().manual_seed(seed)
        self.cell = nn.LSTMCell(input_size, hidden)
        with torch.no_grad():  # reproducible weights and data from the seed alone
            for p in self.cell.parameters():
                p.copy_(torch.rand(p.shape, generator=generator) * 0.2 - 0.1)
        self.register_buffer("sequence", torch.randn(steps, batch, input_size, generator=generator), persistent=False)
        self.steps = nn.ModuleList(
            LSTMSteps(self.cell, self.sequence[t : t + steps_per_stage]) for t in range(0, steps, steps_per_stage)
        )
        self.steps_per_stage = steps_per_stage

    def remat_stages(self) -> list[tuple[str, nn.Module]]:
        return [(f"t{i * self.steps_per_stage}", stage) for i, stage in enumerate(self.steps)]

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        for stage in self.steps:
            state = stage(state)
        return state


def unrolled_loop(model: UnrolledLSTM, state: torch.Tensor) -> torch.Tensor:
    """The plain LSTM loop over the whole sequence, no stages: what the chain must compute."""
    h, c = state.chunk(2, dim=1)
    for x in model.sequence:
        h, c = model.cell(x, (h, c))
    return torch.cat([h, c], dim=1)


def lstm(steps: int = 1000, batch: int = 16, input_size: int = 64, hidden: int = 128, steps_per_stage: int = 1):
    """T = ``steps``; input shape (batch, 2 x hidden): the initial state."""
    return UnrolledLSTM(steps, batch, input_size, hidden, steps_per_stage)


def lstm_small(steps: int = 60, batch: int = 4, input_size: int = 8, hidden: int = 16, steps_per_stage: int = 1):
    """A test-size LSTM (T = 60, hidden 16); input shape (4, 32)."""
    return UnrolledLSTM(steps, batch, input_size, hidden, steps_per_stage)


def repeated_profile(model: UnrolledLSTM, state: torch.Tensor, sample: int = 6, repeats: int = 5) -> ChainProfile:
    """The chain profile of all of ``model``'s identical stages from ``sample`` of them profiled for real.

    Profiles the first ``sample`` stages with :func:`remat.profile.chain.profile_chain`, checks
    that their sizes are equal (they must be: same cell, same shapes), and repeats the stage with
    the median times. Bytes, milliseconds."""
    stages = model.remat_stages()
    part = profile_chain(Chain(stages[: min(sample, len(stages))]), state, repeats=repeats)
    # the sample's last stage is measured as a chain's last (its backward releases nothing early:
    # remat.profile.stage.record_and_backward_memory); it sizes the whole chain's last stage
    inner = part.stages[:-1] or part.stages
    sizes = {(s.output_size, s.saved_size, s.forward_overhead, s.backward_overhead) for s in inner}
    if len(sizes) != 1:
        raise RematError(f"lstm: the sampled stages differ in size: {sorted(sizes)}")
    forward_ms = statistics.median(s.forward_ms for s in part.stages)
    backward_ms = statistics.median(s.backward_ms for s in part.stages)
    median = dataclasses.replace(part.stages[0], forward_ms=forward_ms, backward_ms=backward_ms)
    last = dataclasses.replace(part.stages[-1], forward_ms=forward_ms, backward_ms=backward_ms)
    metadata = dict(part.metadata)
    metadata.pop("forward_overheads_nograd", None)
    metadata.update(
        steps=len(stages) * model.steps_per_stage,
        steps_per_stage=model.steps_per_stage,
        profiled_stages=len(part.stages),
        note="one stage profiled and repeated: every stage runs the same LSTMCell on inputs of one shape",
    )
    return ChainProfile(
        name=f"lstm-T{len(stages) * model.steps_per_stage}-k{model.steps_per_stage}",
        input_size=part.input_size,
        stages=tuple(
            dataclasses.replace(last if k == len(stages) - 1 else median, name=name)
            for k, (name, _) in enumerate(stages)
        ),
        metadata=metadata,
    )


__all__ = ["INPUT_SHAPES", "LSTMSteps", "UnrolledLSTM", "lstm", "lstm_small", "repeated_profile", "unrolled_loop"]
