"""Run training steps of a :class:`RematChain` and compare them with the simulator's prediction.

Measured peak activation memory uses the simulator's accounting (DESIGN.md): live bytes of
everything the step allocates (CUDA allocator, or :class:`~remat.executor.memory.StorageTracker`
on CPU) plus the input a[0]; parameters, their (pre-allocated) gradients and optimizer state are
outside it. The step is ``loss = (wrapped(x) * r).sum(); loss.backward()`` with a fixed random
``r``: its product is freed before the backward, and autograd hands the Function a full-size
output gradient g[n], as the chain model assumes.

Units: bytes and milliseconds.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from remat.executor.memory import allocation_size, memory_meter, untracked
from remat.executor.replay import RematChain
from remat.schedules import ChainProfile, Schedule, simulate


@dataclass(frozen=True)
class OpMeasurement:
    """Measured memory around one op (bytes, simulator accounting): before, peak during, after."""

    position: int
    op: str
    index: int
    memory_before: int
    peak: int
    memory_after: int


@dataclass(frozen=True)
class Measurement:
    """What the steps used: ``peak_memory`` bytes (max over steps), ``step_ms`` median milliseconds."""

    peak_memory: int
    step_ms: float
    steps: int
    device: str
    timeline: tuple[OpMeasurement, ...] = ()


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


def sync(device: torch.device) -> None:
    """Wait for the device (CUDA) so a wall-clock or allocator reading covers finished work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def loss_step(
    wrapped: torch.nn.Module, inputs: Sequence[torch.Tensor], weights: list[torch.Tensor]
) -> Callable[[], None]:
    """One training step ``loss = (wrapped(*inputs) * r).sum(); loss.backward()``. ``r`` is
    ``weights[0]``, drawn at random (untracked) after the first forward when ``weights`` is empty,
    so autograd hands the replay a full-size output gradient."""

    def step() -> None:
        out = wrapped(*inputs)
        if not weights:
            with untracked():
                weights.append(torch.randn_like(out))
        loss = (out * weights[0]).sum()
        del out
        loss.backward()

    return step


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
) -> Measurement:
    """Run ``warmup`` + ``steps`` training steps (forward + backward, no optimizer) and measure them.

    Memory is measured on every step (the largest peak is reported); time is the median of the
    steps, each measured in a separate, unmetered run so the CPU tracker's bookkeeping is not timed
    (``timed=False`` skips them: ``step_ms`` is then NaN). ``weight`` is the loss weight ``r``
    (default: random, drawn after the first forward). ``warmup=0`` measures the very first step.
    """
    device = x.device
    wrapped.train()
    input_bytes = allocation_size(x.untyped_storage().nbytes(), device)
    step = loss_step(wrapped, (x,), [] if weight is None else [weight])

    for _ in range(max(0, warmup)):
        prepare_grads(wrapped)
        step()

    peak = 0
    for _ in range(max(1, steps)):
        prepare_grads(wrapped)
        sync(device)
        with memory_meter(device) as meter:
            step()
            peak = max(peak, meter.peak_bytes)

    times = time_steps(wrapped, step, device, max(1, steps) if timed else 0)

    records: list[OpMeasurement] = []
    if timeline:
        prepare_grads(wrapped)
        sync(device)
        with memory_meter(device) as meter:
            current: dict[str, int] = {}

            def observer(position: int, op: str, index: int, when: str) -> None:
                if when == "before":
                    current["before"] = meter.current_bytes
                    meter.reset_peak()
                else:
                    records.append(
                        OpMeasurement(
                            position,
                            op,
                            index,
                            current["before"] + input_bytes,
                            meter.peak_bytes + input_bytes,
                            meter.current_bytes + input_bytes,
                        )
                    )

            wrapped.observer = observer
            try:
                step()
            finally:
                wrapped.observer = None
    return Measurement(
        peak_memory=peak + input_bytes,
        step_ms=float(statistics.median(times)) if times else math.nan,
        steps=steps,
        device=str(device),
        timeline=tuple(records),
    )


def _relative(measured: float, predicted: float) -> float:
    if predicted == 0:
        return 0.0 if measured == 0 else math.inf
    return (measured - predicted) / predicted


@dataclass(frozen=True)
class Report:
    """Predicted (simulator) next to measured, for one schedule on one model."""

    strategy: str
    budget: int
    predicted_peak: int
    measured_peak: int
    predicted_ms: float
    measured_ms: float
    steps: int
    device: str
    predicted_timeline: tuple[tuple[int, int, int], ...] = ()
    measured_timeline: tuple[OpMeasurement, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)

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
            "peak_memory": {"predicted": self.predicted_peak, "measured": self.measured_peak, "error": self.peak_error},
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
        from remat.schedules import format_size

        rows = [
            ("", "predicted", "measured", "error"),
            (
                "peak activation memory",
                f"{format_size(self.predicted_peak)}",
                f"{format_size(self.measured_peak)}",
                f"{100 * self.peak_error:+.2f}%",
            ),
            ("  (bytes)", str(self.predicted_peak), str(self.measured_peak), ""),
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
        return "\n".join(lines)


def compare(
    profile: ChainProfile, schedule: Schedule, wrapped: RematChain, x: torch.Tensor, steps: int = 3, warmup: int = 1
) -> Report:
    """Measure ``steps`` steps of ``wrapped`` on ``x`` and put them next to the simulator's prediction."""
    predicted = simulate(profile, schedule.ops, timeline=True)
    measured = measure_steps(wrapped, x, steps=steps, warmup=warmup)
    return Report(
        strategy=schedule.strategy,
        budget=schedule.budget,
        predicted_peak=predicted.peak_memory,
        measured_peak=measured.peak_memory,
        predicted_ms=predicted.compute_ms,
        measured_ms=measured.step_ms,
        steps=measured.steps,
        device=measured.device,
        predicted_timeline=tuple((r.memory_before, r.peak, r.memory_after) for r in predicted.timeline),
        measured_timeline=measured.timeline,
        metadata={"profile": profile.name, "torch": torch.__version__},
    )


def plot_comparison(report: Report, path: str) -> None:
    """Predicted and measured memory (MiB) per op into one image: :func:`remat.plots.comparison_figure`."""
    import matplotlib.pyplot as plt

    from remat.plots import comparison_figure
    from remat.schedules import RematError

    fig = comparison_figure(report)
    try:
        fig.savefig(path)
    except (OSError, ValueError) as error:
        raise RematError(f"{path}: cannot write the plot ({error})") from None
    finally:
        plt.close(fig)


__all__ = ["Measurement", "OpMeasurement", "Report", "compare", "measure_steps", "plot_comparison"]
