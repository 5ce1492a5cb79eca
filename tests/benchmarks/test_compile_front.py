"""benchmarks/compile_front.py's targets, table and summary on hand-made points (no model, no
compile: the benchmark's own run is what measures)."""

from __future__ import annotations

from benchmarks import compile_front as cf


def _timed(row: dict, peak: int, ms: float, spread: float = 0.05) -> dict:
    return row | {"measured_peak": peak, "measured_ms": ms, "ms_min": ms, "ms_max": ms, "ms_spread": spread}


def _remat(budget: int | float, budget_bytes: int, predicted: int, solve_s: float) -> dict:
    return {"method": cf.REMAT, "budget": budget, "budget_bytes": budget_bytes, "predicted_peak": predicted,
            "solve_s": solve_s}  # fmt: skip


def _rows() -> list[dict]:
    return [
        _timed({"method": cf.PLAIN}, 1000, 10.0),
        _timed({"method": cf.TORCH, "activation_memory_budget": 0.0}, 600, 12.0),
        _timed({"method": cf.TORCH, "activation_memory_budget": 1.0}, 800, 9.0),
        _timed(_remat(1.0, 900, 905, 3.0), 900, 8.8),
        _timed(_remat(800, 800, 790, 4.0), 790, 9.2),
        _timed(_remat(600, 600, 590, 2.0), 580, 11.0),
        {"method": cf.REMAT, "budget": 500, "refused": "remat.compile: budget 500 bytes cannot be met: ..."},
        {"method": cf.TORCH, "activation_memory_budget": 0.5, "failed": "RuntimeError: boom"},
    ]  # fmt: skip


def test_targets_on_points_that_meet_them():
    verdict = cf.targets(cf.with_errors(_rows()))
    a = verdict["a_frontier"]
    assert a["met"] and [p["remat_peak"] for p in a["points"]] == [580, 790]
    # at 0.0 (600 B, 12 ms) the fastest remat point within 600 B is 580 B at 11 ms
    assert a["points"][0]["ratio"] == 11.0 / 12.0 and a["points"][0]["no_slower"]
    # at 1.0 (800 B, 9 ms): 790 B at 9.2 ms, slower by 2.2%, within the 5% noise
    assert a["points"][1]["met"] and not a["points"][1]["no_slower"]
    assert verdict["b_monotone"]["met"] and verdict["b_monotone"]["violations"] == []
    assert verdict["c_least"] == {"remat_least": 580, "compile_least": 600, "ratio": 580 / 600, "met": True}
    assert verdict["d_prediction"]["met"] and verdict["d_prediction"]["worst_abs_error"] < 0.02
    assert verdict["e_solve"] == {"largest_s": 4.0, "median_s": 3.0, "limit_s": 10.0, "met": True}


def test_targets_that_fail_say_where():
    rows = _rows()
    rows[5] = rows[5] | {"measured_peak": 620, "predicted_peak": 600, "measured_ms": 14.0, "solve_s": 12.0}
    rows[4] = rows[4] | {"measured_peak": 610}  # a larger budget (800) peaking below the 600-byte point's 620
    verdict = cf.targets(cf.with_errors(rows))
    assert not verdict["a_frontier"]["met"] and verdict["a_frontier"]["failing"] == [0.0]
    assert verdict["a_frontier"]["points"][0]["remat_budget"] is None  # nothing at or below 600 B
    assert verdict["b_monotone"]["violations"] == [{"budget": 600, "peak": 620, "larger_budget": 800, "its_peak": 610}]
    assert not verdict["c_least"]["met"] and verdict["c_least"]["remat_least"] == 610
    assert not verdict["d_prediction"]["met"] and verdict["d_prediction"]["failing"] == [800, 600]
    assert not verdict["e_solve"]["met"] and verdict["e_solve"]["largest_s"] == 12.0
    text = cf.summary("toy", verdict)
    assert text.count("NOT met") == 5 and "failing at activation_memory_budget [0.0]" in text


def test_table_keeps_refused_and_failed_rows_with_their_reason():
    rows = cf.with_errors(_rows())
    text = cf.table(rows)
    lines = text.splitlines()
    assert len(lines) == 2 + len(rows)
    assert "remat.compile: budget 500 bytes cannot be met" in text and "RuntimeError: boom" in text
    assert "| remat.compile | 600 B | 0.00 | 0.00 (-1.69%) | 11.0 (x1.10) |" in text
