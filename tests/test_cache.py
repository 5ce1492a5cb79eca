"""The one cache registry (remat/cache.py): bounded keyed caches, memoized functions, and
clear_caches() emptying every cache of remat, the DP's included."""

from __future__ import annotations

from remat.cache import KeyedCache, clear_caches, memo
from remat.solver import solve
from remat.solver.chain.dp.cache import CACHE
from remat.solver.chain.optimal import minimum_budget
from tests.conftest import three_stage_chain


def test_a_keyed_cache_keeps_its_bound_least_recently_used_out():
    cache = KeyedCache(items=2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # "a" is now the most recent
    cache.put("c", 3)
    assert "b" not in cache and cache.get("a") == 1 and cache.get("c") == 3


def test_a_keyed_cache_bounded_by_bytes_keeps_the_newest_entry():
    cache = KeyedCache(nbytes=10, size=len, refresh=False)
    cache.put("a", "x" * 6)
    cache.put("b", "y" * 6)
    assert "a" not in cache and len(cache) == 1
    cache.put("c", "z" * 50)  # over the bound alone: kept
    assert list(cache._entries) == ["c"]


def test_clear_caches_empties_keyed_caches_memos_and_the_dp():
    calls = []

    @memo()
    def square(x: int) -> int:
        calls.append(x)
        return x * x

    cache = KeyedCache(items=4)
    cache.put("k", 1)
    assert square(3) == square(3) == 9 and calls == [3]
    profile = three_stage_chain()
    clear_caches()  # the count below must not depend on what earlier tests in this process solved
    cache.put("k", 1)
    solve(profile, minimum_budget(profile), "optimal")  # below store-all: the front is built
    assert CACHE.count("front") == 1
    clear_caches()
    assert len(cache) == 0 and CACHE.count("front") == 0
    assert square(3) == 9 and calls == [3, 3]
