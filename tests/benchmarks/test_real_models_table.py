"""benchmarks/real_models.py (the table of docs/models.md): its core on tiny models computes every
cell, a failing model keeps its row with the reason, and the table lands between the doc's markers."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from tests.conftest import ROOT

try:  # first: timm and transformers import torchvision (remat/models/compat.py)
    from remat.models.compat import import_torchvision

    import_torchvision()
except ModuleNotFoundError:
    pytest.skip("torchvision is not installed (.ci/run installs it)", allow_module_level=True)
pytest.importorskip("transformers")

from benchmarks import real_models  # noqa: E402  (after importorskip)


@pytest.fixture(scope="module")
def rows() -> dict[str, dict]:
    quick = real_models.quick_models()
    chosen = {name: quick[name] for name in ("gpt2", "torchvision-resnet18")}
    return {row["model"]: row for row in real_models.run(chosen, runs=1)}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gpt2", "torchvision-resnet18"])
def test_every_cell_of_a_row_is_computed(rows, name):
    row = rows[name]
    assert "failed" not in row, row
    assert row["stages"] == len(row["stage_names"]) > 2 and row["stage_names"][-1].split("+")[-1] == "loss"
    store = row["store_all"]
    assert math.isfinite(store["error"]) and store["plain_peak"] > 0 and store["measured_peak"] > 0
    half = row["half"]
    assert "failed" not in half, half
    assert half["fraction"] < 1.0 and half["budget"] >= half["predicted_peak"] > 0
    assert math.isfinite(half["error"])
    # GPT-2 (dropout) and ResNet-18 (BatchNorm) are known exact: a recomputing replay, bit for bit
    assert row["fp32_grads_equal"] == {"equal": True}
    bf16 = row["bf16"]
    assert bf16["remat"] >= 0 and bf16["checkpoint"] >= 0 and bf16["within"] == (bf16["remat"] <= bf16["checkpoint"])
    memory = row["equal_memory"]
    assert "failed" not in memory, memory
    assert memory["budget"] == memory["baseline_peak"]  # remat solved for the baseline's measured peak
    assert memory["remat_ms"] > 0 and memory["baseline_ms"] > 0 and memory["remat_peak"] > 0
    # remat's least: the schedule at the least budget the DP meets, measured by the same meter
    assert 0 < memory["least_budget"] <= memory["budget"] and memory["least_peak"] > 0
    assert memory["least_at_most_baseline"] == (memory["least_peak"] <= memory["baseline_peak"])
    errors = row["errors"]  # one fresh profile quiet, one beside two busy processes, >= 2 budgets each
    assert errors["runs"] == 1 and len(errors["quiet"]) >= 2 and len(errors["loaded"]) >= 2
    assert all(math.isfinite(e) for e in errors["quiet"] + errors["loaded"])
    assert errors["worst_quiet"] == max(errors["quiet"], key=abs)


@pytest.mark.slow
def test_the_baselines_are_hf_checkpointing_and_per_block_checkpoint(rows):
    assert rows["gpt2"]["equal_memory"]["baseline"].startswith("HF ")
    assert rows["torchvision-resnet18"]["equal_memory"]["baseline"].startswith("torch.utils.checkpoint")


def test_a_failing_model_keeps_its_row_with_a_one_line_reason():
    row = real_models.measure_model("nothing", ("torchvision:no_such_model", {}, torch.randn(2, 3, 8, 8), True))
    assert "failed" in row and "\n" not in row["failed"] and "no_such_model" in row["failed"]
    table = real_models.markdown([row])
    assert table.splitlines()[-1].startswith("| nothing | failed: ")


def test_per_block_checkpoint_runs_ranges_as_one_segment_and_restores_the_forwards():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(inplace=True), nn.Conv2d(4, 4, 3), nn.ReLU(inplace=True)),
        nn.Flatten(),
        nn.Linear(4 * 4 * 4, 3),
    )
    segments = real_models.block_segments(model, ["0.0-1", "0.2-3", "1", "2", "root", "loss"])
    assert [len(s) for s in segments] == [2, 2, 1, 1]
    x = torch.randn(2, 3, 8, 8)
    model(x).sum().backward()
    expected = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    with real_models.per_block_checkpoint(model, segments):
        assert "forward" in vars(model[0][0])
        model(x).sum().backward()
    assert all(torch.equal(p.grad, e) for p, e in zip(model.parameters(), expected, strict=True))
    assert all("forward" not in vars(m) for m in model.modules())


def test_per_block_segments_skip_ranges_that_hold_stages_and_take_a_shared_block_once():
    """timm Swin's cut names ``layers.0-1`` beside the blocks inside ``layers.0``: wrapping both would
    patch a block's forward twice; ALBERT's shared layer is named once per call (``...0#2``)."""
    model = nn.Sequential(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), nn.Linear(4, 4))
    segments = real_models.block_segments(model, ["0.0", "0.1", "0-1", "0.0#2", "1#2", "loss"])
    assert [[id(m) for m in s] for s in segments] == [[id(model[0][0])], [id(model[0][1])], [id(model[1])]]


def test_the_table_replaces_only_what_is_between_the_markers(tmp_path):
    doc = tmp_path / "models.md"
    doc.write_text(f"before\n{real_models.BEGIN}\nold\n{real_models.END}\nafter\n")
    real_models.write_doc("| new |", "note", doc)
    assert doc.read_text() == f"before\n{real_models.BEGIN}\nnote\n\n| new |\n{real_models.END}\nafter\n"
    assert real_models.BEGIN in (ROOT / "docs" / "models.md").read_text()


def test_only_selects_by_full_name_or_by_the_name_after_the_library():
    models = real_models.full_models()
    assert list(real_models.select(models, ["gpt2", "resnet50"])) == ["gpt2", "torchvision-resnet50", "timm-resnet50"]
    assert list(real_models.select(models, ["timm-resnet50"])) == ["timm-resnet50"]
    with pytest.raises(KeyError):
        real_models.select(models, ["resnet51"])
