"""The kernel that fills the ``optimal`` table against the numpy baseline on hypothesis chains (the
fixed cases are in tests/solver/chain/test_optimal_kernel.py): chains longer than the kernel's block of rows
(16), activations far larger than a table's free memory, and fractions of the store-all memory
down to those of the front's lower tables."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.solver.chain.chain_strategies import random_chains
from tests.solver.chain.test_optimal_kernel import assert_same_table

_sizes = st.one_of(st.integers(0, 40), st.integers(1000, 5000), st.integers(10**6, 10**8))
_times = st.one_of(st.just(1.0), st.floats(0.01, 10.0, allow_nan=False))


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    profile=random_chains(_sizes, _times, max_length=40),
    slots=st.sampled_from([3, 25, 120, 500]),
    fraction=st.sampled_from([1.0, 0.5, 1 / 8, 1 / 64, 1 / 512]),
)
def test_kernel_equals_numpy_on_hypothesis_chains(profile, slots, fraction):
    assert_same_table(profile, slots, fraction)
