"""`remat profile --graph` and `remat execute` with graph schedules, through ``remat.cli.main``."""

from __future__ import annotations

import json

import pytest

from remat.cli import main
from remat.schedules import GraphProfile, load_profile, load_schedule

CNN = "remat.zoo.small:cnn"
SHAPE = "2,3,16,16"


def _ok(argv, capsys):
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return captured.out


@pytest.fixture(autouse=True)
def _one_thread():
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _profile(tmp_path, capsys, time_source="flops"):
    path = tmp_path / "g.json"
    out = _ok(
        ["profile", "--graph", "--model", CNN, "--input-shape", SHAPE, "--device", "cpu", "--repeats", "1"]
        + ["--time-source", time_source, "-o", str(path)],
        capsys,
    )
    assert "graph profile:" in out and "wrote" in out
    return path, out


@pytest.mark.slow
def test_profile_graph_solve_execute(tmp_path, capsys):
    profile_path, _ = _profile(tmp_path, capsys, "measured")
    profile = load_profile(profile_path)
    assert isinstance(profile, GraphProfile)
    assert profile.metadata["time_source"] == "measured" and profile.metadata["input_shape"] == [2, 3, 16, 16]
    assert any(node.overhead > 0 for node in profile.nodes)
    assert [node.name for node in profile.nodes if not node.recompute] == ["grad:output"]
    for strategy, budget in (("store-all", "100%"), ("ilp", "80%")):
        schedule_path = tmp_path / f"{strategy}.json"
        argv = ["solve", str(profile_path), "--budget", budget, "--strategy", strategy, "-o", str(schedule_path)]
        _ok(argv + (["--time-limit", "5"] if strategy == "ilp" else []), capsys)
        schedule = load_schedule(schedule_path)
        report_path, plot_path = tmp_path / f"{strategy}-r.json", tmp_path / f"{strategy}.png"
        out = _ok(
            ["execute", "--model", CNN, "--input-shape", SHAPE, "--device", "cpu", "--schedule", str(schedule_path)]
            + ["--profile", str(profile_path), "--steps", "1", "--json", str(report_path), "--plot", str(plot_path)],
            capsys,
        )
        assert "peak activation memory" in out and "step time" in out and f"strategy {strategy}" in out
        report = json.loads(report_path.read_text())
        peak = report["peak_memory"]
        assert peak["predicted"] == schedule.predicted.peak_memory
        # measured by the allocator, as the profile's overheads are: within the chain's 0.12%
        assert peak["measured_by"] == "allocator" and peak["live_tensors"] <= peak["measured"]
        assert peak["predicted"] <= peak["measured"] <= 1.0012 * peak["predicted"], out
        assert len(report["timeline"]) == len(schedule.ops)
        assert report["metadata"]["kind"] == "graph"
        assert plot_path.stat().st_size > 0


@pytest.mark.slow
def test_execute_graph_schedule_without_profile_profiles_the_model(tmp_path, capsys):
    profile_path, _ = _profile(tmp_path, capsys)
    schedule_path = tmp_path / "s.json"
    _ok(["solve", str(profile_path), "--strategy", "store-all", "-o", str(schedule_path)], capsys)
    code = main(
        ["execute", "--model", CNN, "--input-shape", SHAPE, "--device", "cpu"]
        + ["--schedule", str(schedule_path), "--steps", "1"]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "profiling the model's graph" in captured.out and "peak activation memory" in captured.out


@pytest.mark.slow
def test_graph_schedule_with_a_chain_profile_or_another_model_is_one_line(tmp_path, capsys):
    profile_path, _ = _profile(tmp_path, capsys)
    schedule_path = tmp_path / "s.json"
    _ok(["solve", str(profile_path), "--strategy", "store-all", "-o", str(schedule_path)], capsys)
    chain = "examples/resnet_like.json"
    for extra, message in (
        (["--profile", chain], "graph profile"),
        (["--profile", str(profile_path), "--input-shape", "4,3,16,16"], "shape"),
    ):
        argv = ["execute", "--model", CNN, "--input-shape", SHAPE, "--device", "cpu", "--schedule", str(schedule_path)]
        if "--input-shape" in extra:
            argv[4] = extra[-1]
            extra = extra[:2]
        code = main(argv + extra + ["--steps", "1"])
        err = capsys.readouterr().err
        assert code == 2 and err.startswith("remat: error:") and message in err, err
        assert err.count("\n") == 1
