"""Run training steps of a :class:`RematChain` and compare them with the simulator's prediction.

Measured peak activation memory uses the simulator's accounting (docs/model.md): bytes of everything
the step allocates plus the input a[0]; parameters, their (pre-allocated) gradients and optimizer
state are outside it. Two readings (docs/executor.md, "Measurement"):

* the **allocator's** peak (:class:`~remat.measure.allocator.AllocatorMeter`: the c10 CPU
  allocator, or CUDA's ``max_memory_allocated``), which includes what kernels allocate inside
  themselves; it is "measured", and the prediction is judged against it;
* the **live-tensor** peak (:class:`~remat.measure.memory.StorageTracker` on CPU/meta; on CUDA the
  allocator again), which explains where the memory went but misses kernel-internal buffers.

The measured step is the user's (:data:`STEPS`, docs/executor.md "Measurement"): when the chain
ends in a loss (``loss=`` given to :func:`remat.checkpoint`, or the model's own loss, e.g. Hugging
Face with ``labels``) it is ``loss = wrapped(x); loss.backward()``, the loss held through the
backward as a training loop holds it; otherwise (the chain ends in the model's output) the
documented default ``loss = (wrapped(x) * r).sum(); loss.backward()`` with a fixed random ``r``
(the proof's step): its product is freed before the backward, and autograd hands the Function a
full-size output gradient g[n], as the chain model assumes. The report names the step it measured.

Units: bytes and milliseconds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from remat.measure.allocator import AllocatorMeter, LivePhases, tensor_meter
from remat.measure.memory import allocation_size, untracked
from remat.measure.state import StepState
from remat.measure.timing import sync
from remat.profile.chain import check_profile_matches
from remat.replay.chain import RematChain
from remat.runtime.core import AutocastState
from remat.schedules import (
    ChainProfile,
    OpRecord,
    RematError,
    Schedule,
    SimulationResult,
    format_size,
    simulate,
)
from remat.trace.loss import step_loss


@dataclass(frozen=True)
class Measurement:
    """What the steps used (bytes, simulator accounting; milliseconds).

    ``peak_memory``: the allocator's peak (max over steps); ``tensor_peak``: the live-tensor tracker's
    peak (max over steps; None if not measured); ``step_ms``: the fastest step; ``timeline`` / ``tensor_timeline``:
    the allocator's / the tracker's readings around each op of the step with the largest peak;
    ``bookkeeping_peak``: the most bytes the replay's own bookkeeping (RNG snapshots, made inside
    ``untracked()``) held at once, which the allocator saw and the two peaks leave out (CPU);
    ``step``: the :data:`STEPS` kind measured.
    """

    peak_memory: int
    step_ms: float
    steps: int
    device: str
    timeline: tuple[OpRecord, ...] = ()
    tensor_peak: int | None = None
    tensor_timeline: tuple[OpRecord, ...] = ()
    bookkeeping_peak: int = 0
    step: str = "output"


def prepare_grads(module: torch.nn.Module) -> None:
    """Pre-allocate (or zero) every parameter gradient outside the meter, so a measured step counts
    only activation memory and per-op transients, never the parameter gradients themselves."""
    with untracked():
        for p in module.parameters():
            if p.requires_grad:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                else:
                    p.grad.detach_()
                    p.grad.zero_()


# What a report's step differentiates, by kind: the text its table prints and its JSON holds.
STEPS = {
    "loss": "your loss (loss=): loss = wrapped(x, target=y); loss.backward()",
    "model loss": "the model's own loss (e.g. labels=): loss = wrapped(...); loss.backward()",
    "output": "default (no loss in the step): (wrapped(x) * r).sum().backward(), r fixed random; pass loss= for yours",
}


def loss_step(
    wrapped: torch.nn.Module,
    inputs: Sequence[torch.Tensor],
    weights: list[torch.Tensor],
    kind: str = "output",
    call: Callable[[], torch.Tensor] | None = None,
) -> Callable[[], None]:
    """One training step of :data:`STEPS` kind ``kind`` (``"auto"``: ``"model loss"`` when the
    output is a scalar, else ``"output"``; the kind run is ``step.kind``). A loss (``"loss"``,
    ``"model loss"``: the chain's scalar output) is held through its ``backward()``, as a training
    loop holds it. The default (``"output"``) differentiates ``(wrapped(*inputs) * r).sum()`` (a
    scalar output as it is: :func:`~remat.trace.loss.step_loss`, the one definition); ``r``
    is ``weights[0]``, drawn at random (untracked) after the first forward when ``weights`` is
    empty, so autograd hands the replay a full-size output gradient. ``call``: the forward to run
    instead of ``wrapped(*inputs)`` (the user's whole call, e.g. ``remat.checkpoint``'s model,
    which computes its side values before it replays ``wrapped``)."""
    if kind not in STEPS and kind != "auto":
        raise RematError(f"step: unknown kind {kind!r} (one of {', '.join(STEPS)}, auto)")

    def step() -> None:
        out = call() if call is not None else wrapped(*inputs)
        if step.kind == "auto":
            step.kind = "model loss" if out.dim() == 0 else "output"
        if step.kind != "output" and out.dim() != 0:
            raise RematError(f"step: the {step.kind} must be a scalar, got shape {tuple(out.shape)}")
        if not weights and out.dim() != 0:
            with untracked():
                weights.append(torch.randn_like(out))
        loss = step_loss(out, lambda _: weights[0])
        del out
        loss.backward()

    step.kind = kind
    return step


def warm_up(wrapped: torch.nn.Module, step: Callable[[], None], count: int) -> None:
    """``count`` unmetered runs of ``step``, each after :func:`prepare_grads`."""
    for _ in range(count):
        prepare_grads(wrapped)
        step()


def time_steps(wrapped: torch.nn.Module, step: Callable[[], None], device: torch.device, count: int) -> list[float]:
    """Wall-clock milliseconds of ``count`` unmetered runs of ``step``."""
    times = []
    for _ in range(count):
        prepare_grads(wrapped)
        sync(device)
        begin = time.perf_counter()
        step()
        sync(device)
        times.append((time.perf_counter() - begin) * 1000.0)
    return times


def measure_steps(
    wrapped: RematChain,
    x: torch.Tensor,
    steps: int = 3,
    warmup: int = 1,
    timeline: bool = True,
    timed: bool = True,
    weight: torch.Tensor | None = None,
    kind: str = "output",
    call: Callable[[], torch.Tensor] | None = None,
) -> Measurement:
    """Run ``warmup`` + ``steps`` training steps (forward + backward, no optimizer) and measure them.

    Every step is metered by the allocator alone; the largest peak is reported, with the per-op
    timeline of that step if ``timeline``. The live-tensor tracker runs in one more step of its
    own, a diagnostic, after which the parameters' gradients, the buffers (BatchNorm statistics)
    and the RNG are put back as the last measured step left them (a
    :class:`~remat.measure.state.StepState`), so
    ``steps=1`` is still exactly one training step. Not both meters at once: under the tracker
    autograd stops adding gradients in place (see :func:`meter_step`), so the allocator would
    see more than the step allocates without it. Time is the fastest of ``steps`` separate,
    unmetered runs, so no meter's bookkeeping is timed (``timed=False`` skips them: ``step_ms``
    is then NaN). ``kind`` is the :data:`STEPS` step measured; ``weight`` the default step's loss
    weight ``r`` (default: random, drawn after the first forward). ``warmup=0`` measures the very
    first step. ``call``: the whole forward to run in each step instead of ``wrapped(x)``
    (:func:`loss_step`); ``x`` is then the input it replays ``wrapped`` on, allocated before.
    """
    device = x.device
    wrapped.train()
    input_bytes = allocation_size(x.untyped_storage().nbytes(), device)
    step = loss_step(wrapped, (x,), [] if weight is None else [weight], kind, call)

    warm_up(wrapped, step, max(0, warmup))
    peak, bookkeeping, records = -1, 0, ()
    for _ in range(max(1, steps)):
        meter, ops = _metered(wrapped, step, AllocatorMeter(device), device, timeline)
        bookkeeping = max(bookkeeping, meter.bookkeeping_peak)
        if meter.peak_bytes > peak:
            peak, records = meter.peak_bytes, _op_records(meter, ops, input_bytes)
    with StepState(wrapped, grads="copy"):
        tracker, ops = _metered(wrapped, step, tensor_meter(device), device, timeline)
    times = time_steps(wrapped, step, device, max(1, steps) if timed else 0)
    return Measurement(
        peak_memory=peak + input_bytes,
        step_ms=float(min(times)) if times else math.nan,
        steps=steps,
        device=str(device),
        timeline=records,
        tensor_peak=tracker.peak_bytes + input_bytes,
        tensor_timeline=_op_records(tracker, ops, input_bytes),
        bookkeeping_peak=bookkeeping,
        step=step.kind,
    )


def _metered(wrapped: torch.nn.Module, step: Callable[[], None], meter, device: torch.device, timeline: bool):
    """One step under ``meter`` (a phase per op if ``timeline``); returns the meter and the ops."""
    prepare_grads(wrapped)
    sync(device)
    ops: dict[str, tuple[int, str, int]] = {}
    with meter, _observed(wrapped, _marking_observer((meter,), ops) if timeline else None):
        step()
        sync(device)
    return meter, ops


def step_allocator_peak(
    module: torch.nn.Module,
    step: Callable[[], torch.Tensor],
    device: torch.device,
    steps: int = 2,
    warmup: int = 1,
) -> int:
    """The allocator's peak of the training step ``step().backward()`` (bytes above what was
    allocated before it), the largest of ``steps`` steps after ``warmup``; ``module``'s parameter
    gradients are pre-allocated and zeroed outside the meter, and its gradients, buffers
    (BatchNorm statistics) and the RNG are restored afterwards. ``step`` may run remat or the
    plain model: both are measured alike. Bytes."""
    peak = 0
    with StepState(module, grads="copy"):
        for k in range(max(0, warmup) + max(1, steps)):
            prepare_grads(module)
            sync(device)
            with AllocatorMeter(device) as meter:
                step().backward()
                sync(device)
            if k >= warmup:
                peak = max(peak, meter.peak_bytes)
    return peak


@dataclass(frozen=True)
class MeteredStep:
    """Readings of a replayed training step (bytes relative to what was allocated before the step,
    plus the ``input_bytes`` the caller counts): ``peak`` / ``timeline`` the allocator's,
    ``tensor_peak`` / ``tensor_timeline`` the live-tensor tracker's (from a separate step, see
    :func:`meter_step`), ``bookkeeping_peak`` remat's own bookkeeping (``untracked()``), which the
    allocator saw and both peaks leave out."""

    peak: int
    tensor_peak: int
    bookkeeping_peak: int
    timeline: tuple[OpRecord, ...]
    tensor_timeline: tuple[OpRecord, ...]


def meter_step(
    wrapped: torch.nn.Module, step: Callable[[], None], device: torch.device, input_bytes: int = 0
) -> MeteredStep:
    """Run ``step`` twice with a meter phase per op of ``wrapped``'s replay (its ``observer`` is
    called as ``observer(position, op, index, "before" | "after")``): once under the allocator
    alone, once under the live-tensor tracker alone. Not both at once: the tracker (a
    ``TorchDispatchMode``) holds references to op results while it counts them, which stops the
    autograd engine from adding gradient contributions in place (it adds into a gradient only when
    nothing else refers to it), so under the tracker the backward allocates more than it does
    without it (16 KiB more in a 32-wide MultiheadAttention's backward). Parameter gradients are
    pre-allocated before each run (:func:`prepare_grads`). Used by the graph replay's measurement.
    Bytes."""
    runs = []
    for fresh in (AllocatorMeter(device), tensor_meter(device)):
        meter, ops = _metered(wrapped, step, fresh, device, timeline=True)
        runs.append((meter, _op_records(meter, ops, input_bytes)))
    (allocator, records), (tracker, tensor_records) = runs
    return MeteredStep(
        peak=allocator.peak_bytes + input_bytes,
        tensor_peak=tracker.peak_bytes + input_bytes,
        bookkeeping_peak=allocator.bookkeeping_peak,
        timeline=records,
        tensor_timeline=tensor_records,
    )


def plain_step_peak(
    module: torch.nn.Module,
    step: Callable[[], torch.Tensor],
    first_input: torch.Tensor,
    steps: int = 2,
    warmup: int = 1,
) -> int:
    """The allocator's peak of the plain training step ``step().backward()`` (the user's model and
    loss, no remat), in the accounting of :func:`measure_steps`: :func:`step_allocator_peak` plus
    the chain input a[0] (``first_input``). Bytes."""
    peak = step_allocator_peak(module, step, first_input.device, steps=steps, warmup=warmup)
    return peak + allocation_size(first_input.untyped_storage().nbytes(), first_input.device)


def _marking_observer(meters: Sequence[AllocatorMeter | LivePhases], ops: dict[str, tuple[int, str, int]]) -> Callable:
    """A replay observer that starts a meter phase at each op's start and end (see RematChain.observer)."""

    def observer(position: int, op: str, index: int, when: str) -> None:
        label = f"op {position}" if when == "before" else "between ops"
        if when == "before":
            ops[label] = (position, op, index)
        for meter in meters:
            meter.mark(label)

    return observer


