"""benchmarks/does_not_fit.py: its verdicts and table on hand-made rows, and one tiny real run in
child processes (a failure in a child is a row's verdict, never the end of the benchmark)."""

from __future__ import annotations

import pytest

from benchmarks import does_not_fit as dnf

MiB = dnf.MiB
OOM = "RuntimeError: [enforce fail at alloc_cpu.cpp:127] . DefaultCPUAllocator: can't allocate memory: you tried"
REFUSAL = "strategy 'optimal' cannot fit a budget of 10 MiB (10485760 bytes); the smallest budget it can meet is 12 MiB"


def _cell(
    budget: int, measured: list[int], predicted: int, equal: bool = True, rss: int | None = None, first: int = 0
) -> dict:
    return {
        "budget": budget,
        "first_call": {
            "seconds": 3.0,
            "allocator_peak": first or budget,
            "rss_growth": rss if rss is not None else budget,
            "address_space_growth": budget,
        },
        "steps": [{"predicted": predicted, "measured": m, "seconds": 1.0} for m in measured],
        "step_ms": 900.0,
        "grads": {"equal": equal, "steps": 3, "max_abs_diff": 0.0 if equal else 1.3e-8},
    }


def _row(half: dict, plain_fails: bool = True) -> dict:
    reference = {"plain_peak": 300 * MiB, "per_block_peak": 100 * MiB, "plain_address_space": 310 * MiB,
                 "per_block_address_space": 105 * MiB, "a0": 1024}  # fmt: skip
    baselines = {"per_block_fits": True, "per_block_ms": 800.0, "plain_fails": plain_fails,
                 "plain_error": OOM if plain_fails else None}  # fmt: skip
    good = _cell(100 * MiB, [99 * MiB] * 3, 99 * MiB)
    for cell in (good, half):
        cell["verdict"] = dnf.budget_verdict(cell, 20 * MiB)
    return {"row": "toy", "reference": reference, "allowance": 120 * MiB, "plain_over_allowance": 2.6,
            "baselines": baselines, "budgets": {"per-block": good, "half": half}}  # fmt: skip


def test_a_budget_passes_only_when_every_check_holds() -> None:
    budget = 100 * MiB
    assert dnf.budget_verdict(_cell(budget, [budget] * 3, budget), 0)["ok"]
    above = dnf.budget_verdict(_cell(budget, [budget, budget + 1, budget], budget + 1), 0)
    assert not above["ok"] and not above["steps_within"] and above["prediction"]
    off = dnf.budget_verdict(_cell(budget, [int(0.97 * budget)] * 3, budget), 0)  # 3% below its prediction
    assert not off["ok"] and off["steps_within"] and not off["prediction"] and "prediction" in off["why"]
    unequal = dnf.budget_verdict(_cell(budget, [budget] * 3, budget, equal=False), 0)
    assert not unequal["ok"] and not unequal["grads_equal"]
    # the first call's RSS growth may use the room the cap grants per-block checkpointing, no more
    assert dnf.budget_verdict(_cell(budget, [budget] * 3, budget, rss=budget + 5 * MiB), 5 * MiB)["ok"]
    grown = dnf.budget_verdict(_cell(budget, [budget] * 3, budget, rss=budget + 5 * MiB + 1), 5 * MiB)
    assert not grown["ok"] and not grown["first_call_within"]
    # the first call's allocator peak (the whole call, metered around it) within the budget, no room
    over = dnf.budget_verdict(_cell(budget, [budget] * 3, budget, first=budget + 1), 5 * MiB)
    assert not over["ok"] and not over["first_call_allocator_within"] and over["first_call_within"]
    unread = _cell(budget, [budget] * 3, budget)
    del unread["first_call"]["allocator_peak"]  # a cell without the reading does not pass
    assert not dnf.budget_verdict(unread, 0)["first_call_allocator_within"]
    short = _cell(budget, [budget] * 2, budget)  # two steps trained, then one failed
    short["step_failed"] = OOM
    assert dnf.budget_verdict(short, 0) | {"why": None} == {"ok": False, "trains": False, "first_call_within": True,
        "first_call_allocator_within": True, "steps_within": True, "prediction": True, "grads_equal": True,
        "why": None}  # fmt: skip


def test_a_first_call_that_fails_is_an_out_of_memory_or_a_refusal() -> None:
    oom = dnf.budget_verdict({"budget": 1, "first_call": {"failed": OOM, "seconds": 1.0}}, 0)
    assert oom == {"ok": False, "refused": False, "why": OOM}
    refused = dnf.budget_verdict({"budget": 1, "first_call": {"failed": REFUSAL, "seconds": 1.0}}, 0)
    assert refused == {"ok": False, "refused": True, "why": REFUSAL}
    assert dnf.is_out_of_memory("MemoryError: std::bad_alloc") and not dnf.is_out_of_memory(REFUSAL)


