"""Matplotlib figures (imported lazily by the CLI; the solvers never need matplotlib)."""

from __future__ import annotations

import math
import os

from remat.schedules import RematError, Schedule, SimulationResult, format_size
from remat.schedules.files import atomic_file

# The image type of a file name without an extension (the CLI's documented default).
DEFAULT_IMAGE_TYPE = "png"


def save_figure(fig, path: str | os.PathLike[str], **options) -> None:
    """Save ``fig`` into ``path`` exactly (no extension is added), atomically
    (remat.schedules.files: the old file survives any failure). The type is the name's extension
    (``.pdf``, ``.svg``, ...), PNG when it has none; errors are one :class:`RematError` line."""
    suffix = os.path.splitext(os.fspath(path))[1].lower().lstrip(".")
    image_type = suffix or DEFAULT_IMAGE_TYPE
    supported = fig.canvas.get_supported_filetypes()
    if image_type not in supported:
        raise RematError(
            f"{path}: cannot draw: unsupported image type '.{image_type}' "
            f"(use one of {', '.join('.' + s for s in sorted(supported))}, or no extension for PNG)"
        )
    try:
        with atomic_file(path, "wb") as handle:
            fig.savefig(handle, format=image_type, **options)
    except ValueError as error:  # matplotlib's own refusals (e.g. an image too large to draw)
        raise RematError(f"{path}: cannot write the plot ({error})") from None


