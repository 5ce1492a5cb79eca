"""What every strategy shares: turning an op list into a simulator-checked :class:`Schedule`."""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from remat.cache import KeyedCache
from remat.schedules import (
    ChainProfile,
    GraphProfile,
    InfeasibleBudgetError,
    Op,
    ProfileError,
    Schedule,
    parse_ops,
    simulate,
)

Profile = ChainProfile | GraphProfile


class SolverBug(AssertionError):
    """A strategy produced something the simulator disagrees with: a bug in remat, not bad input."""


@dataclass(frozen=True)
class Strategy:
    """A registered strategy.

    Attributes:
        name: what users type (``--strategy NAME``).
        kind: ``"chain"`` or ``"graph"`` (the profile type it solves).
        description: one line for ``remat strategies``.
        solve: ``solve(profile, budget, **options) -> Schedule``; budget in bytes.
        options: names of the keyword options ``solve`` accepts (e.g. ``("segments",)``).
        reference: the paper or tool it follows.
        choose: optional ``choose(profile, budget) -> key or None``: which schedule ``solve``
            (without options) would return at this budget, as a hashable key (None: it would
            refuse), without building or simulating it. A budget sweep solves only budgets whose
            key is new, so each distinct schedule is built and simulated once.
    """

    name: str
    kind: str
    description: str
    solve: Callable[..., Schedule]
    options: tuple[str, ...] = ()
    reference: str = ""
    choose: Callable[[Any, int], Hashable | None] | None = None


class ProfileCache:
    """A small least-recently-used cache keyed by a profile's digest (and a key of the caller's):
    strategies keep their candidates' costs here, so a sweep over budgets computes them once
    (a :class:`~remat.cache.KeyedCache`, emptied by :func:`remat.cache.clear_caches`)."""

    def __init__(self, size: int = 4) -> None:
        self._items = KeyedCache(items=size)

    def get(self, profile: Profile, key: Hashable, compute: Callable[[], Any]) -> Any:
        """The cached value for (profile, key), computing and storing it on a miss."""
        return self._items.get_or_put((profile.sha256, key), compute)


def make_schedule(
    profile: Profile,
    budget: int,
    strategy: str,
    ops: Sequence[Op],
    claimed_compute_ms: float | None = None,
    claimed_peak_memory: int | None = None,
    extra: Mapping[str, Any] | None = None,
) -> Schedule:
    """Simulate ``ops`` and wrap them in a :class:`Schedule` whose ``predicted`` is the simulator's.

    Raises :class:`InfeasibleBudgetError` if the simulated peak exceeds ``budget`` (strategies
    should have refused earlier with their smallest feasible budget; this is the safety net), and
    :class:`SolverBug` if a strategy's own claimed cost differs from the simulator's.
    """
    ops = parse_ops(ops if isinstance(ops, (list, tuple)) else list(ops))  # ("F_all", i, 0) -> ("F_all", i)
    result = simulate(profile, ops, timeline=False)
    if claimed_peak_memory is not None and claimed_peak_memory != result.peak_memory:
        raise SolverBug(f"{strategy}: claimed peak {claimed_peak_memory} bytes, simulator says {result.peak_memory}")
    if claimed_compute_ms is not None and not math.isclose(
        claimed_compute_ms, result.compute_ms, rel_tol=1e-6, abs_tol=1e-6
    ):
        raise SolverBug(f"{strategy}: claimed {claimed_compute_ms} ms, simulator says {result.compute_ms} ms")
    if result.peak_memory > budget:
        raise InfeasibleBudgetError(strategy, budget, None, f"its schedule peaks at {result.peak_memory} bytes")
    return Schedule(
        profile=profile.name,
        profile_sha256=profile.sha256,
        strategy=strategy,
        budget=int(budget),
        ops=ops,
        predicted=result.prediction,
        extra=dict(extra or {}),
    )


def require_chain(profile: Profile, strategy: str) -> ChainProfile:
    """Return ``profile`` if it is a chain, else raise a one-line error."""
    if not isinstance(profile, ChainProfile):
        raise ProfileError(f"strategy '{strategy}' solves chain profiles; this profile is a graph")
    return profile


def require_graph(profile: Profile, strategy: str) -> GraphProfile:
    """Return ``profile`` if it is a graph, else raise a one-line error."""
    if not isinstance(profile, GraphProfile):
        raise ProfileError(f"strategy '{strategy}' solves graph profiles; this profile is a chain")
    return profile
