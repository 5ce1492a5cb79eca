"""The simulator against peaks computed by hand (tests/conftest.py's three-stage chain).

Chain: a_0 = 1 byte. Stage 0: out 10, saved 30, fwd overhead 2, bwd overhead 3, 1 ms / 2 ms.
Stage 1: out 100, saved 300, overheads 20 / 30, 10 ms / 20 ms. Stage 2: out 1000, saved 3000,
overheads 200 / 300, 100 ms / 200 ms. Store-all time: 333 ms.
"""

from __future__ import annotations

import pytest

from remat.schedules import GraphNode, GraphProfile, ScheduleError, simulate
from remat.solver import make_schedule
from remat.solver.common import SolverBug


def _peaks(result):
    return [(r.memory_before, r.peak, r.memory_after) for r in result.timeline]


def test_store_all_by_hand(chain3):
    ops = [("F_all", 0), ("F_all", 1), ("F_all", 2), ("B", 2), ("B", 1), ("B", 0)]
    result = simulate(chain3, ops)
    assert _peaks(result) == [
        (1, 1 + 30 + 2, 31),
        (31, 31 + 300 + 20, 331),
        (331, 331 + 3000 + 200, 3331),
        # g[3] (1000) appears before B 2: before = 4331; adds g[2] = 100, transient 300;
        # releases abar[3] (3000) and g[3] (1000); a_2 lives inside abar[2], nothing else to drop.
        (4331, 4331 + 100 + 300, 431),
        (431, 431 + 10 + 30, 41),
        (41, 41 + 1 + 3, 2),  # a[0] stays (the caller owns it) with g[0]
    ]
    assert result.peak_memory == 4731
    assert result.compute_ms == pytest.approx(333.0)
    assert result.recompute_ms == pytest.approx(0.0)


def test_f_ck_keeps_its_input_and_b_releases_a(chain3):
    ops = [("F_ck", 0), ("F_ck", 1), ("F_all", 2), ("B", 2), ("F_all", 1), ("B", 1), ("F_all", 0), ("B", 0)]
    result = simulate(chain3, ops)
    assert _peaks(result) == [
        (1, 1 + 10 + 2, 11),
        (11, 11 + 100 + 20, 111),  # a[1] kept
        (111, 111 + 3000 + 200, 3111),
        (4111, 4111 + 100 + 300, 111),  # B 2 drops abar[3], g[3] and a[2]: a[0] + a[1] + g[2]
        (111, 111 + 300 + 20, 411),  # F_all 1 reads a[1]
        (411, 411 + 10 + 30, 11),  # B 1 drops abar[2], g[2], a[1]: a[0] + g[1]
        (11, 11 + 30 + 2, 41),
        (41, 41 + 1 + 3, 2),
    ]
    assert result.peak_memory == 4511
    assert result.compute_ms == pytest.approx(344.0)
    assert result.recompute_ms == pytest.approx(11.0)


def test_f_n_drops_its_input_but_never_a0(chain3):
    ops = [
        ("F_n", 0),
        ("F_n", 1),
        ("F_all", 2),
        ("B", 2),
        ("F_n", 0),
        ("F_all", 1),
        ("B", 1),
        ("F_all", 0),
        ("B", 0),
    ]
    result = simulate(chain3, ops)
    assert _peaks(result) == [
        (1, 13, 11),  # F_n 0 keeps a[0]
        (11, 11 + 100 + 20, 101),  # F_n 1 drops a[1]
        (101, 101 + 3000 + 200, 3101),
        (4101, 4101 + 100 + 300, 101),
        (101, 101 + 10 + 2, 111),
        (111, 111 + 300 + 20, 411),
        (411, 451, 11),
        (11, 43, 41),
        (41, 45, 2),
    ]
    assert result.peak_memory == 4501
    assert result.recompute_ms == pytest.approx(12.0)  # F_n 0 twice and F_n 1 once: 1 + 1 + 10


