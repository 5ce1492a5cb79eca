"""The quickstart notebook runs top to bottom on the current code (so it cannot rot), its stored
outputs are what its code prints today, and its text names the memory measure its outputs name."""

from __future__ import annotations

import re
import shutil

import nbclient
import nbformat
import pytest

from tests.conftest import ROOT
from tests.docs.readme_blocks import shape_mismatches


def _printed(notebook: nbformat.NotebookNode) -> list[str]:
    """Each code cell's printed text (its stream outputs), in order."""
    return [
        "".join(output.get("text", "") for output in cell.outputs if output.output_type == "stream")
        for cell in notebook.cells
        if cell.cell_type == "code"
    ]


def _comparable(text: str) -> str:
    # a schedule's op list is the solution for the profile measured here: another machine's
    # profile (its sizes) can give another schedule, so it is left out of the comparison
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith("(("))


@pytest.mark.slow
def test_quickstart_notebook_executes(tmp_path):
    source = ROOT / "notebooks" / "quickstart.ipynb"
    shutil.copy(source, tmp_path / source.name)
    notebook = nbformat.read(tmp_path / source.name, as_version=4)
    stored = _printed(notebook)
    client = nbclient.NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()  # raises CellExecutionError on any failing cell
    printed = _printed(notebook)
    text = "\n".join(printed)
    assert "peak activation memory" in text
    assert "gradients identical to the plain model: True" in text
    assert (tmp_path / "front.png").stat().st_size > 10_000
    # the stored outputs are what the code prints now, by shape (sizes and times are this
    # machine's: NOTE [README output blocks] in tests/docs/readme_blocks.py)
    for index, (was, now) in enumerate(zip(stored, printed, strict=True)):
        mismatches = shape_mismatches(_comparable(was), _comparable(now))
        assert not mismatches, f"code cell {index}: stored output differs\n" + "\n".join(mismatches)
    # the text says memory is measured by what the report says measured it
    measure = re.search(r"^measured: the (\w+)'s peak", text, re.M)
    assert measure, text
    markdown = "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "markdown")
    named = re.findall(r"measured by (?:a|the) (\w+)", markdown)
    assert named and set(named) == {measure[1]}, (named, measure[1])
