"""The ``remat`` command: solve, simulate, strategies, --help (called in-process through ``main``)."""

from __future__ import annotations

import pytest

from remat.cli import main
from remat.schedules import check_schedule, load_profile, load_schedule
from remat.solver import strategy_names
from tests.conftest import EXAMPLES

RESNET = str(EXAMPLES / "resnet_like.json")


def _run(capsys, argv):
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.slow
@pytest.mark.parametrize("strategy", strategy_names("chain"))
def test_solve_each_chain_strategy_writes_a_valid_schedule(tmp_path, capsys, strategy):
    out = tmp_path / "schedule.json"
    code, stdout, err = _run(capsys, ["solve", RESNET, "--budget", "100%", "--strategy", strategy, "-o", str(out)])
    assert code == 0, err
    profile = load_profile(RESNET)
    schedule = load_schedule(out)
    assert schedule.strategy == strategy
    result = check_schedule(profile, schedule)  # same profile, valid, within budget, claimed == simulated
    assert "peak memory  " in stdout and f"({result.peak_memory} bytes)" in stdout
    assert f"wrote {out}" in stdout


def test_solve_percentage_budget(tmp_path, capsys):
    out = tmp_path / "s.json"
    code, _, err = _run(capsys, ["solve", RESNET, "--budget", "40%", "--strategy", "chen-greedy", "-o", str(out)])
    assert code == 0, err
    profile = load_profile(RESNET)
    store_all = check_schedule(profile, _solved(tmp_path, capsys, "store-all", "100%")).peak_memory
    schedule = load_schedule(out)
    assert schedule.budget == int(store_all * 0.4)
    assert check_schedule(profile, schedule).peak_memory <= store_all * 0.4


def _solved(tmp_path, capsys, strategy, budget, *extra):
    out = tmp_path / f"{strategy}.json"
    code, _, err = _run(capsys, ["solve", RESNET, "--budget", budget, "--strategy", strategy, "-o", str(out), *extra])
    assert code == 0, err
    return load_schedule(out)


def test_solve_options(tmp_path, capsys):
    assert _solved(tmp_path, capsys, "sequential", "100%", "--segments", "3").extra["segments"] == 3
    assert _solved(tmp_path, capsys, "revolve", "100%", "--checkpoints", "2").extra["checkpoints"] == 2


def test_solve_infeasible_states_the_smallest_budget(capsys):
    code, _, err = _run(capsys, ["solve", RESNET, "--budget", "1MiB", "--strategy", "chen-sqrt"])
    assert code == 2
    assert "strategy 'chen-sqrt' cannot fit a budget of 1.00 MiB" in err
    assert "the smallest budget it can meet is" in err


def test_simulate_exits_1_when_the_schedule_is_over_its_budget(tmp_path, capsys):
    import json

    _solved(tmp_path, capsys, "store-all", "100%")
    path = tmp_path / "store-all.json"
    data = json.loads(path.read_text())
    data["budget"] = data["predicted"]["peak_memory"] - 1
    path.write_text(json.dumps(data))
    code, out, err = _run(capsys, ["simulate", RESNET, str(path)])
    assert code == 1
    assert "within budget  NO" in out and "exceeds the schedule's budget" in err


def test_simulate_prints_table_and_plot(tmp_path, capsys):
    schedule = _solved(tmp_path, capsys, "revolve", "40%")
    png = tmp_path / "timeline.png"
    code, out, err = _run(capsys, ["simulate", RESNET, str(tmp_path / "revolve.json"), "--plot", str(png)])
    assert code == 0, err
    assert f"({schedule.predicted.peak_memory} bytes)" in out
    assert "within budget  yes" in out
    assert f"compute        {schedule.predicted.compute_ms:.3f} ms" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_strategies_lists_every_registered_strategy(capsys):
    code, out, _ = _run(capsys, ["strategies"])
    assert code == 0
    listed = {line.split()[0] for line in out.splitlines() if line.strip()}
    assert listed == set(strategy_names())


@pytest.mark.parametrize("command", [[], ["solve"], ["simulate"], ["strategies"]])
def test_help(capsys, command):
    assert main([*command, "--help"]) == 0
    assert "example:" in capsys.readouterr().out


def test_no_command_prints_help(capsys):
    code, out, _ = _run(capsys, [])
    assert code == 2
    assert "solve" in out and "simulate" in out


@pytest.mark.parametrize("strategy", strategy_names("chain"))
def test_solve_output_in_plain_words(capsys, strategy):
    code, out, err = _run(capsys, ["solve", RESNET, "--budget", "40%", "--strategy", strategy])
    if code == 2:  # a baseline that cannot fit 40%: its error, nothing else
        assert "cannot fit" in err and out == ""
        return
    profile = load_profile(RESNET)
    from remat.schedules import format_size
    from remat.solver.budget import reference_peak

    peak = reference_peak(profile)
    assert f"40% of the store-all peak, {format_size(peak)}" in out
    assert "of the store-all peak" in out.splitlines()[2]  # peak memory as a share too
    for jargon in ("claim", "slot_bytes", "slots ", "segment_starts", "forward_steps"):
        assert jargon not in out, (jargon, out)


@pytest.mark.slow
def test_graph_ilp_output_says_when_the_limit_is_too_short(capsys):
    code, out, err = _run(
        capsys,
        ["solve", str(EXAMPLES / "graph_resnet50.json"), "--budget", "50%", "--strategy", "ilp", "--time-limit", "1"],
    )
    assert code == 0, err
    assert "found by     the warm start" in out
    assert "note         the 1 s time limit ran out" in out and "larger --time-limit" in out
    assert "backend" not in out and "variables" not in out


@pytest.mark.slow
def test_graph_profile_printout_uses_the_one_store_all_peak(tmp_path, capsys):
    """What `remat profile --graph` calls the store-all peak is what `--budget 100%` means."""
    import re

    out_path = tmp_path / "g.json"
    argv = ["profile", "--graph", "--model", "remat.zoo.small:cnn", "--input-shape", "4,3,16,16"]
    code, out, err = _run(capsys, [*argv, "--time-source", "flops", "-o", str(out_path)])
    assert code == 0, err
    printed = int(re.search(r"store-all peak [^(]+\((\d+) bytes\)", out).group(1))
    code, out, err = _run(capsys, ["solve", str(out_path), "--budget", "100%", "--strategy", "store-all"])
    assert code == 0, err
    assert f"({printed} bytes): 100% of the store-all peak" in out
    assert check_schedule(load_profile(out_path), _store_all(out_path)).peak_memory == printed


def _store_all(profile_path):
    from remat.solver import solve

    return solve(load_profile(profile_path), 2**80, "store-all")
