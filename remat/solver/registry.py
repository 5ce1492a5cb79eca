"""The list of strategies, looked up by name and profile kind.

Each strategy lives in its own module and exposes ``STRATEGY``; add it to ``_ALL`` below.
"""

from __future__ import annotations

from typing import Any

from remat.schedules import ChainProfile, GraphProfile, RematError, Schedule
from remat.solver.budget import budget_bytes, profile_kind
from remat.solver.chain import (
    chen_greedy,
    chen_sqrt,
    optimal,
    recompute_all,
    revolve,
    sequential,
    store_all,
)
from remat.solver.common import Strategy
from remat.solver.graph import baselines as graph_baselines
from remat.solver.graph import hierarchical, ilp
from remat.solver.graph.ilp import lp_rounding

_ALL: tuple[Strategy, ...] = (
    store_all.STRATEGY,
    recompute_all.STRATEGY,
    sequential.STRATEGY,
    chen_sqrt.STRATEGY,
    chen_greedy.STRATEGY,
    revolve.STRATEGY,
    optimal.STRATEGY,
    graph_baselines.STORE_ALL,
    graph_baselines.CHEN_SQRT,
    graph_baselines.CHEN_GREEDY,
    ilp.STRATEGY,
    lp_rounding.STRATEGY,
    hierarchical.STRATEGY,
)

STRATEGIES: dict[tuple[str, str], Strategy] = {(s.kind, s.name): s for s in _ALL}


def strategy_names(kind: str | None = None) -> list[str]:
    """Names of the registered strategies (of one kind, or all), in registration order."""
    names: list[str] = []
    for strategy in _ALL:
        if (kind is None or strategy.kind == kind) and strategy.name not in names:
            names.append(strategy.name)
    return names


def get_strategy(name: str, kind: str) -> Strategy:
    """The strategy ``name`` for ``kind`` (``"chain"`` or ``"graph"``), or a one-line error."""
    strategy = STRATEGIES.get((kind, name))
    if strategy is None:
        available = ", ".join(strategy_names(kind)) or "none"
        raise RematError(f"unknown strategy '{name}' for a {kind} profile (available: {available})")
    return strategy


def solve(profile: ChainProfile | GraphProfile, budget: int | float | str, strategy: str, **options: Any) -> Schedule:
    """Solve ``profile`` under ``budget`` with the named strategy.

    ``budget`` is bytes (an int, or ``"6GiB"``) or a share of the profile's store-all peak
    (``"40%"``, ``0.4``, ``"0.4"``), read by the one resolver (remat.solver.budget). Options that
    are ``None`` are dropped; an option the strategy does not take is an error.
    """
    chosen = get_strategy(strategy, profile_kind(profile))
    given = {k: v for k, v in options.items() if v is not None}
    for key in given:
        if key not in chosen.options:
            takes = ", ".join(chosen.options) or "no options"
            raise RematError(f"option '{key}' does not apply to strategy '{strategy}' (it takes: {takes})")
    return chosen.solve(profile, budget_bytes(profile, budget), **given)


__all__ = ["STRATEGIES", "Strategy", "get_strategy", "solve", "strategy_names", "GraphProfile"]
