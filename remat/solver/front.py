"""One point of a memory/compute front, shared by chain and graph sweeps and by ``remat pareto``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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
