"""Shared test fixtures: small chains whose costs are easy to compute by hand."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from hypothesis import settings

from remat.schedules import ChainProfile, Stage

# .ci/run sets REMAT_HYPOTHESIS=ci: CI draws a fixed set of examples (derandomized), so a landing's
# result is reproducible from its commit; a local run explores new examples every time.
settings.register_profile("ci", derandomize=True)
if os.environ.get("REMAT_HYPOTHESIS") == "ci":
    settings.load_profile("ci")


def pytest_configure(config: pytest.Config) -> None:
    """A pytest-xdist worker takes its share of the cores for torch's intra-op threads: with the
    default (every core per worker) two workers on two cores run four OpenMP threads that spin while
    they wait for each other: on a busy 2-core machine ResNet tests took 5 to 10 times the CPU time
    (and 4 to 8 times the wall time) they take with one thread (issue 44)."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers:
        torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // int(workers)))


ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def three_stage_chain() -> ChainProfile:
    """Sizes are powers of ten apart so every hand-computed peak has one reading.

    a_0 = 1 byte; stage i has output 10^(i+1), saved 3 * 10^(i+1), forward overhead 2 * 10^i,
    backward overhead 3 * 10^i; forward 10^i ms, backward 2 * 10^i ms.
    """
    stages = tuple(
        Stage(
            name=f"s{i}",
            forward_ms=float(10**i),
            backward_ms=float(2 * 10**i),
            output_size=10 ** (i + 1),
            saved_size=3 * 10 ** (i + 1),
            forward_overhead=2 * 10**i,
            backward_overhead=3 * 10**i,
        )
        for i in range(3)
    )
    return ChainProfile(name="three", input_size=1, stages=stages)


def uniform_chain(length: int, output: int = 1, saved: int = 1, input_size: int | None = None) -> ChainProfile:
    """``length`` identical stages (1 ms forward, 2 ms backward, no overheads)."""
    stage = Stage(name="s", forward_ms=1.0, backward_ms=2.0, output_size=output, saved_size=saved)
    return ChainProfile(
        name=f"uniform{length}", input_size=output if input_size is None else input_size, stages=(stage,) * length
    )


@pytest.fixture
def chain3() -> ChainProfile:
    return three_stage_chain()
