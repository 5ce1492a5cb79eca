"""Several recording options per stage: the model, the format, the simulator (docs/model.md)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remat.schedules import (
    ChainProfile,
    ProfileError,
    Schedule,
    ScheduleError,
    Stage,
    StageOption,
    load_profile,
    profile_from_dict,
    save_profile,
    simulate,
)
from remat.schedules.schedule import op_option, parse_ops
from remat.schedules.schema import schema_errors
from remat.schedules.simulator import _simulate_chain_reference
from tests.solver.chain.chain_ops import mixed, recompute_all, segments, store_all


def _raw(options=None) -> dict:
    first = {"name": "s0", "forward_ms": 1.0, "backward_ms": 2.0, "output_size": 10, "saved_size": 30}
    if options is not None:
        first["options"] = options
    second = {"name": "s1", "forward_ms": 1.0, "backward_ms": 2.0, "output_size": 10, "saved_size": 30}
    return {"format": "remat-chain-v1", "name": "two", "input_size": 10, "stages": [first, second]}


def test_option_fields_inherit_the_stages():
    profile = profile_from_dict(_raw([{"name": "mm", "saved_size": 15}]))
    option = profile.stages[0].options[0]
    assert option == StageOption("mm", 15, 2.0, 0, 0)
    assert profile.stages[0].recording(0) == StageOption("save all", 30, 2.0, 0, 0)
    assert profile.stages[0].recording(1) is option
    assert profile.has_options and not profile.without_options().has_options


def test_a_profile_without_options_keeps_its_dict_and_digest():
    plain = profile_from_dict(_raw())
    assert all("options" not in stage for stage in plain.to_dict()["stages"])
    assert profile_from_dict(_raw([])).sha256 == plain.sha256
    with_option = profile_from_dict(_raw([{"saved_size": 15}]))
    assert with_option.sha256 != plain.sha256
    assert with_option.without_options().sha256 == plain.sha256


def test_options_round_trip_through_a_file(tmp_path):
    profile = profile_from_dict(_raw([{"name": "mm", "saved_size": 15, "backward_ms": 2.5}]))
    save_profile(profile, tmp_path / "p.json")
    again = load_profile(tmp_path / "p.json")
    assert again == profile and again.sha256 == profile.sha256
    assert schema_errors(json.loads((tmp_path / "p.json").read_text()), "remat-chain-v1") == []


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ({"saved_sise": 15}, "stages[0].options[0].saved_sise: unknown key (did you mean 'saved_size'?)"),
        ({"saved_size": -1}, "stages[0].options[0].saved_size: must be a non-negative integer"),
        ({"saved_size": 5}, "stages[0].options[0].saved_size: must be >= the stage's output_size"),
        ({"backward_ms": 1.0}, "stages[0].options[0].backward_ms: must be >= the stage's backward_ms"),
        ({"backward_overhead": None}, "stages[0].options[0].backward_overhead: must be a number, got null"),
        ({"forward_overhead": 1.5}, "stages[0].options[0].forward_overhead: must be a non-negative integer"),
        ("mm", "stages[0].options[0]: must be a JSON object"),
    ],
)
def test_bad_options_are_refused_in_one_line(option, message):
    with pytest.raises(ProfileError) as error:
        profile_from_dict(_raw([option]))
    assert str(error.value).startswith(message)
    assert "\n" not in str(error.value)


def test_options_must_be_a_list():
    with pytest.raises(ProfileError, match=r"stages\[0\]\.options: must be a list"):
        profile_from_dict(_raw({"saved_size": 15}))


def test_the_schema_refuses_unknown_option_keys():
    data = _raw([{"saved_size": 15, "colour": "red"}])
    assert any("options" in e and "colour" in e for e in schema_errors(data, "remat-chain-v1"))


def test_simulator_uses_the_option_worked_example():
    # docs/model.md: stage 0's option saves 15 bytes with a 0.5 ms slower backward
    profile = profile_from_dict(_raw([{"saved_size": 15, "backward_ms": 2.5}]))
    plain = simulate(profile, store_all(2))
    chosen = simulate(profile, [("F_all", 0, 1), ("F_all", 1), ("B", 1), ("B", 0)])
    assert (plain.peak_memory, plain.compute_ms, plain.recompute_ms) == (90, 6.0, 0.0)
    assert (chosen.peak_memory, chosen.compute_ms, chosen.recompute_ms) == (75, 6.5, 0.5)
    assert [r.peak for r in chosen.timeline] == [25, 55, 75, 45]


def test_option_zero_is_the_short_form():
    assert parse_ops([["F_all", 3, 0], ["F_all", 2, 1], ["B", 1]]) == (("F_all", 3), ("F_all", 2, 1), ("B", 1))
    assert op_option(("F_all", 2, 1)) == 1 and op_option(("F_all", 2)) == 0


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        ([["F_ck", 0, 1]], "ops[0]: only F_all takes an option index"),
        ([["F_all", 0, -1]], "ops[0]: option must be a non-negative integer"),
        ([["F_all", 0, True]], "ops[0]: option must be a non-negative integer"),
        ([["F_all", 0, 1, 2]], "ops[0]: must be a pair [op, index]"),
    ],
)
def test_bad_option_ops_are_refused(ops, message):
    with pytest.raises(ScheduleError) as error:
        parse_ops(ops)
    assert str(error.value).startswith(message)


def test_an_option_the_stage_lacks_is_a_schedule_error():
    profile = profile_from_dict(_raw([{"saved_size": 15}]))
    with pytest.raises(ScheduleError, match=r"op 1 \(F_all 1 option 1\): option index out of range \(stage 1 has"):
        simulate(profile, [("F_all", 0), ("F_all", 1, 1), ("B", 1), ("B", 0)])
    with pytest.raises(ScheduleError, match=r"op 0 \(F_all 0 option 2\): option index out of range"):
        simulate(profile, [("F_all", 0, 2), ("F_all", 1), ("B", 1), ("B", 0)])


def test_schedule_files_keep_the_option():
    profile = profile_from_dict(_raw([{"saved_size": 15}]))
    ops = (("F_all", 0, 1), ("F_all", 1), ("B", 1), ("B", 0))
    result = simulate(profile, ops)
    schedule = Schedule(profile.name, profile.sha256, "hand", 100, ops, result.prediction)
    data = json.loads(json.dumps(schedule.to_dict()))
    assert data["ops"][0] == ["F_all", 0, 1]
    assert schema_errors(data, "remat-schedule-v1") == []
    assert Schedule.from_dict(data).ops == ops
    data["ops"][1] = ["B", 1, 1]
    assert schema_errors(data, "remat-schedule-v1")


# -- property: option k behaves exactly like a stage whose fields are option k's ------------------

_sizes = st.integers(0, 50)
_times = st.floats(0.0, 10.0, allow_nan=False)


@st.composite
def _chains_with_options(draw):
    stages = []
    for _ in range(draw(st.integers(1, 6))):
        out = draw(_sizes)
        options = tuple(
            StageOption("o", out + draw(_sizes), 0.0, draw(_sizes), draw(_sizes))
            for _ in range(draw(st.integers(0, 2)))
        )
        backward = draw(_times)
        options = tuple(dataclasses.replace(o, backward_ms=backward + draw(_times)) for o in options)
        stage = Stage("s", draw(_times), backward, out, out + draw(_sizes), draw(_sizes), draw(_sizes))
        stages.append(dataclasses.replace(stage, options=options))
    return ChainProfile("random", draw(_sizes), tuple(stages))


_SCHEDULES = (store_all, recompute_all, mixed, lambda n: segments(n, [n // 2]))


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(_chains_with_options(), st.sampled_from(_SCHEDULES), st.data())
def test_an_option_costs_what_the_same_stage_with_its_fields_would(profile, make_ops, data):
    n = profile.length
    chosen = [data.draw(st.integers(0, stage.option_count - 1)) for stage in profile.stages]
    ops = [("F_all", i, chosen[i]) if name == "F_all" else (name, i) for name, i in make_ops(n)]
    replaced = ChainProfile(
        "replaced",
        profile.input_size,
        tuple(
            dataclasses.replace(
                stage, options=(), forward_nograd_overhead=stage.nograd_overhead, **_fields(stage.recording(k))
            )
            for stage, k in zip(profile.stages, chosen, strict=True)
        ),
    )
    ours = simulate(profile, ops)
    reference = simulate(replaced, make_ops(n))
    assert ours.peak_memory == reference.peak_memory
    assert ours.compute_ms == pytest.approx(reference.compute_ms, abs=1e-9)
    extra = sum(profile.stages[i].recording(chosen[i]).backward_ms - profile.stages[i].backward_ms for i in range(n))
    assert ours.recompute_ms == pytest.approx(reference.recompute_ms + extra, abs=1e-9)
    assert [r.peak for r in ours.timeline] == [r.peak for r in reference.timeline]


def _fields(option: StageOption) -> dict:
    return {
        "saved_size": option.saved_size,
        "backward_ms": option.backward_ms,
        "forward_overhead": option.forward_overhead,
        "backward_overhead": option.backward_overhead,
    }


def test_long_schedules_with_options_use_the_reference_simulator():
    stage = Stage("s", 1.0, 2.0, 10, 30, options=(StageOption("o", 12, 3.0),))
    profile = ChainProfile("long", 10, (stage,) * 300)
    ops = [("F_all", i, 1) for i in range(300)] + [("B", i) for i in reversed(range(300))]
    fast = simulate(profile, ops, timeline=False)
    assert fast.prediction == _simulate_chain_reference(profile, ops, timeline=True).prediction
    assert fast.peak_memory == 10 + 300 * 12 + 10 + 10
