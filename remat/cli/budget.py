"""Budgets and the one reference they are shares of: the store-all peak (bytes).

``--budget 40%`` is 40% of :func:`reference_peak`, and every "% of the store-all peak" that remat
prints divides by it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from remat.schedules import ChainProfile, RematError, parse_size
from remat.solver import get_strategy


def profile_kind(profile) -> str:
    """``chain`` or ``graph``: the kind of strategy that solves ``profile``."""
    return "chain" if isinstance(profile, ChainProfile) else "graph"


def reference_peak(profile) -> int:
    """Store-all peak (bytes) of a profile: the simulated peak of the store-all strategy's
    schedule, the one reference for budgets given as percentages (and for every "% of the
    store-all peak" remat prints)."""
    # a budget no profile can exceed (sizes are Python ints): the strategy never refuses it
    unbounded = sum(_item_sizes(profile)) * 2 + 1
    return get_strategy("store-all", profile_kind(profile)).solve(profile, unbounded).predicted.peak_memory


def _item_sizes(profile) -> Iterator[int]:
    """Every byte count in the profile (each integer field of its stages or nodes)."""
    items = profile.stages if isinstance(profile, ChainProfile) else profile.nodes
    if isinstance(profile, ChainProfile):
        yield profile.input_size
    for item in items:
        for f in dataclasses.fields(item):
            value = getattr(item, f.name)
            if isinstance(value, int) and not isinstance(value, bool):
                yield value


def parse_budget(text: str, profile) -> int:
    """Bytes from ``6GiB``, ``500MB``, ``123`` or ``40%`` (of the store-all peak)."""
    reference = reference_peak(profile) if text.strip().endswith("%") else None
    try:
        return parse_size(text, reference)
    except RematError as error:
        raise RematError(f"--budget: {error}") from None


__all__ = ["parse_budget", "profile_kind", "reference_peak"]
