"""The store-all reference of a profile, and a budget in any form as bytes for that profile.

``40%`` and ``0.4`` are shares of :func:`reference_peak`, and every "% of the store-all peak" that
remat prints divides by it; the forms themselves are read by the one resolver,
:func:`remat.schedules.units.resolve_budget` (docs/formats.md, "Budgets").
"""

from __future__ import annotations

from remat.schedules import ChainProfile, GraphProfile
from remat.schedules.units import resolve_budget
from remat.solver.chain.store_all import store_all_peak
from remat.solver.graph.baselines import store_all_plan
from remat.solver.graph.stages import plan_peak


def profile_kind(profile: ChainProfile | GraphProfile) -> str:
    """``chain`` or ``graph``: the kind of strategy that solves ``profile``."""
    return "chain" if isinstance(profile, ChainProfile) else "graph"


def reference_peak(profile: ChainProfile | GraphProfile) -> int:
    """Store-all peak (bytes) of a profile: the simulated peak of the store-all strategy's
    schedule, the one reference for budgets given as shares (and for every "% of the store-all
    peak" remat prints)."""
    if isinstance(profile, ChainProfile):
        return store_all_peak(profile)
    return plan_peak(profile, store_all_plan(profile))


def budget_bytes(profile: ChainProfile | GraphProfile, budget: int | float | str, name: str = "budget") -> int:
    """Bytes of ``budget`` (int bytes, ``"6GiB"``, ``"40%"``, ``0.4`` or ``"0.4"``) for ``profile``:
    a share is of :func:`reference_peak`, computed only then. Errors are one line naming ``name``."""
    return resolve_budget(budget, lambda: reference_peak(profile), name)


__all__ = ["budget_bytes", "profile_kind", "reference_peak"]