@contextlib.contextmanager
def _observed(wrapped: torch.nn.Module, observer: Callable | None) -> Iterator[None]:
    wrapped.observer = observer
    try:
        yield
    finally:
        wrapped.observer = None


def _op_records(
    meter: AllocatorMeter | LivePhases, ops: dict[str, tuple[int, str, int]], input_bytes: int
) -> tuple[OpRecord, ...]:
    return tuple(
        OpRecord(*ops[p.label], p.start + input_bytes, p.peak + input_bytes, p.end + input_bytes)
        for p in meter.phases
        if p.label in ops
    )


def _relative(measured: float, predicted: float) -> float:
    if predicted == 0:
        return 0.0 if measured == 0 else math.inf
    return (measured - predicted) / predicted


@dataclass(frozen=True)
class Report:
    """Predicted (simulator) next to measured, for one schedule on one model.

    ``measured_peak`` is the allocator's peak (what the prediction is judged against);
    ``measured_tensor_peak`` the live-tensor tracker's, when measured; ``bookkeeping_peak`` what
    the replay's own bookkeeping (RNG snapshots) held at most, left out of both (bytes);
    ``step`` the :data:`STEPS` kind of the measured step.
    """

    strategy: str
    budget: int
    predicted_peak: int
    measured_peak: int
    predicted_ms: float
    measured_ms: float
    steps: int
    device: str
    predicted_timeline: tuple[tuple[int, int, int], ...] = ()
    measured_timeline: tuple[OpRecord, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)
    measured_tensor_peak: int | None = None
    bookkeeping_peak: int = 0
    step: str = "output"

    @property
    def step_text(self) -> str:
        """What the measured step differentiates (:data:`STEPS`)."""
        return STEPS.get(self.step, self.step)

    @property
    def peak_error(self) -> float:
        """(measured - predicted) / predicted peak memory."""
        return _relative(self.measured_peak, self.predicted_peak)

    @property
    def time_error(self) -> float:
        """(measured - predicted) / predicted step time."""
        return _relative(self.measured_ms, self.predicted_ms)

    def to_dict(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy,
            "budget": self.budget,
            "device": self.device,
            "steps": self.steps,
            "step": {"kind": self.step, "differentiates": self.step_text},
            "peak_memory": {
                "predicted": self.predicted_peak,
                "measured": self.measured_peak,
                "error": self.peak_error,
                "measured_by": "allocator",
                "live_tensors": self.measured_tensor_peak,
                "bookkeeping": self.bookkeeping_peak,
            },
            "step_ms": {"predicted": self.predicted_ms, "measured": self.measured_ms, "error": self.time_error},
            "timeline": [
                {
                    "op": [m.op, m.index],
                    "predicted_peak": p[1],
                    "measured_peak": m.peak,
                    "predicted_after": p[2],
                    "measured_after": m.memory_after,
                }
                for p, m in zip(self.predicted_timeline, self.measured_timeline, strict=False)
            ],
            "metadata": self.metadata,
        }

    def table(self) -> str:
        """The predicted-vs-measured table as printed by ``remat execute``."""
        rows = [
            ("", "predicted", "measured", "error"),
            (
                "peak activation memory",
                f"{format_size(self.predicted_peak)}",
                f"{format_size(self.measured_peak)}",
                f"{100 * self.peak_error:+.2f}%",
            ),
            ("  (bytes)", str(self.predicted_peak), str(self.measured_peak), ""),
            *self._tensor_rows(),
            (
                "step time",
                f"{self.predicted_ms:.3f} ms",
                f"{self.measured_ms:.3f} ms",
                f"{100 * self.time_error:+.1f}%",
            ),
        ]
        widths = [max(len(r[c]) for r in rows) for c in range(4)]
        lines = [f"strategy {self.strategy}, budget {format_size(self.budget)}, {self.device}, {self.steps} steps"]
        lines += ["  ".join(cell.ljust(widths[c]) for c, cell in enumerate(row)).rstrip() for row in rows]
        lines.append(f"step: {self.step_text}")
        lines.append("measured: the allocator's peak, kernel buffers included; live tensors: a tensor count")
        return "\n".join(lines)

    def _tensor_rows(self) -> list[tuple[str, str, str, str]]:
        if self.measured_tensor_peak is None:
            return []
        error = _relative(self.measured_tensor_peak, self.predicted_peak)
        rows = [("  live tensors", "", format_size(self.measured_tensor_peak), f"({100 * error:+.2f}%)")]
        if self.bookkeeping_peak:
            # the replay's copies of buffers and generator states, made once (a first measured
            # step, warmup=0): its state across steps, like parameter gradients (docs/model.md)
            rows.append(("  remat state (made once)", "", format_size(self.bookkeeping_peak), "(not counted)"))
        return rows


