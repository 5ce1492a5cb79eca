"""--time-limit bounds the whole solve: one deadline shared by every phase (remat.solver.deadline).

No wall-clock asserts on our own speed: the deadline logic is checked with a fake clock, and the
real solves are checked through the times they report against the promise they make.
"""

from __future__ import annotations

import itertools
import os
import time

import pytest

import remat.solver.graph.ilp as ilp
from remat.schedules import RematError, load_profile
from remat.solver import solve
from remat.solver.budget import reference_peak
from remat.solver.deadline import MARGIN_FRACTION, MARGIN_SECONDS, Deadline, TimeUp
from remat.solver.graph.chain_to_graph import chain_to_graph
from remat.solver.graph.ilp.checkmate_search import solve_model, solve_relaxation
from remat.solver.graph.ilp.highs_search import BranchAndCut
from remat.solver.graph.ilp.lp_rounding import Rounded
from tests.conftest import EXAMPLES
from tests.solver.graph.test_chain_as_graph import random_chain


def _kept_its_limit(limit: float, solve_once):
    """Run ``solve_once()`` and check its reported elapsed time against the deadline's promise.

    The margin covers work that cannot be interrupted (the last solver call, decoding, the final
    simulator check): seconds of CPU. On a machine where other processes take the cores, that work
    takes longer in wall time by the share of a core this process got (the solve is one thread and
    its child processes): the margin is scaled by that share, measured over the solve (this
    process's and its reaped children's CPU time over the wall time), so the check holds for what
    the solver does, not for how busy the machine is."""
    before_wall, before = time.monotonic(), os.times()
    schedule = solve_once()
    after = os.times()
    wall = time.monotonic() - before_wall
    cpu = sum(after[:4]) - sum(before[:4])
    share = min(1.0, max(cpu / wall if wall > 0 else 1.0, 0.25))
    elapsed = schedule.extra["elapsed_seconds"]
    allowed = limit * (1 + MARGIN_FRACTION) + MARGIN_SECONDS / share
    assert elapsed <= allowed, (elapsed, allowed, share)
    return schedule


class FakeClock:
    """Advances ``step`` seconds at every reading."""

    def __init__(self, step: float = 0.0):
        self.now = 100.0
        self.step = step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_deadline_left_share_and_check():
    clock = FakeClock()
    deadline = Deadline(10.0, clock)
    assert deadline.left() == 10.0
    clock.now += 4.0
    assert deadline.left() == 6.0 and deadline.elapsed() == 4.0
    part = deadline.share(0.5)
    assert part.left() == 3.0 and part.end == deadline.end - 3.0
    assert deadline.share(2.0).end == deadline.end  # a share never outlives its parent
    clock.now += 6.0
    assert deadline.left() == 0.0
    with pytest.raises(TimeUp, match="during building"):
        deadline.check("building")
    assert deadline.within_margin(10.0 * (1 + MARGIN_FRACTION) + MARGIN_SECONDS)
    assert not deadline.within_margin(10.0 * (1 + MARGIN_FRACTION) + MARGIN_SECONDS + 0.01)


