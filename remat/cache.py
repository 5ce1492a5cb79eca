"""remat's caches, in one registry, and :func:`clear_caches`, which empties every one of them.

A cache keeps work between calls (a profile's DP tables, a strategy's candidate costs, a
profile's arrays for the compiled simulator, a JSON Schema read from disk), never an answer that
a call's own arguments do not determine: after :func:`clear_caches` every call answers as it did
before, only slower the first time (``tests/solver/test_history.py``).

Every cache is made here, and registers itself as it is made: :class:`KeyedCache` (bounded by
entries or by bytes, least recently used or first in out first) and :func:`memo` (a
:func:`functools.lru_cache`). Torch-free, and the bottom of the house: it imports nothing of remat.

Two ``functools.cache`` stay outside it on purpose, as they are no caches but once-per-process
actions that clearing would repeat: registering the CPU flash attention's FLOP formulas
(:func:`remat.models.meta.count_cpu_flash_attention_flops`) and spending torch's unknown-block
warning (``remat.measure.allocator``).
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

# The one module-level mutable state of remat's caches: each cache's ``clear``, appended once as
# the module that owns the cache is imported. It only grows (caches live as long as their
# modules), and clear_caches() needs every cache of the process without importing their modules.
_CLEARS: list[Callable[[], None]] = []


def clear_caches() -> None:
    """Empty every cache remat keeps in this process (the next calls recompute what they need)."""
    for clear in _CLEARS:
        clear()


class KeyedCache:
    """Entries by key, bounded: at most ``items`` of them, or at most ``nbytes`` bytes in all as
    ``size(entry)`` counts them (the newest entry is always kept). ``refresh``: a hit makes the
    entry the most recent (least recently used out), else the first in is the first out.
    Registered with :func:`clear_caches` when made."""

    def __init__(
        self,
        items: int | None = None,
        nbytes: int | None = None,
        size: Callable[[Any], int] | None = None,
        refresh: bool = True,
    ) -> None:
        self.items, self.nbytes, self.size, self.refresh = items, nbytes, size, refresh
        self._entries: OrderedDict[Hashable, Any] = OrderedDict()
        _CLEARS.append(self.clear)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable, default: Any = None) -> Any:
        """The entry, or ``default``; a hit on a refreshing cache makes it the most recent."""
        if key not in self._entries:
            return default
        if self.refresh:
            self._entries.move_to_end(key)
        return self._entries[key]

    def put(self, key: Hashable, value: Any) -> None:
        """Store ``value`` (an existing key keeps its place in the order), then drop the oldest
        entries past the bound."""
        self._entries[key] = value
        if self.items is not None:
            while len(self._entries) > self.items:
                self._entries.popitem(last=False)
        if self.nbytes is not None and self.size is not None:
            while len(self._entries) > 1 and sum(map(self.size, self._entries.values())) > self.nbytes:
                self._entries.popitem(last=False)

    def get_or_put(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """The entry, computed and stored on a miss."""
        found = self.get(key, _MISSING)
        if found is _MISSING:
            found = compute()
            self.put(key, found)
        return found

    def clear(self) -> None:
        """Forget every entry."""
        self._entries.clear()


def memo(maxsize: int | None = None) -> Callable[[F], F]:
    """:func:`functools.lru_cache` of ``maxsize`` entries (None: unbounded), registered with
    :func:`clear_caches`. For pure functions of hashable arguments only."""

    def wrap(function: F) -> F:
        cached = functools.lru_cache(maxsize=maxsize)(function)
        _CLEARS.append(cached.cache_clear)
        return cached  # type: ignore[return-value]

    return wrap


_MISSING = object()

__all__ = ["KeyedCache", "clear_caches", "memo"]
