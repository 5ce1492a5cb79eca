"""benchmarks/compile_models.py's table and summary on hand-made rows (no model, no compile: the
benchmark's own run is what measures)."""

from __future__ import annotations

from benchmarks import compile_models as cm


def _ran(budget_bytes: int, predicted: int, measured: int, close: bool = True) -> dict:
    return {"budget": 0.5, "first_call_s": 30.0, "budget_bytes": budget_bytes, "regions": 2,
            "predicted_peak": predicted, "simulated_peak": predicted, "store_all_peak": 2 * budget_bytes,
            "solve_s": 2.5, "sources": [], "measured_peak": measured, "error": measured / predicted - 1,
            "within_budget": measured <= budget_bytes, "grads_vs_eager": 3e-6, "grads_vs_torch_compile": 1e-7,
            "grads_against": "eager", "grads_close": close}  # fmt: skip


def _rows() -> list[dict]:
    torch_ok = {"first_call_s": 8.0, "peak": 3 * 2**20, "grads_vs_eager": 2e-6}
    return [
        {"model": "a", "eager_peak": 4 * 2**20, "torch_compile": torch_ok, "remat_compile": _ran(2**20, 2**20, 2**20)},
        {"model": "b", "eager_peak": 4 * 2**20, "torch_compile": {"failed": "RuntimeError: boom"},
         "remat_compile": _ran(2**20, 2**20, 2**20 + 2**19, close=False)},
        {"model": "c", "eager_peak": 4 * 2**20, "torch_compile": torch_ok,
         "refused": {"budget": 0.5, "refused": "remat.compile: budget ... at least 123 bytes", "named_least": 123},
         "remat_compile": {"budget": 123, "failed": "RuntimeError: later"}},
    ]  # fmt: skip


def test_summary_counts_only_what_held() -> None:
    verdict = cm.summary(_rows())
    assert verdict == {"models": 3, "torch_compile_ran": 2, "remat_compile_ran": 2, "within_budget": 1,
                       "prediction_within_2pct": 1, "grads_close": 1, "largest_solve_s": 2.5,
                       "swept": 0, "remat_least_at_most_torch_least": 0}  # fmt: skip
    rows = _rows()
    rows[0]["sweep"], rows[1]["sweep"] = {"remat_at_most_torch": True}, {"remat_at_most_torch": False}
    swept = cm.summary(rows)
    assert (swept["swept"], swept["remat_least_at_most_torch_least"]) == (2, 1)


def test_table_says_what_failed_and_where_a_budget_was_refused() -> None:
    lines = cm.table(_rows()).splitlines()
    assert len(lines) == 2 + 3
    assert lines[2].startswith("| a | 4.00 | 3.00 (8) | 0.5 | 2 | 1.00 (1.00, +0.00%) | yes | close (eager; 3.0e-06) |")
    assert "| RuntimeError: boom |" in lines[3] and "| NO | NOT close (eager;" in lines[3] and "+50.00%" in lines[3]
    assert "| 123 B (refused at 0.5: least) | RuntimeError: later |" in lines[4]


def test_gradients_are_close_within_tolerance_or_as_close_to_eager_as_torch_compiles() -> None:
    assert cm.grads_verdict(True, "eager", 1e-3, 1e-6) == (True, "eager")
    within = "within torch.compile's distance from eager"
    assert cm.grads_verdict(False, "torch.compile", 4.5e-3, 9.1e-3) == (True, within)
    assert cm.grads_verdict(False, "eager", 9.2e-3, 9.1e-3) == (False, "eager")  # farther than torch.compile's
    assert cm.grads_verdict(False, "eager", 1e-6, None) == (False, "eager")  # torch.compile did not run