def test_transient_overheads_count_only_during_their_op(chain3):
    # Peaks include the overhead, the memory after does not: stage 2's backward overhead (300)
    # is the difference between B 2's peak and its before + g[2].
    ops = [("F_all", 0), ("F_all", 1), ("F_all", 2), ("B", 2), ("B", 1), ("B", 0)]
    timeline = simulate(chain3, ops).timeline
    for record, overhead, added in zip(timeline[:3], (2, 20, 200), (30, 300, 3000), strict=True):
        assert record.peak - record.memory_before == added + overhead
        assert record.memory_after - record.memory_before == added


def test_abar_holds_a_i(chain3):
    # F_ck 1 and F_all 1 may read a_1 from inside abar[1]; F_n 1 may not (it would free a_1).
    ops = [("F_all", 0), ("F_ck", 1), ("F_all", 2), ("B", 2), ("F_all", 1), ("B", 1), ("B", 0)]
    result = simulate(chain3, ops)
    assert result.timeline[1].memory_after == 31 + 100
    with pytest.raises(ScheduleError, match=r"op 1 \(F_n 1\): needs a\[1\], which is only held inside abar"):
        simulate(chain3, [("F_all", 0), ("F_n", 1)])


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        ([("F_all", 1)], r"op 0 \(F_all 1\): needs a_1 \(a\[1\] or abar\[1\]\), which is not in memory"),
        ([("F_ck", 0), ("F_n", 2)], r"op 1 \(F_n 2\): needs a\[2\], which is not in memory"),
        ([("F_ck", 0), ("F_ck", 1), ("F_ck", 2), ("B", 2)], r"op 3 \(B 2\): needs abar\[3\]"),
        ([("F_all", 0), ("F_all", 1), ("F_all", 2), ("B", 1)], r"op 3 \(B 1\): expected B 2"),
        (
            [("F_all", 0), ("F_all", 1), ("F_all", 2), ("B", 2), ("B", 1), ("B", 0), ("F_all", 0)],
            r"op 6 \(F_all 0\): comes after the last backward",
        ),
        ([("F_all", 0), ("F_all", 1), ("F_all", 2), ("B", 2), ("B", 1)], r"schedule ends before B 0"),
        ([], r"schedule ends before B 2"),
        ([("F_ck", 0), ("F_ck", 0)], r"op 1 \(F_ck 0\): a\[1\] is already in memory"),
        ([("F_all", 0), ("F_all", 0)], r"op 1 \(F_all 0\): abar\[1\] is already in memory"),
        ([("F_ck", 3)], r"op 0 \(F_ck 3\): stage index out of range"),
        ([("F_up", 0)], r"ops\[0\]: unknown op 'F_up'"),
        ([("F_all", -1)], r"ops\[0\]: index must be a non-negative integer"),
        ([("compute", 0)], r"graph ops"),
        # B 0 with a_0 present but B 1 missing its abar: the missing item is named.
        ([("F_ck", 0), ("F_all", 1), ("F_all", 2), ("B", 2), ("B", 1), ("B", 0)], r"op 5 \(B 0\): needs abar\[1\]"),
    ],
)
def test_chain_errors_name_op_and_item(chain3, ops, message):
    with pytest.raises(ScheduleError, match=message):
        simulate(chain3, ops)


def test_b_needs_a_i(chain3):
    # abar[2] is recorded from a[1], then F_n 1 frees a[1]: B 1 has its abar but not a_1.
    ops = [("F_ck", 0), ("F_all", 1), ("F_n", 1), ("F_all", 2), ("B", 2), ("B", 1)]
    with pytest.raises(ScheduleError, match=r"op 5 \(B 1\): needs a_1 \(a\[1\] or abar\[1\]\), which is not in memory"):
        simulate(chain3, ops)


def test_same_activation_twice_is_counted_twice(chain3):
    # a_1 inside abar[1] and again as a[1] (F_n 0 keeps a[0]): legal, both held.
    ops = [("F_all", 0), ("F_n", 0), ("F_all", 1), ("F_all", 2), ("B", 2), ("B", 1), ("B", 0)]
    result = simulate(chain3, ops)
    assert result.timeline[1].memory_after == 1 + 30 + 10


