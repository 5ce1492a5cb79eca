"""Bad input: one-line errors naming the field, from the library and through the CLI (exit 2, no traceback)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from remat.cli import main
from remat.schedules import ProfileError, RematError, ScheduleError, load_profile, load_schedule, profile_from_dict

ROOT = Path(__file__).resolve().parents[2]


def _chain() -> dict:
    stage = {
        "name": "s",
        "forward_ms": 1.0,
        "backward_ms": 2.0,
        "output_size": 10,
        "saved_size": 30,
        "forward_overhead": 0,
        "backward_overhead": 5,
        "param_size": 0,
    }
    return {
        "format": "remat-chain-v1",
        "name": "c",
        "input_size": 10,
        "stages": [dict(stage, name=f"s{i}") for i in range(5)],
        "metadata": {},
    }


def _graph() -> dict:
    return {
        "format": "remat-graph-v1",
        "name": "g",
        "nodes": [{"name": f"v{i}", "time_ms": 1.0, "size": 8, "backward": i >= 2} for i in range(4)],
        "edges": [[0, 1], [1, 2], [0, 3], [2, 3]],
        "metadata": {},
    }


def _set(data: dict, path: tuple, value) -> dict:
    data = copy.deepcopy(data)
    target = data
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return data


_DELETE = object()

# (case id, builder, expected message, exactly or as a regex)
CHAIN_CASES = [
    (
        "handed on more than the output",
        ("stages", 1, "handed_on"),
        11,
        "stages[1].handed_on: must be <= output_size (it is part of the output)",
    ),
    (
        "backward overhead below freeing abar and g",
        ("stages", 2, "backward_overhead"),
        -41,
        "stages[2].backward_overhead: must be an integer number of bytes >= -40, got -41",
    ),
    (
        "saved<output",
        ("stages", 3, "saved_size"),
        9,
        "stages[3].saved_size: must be >= output_size (saved includes the output)",
    ),
    (
        "negative size",
        ("stages", 1, "output_size"),
        -1,
        "stages[1].output_size: must be a non-negative integer number of bytes, got -1",
    ),
    (
        "fractional size",
        ("stages", 2, "saved_size"),
        30.5,
        "stages[2].saved_size: must be a non-negative integer number of bytes, got 30.5",
    ),
    ("string size", ("input_size",), "10", "input_size: must be a non-negative integer number of bytes, got '10'"),
    (
        "bool size",
        ("stages", 0, "forward_overhead"),
        True,
        "stages[0].forward_overhead: must be a non-negative integer number of bytes, got True",
    ),
    (
        "negative time",
        ("stages", 4, "backward_ms"),
        -0.5,
        "stages[4].backward_ms: must be a non-negative number of milliseconds, got -0.5",
    ),
    (
        "string time",
        ("stages", 0, "forward_ms"),
        "fast",
        "stages[0].forward_ms: must be a non-negative number of milliseconds, got 'fast'",
    ),
    ("missing stage field", ("stages", 2, "saved_size"), _DELETE, "stages[2].saved_size: missing required field"),
    ("missing input", ("input_size",), _DELETE, "input_size: missing required field"),
    ("missing stages", ("stages",), _DELETE, "stages: missing required field"),
    ("empty stages", ("stages",), [], "stages: a chain needs at least one stage"),
    ("stage not object", ("stages", 1), 7, "stages[1]: must be a JSON object"),
    (
        "wrong format",
        ("format",),
        "remat-chain-v2",
        "format: expected 'remat-chain-v1' or 'remat-graph-v1', got 'remat-chain-v2'",
    ),
    ("missing format", ("format",), _DELETE, "format: missing required field"),
    ("metadata not object", ("metadata",), [1], "metadata: must be a JSON object"),
]

GRAPH_CASES = [
    (
        "cycle",
        ("edges",),
        [[0, 1], [1, 2], [2, 1], [2, 3]],
        "edges: the graph has a cycle: 1 ('v1') -> 2 ('v2') -> 1 ('v1')",
    ),
    ("self loop", ("edges",), [[0, 1], [1, 1]], "edges[1]: self-loop on node 1 ('v1')"),
    ("bad index", ("edges",), [[0, 1], [1, 4]], "edges[1]: node index 4 out of range (graph has 4 nodes)"),
    ("negative index", ("edges",), [[-1, 1]], "edges[0]: node index -1 out of range (graph has 4 nodes)"),
    ("not a pair", ("edges",), [[0, 1, 2]], "edges[0]: must be a pair [u, v] of node indices, got (0, 1, 2)"),
    (
        "backwards edge",
        ("edges",),
        [[1, 0]],
        "edges[0]: [1, 0] points backwards; nodes must be listed in a topological order",
    ),
    ("duplicate edge", ("edges",), [[0, 1], [0, 1]], "edges[1]: duplicate edge [0, 1]"),
    (
        "negative node size",
        ("nodes", 2, "size"),
        -3,
        "nodes[2].size: must be a non-negative integer number of bytes, got -3",
    ),
    (
        "negative node time",
        ("nodes", 1, "time_ms"),
        -1,
        "nodes[1].time_ms: must be a non-negative number of milliseconds, got -1",
    ),
    (
        "node time past float",  # JSON integers are unbounded: float() would overflow (found by hypothesis)
        ("nodes", 1, "time_ms"),
        10**400,
        "nodes[1].time_ms: must be a finite number of milliseconds, got an integer of 1329 bits",
    ),
    ("backward not bool", ("nodes", 1, "backward"), "yes", "nodes[1].backward: must be true or false, got 'yes'"),
    ("missing node size", ("nodes", 0, "size"), _DELETE, "nodes[0].size: missing required field"),
    ("missing edges", ("edges",), _DELETE, "edges: missing required field"),
    ("no nodes", ("nodes",), [], "nodes: a graph needs at least one node"),
]

ALL_CASES = [(name, _chain, *rest) for name, *rest in CHAIN_CASES] + [
    (name, _graph, *rest) for name, *rest in GRAPH_CASES
]


@pytest.mark.parametrize(("name", "base", "path", "value", "message"), ALL_CASES, ids=[c[0] for c in ALL_CASES])
def test_profile_errors_name_the_field(name, base, path, value, message):
    with pytest.raises(ProfileError) as info:
        profile_from_dict(_set(base(), path, value))
    assert str(info.value) == message


def test_valid_profiles_round_trip(tmp_path):
    for data in (_chain(), _graph()):
        profile = profile_from_dict(data)
        again = profile_from_dict(json.loads(json.dumps(profile.to_dict())))
        assert again == profile and again.sha256 == profile.sha256


def test_integral_floats_are_sizes():
    profile = profile_from_dict(_set(_chain(), ("stages", 0, "output_size"), 10.0))
    assert profile.stages[0].output_size == 10 and isinstance(profile.stages[0].output_size, int)


def test_non_finite_numbers_are_rejected(tmp_path):
    path = tmp_path / "nan.json"
    path.write_text(json.dumps(_chain()).replace('"forward_ms": 1.0', '"forward_ms": NaN', 1))
    # refused where the file is read (NaN is not JSON), with its path in the file
    with pytest.raises(RematError, match=r"stages\[0\].forward_ms: NaN is not a number JSON has"):
        load_profile(path)
    path.write_text(json.dumps(_chain()).replace('"metadata": {}', '"metadata": {"lr": NaN}'))
    with pytest.raises(RematError, match=r"metadata.lr: NaN"):
        load_profile(path)  # the digest (sha256) used to fail on NaN with a traceback


def test_file_errors(tmp_path):
    with pytest.raises(RematError, match=r"no such file"):
        load_profile(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "remat-chain-v1", ')
    with pytest.raises(RematError, match=r"bad.json: not valid JSON \(line 1, column 30"):
        load_profile(bad)
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(RematError, match=r"binary.json: not valid JSON"):
        load_profile(binary)
    with pytest.raises(RematError, match=r"is a directory"):
        load_profile(tmp_path)
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    with pytest.raises(ProfileError, match=r"profile: must be a JSON object, got list"):
        load_profile(listed)


def test_schedule_file_errors(tmp_path):
    good = {
        "format": "remat-schedule-v1",
        "profile": "c",
        "profile_sha256": "0" * 64,
        "strategy": "store-all",
        "budget": 100,
        "ops": [["F_all", 0], ["B", 0]],
        "predicted": {"peak_memory": 1, "compute_ms": 1.0, "recompute_ms": 0.0},
    }
    path = tmp_path / "s.json"
    for change, message in [
        ({"format": "remat-schedule-v0"}, r"format: expected 'remat-schedule-v1'"),
        ({"budget": -1}, r"budget: must be a non-negative integer"),
        ({"ops": [["F_all", 0], ["B"]]}, r"ops\[1\]: must be a pair"),
        ({"ops": [["jump", 0]]}, r"ops\[0\]: unknown op 'jump'"),
        ({"predicted": {"peak_memory": 1, "compute_ms": 1.0}}, r"predicted.recompute_ms: missing required field"),
    ]:
        path.write_text(json.dumps({**good, **change}))
        with pytest.raises(ScheduleError, match=message):
            load_schedule(path)


# ---------------------------------------------------------------- through the CLI


def _write(tmp_path, data, name="p.json"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def _run_main(capsys, argv):
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize(("name", "base", "path", "value", "message"), ALL_CASES, ids=[c[0] for c in ALL_CASES])
def test_cli_reports_profile_errors_in_one_line(tmp_path, capsys, name, base, path, value, message):
    profile = _write(tmp_path, _set(base(), path, value))
    code, out, err = _run_main(capsys, ["solve", profile, "--budget", "1GiB", "--strategy", "store-all"])
    assert code == 2
    assert err == f"remat: error: {profile}: {message}\n"
    assert "Traceback" not in out + err


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["solve", "{p}", "--budget", "lots"], "size 'lots': expected bytes"),
        (
            ["solve", "{p}", "--budget", "10", "--strategy", "store-all"],
            "strategy 'store-all' cannot fit a budget of 10 B",
        ),
        (["solve", "{p}", "--strategy", "magic"], "unknown strategy 'magic' for a chain profile"),
        (["solve", "{p}", "--strategy", "store-all", "--segments", "2"], "option 'segments' does not apply"),
        (["solve", "{missing}"], "no such file"),
        (["solve", "{bad}"], "not valid JSON"),
        (["solve", "{p}", "-o", "{p}/x/schedule.json"], "cannot write"),
        (["simulate", "{p}", "{bad}"], "not valid JSON"),
        (["simulate", "{p}", "{wrong_schedule}"], "op 0 (F_all 1): needs a_1"),
        (["simulate", "{p}", "{other_profile_schedule}"], "schedule was solved for profile 'other'"),
    ],
)
def test_cli_errors_are_one_line_exit_2(tmp_path, capsys, args, expected):
    paths = {
        "p": _write(tmp_path, _chain()),
        "missing": str(tmp_path / "missing.json"),
        "bad": _write(tmp_path, "{nope", "bad.json"),
    }
    profile = profile_from_dict(_chain())
    schedule = {
        "format": "remat-schedule-v1",
        "profile": "c",
        "profile_sha256": profile.sha256,
        "strategy": "hand",
        "budget": 10**6,
        "ops": [["F_all", 1]],
        "predicted": {"peak_memory": 1, "compute_ms": 1.0, "recompute_ms": 0.0},
    }
    paths["wrong_schedule"] = _write(tmp_path, schedule, "wrong.json")
    paths["other_profile_schedule"] = _write(
        tmp_path, {**schedule, "profile": "other", "profile_sha256": "f" * 64}, "other.json"
    )
    code, out, err = _run_main(capsys, [a.format(**paths) for a in args])
    assert code == 2
    assert err.startswith("remat: error: ") and err.endswith("\n") and err.count("\n") == 1, err
    assert expected in err
    assert "Traceback" not in out + err


@pytest.mark.slow
def test_cli_subprocess_no_traceback(tmp_path):
    """The real entry point (``python -m remat``): bad profile and bad argument, exit 2, one line."""
    profile = _write(tmp_path, _set(_chain(), ("stages", 3, "saved_size"), 9))
    for argv in (["solve", profile, "--budget", "1GiB"], ["solve", profile, "--segments", "many"], ["nonsense"]):
        done = subprocess.run([sys.executable, "-m", "remat", *argv], capture_output=True, text=True, cwd=ROOT)
        assert done.returncode == 2, done
        assert "Traceback" not in done.stdout + done.stderr
        assert done.stderr.startswith("remat: error: ") and done.stderr.count("\n") == 1
    assert (
        "stages[3].saved_size: must be >= output_size (saved includes the output)"
        in subprocess.run(
            [sys.executable, "-m", "remat", "solve", profile], capture_output=True, text=True, cwd=ROOT
        ).stderr
    )


def test_a_backward_overhead_may_be_negative_down_to_freeing_abar_and_its_gradient() -> None:
    """Early release (docs/model.md): -(saved_size + output_size) loads, through the schema too, and
    the simulator's B peak goes below before + g_i by it."""
    from remat.schedules import simulate
    from remat.schedules.schema import schema_errors

    data = _set(_chain(), ("stages", 4, "backward_overhead"), -40)
    assert schema_errors(data, "remat-chain-v1") == []
    profile = profile_from_dict(data)
    assert profile.stages[4].backward_overhead == -40
    ops = [("F_all", i) for i in range(5)] + [("B", i) for i in reversed(range(5))]
    first_b = simulate(profile, ops).timeline[5]
    assert first_b.peak == first_b.memory_before + 10 - 40


