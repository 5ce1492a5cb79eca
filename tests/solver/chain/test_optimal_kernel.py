"""The numba kernel that fills the ``optimal`` DP table against the numpy-vectorized implementation it
replaced (kept as a baseline in benchmarks/optimal_numpy.py): on random chains both must give the
same bounds, the same float32 optimum at every level and the same decision in every cell.

Chains stay under 97 stages, where the numpy version evaluates every split point (its block
pruning starts after 96 candidates), so both are compared with the plain recurrence's choices.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from benchmarks.optimal_numpy import build_table_numpy
from remat.schedules import ChainProfile, Stage
from remat.solver.chain.dp.table import STORE_ALL, build_table, slot_size
from remat.solver.chain.optimal import minimum_budget
from remat.solver.chain.store_all import store_all_peak


def random_chain(n: int, seed: int, unit: int) -> ChainProfile:
    """Sizes in multiples of ``unit`` bytes (1: arbitrary sizes), transients on some stages, some
    stages much bigger than others, some times tied (ties between split points must break alike)."""
    rng = random.Random(seed)
    stages = []
    for i in range(n):
        out = unit * rng.randint(1, 40) * rng.choice([1, 1, 1, 8])
        stages.append(
            Stage(
                name=f"s{i}",
                forward_ms=rng.choice([1.0, rng.uniform(0.1, 3.0)]),
                backward_ms=rng.choice([2.0, rng.uniform(0.2, 6.0)]),
                output_size=out,
                saved_size=out + unit * rng.randint(0, 60),
                forward_overhead=rng.choice([0, unit * rng.randint(0, 20)]),
                backward_overhead=rng.choice([0, unit * rng.randint(0, 30)]),
            )
        )
    return ChainProfile(name=f"kernel{n}-{seed}", input_size=unit * rng.randint(1, 30), stages=tuple(stages))


def assert_same_table(profile: ChainProfile, slots: int, fraction: float = 1.0) -> int:
    """Fill both tables for ``fraction`` of the store-all free memory; return the cells compared."""
    free = max(1, int(fraction * (store_all_peak(profile) - profile.input_size)))
    slot = slot_size(free, slots)
    levels = min(slots, free // slot)
    kernel = build_table(profile, slot, levels)
    baseline = build_table_numpy(profile, slot, levels)
    n = profile.length
    upper = np.triu_indices(n + 1)
    assert np.array_equal(kernel.lo[upper], baseline.lo[upper])
    assert np.array_equal(kernel.hi[upper], baseline.hi[upper])
    assert np.array_equal(kernel.top, baseline.top)  # bit for bit, inf included
    assert kernel.flat.size == sum(d.size for d in baseline.decisions.values())
    cells = 0
    for (s, t), expected in baseline.decisions.items():
        got = kernel.segment_decisions(s, t)
        assert np.array_equal(got, expected), (s, t, np.flatnonzero(got != expected)[:5])
        lo = int(baseline.lo[s, t])
        for offset in (0, expected.size // 2, expected.size - 1):
            if expected.size:
                assert kernel.decision(s, t, lo + offset) == int(expected[offset])
        cells += expected.size
    # outside the computed runs: infeasible below lo, store-all from hi on (segments of 2+ stages)
    for s, t in ((0, n), (n // 2, n), (0, max(1, n // 2))):
        if t - s >= 2:
            if baseline.lo[s, t] > 0:
                assert kernel.decision(s, t, int(baseline.lo[s, t]) - 1) == -1
            if baseline.hi[s, t] <= levels:
                assert kernel.decision(s, t, int(baseline.hi[s, t])) == STORE_ALL
    return cells


@pytest.mark.parametrize("seed", range(12))
def test_kernel_equals_numpy_on_random_chains(seed):
    rng = random.Random(1000 + seed)
    n = rng.randint(2, 30)
    unit = rng.choice([1, 1024])
    slots = rng.choice([7, 40, 150, 500])
    profile = random_chain(n, seed, unit)
    cells = assert_same_table(profile, slots, fraction=rng.choice([1.0, 0.6, 0.3]))
    if n >= 8 and slots >= 40:
        assert cells > 0  # the comparison covered computed cells, not only the shortcuts


def test_kernel_equals_numpy_on_a_longer_chain():
    # 90 stages: long segments, where the kernel's pruning of split points is active
    assert assert_same_table(random_chain(90, 7, 1), 300) > 100_000


def test_kernel_equals_numpy_near_the_minimum():
    # 90 stages with a table just above the least memory: every level is far from store-all, the
    # SA bound prunes little and the split-skip (a split's value at the band's top level against
    # the best so far at its first level) and the whole-chunk relax loop do the pruning
    profile = random_chain(90, 11, 1)
    free = minimum_budget(profile) - profile.input_size
    fraction = 1.3 * free / (store_all_peak(profile) - profile.input_size)
    assert assert_same_table(profile, 250, fraction=fraction) > 10_000


def test_kernel_on_one_stage_and_tiny_budgets():
    one = random_chain(1, 3, 1)
    assert_same_table(one, 50)
    two = random_chain(5, 4, 1)
    assert_same_table(two, 3, fraction=0.05)  # almost everything infeasible
