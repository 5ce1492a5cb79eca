"""The compiled chain simulation (remat/schedules/fast_chain.py) against the reference Python
simulator: identical validity, peak, step time and recompute time on random valid schedules (from
every chain strategy's op builders) and on random corruptions of them."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remat.schedules import ChainProfile, ScheduleError, Stage, fast_chain, simulate
from remat.schedules.simulator import _simulate_chain_reference
from remat.solver.chain.recompute_all import recompute_all_ops
from remat.solver.chain.revolve import revolve_ops
from remat.solver.chain.segments import segment_ops
from remat.solver.chain.store_all import store_all_ops
from tests.solver.chain.chain_strategies import random_chains

sizes = st.one_of(st.just(0), st.integers(1, 1000), st.integers(10**6, 10**12))
times = st.one_of(st.just(0.0), st.floats(0.001, 1e6, allow_nan=False, allow_infinity=False))


def chains(max_length: int = 12):
    return random_chains(sizes, times, max_length=max_length)


def _valid_ops(profile: ChainProfile, rng: random.Random) -> list:
    n = profile.length
    choice = rng.randrange(4)
    if choice == 0:
        return store_all_ops(profile)
    if choice == 1:
        return recompute_all_ops(n)
    if choice == 2:
        return revolve_ops(n, rng.randint(1, n + 1))
    starts = [0, *sorted(rng.sample(range(1, n), rng.randint(0, n - 1)))] if n > 1 else [0]
    return segment_ops(n, starts)


def _corrupt(ops: list, rng: random.Random, n: int) -> list:
    ops = list(ops)
    kind = rng.randrange(4) if ops else 1
    position = rng.randrange(len(ops)) if ops else 0
    if kind == 0:
        del ops[position]
    elif kind == 1:
        ops.insert(position, (rng.choice(["F_ck", "F_n", "F_all", "B"]), rng.randrange(n + 1)))
    elif kind == 2:
        other = rng.randrange(len(ops))
        ops[position], ops[other] = ops[other], ops[position]
    else:
        ops[position] = (ops[position][0], rng.randrange(n + 1))
    return ops


def _compare(profile: ChainProfile, ops: list) -> bool:
    """Assert both simulators agree on ``ops``; return whether the ops were valid."""
    try:
        reference = _simulate_chain_reference(profile, ops, timeline=False)
    except ScheduleError:
        reference = None
    valid, peak, compute, recompute = fast_chain.chain_costs(
        *fast_chain.encode(ops), *fast_chain.profile_arrays(profile)
    )
    assert valid == (reference is not None), ops
    if reference is not None:
        assert int(peak) == reference.peak_memory
        assert float(compute) == reference.compute_ms  # same additions in the same order: equal bits
        assert float(recompute) == reference.recompute_ms
    return reference is not None


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(profile=chains(), seed=st.integers(0, 2**32))
def test_fast_equals_reference_on_valid_and_corrupted_schedules(profile, seed):
    rng = random.Random(seed)
    ops = _valid_ops(profile, rng)
    assert _compare(profile, ops)
    for _ in range(3):
        ops = _corrupt(ops, rng, profile.length)
        _compare(profile, ops)


def test_simulate_uses_the_fast_path_for_long_lists_and_words_errors_like_the_reference():
    stage = Stage("s", 1.0, 2.0, 10, 30, 5, 7, forward_nograd_overhead=3)
    profile = ChainProfile("long", 4, (stage,) * 40)
    ops = recompute_all_ops(profile.length)  # 40 * 41 / 2 + 40 ops, over the fast threshold
    fast = simulate(profile, ops, timeline=False)
    slow = simulate(profile, ops, timeline=True)
    assert (fast.peak_memory, fast.compute_ms, fast.recompute_ms) == (
        slow.peak_memory,
        slow.compute_ms,
        slow.recompute_ms,
    )
    assert fast.timeline == ()
    broken = ops[:100] + ops[101:]
    messages = []
    for timeline in (False, True):
        try:
            simulate(profile, broken, timeline=timeline)
        except ScheduleError as error:
            messages.append(str(error))
    assert len(messages) == 2 and messages[0] == messages[1]


def test_huge_sizes_fall_back_to_python_integers():
    stage = Stage("s", 1.0, 2.0, 2**70, 2**71)
    profile = ChainProfile("huge", 2**70, (stage,) * 30)
    assert fast_chain.profile_arrays(profile) is None
    result = simulate(profile, recompute_all_ops(30), timeline=False)
    assert result.peak_memory == simulate(profile, recompute_all_ops(30), timeline=True).peak_memory
    assert result.peak_memory > 2**71


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(profile=chains(), seed=st.integers(0, 2**32))
def test_compiled_checkpoint_count_equals_the_python_count(profile, seed):
    from remat.solver.chain.checkpoints import chain_checkpoints, checkpoints_reference

    rng = random.Random(seed)
    ops = _valid_ops(profile, rng)
    for _ in range(4):  # valid ones and corruptions (the rules are the same on any op list)
        assert int(fast_chain.most_held(*fast_chain.encode(ops))) == checkpoints_reference(ops)
        ops = _corrupt(ops, rng, profile.length)
    long_ops = recompute_all_ops(40)  # past FAST_FROM_OPS: the dispatcher takes the compiled count
    assert len(long_ops) >= 256 and chain_checkpoints(long_ops) == checkpoints_reference(long_ops) == 1
