"""What the chain DP keeps between calls, in one owner: :data:`CACHE`, a
:class:`~remat.cache.KeyedCache` per kind (so :func:`remat.cache.clear_caches` empties it).

Every entry is keyed by its kind and a key that starts with the profile's digest, and each kind
is bounded on its own (:data:`BOUNDS`):

* ``"table"``: filled single-option tables (:class:`~remat.solver.chain.dp.table.Table`), kept
  while their decisions add up to at most :data:`TABLE_BYTES` (at least one is kept), least
  recently used first out: a 1000-stage front is 3 tables, ~410 MB of decisions (int16) in all;
* ``"minimum"``, ``"front"``: a profile's exact minimum and its front, for :data:`PROFILES` profiles;
* ``"options table"``, ``"options front"``: the multi-option DP's tables and fronts
  (:data:`PROFILES` each).

Apart from the tables, the first entry in is the first out. What is kept is work, never an
answer: every entry is a function of its key, so a solve answers alike whatever came before
(``tests/solver/test_history.py``). ``CACHE.clear()`` forgets everything: the next call recomputes.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any

from remat.cache import KeyedCache


@dataclass(frozen=True)
class Bound:
    """How much of one kind is kept: at most ``items`` entries, or entries of at most ``nbytes``
    bytes in all as ``size`` counts them (the newest one is always kept); ``refresh``: a hit makes
    the entry the most recent (least recently used out), else the first in is the first out."""

    items: int | None = None
    nbytes: int | None = None
    size: Callable[[Any], int] | None = None
    refresh: bool = False


class DPCache:
    """A :class:`~remat.cache.KeyedCache` per kind, bounded as ``bounds`` says (see the module doc).
    Not shared across processes; the front's threads only read it while the caller stores what
    they filled."""

    def __init__(self, bounds: Mapping[str, Bound]) -> None:
        self._kinds = {
            kind: KeyedCache(items=b.items, nbytes=b.nbytes, size=b.size, refresh=b.refresh)
            for kind, b in bounds.items()
        }

    def __contains__(self, kind_key: tuple[str, Hashable]) -> bool:
        kind, key = kind_key
        return key in self._kinds[kind]

    def get(self, kind: str, key: Hashable, default: Any = None) -> Any:
        """The entry, or ``default``; a hit on a refreshing kind makes it the most recent."""
        return self._kinds[kind].get(key, default)

    def put(self, kind: str, key: Hashable, value: Any) -> None:
        """Store ``value`` (an existing key keeps its place in the order), then drop the oldest
        entries of that kind past its bound."""
        self._kinds[kind].put(key, value)

    def get_or_put(self, kind: str, key: Hashable, compute: Callable[[], Any]) -> Any:
        """The entry, computing and storing it on a miss."""
        return self._kinds[kind].get_or_put(key, compute)

    def clear(self) -> None:
        """Forget every entry of every kind."""
        self.release(*self._kinds)

    def release(self, *kinds: str) -> None:
        """Forget every entry of these kinds (the others are kept)."""
        for kind in kinds:
            self._kinds[kind].clear()

    def count(self, kind: str) -> int:
        """How many entries of ``kind`` are kept."""
        return len(self._kinds[kind])


TABLE_BYTES = 640 << 20  # a 1000-stage front: 3 tables, ~410 MB of decisions (int16) in all
PROFILES = 4  # entries (a profile, or a profile and its slots) kept of each other kind: each O(n**2) bytes at most

BOUNDS = {
    "table": Bound(nbytes=TABLE_BYTES, size=lambda table: table.flat.nbytes, refresh=True),
    "minimum": Bound(items=PROFILES),
    "front": Bound(items=PROFILES),
    "options table": Bound(items=PROFILES),
    "options front": Bound(items=PROFILES),
    # the blocked DP of long chains (remat.solver.chain.dp.blocked): ~130 MB a table at 10,000 stages
    "blocked table": Bound(items=2, refresh=True),
    "blocked minimum": Bound(items=PROFILES),
    "blocked front": Bound(items=PROFILES),
}

CACHE = DPCache(BOUNDS)
TABLES = ("table", "options table", "blocked table")  # the kinds of O(n**2 * slots) bytes each


def release_tables() -> None:
    """Forget the filled DP tables (:data:`TABLES`), keeping the minima and fronts (small):
    a later solve of the same profile at another budget fills its tables again (seconds), and
    until then the host holds no table. remat.checkpoint calls it after each solve of its own, so
    that the tables (tens of MiB at a few hundred stages) do not stay beside the proof and the
    steps (NOTE [The first call's host memory] in remat/api/shapes.py)."""
    CACHE.release(*TABLES)