def preload() -> None:
    """Import matplotlib (Agg backend) now, e.g. while a solver runs in another thread."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401


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
    try:
        save_figure(fig, path)
    finally:
        plt.close(fig)


def comparison_figure(report):
    """Predicted and measured memory (MiB) at each op's peak for an executor ``Report``: op index
    on x; the budget and the predicted step peak as labelled horizontal lines; every line in the
    legend. Returns the figure (the caller saves and closes it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mib = float(2**20)
    fig, ax = plt.subplots(figsize=(10, 4.2), dpi=120)
    ax.ticklabel_format(useOffset=False, style="plain")  # MiB values, not "1e6 + ..."
    xs = list(range(len(report.predicted_timeline)))
    ax.step(xs, [p[1] / mib for p in report.predicted_timeline], where="mid", label="predicted peak of each op")
    ax.step(
        [m.position for m in report.measured_timeline],
        [m.peak / mib for m in report.measured_timeline],
        where="mid",
        linestyle="--",
        label="measured peak of each op",
    )
    ax.axhline(report.predicted_peak / mib, color="gray", linewidth=0.8, label="predicted step peak")
    ax.axhline(report.budget / mib, color="tab:red", linestyle=":", linewidth=1, label="budget")
    ax.set_xlabel("op of the schedule (index)")
    ax.set_ylabel("memory (MiB)")
    ax.set_title(f"{report.strategy}: predicted vs measured memory ({report.device})")
    ax.legend(loc="best", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


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
    """Draw :func:`front_figure` into ``path`` (PNG, PDF, SVG, ... by its extension)."""
    import matplotlib.pyplot as plt

    fig = front_figure(title, by_strategy, store_all_ms, marks)
    try:
        save_figure(fig, path)
    finally:
        plt.close(fig)


def front_figure(title: str, by_strategy: dict, store_all_ms: float, marks: dict | None = None):
    """Step time (ms, left axis; overhead % over store-all on the right axis) against peak memory.

    ``by_strategy`` maps a strategy name to its FrontPoints; ``optimal`` (and any strategy whose
    name starts with ``ilp``) is drawn as a step curve -- at a given memory the best time is the
    last point at or left of it -- the others as markers with their own (dashed) staircase. ``marks`` maps a
    label to a FrontPoint to annotate. The memory axis is log-scaled when it spans more than 20x.
    Labels are placed where they cover no marker (see :func:`remat.plot_labels.place_label`), each
    with an arrow to its point; a point above the time axis is drawn on the top edge. Returns the
    figure (the caller saves and closes it).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from remat.plot_labels import Placer

    all_points = [p for points in by_strategy.values() for p in points]
    if not all_points:
        raise RematError("nothing to plot: no strategy produced a schedule")
    peaks = [p.peak_memory for p in all_points]
    scale, unit = _scale(max(peaks))
    fig, ax = plt.subplots(figsize=(9.5, 5.2), dpi=120)
    top_y = _time_axis(ax, by_strategy, store_all_ms)
    styles = _draw_strategies(ax, by_strategy, scale, top_y)
    merged: dict[tuple[int, float], list[str]] = {}
    for label, point in (marks or {}).items():
        merged.setdefault((point.peak_memory, point.compute_ms), []).append(label)
    for peak, y in merged:
        # hollow, so that a strategy's own marker at the same point stays visible inside it
        ax.plot(
            [peak / scale],
            [y],
            marker="*",
            markersize=16,
            markerfacecolor="none",
            markeredgecolor="black",
            markeredgewidth=1.2,
            linestyle="",
            zorder=6,
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
    fig.tight_layout()
    # the layout is final: without this, savefig lays the figure out again in a dry-run draw
    fig.set_layout_engine(None)
    placer = Placer(fig, ax)
    placer.place_legend(styles)
    shown = [format_size(peak) for peak, _ in merged]
    for (peak, y), labels in merged.items():
        # two marks whose sizes print alike (2.10 MiB) are told apart by their bytes
        size = format_size(peak) + (f" ({peak:,} bytes)" if shown.count(format_size(peak)) > 1 else "")
        placer.place(f"{' = '.join(labels)}\n{size}, {y:.1f} ms", (peak / scale, y))
    for name, point in ((n, p) for n, pts in by_strategy.items() for p in pts if p.compute_ms > top_y):
        text = f"↑ {name} at {format_size(point.peak_memory)}: {point.compute_ms:.0f} ms (off scale)"
        placer.place(text, (point.peak_memory / scale, top_y), small=True)
    return fig


def _time_axis(ax, by_strategy: dict, store_all_ms: float) -> float:
    """Set the time axis; return its top. A baseline far slower than the front (recompute-all) is
    drawn on the top edge with its time written next to it instead of squashing the front."""
    all_points = [p for points in by_strategy.values() for p in points]
    front_times = [p.compute_ms for name, pts in by_strategy.items() if name == "optimal" for p in pts]
    reference_top = max(front_times) if front_times else max(p.compute_ms for p in all_points)
    low_y = min(min(p.compute_ms for p in all_points), store_all_ms if store_all_ms > 0 else math.inf)
    top_y = reference_top + 1.0 * max(reference_top - low_y, 0.05 * reference_top)
    if any(p.compute_ms > top_y for p in all_points):
        ax.set_ylim(low_y - 0.05 * (top_y - low_y), top_y)
        return top_y
    return math.inf


def _draw_strategies(ax, by_strategy: dict, scale: float, top_y: float) -> list:
    """Each strategy's points and staircase; returns the legend handles (one per drawn strategy)."""
    import matplotlib.pyplot as plt

    markers = iter(["o", "s", "^", "D", "v", "P", "X", "<", ">", "h"])
    colors = iter(plt.rcParams["axes.prop_cycle"].by_key()["color"][1:] * 3)
    handles = []
    right = max(p.peak_memory for pts in by_strategy.values() for p in pts) / scale
    for name, points in by_strategy.items():
        pts = sorted(points, key=lambda p: p.peak_memory)
        if not pts:
            continue  # nothing drawn: no legend entry
        # At a given memory a strategy's best time is that of its fastest point at or left of it
        # (a schedule within a smaller budget fits a larger one), so each strategy is drawn as the
        # staircase of its non-dominated points; a time-limited ILP can return a dominated one.
        kept = [pts[0]]
        for point in pts[1:]:
            if point.compute_ms < kept[-1].compute_ms:
                kept.append(point)
        # the staircase runs on to the right edge: its last time holds at every larger memory
        kept_xs = [p.peak_memory / scale for p in kept] + [right]
        kept_ys = [min(p.compute_ms, top_y) for p in kept] + [min(kept[-1].compute_ms, top_y)]
        xs = [p.peak_memory / scale for p in pts]
        ys = [min(p.compute_ms, top_y) for p in pts]  # off-scale points sit on the top edge
        if name == "optimal" or name.startswith("ilp"):
            color = "tab:blue" if name == "optimal" else next(colors)
            (handle,) = ax.step(kept_xs, kept_ys, where="post", color=color, linewidth=2.0, zorder=3)
            ax.plot(xs, ys, ".", color=color, markersize=3, zorder=3, clip_on=False)
            handle.set_label(f"{name} (front, {len(pts)} points)")
        else:
            color = next(colors)
            ax.step(kept_xs, kept_ys, where="post", linestyle="--", linewidth=0.8, color=color, alpha=0.85, zorder=2)
            off = " (↑ off scale)" if any(p.compute_ms > top_y for p in pts) else ""
            (handle,) = ax.plot(
                xs,
                ys,
                linestyle="",
                marker=next(markers),
                # earlier strategies get larger markers: a point two baselines share shows both
                markersize=max(3.5, 7.0 - 0.6 * len(handles)),
                color=color,
                alpha=0.85,
                label=name + off,
                clip_on=False,
                zorder=4,
            )
        handles.append(handle)
    return handles
