"""The published JSON Schemas agree with the loaders: every file remat writes or ships satisfies
its schema, and the schema rejects the structural bad inputs the loaders reject."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remat.schedules import ChainProfile, ProfileError, Stage, load_profile, load_schedule, save_schedule
from remat.schedules.schema import SCHEMA_NAMES, load_schema, schema_errors, validate
from remat.solver import solve, strategy_names
from tests.conftest import EXAMPLES


def test_schemas_are_valid_draft_2020_12():
    import jsonschema

    for name in SCHEMA_NAMES:
        jsonschema.Draft202012Validator.check_schema(load_schema(name))


@pytest.mark.slow
@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.json")), ids=lambda p: p.name)
def test_every_example_satisfies_its_schema(path):
    data = json.loads(path.read_text())
    assert schema_errors(data, data["format"]) == []
    load_profile(path)  # and the loader accepts it


def test_schedules_written_by_solve_satisfy_the_schema(tmp_path):
    profile = load_profile(EXAMPLES / "resnet_like.json")
    for strategy in strategy_names("chain"):
        schedule = solve(profile, 10**15, strategy)
        path = tmp_path / f"{strategy}.json"
        save_schedule(schedule, path)
        assert schema_errors(json.loads(path.read_text()), "remat-schedule-v1") == []
        assert load_schedule(path).ops == schedule.ops


@pytest.mark.parametrize(
    "mutate, where",
    [
        (lambda d: d["stages"][1].pop("saved_size"), "stages[1]"),
        (lambda d: d["stages"][0].__setitem__("output_size", -3), "stages[0].output_size"),
        (lambda d: d["stages"][0].__setitem__("forward_ms", "fast"), "stages[0].forward_ms"),
        (lambda d: d.__setitem__("input_size", 1.5), "input_size"),
        (lambda d: d.__setitem__("stages", []), "stages"),
    ],
)
def test_schema_rejects_what_the_loader_rejects(mutate, where):
    data = json.loads((EXAMPLES / "resnet_like.json").read_text())
    mutate(data)
    errors = schema_errors(data, "remat-chain-v1")
    assert errors and errors[0].startswith(where)
    with pytest.raises(ProfileError):
        ChainProfile.from_dict(data)


def test_schema_rejects_unknown_op_and_validate_raises_one_line():
    data = {
        "format": "remat-schedule-v1",
        "profile": "p",
        "profile_sha256": "0",
        "strategy": "s",
        "budget": 1,
        "ops": [["F_x", 0]],
        "predicted": {"peak_memory": 1, "compute_ms": 0, "recompute_ms": 0},
    }
    with pytest.raises(ProfileError) as raised:
        validate(data, "remat-schedule-v1", ProfileError)
    assert "ops[0][0]" in str(raised.value) and "\n" not in str(raised.value)


sizes = st.integers(min_value=0, max_value=2**40)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(sizes, sizes, sizes, st.floats(0, 1e3), st.floats(0, 1e3)), min_size=1, max_size=8),
    sizes,
)
def test_any_valid_profile_satisfies_the_schema(raw, input_size):
    stages = tuple(
        Stage(f"s{i}", fwd, bwd, output, output + extra, overhead, overhead)
        for i, (output, extra, overhead, fwd, bwd) in enumerate(raw)
    )
    profile = ChainProfile("random", input_size, stages)
    assert schema_errors(profile.to_dict(), "remat-chain-v1") == []
