"""Front plots: every label names its own point (its arrow ends on it) and no label or legend
box hides a plotted point; legend entries only for what is drawn; execution plots in MiB."""

from __future__ import annotations

import re

import matplotlib
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.text import Annotation  # noqa: E402

from remat.plots import _scale, front_figure  # noqa: E402
from remat.schedules import format_size, load_profile  # noqa: E402
from remat.solver.front import FrontPoint  # noqa: E402
from remat.solver.pareto.chain import chain_front  # noqa: E402
from tests.conftest import EXAMPLES  # noqa: E402

STRATEGIES = ["optimal", "store-all", "recompute-all", "sequential", "chen-sqrt", "chen-greedy", "revolve"]


def _front(name: str):
    profile = load_profile(EXAMPLES / name)
    front = chain_front(profile, STRATEGIES, slots=200, points=8)
    return profile, front.by_strategy(), front.store_all_ms, front.marks()


def _crowded():
    """Hand-made: three baselines crowding the front's low end, and two marks near each other."""
    optimal = [FrontPoint("optimal", b, b, 100.0 + 4000.0 / b, 4000.0 / b) for b in range(40, 400, 12)]
    by = {"optimal": optimal, "never-fits": []}
    for k, name in enumerate(["a", "b", "c"]):
        by[name] = [FrontPoint(name, b, b, 104.0 + 4000.0 / b + 3 * k, 1.0) for b in range(44 + 4 * k, 200, 20)]
    by["slow"] = [FrontPoint("slow", 40, 40, 900.0, 800.0)]
    marks = {"minimum memory": optimal[0], "√n": optimal[1], "store-all": optimal[-1]}
    return by, 100.0, marks


def _check(by_strategy, store_all_ms, marks):
    fig = front_figure("t", by_strategy, store_all_ms, marks)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    scale, _ = _scale(max(p.peak_memory for pts in by_strategy.values() for p in pts))
    top = ax.get_ylim()[1]
    # every point drawn, from the FrontPoints themselves (off-scale ones sit on the top edge)
    points = [(n, p, (p.peak_memory / scale, min(p.compute_ms, top))) for n, pts in by_strategy.items() for p in pts]
    shown = ax.transData.transform([xy for _, _, xy in points])
    annotations = [t for t in ax.texts if isinstance(t, Annotation)]
    assert len(annotations) == len({(p.peak_memory, p.compute_ms) for p in marks.values()}) + sum(
        p.compute_ms > top for _, p, _ in points
    )
    boxes = []
    for annotation in annotations:
        text = annotation.get_text()
        off = re.match(r"↑ (\S+) at (.+?): (\d+) ms \(off scale\)", text)
        if off:
            name, size, ms = off.groups()
            (point,) = [
                p for n, p, _ in points if n == name and format_size(p.peak_memory) == size and p.compute_ms > top
            ]
            assert f"{point.compute_ms:.0f}" == ms
            assert annotation.xy == pytest.approx((point.peak_memory / scale, top))
        else:
            labels = text.split("\n")[0].split(" = ")
            point = marks[labels[0]]
            assert all(marks[label] == point for label in labels)  # merged labels name the same point
            assert annotation.xy == pytest.approx((point.peak_memory / scale, point.compute_ms))
            assert format_size(point.peak_memory) in text and text.endswith(f", {point.compute_ms:.1f} ms")
        boxes.append(annotation.get_bbox_patch().get_window_extent(renderer))
    boxes.append(ax.get_legend().get_window_extent(renderer))
    radius = 2.0  # pixels: the smallest marker drawn is 3 pt = 5 px across at 120 dpi
    for box in boxes:
        for (name, point, _), (x, y) in zip(points, shown, strict=True):
            inside = box.x0 - radius < x < box.x1 + radius and box.y0 - radius < y < box.y1 + radius
            assert not inside, f"a label or the legend hides {name} at {point.peak_memory} B, {point.compute_ms} ms"
    legend = [t.get_text().split(" (")[0] for t in ax.get_legend().get_texts()]
    assert legend == [n for n, pts in by_strategy.items() if pts]  # one entry per drawn strategy, no other
    plt.close(fig)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet_like.json", "transformer_like.json", "homogeneous.json"])
def test_front_labels_name_their_points_and_hide_none(name):
    _, by_strategy, store_all_ms, marks = _front(name)
    _check(by_strategy, store_all_ms, marks)


def test_crowded_front_labels_hide_nothing():
    _check(*_crowded())


def test_execution_plot_is_in_mib_with_every_line_labelled():
    from types import SimpleNamespace

    from remat.plots import comparison_figure

    mib = 2**20
    measured = [SimpleNamespace(position=i, peak=(3 + i) * mib + 17) for i in range(4)]
    report = SimpleNamespace(
        strategy="optimal",
        device="cpu",
        budget=8 * mib,
        predicted_peak=6 * mib,
        predicted_timeline=[(i, (3 + i) * mib, 0) for i in range(4)],
        measured_timeline=measured,
    )
    fig = comparison_figure(report)
    ax = fig.axes[0]
    assert ax.get_ylabel() == "memory (MiB)" and "op" in ax.get_xlabel() and "index" in ax.get_xlabel()
    lines = ax.get_lines()
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [line.get_label() for line in lines]
    assert len(lines) == 4 and all(not line.get_label().startswith("_") for line in lines)
    assert max(lines[1].get_ydata()) == pytest.approx(6 + 17 / mib)  # MiB, not bytes
    assert lines[3].get_ydata()[0] == 8  # the budget line
    fig.canvas.draw()
    assert ax.yaxis.get_offset_text().get_text() == ""  # no "1e6" offset
    plt.close(fig)


def test_label_boxes_moved_by_offset_equal_the_laid_out_boxes():
    """Placer lays a label out once per alignment and moves that box for farther offsets: the moved
    box must be the one matplotlib lays out at that offset."""
    import math

    from remat.plot_labels import _ANGLES, _DISTANCES, Placer, _alignment, text_box

    fig, ax = plt.subplots(figsize=(9.5, 5.2), dpi=120)
    ax.plot([1, 2, 3], [1, 4, 9], "o-")
    ax.set_xscale("log")
    fig.tight_layout()
    placer = Placer(fig, ax)
    for text, small in (("minimum memory\n1.10 KiB, 30.2 ms", False), ("↑ revolve at 2 MiB: 300 ms (off scale)", True)):
        first = {}
        for distance in _DISTANCES:
            for angle in _ANGLES:
                dx, dy = distance * math.cos(angle), distance * math.sin(angle)
                annotation = placer._annotation(text, (2, 4), dx, dy, small)
                laid_out = text_box(annotation, placer.renderer)
                annotation.remove()
                box, dx0, dy0 = first.setdefault(_alignment(dx, dy), (laid_out, dx, dy))
                moved = box.translated((dx - dx0) * fig.dpi / 72, (dy - dy0) * fig.dpi / 72)
                assert moved.extents == pytest.approx(laid_out.extents, abs=1e-6)
    plt.close(fig)


def test_the_cli_knows_the_image_types_matplotlib_writes():
    from matplotlib.backend_bases import FigureCanvasBase

    from remat.cli.args import PLOT_TYPES

    assert set(FigureCanvasBase.get_supported_filetypes()) == PLOT_TYPES
