"""parse_ops: the bulk check of plain op lists (remat/schedules/schedule.py's _plain_pairs) accepts
exactly what the op-by-op check accepts, with the same result; anything else goes to the op-by-op
check, whose error names the op."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remat.schedules import ScheduleError, parse_ops
from remat.schedules.schedule import _parse_each, _plain_pairs

names = st.sampled_from(["F_ck", "F_n", "F_all", "B", "compute", "free", "f_ck", ""])
indices = st.one_of(st.integers(-2, 50), st.just(True), st.just(1.0), st.just("3"), st.none())
ops = st.one_of(
    st.tuples(names, indices),
    st.lists(st.one_of(names, indices), min_size=1, max_size=4),
    st.tuples(st.just("F_all"), st.integers(0, 5), st.integers(0, 3)),
)


def _outcome(parse, raw):
    try:
        return parse(raw)
    except ScheduleError as error:
        return str(error)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(raw=st.lists(ops, max_size=12))
def test_bulk_check_agrees_with_the_op_by_op_check(raw):
    bulk = _plain_pairs(raw)
    each = _outcome(_parse_each, raw)
    if bulk is not None:
        assert bulk == each  # accepted in bulk: accepted op by op, with equal ops
    assert _outcome(parse_ops, raw) == each


def test_bulk_path_keeps_ints_and_refuses_lookalikes():
    assert parse_ops([["F_ck", 0], ("B", 0)]) == (("F_ck", 0), ("B", 0))
    for bad, word in ((("F_ck", True), "True"), (("F_ck", -1), "-1"), (("F_ck", 1.0), "1.0")):
        with pytest.raises(ScheduleError, match=word):
            parse_ops([("F_ck", 0), bad])
    with pytest.raises(ScheduleError, match="mixes chain ops"):
        parse_ops([("F_ck", 0), ("compute", 1)])
    with pytest.raises(ScheduleError, match=r"unknown op \['F_ck'\]"):
        parse_ops([[["F_ck"], 0]])