def test_make_schedule_refuses_wrong_claims(chain3):
    ops = [("F_all", 0), ("F_all", 1), ("F_all", 2), ("B", 2), ("B", 1), ("B", 0)]
    schedule = make_schedule(chain3, 4731, "store-all", ops, claimed_compute_ms=333.0, claimed_peak_memory=4731)
    assert schedule.predicted.peak_memory == 4731
    with pytest.raises(SolverBug):
        make_schedule(chain3, 10**6, "x", ops, claimed_peak_memory=4730)
    with pytest.raises(SolverBug):
        make_schedule(chain3, 10**6, "x", ops, claimed_compute_ms=334.0)


# ---------------------------------------------------------------- graph


def _graph() -> GraphProfile:
    # 0 -> 1 -> 2, 0 -> 2 (a skip), 2 -> 3; sizes 1, 10, 100, 1000.
    nodes = tuple(GraphNode(name=f"v{i}", time_ms=float(i + 1), size=10**i, backward=i == 3) for i in range(4))
    return GraphProfile(name="g", nodes=nodes, edges=((0, 1), (1, 2), (0, 2), (2, 3)))


def test_graph_peak_by_hand():
    ops = [("compute", 0), ("compute", 1), ("compute", 2), ("free", 1), ("compute", 3)]
    result = simulate(_graph(), ops)
    assert [(r.memory_before, r.peak, r.memory_after) for r in result.timeline] == [
        (0, 1, 1),
        (1, 11, 11),
        (11, 111, 111),
        (111, 111, 101),
        (101, 1101, 1101),
    ]
    assert result.peak_memory == 1101
    assert result.compute_ms == pytest.approx(10.0)
    assert result.recompute_ms == pytest.approx(0.0)
    # recomputing node 1 after freeing it costs its time again
    ops = [("compute", 0), ("compute", 1), ("free", 1), ("compute", 1), ("compute", 2), ("compute", 3)]
    assert simulate(_graph(), ops).recompute_ms == pytest.approx(2.0)


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        ([("compute", 0), ("compute", 2)], r"op 1 \(compute 2\): needs the output of node 1 \('v1'\)"),
        ([("compute", 0), ("free", 1)], r"op 1 \(free 1\): node 1 \('v1'\) is not in memory"),
        ([("compute", 0), ("compute", 0)], r"op 1 \(compute 0\): node 0 \('v0'\) is already in memory"),
        ([("compute", 4)], r"op 0 \(compute 4\): node index out of range"),
        ([("compute", 0), ("compute", 1)], r"never computes node 2 \('v2'\) and 1 other"),
        (
            [("compute", 0), ("compute", 1), ("compute", 2), ("compute", 3), ("free", 1), ("compute", 1)],
            r"last computed node must be the last node \(3\), not 1",
        ),
        ([("F_all", 0)], r"chain ops"),
    ],
)
def test_graph_errors(ops, message):
    with pytest.raises(ScheduleError, match=message):
        simulate(_graph(), ops)


def test_no_recomputation_is_exactly_zero():
    # Summing forwards then backwards and subtracting the per-stage sums used to leave 2.8e-14 ms.
    from remat.schedules import ChainProfile, Stage

    chain = ChainProfile(
        name="float",
        input_size=0,
        stages=(
            Stage("a", forward_ms=64.12883986269449, backward_ms=64.40447596996391, output_size=0, saved_size=0),
            Stage("b", forward_ms=0.0, backward_ms=0.001, output_size=0, saved_size=0),
        ),
    )
    ops = [("F_all", 0), ("F_all", 1), ("B", 1), ("B", 0)]
    assert simulate(chain, ops).recompute_ms == 0.0
    # and a recomputation costs exactly the recomputed forwards
    ops = [("F_ck", 0), ("F_all", 1), ("B", 1), ("F_all", 0), ("B", 0)]
    assert simulate(chain, ops).recompute_ms == 64.12883986269449
    graph = GraphProfile(
        name="g", nodes=(GraphNode("x", 0.1, 1), GraphNode("y", 0.2, 1), GraphNode("z", 0.7, 1)), edges=((0, 1), (1, 2))
    )
    assert simulate(graph, [("compute", 0), ("compute", 1), ("compute", 2)]).recompute_ms == 0.0