def test_a_row_passes_with_half_refused_and_fails_naming_the_budget() -> None:
    half = {"budget": 50 * MiB, "first_call": {"failed": REFUSAL, "seconds": 1.0}}
    assert dnf.row_verdict(_row(half)) == "PASS"
    bad = _cell(50 * MiB, [60 * MiB] * 3, 50 * MiB)
    verdict = dnf.row_verdict(_row(bad, plain_fails=False))
    assert verdict.startswith("FAIL: half: fails: steps_within, prediction") and "per-block:" not in verdict
    assert "plain step did not fail under the cap" in verdict
    oom = {"budget": 50 * MiB, "first_call": {"failed": OOM, "seconds": 1.0}}
    assert dnf.row_verdict(_row(oom)) == f"FAIL: half: {OOM}"
    assert dnf.row_verdict({"row": "x", "failed": "uncapped: boom"}) == "FAIL: uncapped: boom"


def test_the_table_has_a_line_per_budget_and_keeps_failures_in_their_cell() -> None:
    half = {"budget": 50 * MiB, "first_call": {"failed": "a | b", "seconds": 1.0}}
    row = _row(half)
    row["verdict"] = dnf.row_verdict(row)
    failed = {"row": "broken", "failed": "uncapped: x | y", "verdict": "FAIL: uncapped: x | y"}
    lines = dnf.markdown([row, failed]).splitlines()
    assert len(lines) == 2 + 2 + 1
    assert lines[2].startswith("| toy | 300 | 100 | 120 (2.6x) | 100 (per-block) | 100 | 100 RSS / 100 AS, 3 s |")
    assert "99.0 vs 99.0, 99.0 vs 99.0, 99.0 vs 99.0 (worst +0.00%)" in lines[2] and "| 900 vs 800 | yes |" in lines[2]
    assert "**failed**: a / b" in lines[3] and lines[4].startswith("| broken |") and "x / y" in lines[4]
    assert all(line.count("|") - line.count("\\|") == 12 for line in lines)


def test_the_allowance_fits_per_block_and_leaves_the_plain_step_two_to_three_times_over() -> None:
    reference = {"plain_peak": 300 * MiB, "plain_address_space": 310 * MiB, "per_block_peak": 80 * MiB,
                 "per_block_address_space": 90 * MiB, "a0": 16 * MiB}  # fmt: skip
    assert dnf.choose_allowance(reference, 10 * MiB) == int(90 * MiB * 1.05) + 10 * MiB
    reference["per_block_peak"] = 110 * MiB  # the allocator saw more; less a_0, which is in the cap's base
    assert dnf.choose_allowance(reference, 10 * MiB) == int(94 * MiB * 1.05) + 10 * MiB
    reference["plain_address_space"] = 900 * MiB  # the plain step needs far more: a third of it
    assert dnf.choose_allowance(reference, 10 * MiB) == 300 * MiB


@pytest.mark.slow
def test_a_child_that_fails_is_a_row_verdict(tmp_path) -> None:
    result = dnf.run_child("reference", "no-such-row", True, tmp_path, timeout=300)
    assert result["failed"] == "KeyError: 'no-such-row'"


@pytest.mark.slow
def test_a_tiny_row_runs_every_child_and_judges_each_budget() -> None:
    pytest.importorskip("torch")
    row = dnf.measure_row("resmlp", quick=True, timeout=600, slack=256 * MiB)
    reference = row["reference"]
    assert "failed" not in reference, reference
    assert reference["plain_peak"] > reference["per_block_peak"] > reference["a0"] > 0
    assert row["allowance"] >= reference["per_block_address_space"] + 256 * MiB
    assert row["baselines"]["per_block_fits"], row["baselines"]
    assert set(row["budgets"]) == {"per-block", "half"}
    for cell in row["budgets"].values():
        verdict = cell["verdict"]
        assert isinstance(verdict["ok"], bool) and isinstance(verdict["why"], str)
        if "steps" in cell:  # remat trained under the cap: every step metered, its grads compared
            assert len(cell["steps"]) == dnf.STEPS and all(s["measured"] > 0 < s["predicted"] for s in cell["steps"])
            assert cell["first_call"]["allocator_peak"] > reference["a0"]  # the whole first call, metered
            assert cell["grads"]["steps"] == dnf.STEPS
        else:  # a failure or a refusal, kept as one line
            assert "\n" not in cell.get("failed", cell["first_call"].get("failed", ""))
    assert row["verdict"].startswith(("PASS", "FAIL: "))
    assert dnf.markdown([row]).count("\n") == 3
