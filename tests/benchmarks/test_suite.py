"""benchmarks/ as a suite: every script is in the runner's list and in benchmarks/README.md, takes
``--out`` and ``--quick`` from benchmarks/common.py, and nothing edits ``sys.path``; the shared
helpers do what they say."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest
import torch

from benchmarks import common
from benchmarks.__main__ import SUITE
from tests.conftest import ROOT

BENCHMARKS = ROOT / "benchmarks"
NOT_BENCHMARKS = {"__init__", "__main__", "common", "optimal_numpy"}  # optimal_numpy: a baseline, not a run


def _scripts() -> set[str]:
    return {p.stem for p in BENCHMARKS.glob("*.py")} - NOT_BENCHMARKS


def test_every_script_is_in_the_suite_and_in_the_readme() -> None:
    assert {b.name for b in SUITE} == _scripts()
    readme = (BENCHMARKS / "README.md").read_text()
    unlisted = [b.name for b in SUITE if f"`{b.name}`" not in readme]
    assert unlisted == []


def test_every_script_takes_the_one_output_flag_and_a_quick_form() -> None:
    for name in sorted(_scripts()):
        text = (BENCHMARKS / f"{name}.py").read_text()
        assert "common.add_out(" in text and "common.add_quick(" in text, name
        assert "--output" not in text and "def machine(" not in text, name


def test_no_sys_path_edits_for_benchmarks() -> None:
    """Benchmarks run as modules (``python -m benchmarks.NAME``) and tests import them as a package."""
    assert [p.name for p in BENCHMARKS.glob("*.py") if "sys.path" in p.read_text()] == []
    others = [p for p in (ROOT / "tests").rglob("*.py") if p.name != "test_suite.py"]
    lines = [line for p in others for line in p.read_text().splitlines()]
    assert [line for line in lines if "sys.path" in line and "benchmarks" in line] == []


def test_a_quick_run_writes_outside_results_unless_told() -> None:
    parser = argparse.ArgumentParser()
    common.add_out(parser, "x")
    common.add_quick(parser, "tiny")
    assert common.out_path(parser.parse_args([]), "x") == common.RESULTS / "x.json"
    quick = common.out_path(parser.parse_args(["--quick"]), "x")
    assert quick.name == "x.json" and common.RESULTS not in quick.parents
    assert common.out_path(parser.parse_args(["--quick", "--out", "a/b.json"]), "x").as_posix() == "a/b.json"


def test_update_result_keeps_the_other_keys(tmp_path) -> None:
    path = tmp_path / "r.json"
    common.write_result({"a": 1, "long": 2}, path)
    common.update_result(path, "train", {"b": 3})
    common.write_result({"a": 4}, path, keep=("long", "train"))
    assert json.loads(path.read_text()) == {"a": 4, "long": 2, "train": {"b": 3}}


def test_interleaved_runs_every_step_once_a_round_in_order() -> None:
    calls: list[str] = []
    times = common.interleaved({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, rounds=3)
    assert calls == ["a", "b"] * 3
    assert [len(v) for v in times.values()] == [3, 3] and all(t >= 0 for v in times.values() for t in v)


def test_step_peak_reads_the_allocator() -> None:
    size = 4 << 20
    peak = common.step_peak(lambda: torch.empty(size, dtype=torch.uint8).fill_(1))
    assert size <= peak < 2 * size


def test_missing_names_what_is_missing() -> None:
    assert common.missing(()) is None
    assert common.missing(("surely_not_a_module_xyz",)) == "needs surely_not_a_module_xyz (not installed)"
    assert (common.missing(("gpu",)) is None) == torch.cuda.is_available()


@pytest.mark.parametrize("argv", [["--only", "nope", "--quick"], []])
def test_the_runner_refuses_bad_input_in_one_line(argv: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", "benchmarks", *argv], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith("python -m benchmarks: error:")


def test_docs_show_each_benchmark_once_and_results_keep_one_file_each() -> None:
    """docs/benchmarks.md: a section per benchmark, its heading the script's name, in ~500 lines;
    results/: one file per benchmark (gpu_validate's CPU run is its file while no GPU ran it)."""
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    headings = [line[3:] for line in text.splitlines() if line.startswith("## ")]
    assert sorted(headings) == sorted(b.name for b in SUITE)
    assert len(text.splitlines()) <= 520
    stems = [p.stem.removesuffix("_cpu") for p in common.RESULTS.iterdir()]
    assert len(stems) == len(set(stems)) and set(stems) <= {b.name for b in SUITE}
