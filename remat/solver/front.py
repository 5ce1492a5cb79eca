"""Points of a memory/compute front: :class:`FrontPoint`, the Pareto filter over them, and the
front's CSV and JSON files. Shared by the chain DP's front, the chain and graph sweeps
(:mod:`remat.solver.pareto`) and ``remat pareto``; imports no strategy.

Units: bytes and milliseconds.
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from remat.schedules import write_json
from remat.schedules.files import atomic_file

FRONT_FORMAT = "remat-front-v1"
CSV_FIELDS = (
    "strategy",
    "budget",
    "peak_memory",
    "compute_ms",
    "recompute_ms",
    "checkpoints",
    "lower_bound_ms",
    "gap",
)


@dataclass(frozen=True)
class FrontPoint:
    """A solved schedule summarized for a front.

    Attributes:
        strategy: the strategy that produced it.
        budget: the budget it was solved for, bytes.
        peak_memory: simulated peak, bytes.
        compute_ms: simulated step time (all ops), milliseconds.
        recompute_ms: step time added over store-all, milliseconds.
        checkpoints: number of stored activations/outputs the schedule keeps at once at most
            (chains: checkpoints a[i] held; graphs: may be None).
        lower_bound_ms: a proven lower bound on compute_ms at this budget (ILP/LP), or None.
        gap: relative gap (compute_ms - lower_bound_ms) / compute_ms, or None if not known.
    """

    strategy: str
    budget: int
    peak_memory: int
    compute_ms: float
    recompute_ms: float
    checkpoints: int | None = None
    lower_bound_ms: float | None = None
    gap: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy,
            "budget": self.budget,
            "peak_memory": self.peak_memory,
            "compute_ms": self.compute_ms,
            "recompute_ms": self.recompute_ms,
            "checkpoints": self.checkpoints,
            "lower_bound_ms": self.lower_bound_ms,
            "gap": self.gap,
        }


def pareto_order(points: list[FrontPoint]) -> list[int]:
    """Indices of the points no other point beats in both peak and time, sorted by peak."""
    order = sorted(range(len(points)), key=lambda i: (points[i].peak_memory, points[i].compute_ms))
    kept: list[int] = []
    best = math.inf
    for i in order:
        if points[i].compute_ms < best - 1e-9 * max(1.0, points[i].compute_ms):
            kept.append(i)
            best = points[i].compute_ms
    return kept


def pareto_filter(points: list[FrontPoint]) -> list[FrontPoint]:
    """Sort by peak memory, keep the points that no other point beats in both peak and time."""
    return [points[i] for i in pareto_order(points)]


def front_rows(points: Iterable[FrontPoint]) -> list[dict[str, Any]]:
    """One dict per point with :data:`CSV_FIELDS` (bytes, milliseconds)."""
    return [{key: point.to_dict()[key] for key in CSV_FIELDS} for point in points]


def write_front_csv(points: Iterable[FrontPoint], path: str | os.PathLike[str]) -> None:
    """CSV with a header row and one row per front point, written atomically
    (remat.schedules.files: the old file survives any failure)."""
    with atomic_file(path, "w") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for row in front_rows(points):
            writer.writerow({k: "" if v is None else v for k, v in row.items()})


def write_front_json(
    profile: Any, points: Iterable[FrontPoint], store_all_ms: float, path: str | os.PathLike[str]
) -> None:
    """``{"format": "remat-front-v1", "profile", "profile_sha256", "store_all_compute_ms", "points": [...]}``."""
    write_json(
        {
            "format": FRONT_FORMAT,
            "profile": profile.name,
            "profile_sha256": profile.sha256,
            "store_all_compute_ms": store_all_ms,
            "points": front_rows(points),
        },
        path,
    )


def overhead_percent(compute_ms: float, store_all_ms: float) -> float:
    """Step-time overhead over store-all, percent."""
    return 100.0 * (compute_ms / store_all_ms - 1.0) if store_all_ms > 0 else 0.0 if math.isfinite(compute_ms) else 0.0
