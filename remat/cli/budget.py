"""``--budget``: the one resolver (remat.schedules.units.resolve_budget) against a profile's
store-all peak (remat.solver.budget, where the reference lives), its errors named ``--budget``."""

from __future__ import annotations

from remat.solver.budget import budget_bytes


def parse_budget(text: str, profile) -> int:
    """Bytes from ``--budget``: ``123``, ``6GiB``, ``500MB``, ``40%`` or ``0.4`` (of the store-all peak)."""
    return budget_bytes(profile, text, "--budget")


__all__ = ["parse_budget"]
