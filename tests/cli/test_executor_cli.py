"""`remat profile` and `remat execute`: files, the predicted-vs-measured table, one-line errors."""

from __future__ import annotations

import json

import pytest

from remat.cli import main
from remat.models.loading import load_model
from remat.schedules import RematError, load_profile

MLP = "remat.zoo.small:mlp"


def _ok(argv, capsys):
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return captured.out


def test_profile_solve_execute(tmp_path, capsys):
    profile_path = tmp_path / "p.json"
    out = _ok(
        [
            "profile",
            "--model",
            MLP,
            "--input-shape",
            "16,64",
            "--device",
            "cpu",
            "--repeats",
            "1",
            "-o",
            str(profile_path),
        ],
        capsys,
    )
    assert "wrote" in out
    profile = load_profile(profile_path)
    assert profile.length == 7 and profile.metadata["batch_size"] == 16
    schedule_path = tmp_path / "s.json"
    _ok(["solve", str(profile_path), "--budget", "100%", "-o", str(schedule_path)], capsys)
    report_path = tmp_path / "r.json"
    plot_path = tmp_path / "t.png"
    out = _ok(
        [
            "execute",
            "--model",
            MLP,
            "--input-shape",
            "16,64",
            "--device",
            "cpu",
            "--schedule",
            str(schedule_path),
            "--profile",
            str(profile_path),
            "--steps",
            "1",
            "--json",
            str(report_path),
            "--plot",
            str(plot_path),
        ],
        capsys,
    )
    assert "peak activation memory" in out and "step time" in out
    report = json.loads(report_path.read_text())
    peak = report["peak_memory"]
    assert abs(peak["live_tensors"] - peak["predicted"]) <= 0.05 * peak["predicted"]
    assert abs(peak["measured"] - peak["predicted"]) <= 0.05 * peak["predicted"]  # judged by the allocator
    # store-all recomputes nothing, so the replay keeps no RNG snapshots or buffer copies
    assert peak["bookkeeping"] == 0
    assert len(report["timeline"]) == 14
    assert plot_path.stat().st_size > 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "nocolon", "--input-shape", "2,64"], "expected 'package.module:factory'"),
        (["--model", "no_such_pkg_xyz.mod:f", "--input-shape", "2,64"], "cannot import module"),
        (["--model", "remat.zoo.small:nope", "--input-shape", "2,64"], "has no attribute 'nope'"),
        (["--model", "remat.zoo.small:INPUT_SHAPES", "--input-shape", "2,64"], "not a factory"),
        (["--model", MLP, "--input-shape", "2,x,64"], "--input-shape"),
        (["--model", MLP, "--input-shape", "2,64", "--dtype", "int3"], "--dtype"),
        (["--model", MLP, "--input-shape", "2,64", "--device", "cuda:0"], "--device"),
        (["--model", MLP, "--input-shape", "2,64", "--graph"], "--graph"),
    ],
)
def test_profile_errors_are_one_line(argv, message, tmp_path, capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    if "--graph" in argv:
        import sys

        monkeypatch.setitem(sys.modules, "remat.graph.profiler", None)  # not built: ImportError
    code = main(["profile", *argv, "-o", str(tmp_path / "p.json")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("remat: error:") and message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_factory_that_raises(monkeypatch):
    import types

    module = types.ModuleType("remat_test_factories")

    def broken():
        raise ValueError("boom")

    module.broken = broken
    module.not_a_model = lambda: 42
    monkeypatch.setitem(__import__("sys").modules, "remat_test_factories", module)
    with pytest.raises(RematError, match=r"broken\(\) raised ValueError: boom"):
        load_model("remat_test_factories:broken")
    with pytest.raises(RematError, match="not a torch.nn.Module"):
        load_model("remat_test_factories:not_a_model")


def test_execute_rejects_a_schedule_for_another_model(tmp_path, capsys):
    profile_path = tmp_path / "p.json"
    _ok(
        [
            "profile",
            "--model",
            MLP,
            "--input-shape",
            "4,64",
            "--device",
            "cpu",
            "--repeats",
            "1",
            "-o",
            str(profile_path),
        ],
        capsys,
    )
    schedule_path = tmp_path / "s.json"
    _ok(["solve", str(profile_path), "-o", str(schedule_path)], capsys)
    code = main(
        [
            "execute",
            "--model",
            "remat.zoo.small:cnn",
            "--input-shape",
            "2,3,16,16",
            "--device",
            "cpu",
            "--schedule",
            str(schedule_path),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "the model has 6 stages" in err
