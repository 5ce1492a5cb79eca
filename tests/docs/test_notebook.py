"""The quickstart notebook runs top to bottom on the current code (so it cannot rot)."""

from __future__ import annotations

import shutil

import nbclient
import nbformat
import pytest

from tests.conftest import ROOT


@pytest.mark.slow
def test_quickstart_notebook_executes(tmp_path):
    source = ROOT / "notebooks" / "quickstart.ipynb"
    shutil.copy(source, tmp_path / source.name)
    notebook = nbformat.read(tmp_path / source.name, as_version=4)
    client = nbclient.NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()  # raises CellExecutionError on any failing cell
    text = "\n".join(
        output.get("text", "") for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs
    )
    assert "peak activation memory" in text
    assert "gradients identical to the plain model: True" in text
    assert (tmp_path / "front.png").stat().st_size > 10_000
