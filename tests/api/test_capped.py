"""A step that does not fit, trained by remat: a child process whose address space is capped
between per-block checkpointing's need and the plain step's (issue 45; docs/models.md, "The
first call's memory"). The cap and the budget come from what this test measures here."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from torch.utils.checkpoint import checkpoint

import remat
from remat.measure.allocator import AllocatorMeter
from tests.api.capped_child import build, plain_step

CHILD = os.path.join(os.path.dirname(__file__), "capped_child.py")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(remat.__file__)))


def _peak(step) -> int:
    with AllocatorMeter("cpu") as meter:
        step()
    return meter.peak_bytes


def _per_block_step(model, x) -> None:
    h = x
    for block in model.blocks:
        h = checkpoint(block, h, use_reentrant=False)
    ((h**2).mean()).backward()


def _child(mode: str, allowance: int, budget: int) -> dict:
    # glibc serves every large block by mmap and unmaps it when freed (no dynamic threshold), as a
    # device allocator gives freed memory back: the address space is what is live, not a high-water mark
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env["MALLOC_MMAP_THRESHOLD_"] = str(1 << 17)
    done = subprocess.run(
        [sys.executable, CHILD, mode, str(allowance), str(budget)],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=900,
    )  # fmt: skip
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and lines, done.stderr[-2000:]
    return json.loads(lines[-1])


@pytest.mark.slow
def test_a_step_over_the_cap_trains_under_remat_in_a_capped_child():
    model, x = build()
    plain = _peak(lambda: plain_step(model, x))
    model.zero_grad(set_to_none=True)
    per_block = _peak(lambda: _per_block_step(model, x))
    assert plain > 2 * per_block, (plain, per_block)  # the step does not fit where per-block does
    allowance = (plain + per_block) // 2  # above per-block checkpointing's need, below the plain step's
    budget = per_block
    refused = _child("plain", allowance, budget)
    assert not refused["ok"] and refused["out_of_memory"], refused
    trained = _child("remat", allowance, budget)
    assert trained["ok"], trained


@pytest.mark.slow
def test_remat_compile_under_the_cap_trains_or_names_out_of_memory_in_one_line():
    """issue 45 item 5: remat.compile's first call (its own measured step of a first plan included)
    within the cap where the plain step does not fit; else one line: out of memory naming the phase,
    the bytes and the budget, or a budget below the compiled step's least refused naming that least
    (seen here: per-block checkpointing's peak is below what the compiled graphs' partitions reach),
    never std::bad_alloc or a compiler's traceback."""
    model, x = build()
    plain = _peak(lambda: plain_step(model, x))
    model.zero_grad(set_to_none=True)
    per_block = _peak(lambda: _per_block_step(model, x))
    allowance = (plain + per_block) // 2
    result = _child("compile", allowance, per_block)
    if not result["ok"]:
        error = result["error"]
        assert result["lines"] == 1, result
        if result["out_of_memory"]:
            assert error.startswith("out of memory while") and f"budget {per_block} bytes" in error, result
        else:
            assert f"budget {per_block} bytes cannot be met" in error and "at least" in error, result