def build_report(
    schedule: Schedule,
    predicted: SimulationResult,
    *,
    measured_peak: int,
    measured_ms: float,
    steps: int,
    device: str,
    measured_timeline: tuple[OpRecord, ...],
    metadata: dict[str, Any],
    measured_tensor_peak: int | None,
    bookkeeping_peak: int,
    step: str = "output",
) -> Report:
    """The :class:`Report` of ``schedule``: the simulator's ``predicted`` run (its peak, time and
    per-op timeline) next to what was measured (bytes, milliseconds); the chain's :func:`compare`
    and the graph's ``compare_graph`` both build theirs here."""
    return Report(
        strategy=schedule.strategy,
        budget=schedule.budget,
        predicted_peak=predicted.peak_memory,
        measured_peak=measured_peak,
        predicted_ms=predicted.compute_ms,
        measured_ms=measured_ms,
        steps=steps,
        device=device,
        predicted_timeline=tuple((r.memory_before, r.peak, r.memory_after) for r in predicted.timeline),
        measured_timeline=measured_timeline,
        metadata=metadata,
        measured_tensor_peak=measured_tensor_peak,
        bookkeeping_peak=bookkeeping_peak,
        step=step,
    )


def compare(
    profile: ChainProfile,
    schedule: Schedule,
    wrapped: RematChain,
    x: torch.Tensor,
    steps: int = 3,
    warmup: int = 1,
    kind: str | None = None,
    call: Callable[[], torch.Tensor] | None = None,
    side_bytes: int = 0,
    autocast: AutocastState | None = None,
) -> Report:
    """Measure ``steps`` steps of ``wrapped`` on ``x`` and put them next to the simulator's prediction.

    ``kind`` is the :data:`STEPS` step measured; None: ``"model loss"`` when the chain returns a
    scalar (it ends in a loss), else the default ``"output"`` step. A profile measured on another
    model or input is refused (:func:`check_profile_matches`). ``call``: the user's whole forward,
    measured instead of ``wrapped(x)``; it computes ``side_bytes`` of side values (bytes) before
    the replay and holds them through it, which the prediction then adds at every op.
    ``autocast``: the state the profile was measured under (``call`` enters it itself), under
    which the profile is checked against the model."""
    with autocast.entered() if autocast is not None else contextlib.nullcontext():
        check_profile_matches(profile, getattr(wrapped, "chain", wrapped), x)
    predicted = _with_side_values(simulate(profile, schedule.ops, timeline=True), side_bytes)
    measured = measure_steps(wrapped, x, steps=steps, warmup=warmup, kind=kind or "auto", call=call)
    return build_report(
        schedule,
        predicted,
        measured_peak=measured.peak_memory,
        measured_ms=measured.step_ms,
        steps=measured.steps,
        device=measured.device,
        measured_timeline=measured.timeline,
        metadata={"profile": profile.name, "torch": torch.__version__, "threads": torch.get_num_threads()},
        measured_tensor_peak=measured.tensor_peak,
        bookkeeping_peak=measured.bookkeeping_peak,
        step=measured.step,
    )


