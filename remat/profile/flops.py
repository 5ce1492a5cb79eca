"""Stage times without running the stage at full size: FLOPs (counted, also on meta tensors) divided by
a rate (FLOP per millisecond) measured on this machine for the same kind of stage at a small batch.

Used to profile a model that cannot be computed here (a 1,000-layer ResNet at batch 32 needs tens
of GB and hours of CPU time per step) on the meta device: :func:`remat.profile.chain.profile_chain`
measures its sizes exactly there and takes its times from a :class:`FlopTimeEstimate`.

* :func:`stage_flops`: FLOPs of a stage's recording forward and of its backward, counted by
  ``torch.utils.flop_counter.FlopCounterMode`` (convolutions, matmuls; BatchNorm, ReLU, pooling
  and additions count 0 there and ride along in the rate).
* :func:`measure_rates`: per *kind* of stage (stages of one kind have the same shapes and cost),
  FLOP/ms of the forward and of the backward, from a small model containing every kind, timed
  with :func:`remat.profile.chain.time_chain` (stages timed in sequence, each recording forward
  followed by its backward: the profiler's own method) at a small batch.
* :class:`FlopTimeEstimate`: the ``stage_times`` callable: ``FLOPs / rate`` of the stage's kind.

Since FLOPs are linear in the batch, this equals "block time measured at batch b, times B/b";
counting FLOPs makes the scaling explicit and lets kinds be matched by name. Units: FLOPs,
milliseconds, FLOP/ms.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from remat.measure.state import StepState
from remat.profile.chain import time_chain
from remat.trace import boundary
from remat.trace.boundary import Boundary, each, ones_like, requires_grad
from remat.trace.chain import as_chain


def stage_flops(stage: nn.Module, x: Boundary) -> tuple[int, int]:
    """(forward FLOPs, backward FLOPs) of ``stage`` on input ``x`` (any device, meta included; one
    tensor or a tuple of them, remat.trace.boundary).

    The forward is a recording one on a leaf that requires grad, so the backward includes the
    input gradient, as in a training step. Buffers (BatchNorm statistics) are restored."""
    state = StepState(stage, grads="same")
    try:
        leaf = each(lambda t: t.detach().requires_grad_(t.is_floating_point()), x)
        with FlopCounterMode(display=False) as forward_counter, torch.enable_grad():
            out = stage(leaf)
        backward = 0
        if requires_grad(out):
            with FlopCounterMode(display=False) as backward_counter:
                boundary.backward(out, ones_like(out))
            backward = backward_counter.get_total_flops()
        return int(forward_counter.get_total_flops()), int(backward)
    finally:
        state.restore()


@dataclass(frozen=True)
class KindRate:
    """Measured rate of one kind of stage: FLOP per millisecond, forward and backward, and what it came from."""

    forward_flop_per_ms: float
    backward_flop_per_ms: float
    forward_ms: float
    backward_ms: float
    forward_flops: int
    backward_flops: int
    stages: int

    def to_dict(self) -> dict[str, float | int]:
        return {
            "forward_flop_per_ms": self.forward_flop_per_ms,
            "backward_flop_per_ms": self.backward_flop_per_ms,
            "measured_forward_ms": self.forward_ms,
            "measured_backward_ms": self.backward_ms,
            "forward_flops": self.forward_flops,
            "backward_flops": self.backward_flops,
            "stages_averaged": self.stages,
        }


def measure_rates(
    model: nn.Module, kinds: Sequence[str], example_input: torch.Tensor, repeats: int = 3
) -> dict[str, KindRate]:
    """FLOP/ms per kind of stage of ``model`` (a real model, small batch, on a real device).

    ``kinds[i]`` labels chain stage i. Stage times come from :func:`time_chain` (fastest of
    ``repeats`` whole-chain passes, after one warm-up step of the small model); stages of one kind are pooled
    (total FLOPs / total time)."""
    chain = as_chain(model)
    if len(kinds) != len(chain):
        raise ValueError(f"kinds: {len(kinds)} labels for {len(chain)} stages")
    state = StepState(chain, grads="same")
    try:
        with torch.no_grad():  # FLOPs per stage, on each stage's real input
            inputs = []
            x = example_input
            for stage in chain.stages:
                inputs.append(x)
                x = stage(x)
        flops = [stage_flops(stage, inp) for stage, inp in zip(chain.stages, inputs, strict=True)]
        out = chain(example_input)  # warm-up step
        out.backward(torch.ones_like(out))
        del out
        forward_ms, backward_ms = time_chain(chain, example_input, repeats)
    finally:
        state.restore()
    pooled: dict[str, list[tuple[int, int, float, float]]] = {}
    for kind, (ff, bf), fm, bm in zip(kinds, flops, forward_ms, backward_ms, strict=True):
        pooled.setdefault(kind, []).append((ff, bf, fm, bm))
    rates = {}
    for kind, rows in pooled.items():
        ff = sum(r[0] for r in rows)
        bf = sum(r[1] for r in rows)
        fm = sum(r[2] for r in rows)
        bm = sum(r[3] for r in rows)
        rates[kind] = KindRate(
            forward_flop_per_ms=ff / fm if fm > 0 else float("inf"),
            backward_flop_per_ms=bf / bm if bm > 0 else float("inf"),
            forward_ms=statistics.fmean(r[2] for r in rows),
            backward_ms=statistics.fmean(r[3] for r in rows),
            forward_flops=ff // len(rows),
            backward_flops=bf // len(rows),
            stages=len(rows),
        )
    return rates


@dataclass
class FlopTimeEstimate:
    """``stage_times`` for :func:`~remat.profile.chain.profile_chain`: stage i takes
    ``FLOPs / rate[kinds[i]]`` milliseconds (forward and backward separately).

    ``flops`` records every stage's counted (forward, backward) FLOPs as it is called. Stages of one
    kind on inputs of one shape are counted once (they are the same computation)."""

    rates: dict[str, KindRate]
    kinds: Sequence[str]
    flops: list[tuple[int, int]] = field(default_factory=list)
    _counted: dict[tuple, tuple[int, int]] = field(default_factory=dict, repr=False)

    def __call__(self, index: int, name: str, stage: nn.Module, x: torch.Tensor) -> tuple[float, float]:
        kind = self.kinds[index]
        if kind not in self.rates:
            raise KeyError(f"stage {index} ('{name}'): no measured rate for kind '{kind}'")
        rate = self.rates[kind]
        key = (kind, tuple(x.shape), x.dtype)
        if key not in self._counted:
            self._counted[key] = stage_flops(stage, x)
        forward, backward = self._counted[key]
        self.flops.append((forward, backward))
        # a kind with no FLOPs counted (no conv/matmul) has an infinite rate: estimated as 0 ms
        return forward / rate.forward_flop_per_ms, backward / rate.backward_flop_per_ms


__all__ = ["FlopTimeEstimate", "KindRate", "measure_rates", "stage_flops"]
