"""``remat.clear_caches()``: forget what the solvers and the simulator keep between calls.

The caches it empties are the chain DP's (:data:`remat.solver.chain.dp.cache.CACHE`: tables,
minima, fronts and the remembered answers), the strategies' per-profile costs
(:class:`remat.solver.common.ProfileCache` instances) and the simulator's per-profile arrays.
After it, a solve computes everything again, as in a fresh process. Torch-free.
"""

from __future__ import annotations

import importlib

# (module, name) of each ProfileCache a strategy keeps at module level
_PROFILE_CACHES = (
    ("remat.solver.chain.chen_greedy", "_CANDIDATES"),
    ("remat.solver.chain.recompute_all", "_PEAK"),
    ("remat.solver.chain.revolve", "_PEAKS"),
    ("remat.solver.chain.sequential", "_COSTS"),
    ("remat.solver.graph.hierarchical", "_CACHE"),
)


def clear_caches() -> None:
    """Empty every cache remat keeps in the process (solvers and simulator); the next solve of a
    profile recomputes it from scratch. Safe to call at any time between calls."""
    from remat.schedules import simulator
    from remat.solver.chain.dp.cache import CACHE

    CACHE.clear()
    simulator._ARRAYS.clear()
    for module, name in _PROFILE_CACHES:
        getattr(importlib.import_module(module), name)._items.clear()


__all__ = ["clear_caches"]
