"""The time of every node of a graph profile (milliseconds): estimated from FLOPs and bytes moved
at a stated rate, or measured on the device at the profiled shape, where the allocator's
transients of each node are read too (:class:`remat.measure.allocator.AllocatorMeter`)."""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx as fx
from torch import nn

from remat.graph.execution import ConstCache, cast_copy
from remat.graph.pieces import GraphPlan
from remat.graph.recording import RecordedPiece, backward_piece, forward_piece, summed_output_grads
from remat.measure.allocator import AllocatorMeter
from remat.measure.state import kept_rng
from remat.measure.timing import sync
from remat.schedules import ProfileError

DEFAULT_RATES = {
    # (FLOP/s, bytes/s) used by time_source="flops" when none are given: round numbers for a few
    # CPU cores and for a current datacenter GPU; pass flop_rate/bandwidth to override.
    "cpu": (5.0e10, 2.0e10),
    "cuda": (5.0e13, 2.0e12),
}


def flop_times(
    forward_cost: Sequence[tuple[float, int]],
    backward_cost: Sequence[tuple[float, int]],
    device: torch.device,
    flop_rate: float | None,
    bandwidth: float | None,
) -> tuple[list[float], list[float], dict[str, Any]]:
    """Milliseconds of each piece's forward and backward from its ``(flops, bytes moved)``:
    ``1000 * (flops / flop_rate + bytes / bandwidth)``, the rates defaulting to
    :data:`DEFAULT_RATES` of ``device``'s type; and the metadata that states them."""
    rate_default, bw_default = DEFAULT_RATES.get(device.type, DEFAULT_RATES["cpu"])
    rate = float(flop_rate) if flop_rate is not None else rate_default
    bw = float(bandwidth) if bandwidth is not None else bw_default
    if not (rate > 0 and bw > 0 and math.isfinite(rate) and math.isfinite(bw)):
        raise ProfileError("flop_rate, bandwidth: must be positive numbers")
    fwd_ms = [1e3 * (f / rate + b / bw) for f, b in forward_cost]
    bwd_ms = [1e3 * (f / rate + b / bw) for f, b in backward_cost]
    metadata = {
        "flop_rate": rate,
        "bandwidth": bw,
        "time_model": (
            "time_ms = 1000 * (flops / flop_rate + bytes_moved / bandwidth); flops from "
            "torch.utils.flop_counter on the meta device"
        ),
    }
    return fwd_ms, bwd_ms, metadata


def measure_times(
    plan: GraphPlan,
    model: nn.Module,
    inputs: tuple[torch.Tensor, ...],
    device: torch.device,
    dtype: torch.dtype,
    repeats: int,
) -> tuple[list[float], list[float], list[int], list[int]]:
    """Median milliseconds of each piece's recording forward and of its backward over ``repeats``
    rounds (empty lists when ``repeats`` is 0), measured on a deep copy of the model on ``device``
    (the model itself and the global RNG are untouched), and the transient bytes of each: what the
    allocator saw (:class:`remat.measure.allocator.AllocatorMeter`: kernel buffers included) at
    its peak during the piece minus what it held after it, from the first (warm-up) round."""
    gm = cast_copy(plan.graph_module, device, dtype, model.training)
    for p in gm.parameters():  # as in the replay's measurement: gradients are accumulated in place
        if p.requires_grad:
            p.grad = torch.zeros_like(p)
    with kept_rng():
        return _measure_forked(plan, gm, inputs, device, dtype, repeats)