def test_model_building_stops_at_the_deadline():
    profile = load_profile(EXAMPLES / "graph_unet.json")
    expired = Deadline(0.0)
    with pytest.raises(TimeUp, match="building the cp-sat model"):
        solve_model(profile, reference_peak(profile) // 2, expired, workers=1)
    with pytest.raises(TimeUp, match="building the LP relaxation"):
        solve_relaxation(profile, reference_peak(profile) // 2, expired)


def test_each_phase_gets_what_is_left_of_one_deadline(monkeypatch):
    """With a clock that advances 0.5 s per reading, the quick CP-SAT try gets at most QUICK_SECONDS,
    HiGHS then HIGHS_SHARE of what is left, and CP-SAT after it gets the very same deadline as the
    whole solve (the rest of it)."""
    clock = FakeClock(step=0.5)
    seen = {"cp": []}
    monkeypatch.setattr(ilp, "Deadline", lambda limit: Deadline(limit, clock))

    def fake_highs(model, start, budget, deadline, *rest):
        seen["highs"] = (deadline.start, deadline.end)
        return BranchAndCut("killed", None, None, 0.0, "it ran past its time")

    class FakeModel:
        count = 0

        def stop(self):
            pass

    def fake_search(model, deadline, workers, hint=None):
        seen["cp"].append(deadline)
        raise TimeUp("the cp-sat search")

    def no_intervals(*args, **kwargs):
        raise TimeUp("building the moccasin model")  # so that no other thread reads the fake clock

    monkeypatch.setattr(ilp, "branch_and_cut", fake_highs)
    monkeypatch.setattr(ilp, "build_intervals", no_intervals)
    monkeypatch.setattr(ilp, "build_model", lambda profile, budget, deadline: FakeModel())
    monkeypatch.setattr(ilp, "search", fake_search)
    profile = load_profile(EXAMPLES / "graph_unet.json")
    schedule = ilp.solve(profile, reference_peak(profile) * 6 // 10, time_limit=30.0)
    assert len(seen["cp"]) == 2 and seen["cp"][1].limit == 30.0
    quick, whole = seen["cp"]
    assert quick.limit <= ilp.QUICK_SECONDS and quick.end <= whole.end
    highs_start, highs_end = seen["highs"]
    assert highs_start >= quick.start
    assert highs_end == pytest.approx(highs_start + ilp.HIGHS_SHARE * (whole.end - highs_start), abs=0.5)
    assert highs_end < whole.end
    assert "ran out during the cp-sat search" in schedule.extra["note"]
    assert schedule.extra["source"].startswith("warm start")


@pytest.mark.slow
@pytest.mark.parametrize("limit", [1.0, 3.0])
def test_ilp_on_resnet50_keeps_its_limit_and_says_when_it_is_too_short(limit):
    profile = load_profile(EXAMPLES / "graph_resnet50.json")
    schedule = _kept_its_limit(
        limit, lambda: solve(profile, reference_peak(profile) // 2, "ilp", time_limit=limit, workers=1)
    )
    extra = schedule.extra
    assert extra["time_limit_seconds"] == limit
    phases = extra["phases_seconds"]
    # the phases run one after another, except Moccasin's search beside the build and HiGHS
    sequential = sum(v for k, v in phases.items() if k not in ("cp_sat_given", "moccasin_during_highs"))
    assert sequential <= extra["elapsed_seconds"] + 1e-3
    assert phases.get("moccasin_during_highs", 0.0) <= extra["elapsed_seconds"] + 1e-3
    # HiGHS's root LP alone needs ~15 s on this graph: at these limits nothing beats the warm start,
    # and it says so
    assert extra["source"].startswith("warm start") and "--time-limit" in extra["note"]


@pytest.mark.slow
def test_larger_generated_graph_within_its_limit():
    graph = chain_to_graph(random_chain(200, seed=1))  # 401 nodes
    budget = reference_peak(graph) // 2
    schedule = _kept_its_limit(1.0, lambda: solve(graph, budget, "ilp", time_limit=1.0, workers=1))
    assert "time limit ran out" in schedule.extra["note"]
    with pytest.raises(RematError, match="time ran out during building the LP relaxation"):
        solve(graph, budget, "lp-rounding", time_limit=0.5)


def test_time_limit_must_be_finite_and_positive():
    profile = load_profile(EXAMPLES / "small_graph.json")
    for strategy, bad in itertools.product(("ilp", "lp-rounding"), (0, -1, float("inf"), float("nan"))):
        with pytest.raises(RematError, match="time_limit must be a finite positive number"):
            solve(profile, 10**9, strategy, time_limit=bad)


def test_lp_rounding_that_ran_out_before_any_rounding_says_so(monkeypatch):
    import remat.solver.graph.ilp.lp_rounding as lp

    def out_of_time(profile, budget, deadline):
        return Rounded("optimal", 1.0, None, "", None, 1.0, "rounding")

    monkeypatch.setattr(lp, "round_relaxation", out_of_time)
    profile = load_profile(EXAMPLES / "graph_unet.json")
    with pytest.raises(RematError, match="ran out during rounding, before any rounding of the LP was checked"):
        lp.solve(profile, reference_peak(profile) // 2, time_limit=5.0)