def test_what_a_stage_hands_on_is_outside_its_saved_size_and_a_i_stays() -> None:
    """``handed_on`` (docs/model.md): saved_size may be as low as output_size - handed_on (never
    lower), the field round-trips (and is left out at 0, so old files keep their digest), and
    dropping a[i] while abar[i+1] shares what stage i hands on is refused."""
    from remat.schedules import simulate
    from remat.schedules.schema import schema_errors

    data = _set(_set(_chain(), ("stages", 2, "handed_on"), 4), ("stages", 2, "saved_size"), 6)
    assert schema_errors(data, "remat-chain-v1") == []
    profile = profile_from_dict(data)
    assert profile.stages[2].handed_on == 4 and profile.to_dict()["stages"][2]["handed_on"] == 4
    assert "handed_on" not in profile.to_dict()["stages"][1]
    with pytest.raises(ProfileError, match=r"stages\[2\].saved_size: must be >= output_size - handed_on"):
        profile_from_dict(_set(data, ("stages", 2, "saved_size"), 5))
    ops = [("F_ck", 0), ("F_ck", 1), ("F_all", 2), ("F_n", 2)]
    with pytest.raises(ScheduleError, match=r"op 3 \(F_n 2\): would drop a\[2\] while abar\[3\] shares"):
        simulate(profile, ops)
    store_all = [("F_all", i) for i in range(5)] + [("B", i) for i in reversed(range(5))]
    assert simulate(profile, store_all).peak_memory == simulate(profile_from_dict(_chain()), store_all).peak_memory - 24
