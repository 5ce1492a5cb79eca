"""The graph model's optional node fields: ``overhead`` (transient bytes while a node is computed)
and ``recompute`` (false: computed exactly once), in the profile, the simulator and JSON."""

from __future__ import annotations

import json

import jsonschema
import pytest

from remat.schedules import GraphNode, GraphProfile, ProfileError, ScheduleError, load_profile, save_profile, simulate
from remat.schedules.schema import load_schema


def _hand() -> GraphProfile:
    # a (10 bytes, 5 transient) -> b (20) -> seed (4, once) -> c (5, 40 transient) reads b and seed
    nodes = (
        GraphNode("a", 1.0, 10, False, overhead=5),
        GraphNode("b", 2.0, 20, False),
        GraphNode("seed", 0.0, 4, True, recompute=False),
        GraphNode("c", 3.0, 5, True, overhead=40),
    )
    return GraphProfile("hand", nodes, ((0, 1), (1, 2), (1, 3), (2, 3)))


def test_overhead_counts_at_its_compute_only():
    profile = _hand()
    ops = [("compute", 0), ("compute", 1), ("free", 0), ("compute", 2), ("compute", 3), ("free", 1), ("free", 2)]
    result = simulate(profile, ops)
    peaks = [(r.memory_before, r.peak, r.memory_after) for r in result.timeline]
    assert peaks == [
        (0, 15, 10),  # a: 10 held + 5 transient
        (10, 30, 30),  # b: a and b held, no transient
        (30, 30, 20),
        (20, 24, 24),
        (24, 69, 29),  # c: b 20 + seed 4 + c 5 = 29 held, + 40 transient
        (29, 29, 9),
        (9, 9, 5),
    ]
    assert result.peak_memory == 69


def test_overhead_paid_again_on_recompute():
    profile = _hand()
    ops = [("compute", 0), ("free", 0), ("compute", 0), ("compute", 1), ("free", 0), ("compute", 2), ("compute", 3)]
    result = simulate(profile, ops)
    assert [r.peak for r in result.timeline][:3] == [15, 10, 15]
    assert result.recompute_ms == 1.0


def test_a_node_that_cannot_be_recomputed_is_refused_a_second_time():
    profile = _hand()
    ops = [("compute", 0), ("compute", 1), ("compute", 2), ("free", 2), ("compute", 2), ("compute", 3)]
    with pytest.raises(ScheduleError, match=r"op 4 \(compute 2\): node 2 \('seed'\) cannot be recomputed"):
        simulate(profile, ops)
    # the same ops are fine when the node may be recomputed
    plain = GraphProfile(
        "plain", tuple(GraphNode(n.name, n.time_ms, n.size, n.backward) for n in profile.nodes), profile.edges
    )
    assert simulate(plain, ops).compute_ms == 6.0


def test_json_keeps_old_files_and_their_digest(tmp_path):
    old = {
        "format": "remat-graph-v1",
        "name": "old",
        "nodes": [
            {"name": "f", "time_ms": 1.0, "size": 8, "backward": False},
            {"name": "b", "time_ms": 1.0, "size": 8, "backward": True},
        ],
        "edges": [[0, 1]],
        "metadata": {},
    }
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    profile = load_profile(path)
    assert all(n.overhead == 0 and n.recompute for n in profile.nodes)
    assert profile.to_dict() == old  # defaults are not written: the digest of an old file is unchanged
    import hashlib

    canonical = json.dumps(old, sort_keys=True, separators=(",", ":"))
    assert profile.sha256 == hashlib.sha256(canonical.encode()).hexdigest()


def test_json_round_trip_and_schema(tmp_path):
    profile = _hand()
    data = profile.to_dict()
    assert data["nodes"][0]["overhead"] == 5 and "recompute" not in data["nodes"][0]
    assert data["nodes"][2]["recompute"] is False and "overhead" not in data["nodes"][2]
    jsonschema.validate(data, load_schema("remat-graph-v1"))
    path = tmp_path / "p.json"
    save_profile(profile, path)
    again = load_profile(path)
    assert again == profile and again.sha256 == profile.sha256


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("overhead", -1, r"nodes\[0\]\.overhead: must be a non-negative integer"),
        ("overhead", 1.5, r"nodes\[0\]\.overhead: must be a non-negative integer"),
        ("recompute", "no", r"nodes\[0\]\.recompute: must be true or false"),
    ],
)
def test_bad_fields_are_one_line_errors(tmp_path, key, value, message):
    data = _hand().to_dict()
    data["nodes"][0][key] = value
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ProfileError, match=message):
        load_profile(path)