def _measure_forked(
    plan: GraphPlan,
    gm: fx.GraphModule,
    inputs: tuple[torch.Tensor, ...],
    device: torch.device,
    dtype: torch.dtype,
    repeats: int,
) -> tuple[list[float], list[float], list[int], list[int]]:
    real_inputs = _real_inputs(plan, inputs, device, dtype)
    count = len(plan.pieces)
    fwd: list[list[float]] = [[] for _ in range(count)]
    bwd: list[list[float]] = [[] for _ in range(count)]
    transient_f, transient_b = [0] * count, [0] * count
    for round_ in range(repeats + 1):  # the first round warms up and is discarded
        meter = round_ == 0  # the transients come from the first round
        recorded, values, times_f = _forward_round(plan, gm, real_inputs, device, transient_f if meter else None)
        times_b = _backward_round(plan, gm, recorded, values, device, transient_b if meter else None)
        if round_ > 0:
            for p in range(count):
                fwd[p].append(times_f[p])
                bwd[p].append(times_b[p])
        del recorded, values
    fwd_ms = [statistics.median(t) for t in fwd] if repeats else []
    bwd_ms = [statistics.median(t) for t in bwd] if repeats else []
    return fwd_ms, bwd_ms, transient_f, transient_b


def _real_inputs(
    plan: GraphPlan, inputs: Sequence[torch.Tensor], device: torch.device, dtype: torch.dtype
) -> dict[str, torch.Tensor]:
    """The example inputs on ``device``, a meta one replaced by random floats (zeros if integer)."""
    real_inputs = {}
    for name, value in zip(plan.placeholders, inputs, strict=True):
        if value.device.type == "meta":
            value = torch.randn(value.shape, dtype=dtype) if value.is_floating_point() else torch.zeros(value.shape)
            value = value.to(value.dtype if not value.is_floating_point() else dtype)
        real_inputs[name] = value.to(device)
    return real_inputs


def _forward_round(
    plan: GraphPlan,
    gm: fx.GraphModule,
    real_inputs: dict[str, torch.Tensor],
    device: torch.device,
    transients: list[int] | None,
) -> tuple[list[RecordedPiece], dict[str, Any], list[float]]:
    """Every piece's recording forward, timed (ms); with ``transients``, each one metered too."""
    values: dict[str, Any] = dict(real_inputs)
    consts = ConstCache(plan.graph_module, gm, real_inputs)
    recorded = []
    times = [0.0] * len(plan.pieces)
    for p, piece in enumerate(plan.pieces):
        sync(device)
        start = time.perf_counter()
        meter = AllocatorMeter(device) if transients is not None else None
        with meter if meter is not None else contextlib.nullcontext():
            rec = forward_piece(gm, plan.graph_module, piece, values.__getitem__, consts, plan.grad_inputs[p])
            sync(device)
            times[p] = (time.perf_counter() - start) * 1e3
        if meter is not None:
            transients[p] = max(0, meter.peak_bytes - meter.final_bytes)
        recorded.append(rec)
        values.update(rec.outputs)
    return recorded, values, times


def _backward_round(
    plan: GraphPlan,
    gm: fx.GraphModule,
    recorded: list[RecordedPiece],
    values: dict[str, Any],
    device: torch.device,
    transients: list[int] | None,
) -> list[float]:
    """Every piece's backward in reverse order, timed (ms); with ``transients``, each one metered too."""
    params = dict(gm.named_parameters())
    grads_of: dict[int, dict[str, torch.Tensor]] = {}
    seed = torch.ones_like(values[plan.output_value])
    times = [0.0] * len(plan.pieces)
    for p in reversed(range(len(plan.pieces))):
        if plan.backward_node[p] is None:
            continue
        piece = plan.pieces[p]
        sync(device)
        start = time.perf_counter()
        meter = AllocatorMeter(device) if transients is not None else None
        with meter if meter is not None else contextlib.nullcontext():
            output_grads = summed_output_grads(piece, grads_of, plan.output_value, seed)
            grads_of[p] = backward_piece(
                piece,
                recorded[p],
                output_grads,
                [params[n] for n in piece.params if params[n].requires_grad],
                plan.grad_inputs[p],
            )
            del output_grads
            sync(device)
            times[p] = (time.perf_counter() - start) * 1e3
        if meter is not None:
            transients[p] = max(0, meter.peak_bytes - meter.final_bytes)
    return times


__all__ = ["DEFAULT_RATES", "flop_times", "measure_times"]
