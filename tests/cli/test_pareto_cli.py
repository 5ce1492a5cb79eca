"""``remat pareto``: plot, CSV and JSON of the front; one-line errors; graph profiles dispatch to
``remat.solver.pareto.graph.graph_front``."""

from __future__ import annotations

import csv
import json
import math
from itertools import pairwise

import pytest

from remat.cli import main
from remat.cli import pareto as pareto_command
from remat.schedules import ChainProfile, GraphNode, GraphProfile, Stage, save_profile, simulate
from remat.solver import solve
from remat.solver.chain.checkpoints import chain_checkpoints
from remat.solver.chain.store_all import store_all_peak
from remat.solver.front import FrontPoint
from remat.solver.pareto.chain import budget_sweep
from remat.solver.pareto.graph import FailedPoint, GraphFront


def chain(n: int = 14) -> ChainProfile:
    stages = tuple(
        Stage(
            name=f"b{i}",
            forward_ms=1.0 + (i % 3),
            backward_ms=2.0 + (i % 4),
            output_size=1000 * (1 + i % 4),
            saved_size=1000 * (3 + i % 5),
            backward_overhead=500 * (i % 2),
        )
        for i in range(n)
    )
    return ChainProfile(name="cli-chain", input_size=2000, stages=stages)


def test_pareto_writes_plot_csv_json(tmp_path, capsys):
    profile = chain()
    path = tmp_path / "chain.json"
    save_profile(profile, path)
    png, csv_path, json_path = tmp_path / "front.png", tmp_path / "front.csv", tmp_path / "front.json"
    code = main(
        ["pareto", str(path), "--plot", str(png), "--csv", str(csv_path), "--json", str(json_path), "--slots", "200"]
    )
    assert code == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with open(csv_path) as handle:
        rows = list(csv.DictReader(handle))
    data = json.loads(json_path.read_text())
    assert data["format"] == "remat-front-v1" and data["profile_sha256"] == profile.sha256
    assert len(data["points"]) == len(rows)
    optimal = [r for r in rows if r["strategy"] == "optimal"]
    assert len(optimal) >= 3
    peaks = [int(r["peak_memory"]) for r in optimal]
    times = [float(r["compute_ms"]) for r in optimal]
    assert peaks == sorted(peaks) and all(a > b for a, b in pairwise(times))
    for row in optimal:
        assert int(row["peak_memory"]) <= int(row["budget"])
        assert math.isclose(
            float(row["recompute_ms"]), float(row["compute_ms"]) - profile.store_all_compute_ms, abs_tol=1e-6
        )
        assert int(row["checkpoints"]) >= 0
    assert peaks[-1] == store_all_peak(profile)
    # a front point's budget, solved on its own, gives a schedule at least as good (finer table)
    middle = optimal[len(optimal) // 2]
    schedule = solve(profile, int(middle["budget"]), "optimal", slots=200)
    assert schedule.predicted.compute_ms <= float(middle["compute_ms"]) + 1e-9
    out = capsys.readouterr().out
    assert "minimum memory" in out and "store-all" in out


def test_pareto_selected_strategies_only(tmp_path):
    path = tmp_path / "chain.json"
    save_profile(chain(8), path)
    json_path = tmp_path / "front.json"
    assert main(["pareto", str(path), "--json", str(json_path), "--strategies", "store-all"]) == 0
    points = json.loads(json_path.read_text())["points"]
    assert {p["strategy"] for p in points} == {"store-all"}


@pytest.mark.parametrize(
    "extra, message",
    [(["--strategies", "optimal,nonsense"], "nonsense"), (["--slots", "0"], "--slots")],
)
def test_pareto_bad_input_is_one_line(tmp_path, capsys, extra, message):
    path = tmp_path / "chain.json"
    save_profile(chain(4), path)
    assert main(["pareto", str(path), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("remat: error:") and message in err and "\n" not in err


def test_pareto_missing_file(tmp_path, capsys):
    assert main(["pareto", str(tmp_path / "absent.json")]) == 2
    assert capsys.readouterr().err.startswith("remat: error:")


def test_graph_profiles_dispatch_to_graph_front(tmp_path, monkeypatch, capsys):
    calls = {}

    def graph_front(profile, strategies, budgets, time_limit, workers, progress):
        calls.update(strategies=strategies, budgets=budgets, time_limit=time_limit, workers=workers)
        points = (FrontPoint("fake-ilp", 10, 9, 5.0, 1.0, None, 4.5, 0.1), FrontPoint("fake-ilp", 20, 19, 4.0, 0.0))
        notes = (("fake-ilp", 20, "the 3.5 s time limit ran out"),)
        return GraphFront(points, (FailedPoint("fake-ilp", 5, "cannot fit 5 bytes"),), notes)

    monkeypatch.setattr(pareto_command, "graph_front", graph_front)
    graph = GraphProfile(
        name="g",
        nodes=(GraphNode("x", 1.0, 4), GraphNode("y", 1.0, 4), GraphNode("dy", 2.0, 4, True)),
        edges=((0, 1), (1, 2), (0, 2)),
    )
    path = tmp_path / "graph.json"
    save_profile(graph, path)
    csv_path = tmp_path / "g.csv"
    code = main(
        ["pareto", str(path), "--csv", str(csv_path), "--strategies", "a,b", "--time-limit", "3.5", "--workers", "2"]
    )
    assert code == 0
    assert calls == {"strategies": ["a", "b"], "budgets": None, "time_limit": 3.5, "workers": 2}
    rows = list(csv.DictReader(open(csv_path)))
    assert [r["strategy"] for r in rows] == ["fake-ilp", "fake-ilp"] and rows[0]["gap"] == "0.1"
    out = capsys.readouterr().out
    assert "fake-ilp: no schedule at 5 B: cannot fit 5 bytes" in out
    assert "fake-ilp: note at 1 budget(s); at 20 B: the 3.5 s time limit ran out" in out


def test_checkpoint_count_and_sweep_helpers():
    profile = chain(6)
    ops = [("F_ck", 0), ("F_n", 1), ("F_ck", 2), ("F_all", 3), ("F_all", 4), ("F_all", 5)]
    ops += [("B", 5), ("B", 4), ("B", 3), ("F_all", 2), ("B", 2), ("F_all", 0), ("F_all", 1), ("B", 1), ("B", 0)]
    simulate(profile, ops)  # a valid schedule
    assert chain_checkpoints(ops) == 2  # a[2] and a[3] held together
    budgets = budget_sweep(100, 10_000, 7)
    assert budgets[0] == 100 and budgets[-1] == 10_000 and budgets == sorted(set(budgets))


def test_solve_optimal_with_slots(tmp_path, capsys):
    from remat.schedules import check_schedule, load_schedule

    profile = chain(10)
    path = tmp_path / "chain.json"
    save_profile(profile, path)
    out = tmp_path / "schedule.json"
    assert main(["solve", str(path), "--budget", "60%", "--strategy", "optimal", "--slots", "100", "-o", str(out)]) == 0
    schedule = load_schedule(out)
    assert schedule.strategy == "optimal" and schedule.extra["slots"] == 100
    check_schedule(profile, schedule)
    assert main(["solve", str(path), "--budget", "60%", "--strategy", "optimal", "--slots", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("remat: error:") and "slots" in err and "\n" not in err


def test_pareto_says_which_strategies_it_left_out(tmp_path, monkeypatch, capsys):
    """A strategy that refuses a chain this long is named with its reason, not silently missing."""
    from remat.solver.chain import chen_greedy

    monkeypatch.setattr(chen_greedy, "MAX_STAGES", 10)
    path = tmp_path / "chain.json"
    save_profile(chain(14), path)
    out = tmp_path / "front.json"
    assert main(["pareto", str(path), "--strategies", "chen-greedy,sequential", "--json", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    left = [line for line in lines if "left out" in line]
    assert left == [next(line for line in lines if line.startswith("chen-greedy: left out:"))]
    assert "14 stages exceed its limit of 10" in left[0]
    assert {p["strategy"] for p in json.loads(out.read_text())["points"]} == {"sequential"}
