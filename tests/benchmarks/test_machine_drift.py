"""benchmarks/machine_drift.py: its summary reads windows and ratios right, and a short run writes
a table for every kernel on both clocks."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from benchmarks import machine_drift
from tests.conftest import ROOT


def _rounds(values: list[tuple[float, float]]) -> list[tuple[float, dict]]:
    """Rounds of one kernel 'k' at the given (seconds, ms), the same ms on both clocks."""
    return [(at, {"k": {"thread": ms, "wall": ms}}) for at, ms in values]


def test_summary_windows_and_ratio():
    # two 5-s windows: a fast spell (10, 12, 11 ms) and a slow one (20, 22 ms)
    rows = machine_drift.summary(_rounds([(0.0, 10.0), (1.0, 12.0), (4.9, 11.0), (5.0, 20.0), (9.0, 22.0)]), 5.0)
    assert [r["clock"] for r in rows] == ["thread", "wall"]
    row = rows[0]
    assert (row["min_ms"], row["median_ms"], row["max_ms"]) == (10.0, 12.0, 22.0)
    assert row["window_medians_ms"] == [11.0, 21.0]
    assert (row["window_median_low_ms"], row["window_median_high_ms"]) == (11.0, 21.0)
    assert row["median_over_min"] == pytest.approx(0.2)
    assert "| k | thread | 10.0 | 12.0 | 22.0 | 11.0-21.0 | +20% |" in machine_drift.table(rows, 5.0)


def _run(*options: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "benchmarks.machine_drift", *options]
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT)


@pytest.mark.slow
def test_short_run_writes_every_kernel(tmp_path):
    out = tmp_path / "drift.json"
    done = _run("--seconds", "0.5", "--window", "0.25", "--out", str(out))
    assert done.returncode == 0, done.stderr
    rows = json.loads(out.read_text())["rows"]
    expected = {(k, c) for k in machine_drift.kernels() for c in ("thread", "wall")}
    assert {(r["kernel"], r["clock"]) for r in rows} == expected
    assert all(0 < r["min_ms"] <= r["median_ms"] <= r["max_ms"] for r in rows)
    assert "| matmul 5x1024^2 | thread |" in done.stdout


@pytest.mark.slow
def test_bad_options_exit_2(tmp_path):
    done = _run("--seconds", "0", "--out", str(tmp_path / "x.json"))
    assert done.returncode == 2 and "must be positive" in done.stderr


@pytest.mark.slow
def test_a_tiny_duration_still_samples_once():
    rounds = machine_drift.collect(1e-9)
    assert len(rounds) >= 1 and set(rounds[0][1]) == set(machine_drift.kernels())
