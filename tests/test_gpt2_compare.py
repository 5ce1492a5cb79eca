"""benchmarks/gpt2_compare.py on a tiny Hugging Face GPT-2: its measurement path runs for every
method but torch.compile (minutes per budget; the benchmark's own run shows it), and the replayed
schedules that record with middle options peak where the simulator predicts (issue 12: within 2%)."""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

import pytest
import torch

from remat.executor.compat import import_torchvision
from remat.executor.options_profile import applicable_policies
from remat.executor.profiler import profile_chain
from remat.executor.proof import cut_model

try:  # first: transformers imports torchvision (remat/executor/compat.py)
    import_torchvision()
except ModuleNotFoundError:
    pytest.skip("torchvision is not installed (.ci/run installs it)", allow_module_level=True)
pytest.importorskip("transformers")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import gpt2_compare  # noqa: E402  (benchmarks/gpt2_compare.py)

TINY = ["--layers", "2", "--dim", "32", "--heads", "2", "--seq", "64", "--batch", "2", "--vocab", "16"]


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)
    args = gpt2_compare.arguments([*TINY, "--no-compile", "--steps", "1"])
    model, kw = gpt2_compare.build(args)
    chain = cut_model(model, (), kw)
    profile = profile_chain(chain, chain.bind(**kw), repeats=1, warmup=1, options=True)
    return model, kw, chain, profile


def _free_options(profile):
    """The profile with every option's backward as fast as the stage's: the DP then records with
    an option wherever memory binds, whatever the timing noise (the peaks are still measured)."""
    stages = tuple(
        dataclasses.replace(s, options=tuple(dataclasses.replace(o, backward_ms=s.backward_ms) for o in s.options))
        for s in profile.stages
    )
    return dataclasses.replace(profile, stages=stages)


def test_blocks_get_the_fused_attention_policy(tiny):
    model, kw, chain, profile = tiny
    block = chain.stages[1]
    with torch.no_grad():
        x = chain.stages[0](chain.bind(**kw))
    # sdpa with dropout 0 is one fused kernel: no bmm or softmax to keep, so the matmul policies
    # equal "save linear outputs" here and only it is kept, next to the one keeping the kernel
    assert applicable_policies(block, x) == ["save linear outputs", "save linear and attention outputs"]
    for stage in profile.stages:
        assert all(o.saved_size < stage.saved_size for o in stage.options)


def test_middle_option_rows_peak_as_predicted(tiny):
    model, kw, chain, profile = tiny
    free = _free_options(profile)
    budgets = gpt2_compare.option_budgets(free, 2)
    assert budgets, "no front point records with a middle option"
    for budget in budgets:
        row = gpt2_compare.remat_row(model, chain, free, kw, budget, "remat multi-option DP", steps=1)
        assert row["options_used"] >= 1
        assert row["predicted_peak"] <= budget
        assert abs(row["peak_error"]) <= gpt2_compare.PEAK_TOLERANCE, row


def test_baselines_and_targets(tiny):
    model, kw, chain, profile = tiny
    a0 = profile.input_size
    rows = gpt2_compare.baselines(model, kw, a0, steps=1)
    plain, hf = rows
    assert hf["measured_peak"] < plain["measured_peak"]  # per-block checkpointing holds less
    least = gpt2_compare.remat_row(model, chain, profile, kw, 10**12, "remat multi-option DP", steps=1)
    assert least["measured_peak"] == pytest.approx(plain["measured_peak"], rel=0.02)  # store-all = plain
    result = gpt2_compare.targets([*rows, least])
    assert result["least_memory"]["plain_peak"] == plain["measured_peak"]
    assert "| no checkpointing |" in gpt2_compare.table([*rows, least])


def test_thread_clock_is_put_back():
    wall = time.perf_counter
    with gpt2_compare.clock("thread"):
        assert time.perf_counter is time.thread_time  # the profiler's timers read CPU time too
    assert time.perf_counter is wall
