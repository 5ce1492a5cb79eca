"""Placing text labels (and the legend) on a matplotlib axes so that none hides a marker.

Each label is tried at a ring of offsets around its point (8 directions, growing distances,
measured in display pixels through the figure's renderer) and put where its box covers no
marker, no other label and as little of the plotted lines as possible, with an arrow back to
the exact point it names. Used by :func:`remat.plots.front_figure`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

_DISTANCES = (14, 30, 50, 75, 105, 140, 180)  # points from the anchor
_ANGLES = tuple(math.radians(a) for a in (45, -45, 135, -135, 0, 180, 90, -90))
_PAD = 4.0  # pixels around a text box (the bbox patch's padding and edge)


def marker_discs(ax) -> np.ndarray:
    """(x, y, radius) in display pixels of every marker drawn on ``ax`` inside its area."""
    discs = []
    area = ax.get_window_extent()
    for line in ax.get_lines():
        if line.get_marker() in (None, "None", "", " ") or line.get_transform() != ax.transData:
            continue
        radius = line.get_markersize() / 2 * ax.figure.dpi / 72
        for x, y in ax.transData.transform(np.asarray(line.get_xydata(), dtype=float)):
            if area.x0 - radius <= x <= area.x1 + radius and area.y0 - radius <= y <= area.y1 + radius:
                discs.append((x, y, radius))
    return np.array(discs).reshape(-1, 3)


def line_samples(ax, spacing: float = 4.0) -> np.ndarray:
    """Points every ``spacing`` pixels along the data lines of ``ax`` (steps drawn as steps)."""
    samples = []
    for line in ax.get_lines():
        if line.get_linestyle() in ("None", "", " ") or line.get_transform() != ax.transData:
            continue
        xy = ax.transData.transform(np.asarray(line.get_xydata(), dtype=float))
        if line.get_drawstyle() == "steps-post" and len(xy) > 1:
            corners = np.column_stack([xy[1:, 0], xy[:-1, 1]])
            xy = np.insert(xy, np.arange(1, len(xy)), corners, axis=0)  # (x0,y0) (x1,y0) (x1,y1) ...
        for (x0, y0), (x1, y1) in zip(xy[:-1], xy[1:], strict=True):
            count = max(1, int(math.hypot(x1 - x0, y1 - y0) / spacing))
            t = np.linspace(0.0, 1.0, count + 1)
            samples.append(np.column_stack([x0 + t * (x1 - x0), y0 + t * (y1 - y0)]))
    return np.concatenate(samples) if samples else np.zeros((0, 2))


def text_box(annotation, renderer):
    """The pixel box of an annotation's text and its frame (an Annotation's own extent includes
    its arrow)."""
    from matplotlib.text import Text

    annotation.update_positions(renderer)  # where the offset puts the text now
    return Text.get_window_extent(annotation, renderer).padded(_PAD)


def covers(box, discs: np.ndarray) -> int:
    """How many discs (x, y, r) the box (a matplotlib Bbox, pixels) touches."""
    if len(discs) == 0:
        return 0
    dx = np.maximum(np.maximum(box.x0 - discs[:, 0], 0), discs[:, 0] - box.x1)
    dy = np.maximum(np.maximum(box.y0 - discs[:, 1], 0), discs[:, 1] - box.y1)
    return int(np.count_nonzero(dx * dx + dy * dy < discs[:, 2] ** 2))


def _inside(box, points: np.ndarray) -> int:
    if len(points) == 0:
        return 0
    x, y = points[:, 0], points[:, 1]
    return int(np.count_nonzero((x >= box.x0) & (x <= box.x1) & (y >= box.y0) & (y <= box.y1)))


class Placer:
    """Labels placed one after another on ``ax``; each avoids the markers, the lines, the legend
    and the labels placed before it. Call after the axes' limits and layout are final."""

    def __init__(self, fig, ax):
        self.fig = fig
        self.ax = ax
        self.renderer = fig.canvas.get_renderer()
        self.discs = marker_discs(ax)
        self.lines = line_samples(ax)
        self.area = ax.get_window_extent(self.renderer)
        self.boxes: list = []

    def _score(self, box, distance: float) -> float:
        outside = box.x0 < self.area.x0 or box.x1 > self.area.x1 or box.y0 < self.area.y0 or box.y1 > self.area.y1
        overlaps = sum(box.overlaps(other) for other in self.boxes)
        return (
            1e6 * outside + 1e4 * covers(box, self.discs) + 1e3 * overlaps + 10.0 * _inside(box, self.lines) + distance
        )

    def place_legend(self, handles: Sequence) -> None:
        """The legend in the corner or side where it covers the fewest markers and lines."""
        if not handles:
            return
        best = None
        for loc in ("upper right", "upper left", "lower left", "lower right", "center right", "upper center"):
            legend = self.ax.legend(handles=handles, loc=loc, fontsize=8, framealpha=0.9)
            box = legend.get_window_extent(self.renderer).padded(2)
            score = self._score(box, 0.0)
            if best is None or score < best[0]:
                best = (score, loc, box)
        score, loc, box = best
        self.ax.legend(handles=handles, loc=loc, fontsize=8, framealpha=0.9)
        self.boxes.append(box)

    def place(self, text: str, xy: tuple[float, float], small: bool = False):
        """Annotate data point ``xy`` with ``text`` where it hides nothing; returns the annotation."""
        best = None
        boxes = {}  # the text's box at each alignment, laid out once at the first distance
        for distance in _DISTANCES:
            for angle in _ANGLES:
                dx, dy = distance * math.cos(angle), distance * math.sin(angle)
                alignment = _alignment(dx, dy)
                if alignment not in boxes:
                    annotation = self._annotation(text, xy, dx, dy, small)
                    boxes[alignment] = (text_box(annotation, self.renderer), dx, dy)
                    annotation.remove()
                # farther out the same alignment only moves the box: offsets are in points
                first, dx0, dy0 = boxes[alignment]
                scale = self.fig.dpi / 72.0
                box = first.translated((dx - dx0) * scale, (dy - dy0) * scale)
                score = self._score(box, distance)
                if best is None or score < best[0]:
                    best = (score, dx, dy, box)
            if best[0] <= distance:  # hides nothing, not even a line: no need to go farther
                break
        _, dx, dy, box = best
        self.boxes.append(box)
        return self._annotation(text, xy, dx, dy, small)

    def _annotation(self, text: str, xy, dx: float, dy: float, small: bool):
        ha, va = _alignment(dx, dy)
        return self.ax.annotate(
            text,
            xy,
            xytext=(dx, dy),
            textcoords="offset points",
            ha=ha,
            va=va,
            fontsize=7 if small else 8,
            color="dimgray" if small else "black",
            bbox={"boxstyle": "round,pad=0.2", "fc": "white", "alpha": 0.9, "lw": 0.5},
            arrowprops={"arrowstyle": "-", "color": "gray", "lw": 0.6, "shrinkA": 0, "shrinkB": 4},
            annotation_clip=False,
            zorder=7,
        )


def _alignment(dx: float, dy: float) -> tuple[str, str]:
    """The text's (horizontal, vertical) alignment for an offset (points): away from its point."""
    horizontal = "left" if dx > 1 else "right" if dx < -1 else "center"
    return horizontal, ("bottom" if dy > 1 else "top" if dy < -1 else "center")