def _with_side_values(predicted: SimulationResult, side_bytes: int) -> SimulationResult:
    """``predicted`` with ``side_bytes`` held at every op (side values made before the replay)."""
    if not side_bytes:
        return predicted
    timeline = tuple(
        dataclasses.replace(
            r,
            memory_before=r.memory_before + side_bytes,
            peak=r.peak + side_bytes,
            memory_after=r.memory_after + side_bytes,
        )
        for r in predicted.timeline
    )
    return dataclasses.replace(predicted, peak_memory=predicted.peak_memory + side_bytes, timeline=timeline)


def plot_comparison(report: Report, path: str) -> None:
    """Predicted and measured memory (MiB) per op into one image: :func:`remat.plots.comparison_figure`."""
    # imported here: matplotlib is an optional dependency that only plotting needs
    import matplotlib.pyplot as plt

    from remat.plots import comparison_figure

    fig = comparison_figure(report)
    try:
        fig.savefig(path)
    except (OSError, ValueError) as error:
        raise RematError(f"{path}: cannot write the plot ({error})") from None
    finally:
        plt.close(fig)


__all__ = [
    "MeteredStep",
    "Measurement",
    "Report",
    "STEPS",
    "build_report",
    "compare",
    "measure_steps",
    "meter_step",
    "plain_step_peak",
    "plot_comparison",
]
