"""``--budget``: the one resolver (remat.schedules.units.resolve_budget) against a profile's
store-all peak (remat.solver.budget, where the reference lives; re-exported here for the CLI)."""

from __future__ import annotations

from remat.solver.budget import budget_bytes, profile_kind, reference_peak


def parse_budget(text: str, profile) -> int:
    """Bytes from ``--budget``: ``123``, ``6GiB``, ``500MB``, ``40%`` or ``0.4`` (of the store-all peak)."""
    return budget_bytes(profile, text, "--budget")


__all__ = ["parse_budget", "profile_kind", "reference_peak"]
