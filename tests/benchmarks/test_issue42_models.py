"""benchmarks/issue42_models.py (issue 42's architectures in docs/models.md): a row computes every
cell, bf16 included; the table keeps real_models' columns and adds the bf16 one; a partial rerun's
rows replace the full run's by name, keeping the cells it did not measure."""

from __future__ import annotations

import json

import pytest

try:  # first: transformers imports torchvision (remat/models/compat.py)
    from remat.models.compat import import_torchvision

    import_torchvision()
except ModuleNotFoundError:
    pytest.skip("torchvision is not installed (.ci/run installs it)", allow_module_level=True)
pytest.importorskip("transformers")

from benchmarks import issue42_models  # noqa: E402  (after importorskip)

BF16 = {"stages": 3, "fraction": 0.5, "half": {"error": -0.01}, "least": {"failed": "boom"},
        "equal_half": True, "equal_least": False, "baseline_equal": True}  # fmt: skip


def _row(name: str, errors: dict | None, bf16: dict | None = BF16) -> dict:
    return {"model": name, "stages": 3, "stage_names": ["0", "1", "loss"], "errors": errors, "bf16_inside": bf16}


def test_the_table_has_real_models_columns_but_its_bf16_and_the_bf16_cut_inside_autocast():
    lines = issue42_models.markdown([_row("a", None), {"model": "b", "failed": "refused | here"}]).splitlines()
    head = [cell.strip() for cell in lines[0].split("|")[1:-1]]
    assert not any("max-abs" in cell for cell in head) and head[-1].startswith("bf16 autocast (cut inside)")
    assert all(line.count("|") == lines[0].count("|") for line in lines), lines
    assert "-1.00% at 50%, failed: boom at least" in lines[2] and "remat **no** (True / False)" in lines[2]
    assert "refused / here" in lines[3]


def test_a_partial_rerun_replaces_rows_by_name_and_keeps_cells_it_did_not_measure(tmp_path, monkeypatch):
    errors = [{"runs": 3, "worst_quiet": w, "worst_loaded": w} for w in (0.01, 0.02)]
    full = {"machine": {"at": "full"}, "header": "note", "rows": [_row("a", errors[0]), _row("b", errors[1])]}
    partial = {"machine": {"at": "rerun"}, "rows": [_row("b", None, {**BF16, "equal_least": True})]}
    (tmp_path / "issue42_models.json").write_text(json.dumps(full))
    (tmp_path / "partial.json").write_text(json.dumps(partial))
    tables = []
    monkeypatch.setattr(issue42_models, "write_doc", lambda table, note: tables.append((table, note)))
    issue42_models.merge(tmp_path / "partial.json", tmp_path / "issue42_models.json")
    rows = json.loads((tmp_path / "issue42_models.json").read_text())["rows"]
    assert [r["model"] for r in rows] == ["a", "b"] and "rerun" not in rows[0]
    assert rows[1]["errors"] == errors[1] and rows[1]["bf16_inside"]["equal_least"] is True
    assert rows[1]["rerun"] == {"at": "rerun"} and tables[0][1] == "note"


@pytest.mark.slow
def test_the_custom_function_row_is_exact_in_fp32_and_bf16_and_below_per_block():
    row = issue42_models.measure("swish-function", issue42_models.swish_net(), runs=0)
    assert "failed" not in row and row["stages"] >= 8, row  # one stage per Swish block
    assert row["fp32_grads_equal"] == {"equal": True}
    assert row["equal_memory"]["least_at_most_baseline"], row["equal_memory"]
    assert abs(row["half"]["error"]) <= 0.02
    bf16 = row["bf16_inside"]
    assert bf16["equal_half"] and bf16["equal_least"] and bf16["baseline_equal"], bf16
