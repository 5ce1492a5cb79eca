"""revolve against Griewank's closed form, computed here independently of remat.solver.chain.revolve.

Mapping onto our ops. In Griewank's setting a chain of l steps is reversed with c checkpoints
(the state before step 1, our a[0], occupies one of them). Each step is reversed by an "adjoint
step" that reruns it once, recorded, and backpropagates it: in our ops ``F_all i, B i``; there
are exactly l of them and Griewank does not count them. What he counts, the *forward steps*,
are the advances that only move a state along (from a checkpoint, or in the first sweep): our
``F_ck`` (advance and keep the state it started from) and ``F_n`` (advance and drop it). So
revolve's forward-step count is the number of ``F_ck`` plus ``F_n`` ops.

Closed form (Griewank 1992, "Achieving logarithmic growth of temporal and spatial complexity in
reverse automatic differentiation"; Griewank & Walther 2000, "Algorithm 799: revolve"): with
r the smallest integer such that C(c + r, c) >= l,

    t(l, c) = r * l - C(c + r, r - 1)

(and t = 0 for l = 1). E.g. c = 1: r = l - 1, t = (l - 1) l - C(l, l - 2) = l (l - 1) / 2, the
walk from a[0] before every step. The test also checks this closed form against the optimal
substructure recurrence t(l, c) = min_m [m + t(l - m, c - 1) + t(m, c)], so it is not taken on
faith.
"""

from __future__ import annotations

from functools import cache
from math import comb

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remat.schedules import InfeasibleBudgetError, simulate
from remat.solver import solve
from remat.solver.chain.revolve import revolve_ops
from tests.conftest import three_stage_chain, uniform_chain


def closed_form(length: int, slots: int) -> int:
    r = 0
    while comb(slots + r, slots) < length:
        r += 1
    return r * length - (comb(slots + r, r - 1) if r >= 1 else 0)


@cache
def recurrence(length: int, slots: int) -> int:
    if length <= 1:
        return 0
    if slots == 1:
        return sum(range(length))
    return min(m + recurrence(length - m, slots - 1) + recurrence(m, slots) for m in range(1, length))


def _advances(ops) -> int:
    return sum(1 for name, _ in ops if name in ("F_ck", "F_n"))


def test_closed_form_is_the_optimum_of_the_recurrence():
    for length in range(1, 61):
        for slots in range(1, 6):
            assert closed_form(length, slots) == recurrence(length, slots), (length, slots)


@pytest.mark.parametrize("slots", [1, 2, 3, 4, 5])
def test_forward_steps_equal_closed_form(slots):
    for length in range(1, 61):
        chain = uniform_chain(length)
        schedule = solve(chain, 10**9, "revolve", checkpoints=slots)
        ops = schedule.ops
        assert _advances(ops) == closed_form(length, slots), (length, slots)
        assert sum(1 for name, _ in ops if name == "F_all") == length
        assert schedule.extra["forward_steps"] == closed_form(length, slots)
        # one forward per op in this chain (1 ms each), one backward per stage (2 ms each)
        assert schedule.predicted.compute_ms == pytest.approx(closed_form(length, slots) + length + 2 * length)


@pytest.mark.parametrize("slots", [1, 2, 3, 5])
def test_never_holds_more_than_c_checkpoints(slots):
    """Every item is 1 byte here, so before an adjoint step's F_all the memory counts the held
    states a[.] plus the gradient g[i+1] (absent before the first B). The held states are the
    checkpoints (at most c, a[0] included) and the working state a[i] being reversed when it is
    not itself a checkpoint, as in Griewank's model, where the current state is not a snapshot."""
    for length in range(1, 40):
        result = simulate(uniform_chain(length), revolve_ops(length, slots))
        held = []
        backward_started = False
        for record in result.timeline:
            if record.op == "F_all":
                held.append(record.memory_before - (1 if backward_started else 0))
            if record.op == "B":
                backward_started = True
        assert max(held) == min(slots + 1, length), (length, slots)


def test_more_slots_never_more_forward_steps():
    for length in range(1, 61):
        counts = [closed_form(length, c) for c in range(1, 8)]
        assert counts == sorted(counts, reverse=True)
        assert _advances(revolve_ops(length, 7)) == counts[-1]


def test_budget_picks_largest_slot_count_that_fits():
    chain = uniform_chain(20)
    generous = solve(chain, 10**9, "revolve")
    assert generous.extra["checkpoints"] == 19
    assert generous.extra["forward_steps"] == 19  # r = 1: each stage but the last advanced once
    tight = solve(chain, 6, "revolve")
    assert tight.predicted.peak_memory <= 6
    assert simulate(chain, revolve_ops(20, tight.extra["checkpoints"] + 1)).peak_memory > 6
    with pytest.raises(InfeasibleBudgetError) as info:
        solve(chain, 2, "revolve")
    assert info.value.min_budget == solve(chain, 10**9, "revolve", checkpoints=1).predicted.peak_memory


def test_slots_option_validated():
    from remat.schedules import RematError

    with pytest.raises(RematError, match=r"slots: must be a positive integer"):
        solve(three_stage_chain(), 10**9, "revolve", checkpoints=0)


@settings(max_examples=200, deadline=None)
@given(length=st.integers(1, 120), slots=st.integers(1, 130))
def test_compiled_builder_gives_revolve_ops(length, slots):
    """The arrays the slot-count search simulates are revolve_ops' ops, op for op."""
    import numpy as np

    from remat.schedules import fast_chain
    from remat.solver.chain.revolve_kernel import revolve_codes

    kinds, indices = revolve_codes(length, slots)
    expected = fast_chain.encode(revolve_ops(length, slots))
    assert np.array_equal(kinds, expected[0]) and np.array_equal(indices, expected[1])


def test_slot_count_search_peaks_equal_the_simulator():
    from remat.schedules.simulator import _simulate_chain_reference
    from remat.solver.chain.revolve import _peaks
    from tests.solver.chain.test_optimal_kernel import random_chain

    profile = random_chain(60, 3, 1000)  # heterogeneous sizes: peaks not monotone in the count
    choices = tuple(range(1, profile.length))
    reference = [_simulate_chain_reference(profile, revolve_ops(profile.length, c), False).peak_memory for c in choices]
    assert _peaks(profile, choices) == reference
