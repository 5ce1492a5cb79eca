"""Matplotlib figures (imported lazily by the CLI; the solvers never need matplotlib)."""

from __future__ import annotations

import math
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


def plot_front(
    title: str,
    by_strategy: dict,
    store_all_ms: float,
    path: str | os.PathLike[str],
    marks: dict | None = None,
) -> None:
    """Step time (ms, left axis; overhead % over store-all on the right axis) against peak memory.

    ``by_strategy`` maps a strategy name to its FrontPoints; ``optimal`` (and any strategy whose
    name starts with ``ilp``) is drawn as a step curve -- at a given memory the best time is the
    last point at or left of it -- the others as markers with their own (dashed) staircase. ``marks`` maps a
    label to a FrontPoint to annotate. The memory axis is log-scaled when it spans more than 20x.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    all_points = [p for points in by_strategy.values() for p in points]
    if not all_points:
        raise ValueError("nothing to plot: no strategy produced a schedule")
    peaks = [p.peak_memory for p in all_points]
    scale, unit = _scale(max(peaks))
    fig, ax = plt.subplots(figsize=(9.5, 5.2), dpi=120)
    markers = iter(["o", "s", "^", "D", "v", "P", "X", "<", ">", "h"])
    colors = iter(plt.rcParams["axes.prop_cycle"].by_key()["color"][1:] * 3)
    for name, points in by_strategy.items():
        pts = sorted(points, key=lambda p: p.peak_memory)
        if not pts:
            continue
        xs = [p.peak_memory / scale for p in pts]
        ys = [p.compute_ms for p in pts]
        # At a given memory a strategy's best time is that of its fastest point at or left of it
        # (a schedule within a smaller budget fits a larger one), so each strategy is drawn as the
        # staircase of its non-dominated points; a time-limited ILP can return a dominated one.
        kept = [pts[0]]
        for point in pts[1:]:
            if point.compute_ms < kept[-1].compute_ms:
                kept.append(point)
        if name == "optimal" or name.startswith("ilp"):
            color = "tab:blue" if name == "optimal" else next(colors)
            label = f"{name} (front, {len(pts)} points)"
            kept_xs = [p.peak_memory / scale for p in kept]
            kept_ys = [p.compute_ms for p in kept]
            ax.step(kept_xs, kept_ys, where="post", color=color, linewidth=2.0, label=label, zorder=3)
            ax.plot(xs, ys, ".", color=color, markersize=3, zorder=3)
        else:
            color = next(colors)
            ax.step(
                [p.peak_memory / scale for p in kept],
                [p.compute_ms for p in kept],
                where="post",
                linestyle="--",
                linewidth=0.8,
                color=color,
                alpha=0.85,
                zorder=2,
            )
            ax.plot(xs, ys, linestyle="", marker=next(markers), markersize=5, color=color, alpha=0.85, label=name)
    # Keep the front readable: a baseline far slower than the front (recompute-all) is drawn on
    # the top edge with its time written next to it instead of squashing the front.
    front_times = [p.compute_ms for name, pts in by_strategy.items() if name == "optimal" for p in pts]
    reference_top = max(front_times) if front_times else max(p.compute_ms for p in all_points)
    low_y = min(min(p.compute_ms for p in all_points), store_all_ms if store_all_ms > 0 else math.inf)
    top_y = reference_top + 1.0 * max(reference_top - low_y, 0.05 * reference_top)
    off_scale = [(name, p) for name, pts in by_strategy.items() for p in pts if p.compute_ms > top_y]
    if off_scale:
        ax.set_ylim(low_y - 0.05 * (top_y - low_y), top_y)
        for index, (name, point) in enumerate(off_scale):
            x = point.peak_memory / scale
            ax.annotate(
                f"↑ {name} at {format_size(point.peak_memory)}: {point.compute_ms:.0f} ms (off scale)",
                (x, top_y),
                textcoords="offset points",
                xytext=(4, -4 - 10 * index),
                ha="left",
                va="top",
                fontsize=7,
                color="dimgray",
                annotation_clip=False,
            )
    merged: dict[tuple[int, float], list[str]] = {}
    for label, point in (marks or {}).items():
        merged.setdefault((point.peak_memory, point.compute_ms), []).append(label)
    x_low, x_high = min(peaks), max(peaks)
    y_bottom, y_top = ax.get_ylim()
    y_mid = 0.5 * (y_bottom + y_top)
    for (peak, y), labels in merged.items():
        x = peak / scale
        right_half = (peak - x_low) > 0.5 * (x_high - x_low)
        upper_half = y > y_mid
        ax.plot([x], [y], marker="*", markersize=14, color="gold", markeredgecolor="black", zorder=4)
        ax.annotate(
            f"{' = '.join(labels)}\n{format_size(peak)}, {y:.1f} ms",
            (x, y),
            textcoords="offset points",
            xytext=(-10 if right_half else 12, -12 if upper_half else 12),
            ha="right" if right_half else "left",
            va="top" if upper_half else "bottom",
            fontsize=8,
            bbox={"boxstyle": "round,pad=0.2", "fc": "white", "alpha": 0.85, "lw": 0.5},
            zorder=5,
        )
    if max(peaks) / max(1, min(peaks)) > 20:
        ax.set_xscale("log")
    ax.set_xlabel(f"peak memory ({unit})")
    ax.set_ylabel("step time (ms)")
    if store_all_ms > 0:
        ax.axhline(store_all_ms, color="gray", linestyle=":", linewidth=1)
        second = ax.secondary_yaxis(
            "right",
            functions=(lambda t: 100.0 * (t / store_all_ms - 1.0), lambda o: store_all_ms * (1.0 + o / 100.0)),
        )
        second.set_ylabel("overhead over store-all (%)")
    ax.set_title(title)
    ax.grid(alpha=0.3, which="both")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
