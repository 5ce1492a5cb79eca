"""The optional chain-stage field ``forward_nograd_overhead`` (docs/model.md, docs/formats.md):
the transient of a non-recording forward (``F_ck``, ``F_n``), where ``forward_overhead`` is the
recording forward's (``F_all``). Absent, it equals ``forward_overhead`` and files keep their digest."""

from __future__ import annotations

import hashlib
import json
import random

import pytest

from remat.schedules import ChainProfile, ProfileError, Stage, load_profile, simulate
from remat.schedules.schema import schema_errors
from remat.solver import solve
from remat.solver.chain.optimal import minimum_budget, optimal_front
from remat.solver.chain.store_all import store_all_peak


def _raw(nograd: int | None = None) -> dict:
    stage = {
        "name": "s",
        "forward_ms": 1.0,
        "backward_ms": 2.0,
        "output_size": 100,
        "saved_size": 300,
        "forward_overhead": 7,
        "backward_overhead": 0,
        "param_size": 0,
    }
    if nograd is not None:
        stage["forward_nograd_overhead"] = nograd
    return {"format": "remat-chain-v1", "name": "c", "input_size": 50, "stages": [stage, dict(stage)], "metadata": {}}


def test_absent_field_is_not_written_and_the_digest_is_unchanged():
    raw = _raw()
    profile = ChainProfile.from_dict(raw)
    assert profile.to_dict() == raw
    canonical = json.dumps(raw, sort_keys=True, separators=(",", ":"))
    assert profile.sha256 == hashlib.sha256(canonical.encode()).hexdigest()
    assert profile.stages[0].forward_nograd_overhead is None
    assert profile.stages[0].nograd_overhead == 7


@pytest.mark.parametrize("value", [0, 7, 5_000])
def test_given_field_round_trips_even_when_equal_to_the_recording_one(value):
    raw = _raw(value)
    profile = ChainProfile.from_dict(raw)
    assert profile.to_dict() == raw
    assert profile.stages[1].nograd_overhead == value
    assert profile.sha256 != ChainProfile.from_dict(_raw()).sha256


@pytest.mark.parametrize("bad", [-1, 1.5, "big", None, True])
def test_bad_values_are_refused_naming_the_field(tmp_path, bad):
    path = tmp_path / "p.json"
    raw = _raw(0)
    raw["stages"][0]["forward_nograd_overhead"] = bad
    path.write_text(json.dumps(raw))
    with pytest.raises(ProfileError, match=r"stages\[0\]\.forward_nograd_overhead"):
        load_profile(path)


def test_schema_describes_the_field():
    assert schema_errors(_raw(12), "remat-chain-v1") == []
    bad = _raw(12)
    bad["stages"][0]["forward_nograd_overhead"] = -3
    assert any("forward_nograd_overhead" in e for e in schema_errors(bad, "remat-chain-v1"))


def test_nograd_transient_moves_the_peak_of_f_ck_but_not_of_f_all():
    base = ChainProfile.from_dict(_raw())
    big = ChainProfile.from_dict(_raw(10_000))
    ops = [("F_ck", 0), ("F_all", 1), ("B", 1), ("F_all", 0), ("B", 0)]
    plain = simulate(base, ops).timeline
    heavy = simulate(big, ops).timeline
    assert heavy[0].peak == plain[0].peak - 7 + 10_000  # F_ck 0: the no-grad transient
    assert [r.peak for r in heavy[1:]] == [r.peak for r in plain[1:]]  # F_all and B: unchanged
    recorded = [("F_all", 0), ("F_all", 1), ("B", 1), ("B", 0)]
    assert simulate(big, recorded).peak_memory == simulate(base, recorded).peak_memory


def _random_chain(seed: int, n: int = 14) -> ChainProfile:
    rng = random.Random(seed)
    stages = []
    for i in range(n):
        out = rng.randint(1_000, 40_000)
        stages.append(
            Stage(
                name=f"s{i}",
                forward_ms=rng.uniform(0.2, 3.0),
                backward_ms=rng.uniform(0.4, 6.0),
                output_size=out,
                saved_size=out + rng.randint(0, 90_000),
                forward_overhead=rng.choice([0, rng.randint(0, 20_000)]),
                backward_overhead=rng.choice([0, rng.randint(0, 30_000)]),
                forward_nograd_overhead=rng.choice([None, 0, rng.randint(0, 200_000)]),
            )
        )
    return ChainProfile(name=f"nograd{seed}", input_size=rng.randint(1_000, 20_000), stages=tuple(stages))


@pytest.mark.parametrize("seed", range(3))
def test_dp_stays_consistent_with_the_simulator(seed):
    """make_schedule raises SolverBug if the DP's claimed peak or time differs from the simulator's;
    the front's points are checked against full schedules at their budgets."""
    profile = _random_chain(seed)
    low, high = minimum_budget(profile, slots=120), store_all_peak(profile)
    for fraction in (0.0, 0.05, 0.2, 0.5, 0.8):
        budget = int(low + fraction * (high - low))
        schedule = solve(profile, budget, "optimal", slots=120)
        assert simulate(profile, schedule.ops).peak_memory <= budget
    for point in optimal_front(profile, slots=120):
        schedule = solve(profile, point.budget, "optimal", slots=120)
        assert schedule.predicted.peak_memory <= point.budget
