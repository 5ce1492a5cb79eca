"""The CLI's defaults and flags a first-day user meets (issue 43): a budget without --strategy
solves, -o is a command's main output and --plot its figure, plan takes profile's model options,
argument errors come before torch, bars only on a terminal, profile --device meta."""

from __future__ import annotations

import ast
import json
import subprocess
import sys

import pytest

from remat.cli import main
from remat.cli.text import _extra_rows
from tests.cli.test_cli import _run
from tests.conftest import EXAMPLES, ROOT

RESNET = str(EXAMPLES / "resnet_like.json")


@pytest.mark.slow
def test_a_budget_without_strategy_solves_with_optimal(capsys):
    code, out, err = _run(capsys, ["solve", RESNET, "--budget", "40%"])
    assert code == 0, err
    assert out.splitlines()[0].split() == ["strategy", "optimal"]


def test_a_graph_without_strategy_solves_with_hierarchical(capsys):
    code, out, err = _run(capsys, ["solve", str(EXAMPLES / "small_graph.json"), "--budget", "100%"])
    assert code == 0, err
    assert out.splitlines()[0].split() == ["strategy", "hierarchical"]


@pytest.mark.slow
def test_pareto_draws_with_plot_and_refuses_its_old_o(tmp_path, capsys):
    png = tmp_path / "front.png"
    code, out, err = _run(capsys, ["pareto", RESNET, "--points", "3", "-o", str(png)])
    assert code == 2 and err.count("\n") == 1 and f"--plot {png}" in err, err
    assert not png.exists()
    code, out, err = _run(capsys, ["pareto", RESNET, "--points", "3", "--plot", str(png)])
    assert code == 0, err
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert "\r" not in err  # stderr is not a terminal here: no progress bar's carriage returns


@pytest.mark.parametrize("command", ["profile", "execute", "plan"])
def test_plan_takes_the_model_options_of_profile(capsys, command):
    assert main([command, "--help"]) == 0
    out = capsys.readouterr().out
    for option in ("--config", "--input-dtype", "--input-range", "--dtype", "--device", "--threads"):
        assert option in out, (command, option)


@pytest.mark.slow
def test_argument_errors_come_before_torch_is_imported():
    """A typo in a model option or a budget is one line, exit 2, and torch was never imported."""
    cases = [
        ["profile", "--model", "remat.zoo.small:cnn", "--input-shape", "8,3,32x32", "-o", "p.json"],
        ["plan", "--model", "remat.zoo.small:cnn", "--input-shape", "8,3,32x32", "--memory", "1GB"],
        ["plan", "--model", "remat.zoo.small:cnn", "--input-shape", "8,3,32,32", "--memory", "1GB", "--vary", "x"],
        ["plan", "--model", "remat.zoo.small:cnn", "--input-shape", "8", "--memory", "1GB", "--fixed-bytes", "lots"],
        ["execute", "--model", "remat.zoo.small:cnn", "--input-shape", "8,3", "--schedule", "s.json", "--dtype", "x"],
        ["profile", "--model", "m:f", "--input-shape", "8", "--config", "n_layer", "--threads", "1", "-o", "p.json"],
        ["solve", RESNET, "--budget", "1.5"],
    ]
    script = (
        "import json, sys\nfrom remat.cli.parser import main\n"
        f"codes = [main(argv) for argv in {cases!r}]\n"
        "print(json.dumps([codes, 'torch' in sys.modules]))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120)
    codes, torch_imported = json.loads(done.stdout.splitlines()[-1])
    assert codes == [2] * len(cases), done.stderr
    assert not torch_imported
    assert done.stderr.count("remat: error: ") == len(cases) == done.stderr.count("\n"), done.stderr


def test_one_activation_is_singular():
    assert _extra_rows({"checkpoints": 1, "claim": "x"})[-1] == ("stored", "at most 1 activation at once")
    assert ("stored", "at most 3 activations at once") in _extra_rows({"checkpoints": 3, "claim": "x"})


@pytest.mark.slow
def test_profile_on_the_meta_device_is_the_meta_profile(tmp_path, capsys):
    out = tmp_path / "meta.json"
    args = ["profile", "--model", "remat.zoo.small:cnn", "--input-shape", "4,3,16,16", "-o", str(out)]
    code, stdout, err = _run(capsys, [*args, "--device", "meta"])
    assert code == 0, err
    assert json.loads(out.read_text())["metadata"]["device"].startswith("meta")
    code, _, err = _run(capsys, [*args, "--device", "meta", "--graph"])
    assert code == 2 and "--device meta" in err


def test_every_progress_bar_is_off_when_stderr_is_not_a_terminal():
    """tqdm(..., disable=None) is tqdm's "only on a terminal": every bar of remat passes it."""
    bars = []
    sources = ((path, path.read_text()) for path in (ROOT / "remat").rglob("*.py"))
    for path, text in ((path, text) for path, text in sources if "tqdm(" in text):
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "tqdm":
                disable = [k.value for k in node.keywords if k.arg == "disable"]
                bars.append((path.name, node.lineno, [getattr(v, "value", v) for v in disable]))
    assert len(bars) >= 4  # the profiler's, solve's time limit, the chain and graph fronts, the DP's
    assert all(disable == [None] for _, _, disable in bars), bars
