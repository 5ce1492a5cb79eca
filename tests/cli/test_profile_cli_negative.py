"""``remat profile`` says what a negative backward transient means (early release, docs/model.md)."""

from __future__ import annotations

from remat.cli import main


def test_a_negative_backward_transient_is_explained_in_one_line(tmp_path, capsys) -> None:
    out = tmp_path / "p.json"
    assert main(["profile", "--model", "remat.zoo.gpt2:gpt2_tiny", "--input-shape", "2,16,32", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    rows = [line.split() for line in printed.splitlines() if line.startswith(("embed", "blocks", "head"))]
    assert len(rows) == 4
    assert any(row[-2].startswith("-") for row in rows)  # the embedding's: its output is free before its peak
    assert "bwd tmp below 0: the backward frees part of the stage's output and gradient first" in printed
