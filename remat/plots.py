"""Matplotlib figures (imported lazily by the CLI; the solvers never need matplotlib)."""

from __future__ import annotations

import os

from remat.schedules import Schedule, SimulationResult, format_size


def plot_timeline(profile, schedule: Schedule, result: SimulationResult, path: str | os.PathLike[str]) -> None:
    """Memory (bytes) before and at the peak of each op, against the op index; budget as a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    positions = [r.position for r in result.timeline]
    scale, unit = _scale(max(result.peak_memory, schedule.budget))
    fig, ax = plt.subplots(figsize=(9, 4), dpi=110)
    ax.step(positions, [r.memory_after / scale for r in result.timeline], where="post", label="held after op")
    ax.plot(positions, [r.peak / scale for r in result.timeline], ".", markersize=3, label="op peak (with transient)")
    ax.axhline(schedule.budget / scale, color="tab:red", linestyle="--", linewidth=1, label="budget")
    ax.set_xlabel("op index")
    ax.set_ylabel(f"memory ({unit})")
    ax.set_title(
        f"{profile.name}: {schedule.strategy}, peak {format_size(result.peak_memory)}, "
        f"+{result.recompute_ms:.1f} ms recompute"
    )
    ax.legend(loc="best", fontsize=8, framealpha=0.8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _scale(size: int) -> tuple[float, str]:
    for unit, factor in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= factor:
            return float(factor), unit
    return 1.0, "bytes"
