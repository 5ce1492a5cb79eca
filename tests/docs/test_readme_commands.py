"""The README's ``remat`` commands run as written (read from the README, not copied here: another
wording of the README is what is checked) from a fresh clone's root, and print what the README's
output blocks show (NOTE [README output blocks] in tests/docs/readme_blocks.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.docs.readme_blocks import Block, blocks, exact_lines, output_of, remat_commands, shape_mismatches

COMMAND_BLOCKS = [b for b in blocks() if b.lang == "bash" and remat_commands(b)]


def _run(args: list[str], cwd: os.PathLike[str]) -> str:
    """``remat ARGS`` as a user runs it (this checkout's remat), on the CPU the README's outputs
    were printed on; its stdout."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "CUDA_VISIBLE_DEVICES": "",
    }
    done = subprocess.run(
        [sys.executable, "-m", "remat", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"remat {' '.join(args)}: exit {done.returncode}\n{done.stderr}"
    return done.stdout


def test_the_readme_shows_commands_and_what_they_print():
    """The blocks the test below runs are there: the first line's solve and the tour, each with an
    output block (a README that lost them would leave the test below with nothing to check)."""
    assert len(COMMAND_BLOCKS) >= 2, [b.where for b in COMMAND_BLOCKS]
    assert ["solve", "examples/resnet_like.json"] == remat_commands(COMMAND_BLOCKS[0])[0][:2]
    assert all(output_of(b) is not None for b in COMMAND_BLOCKS), [b.where for b in COMMAND_BLOCKS]


@pytest.mark.slow
@pytest.mark.parametrize("block", COMMAND_BLOCKS, ids=lambda b: b.where)
def test_the_readme_commands_print_what_the_readme_shows(block: Block, tmp_path):
    # a fresh clone's root, except that what the commands write lands in tmp_path
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    commands = remat_commands(block)
    for args in commands:
        printed = _run(args, tmp_path)
    shown = output_of(block)
    if shown is None:
        return
    last = commands[-1]
    if "--model" in last:
        # it measured a model here: sizes and times are this machine's, so compared by shape
        assert not shape_mismatches(shown.text, printed), "\n".join(shape_mismatches(shown.text, printed))
    else:
        # it read only the bundled files: every number (the simulated step time too) is the same everywhere
        assert exact_lines(printed) == exact_lines(shown.text), f"{shown.where} shows:\n{shown.text}printed:\n{printed}"
