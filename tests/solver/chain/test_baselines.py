"""Baseline chain strategies on chains small enough to work out by hand, and torch faithfulness.

The hand chains are ``uniform_chain(n)`` (tests/conftest.py): every activation, saved tensor and
gradient is 1 byte, forward 1 ms, backward 2 ms, no overheads; so memory counts items.
"""

from __future__ import annotations

import dataclasses

import pytest

from remat.schedules import InfeasibleBudgetError, RematError, check_schedule, simulate
from remat.solver import solve
from remat.solver.chain.chen_greedy import candidate_thresholds, greedy_starts
from remat.solver.chain.chen_sqrt import sqrt_segment_starts
from remat.solver.chain.recompute_all import recompute_all_ops
from remat.solver.chain.segments import segment_ops
from remat.solver.chain.sequential import torch_segment_starts
from tests.conftest import three_stage_chain, uniform_chain


def test_segment_ops_by_hand():
    assert segment_ops(5, (0, 2)) == [
        ("F_ck", 0),
        ("F_n", 1),
        ("F_all", 2),
        ("F_all", 3),
        ("F_all", 4),
        ("B", 4),
        ("B", 3),
        ("B", 2),
        ("F_all", 0),
        ("F_all", 1),
        ("B", 1),
        ("B", 0),
    ]
    assert segment_ops(3, (0,)) == [("F_all", 0), ("F_all", 1), ("F_all", 2), ("B", 2), ("B", 1), ("B", 0)]
    with pytest.raises(ValueError):
        segment_ops(3, (1,))
    with pytest.raises(ValueError):
        segment_ops(3, (0, 3))


def test_torch_segment_starts_match_checkpoint_sequential_code():
    # torch: size = n // k; checkpointed segments start at 0, size, ..., (k-2) size; the last
    # segment starts at (k-1) size and takes the remainder.
    assert torch_segment_starts(10, 4) == (0, 2, 4, 6)
    assert torch_segment_starts(10, 3) == (0, 3, 6)
    assert torch_segment_starts(7, 7) == tuple(range(7))
    assert torch_segment_starts(7, 1) == (0,)
    assert torch_segment_starts(5, 2) == (0, 2)
    for bad in (0, 8, -1):
        with pytest.raises(RematError, match=r"segments: must be an integer between 1 and the number of stages \(7\)"):
            torch_segment_starts(7, bad)


def test_sequential_replays_torch_checkpoint_sequential():
    """Run the real ``checkpoint_sequential`` with modules that log each forward call and whether
    autograd is recording; the log must equal our ops' forwards (F_ck/F_n unrecorded, F_all recorded)."""
    torch = pytest.importorskip("torch")
    from torch.utils.checkpoint import checkpoint_sequential

    log: list[tuple[int, bool]] = []

    class Logged(torch.nn.Module):
        def __init__(self, index: int):
            super().__init__()
            self.index = index
            self.linear = torch.nn.Linear(3, 3)

        def forward(self, x):
            log.append((self.index, torch.is_grad_enabled()))
            return torch.tanh(self.linear(x))

    for n, k in [(10, 4), (7, 3), (5, 5), (6, 1), (9, 2)]:
        log.clear()
        model = torch.nn.Sequential(*[Logged(i) for i in range(n)])
        x = torch.randn(2, 3, requires_grad=True)
        out = checkpoint_sequential(model, k, x, use_reentrant=True)
        out.sum().backward()
        ops = segment_ops(n, torch_segment_starts(n, k))
        expected = [(i, name == "F_all") for name, i in ops if name != "B"]
        assert log == expected, (n, k)


def test_sequential_by_hand():
    chain = uniform_chain(4)
    # store-all: 4 abar + g[4] + g[3] at B 3 = 1 (a0) + 4 + 1 + 1 = 7
    assert solve(chain, 7, "store-all").predicted.peak_memory == 7
    # k = 2 (starts 0, 2): B 3 holds a0, a2, abar3, abar4, g4 and makes g3: 6. Recompute stages 0, 1.
    schedule = solve(chain, 6, "sequential")
    assert schedule.extra["segments"] == 2
    assert schedule.predicted.peak_memory == 6
    assert schedule.predicted.recompute_ms == pytest.approx(2.0)
    # k = 4 keeps a0..a3 and peaks at 7; k = 3 also 7: nothing fits 5, and 6 is the least.
    with pytest.raises(InfeasibleBudgetError) as info:
        solve(chain, 5, "sequential")
    assert info.value.min_budget == 6
    assert "the smallest budget it can meet is 6 B (6 bytes)" in str(info.value)
    with pytest.raises(InfeasibleBudgetError) as info:
        solve(chain, 6, "sequential", segments=4)
    assert info.value.min_budget == 7
    # with the store-all peak as budget, sequential is store-all (k = 1)
    schedule = solve(chain, 7, "sequential")
    assert schedule.extra["segments"] == 1 and schedule.predicted.recompute_ms == 0


def test_recompute_all_by_hand():
    chain = uniform_chain(4)
    ops = recompute_all_ops(4)
    assert sum(1 for name, _ in ops if name.startswith("F")) == 4 + 3 + 2 + 1
    schedule = solve(chain, 5, "recompute-all")
    # peak: B 3 with a0, a3 freed? no: a0, a3, abar4, g4 + g3 = 5
    assert schedule.predicted.peak_memory == 5
    assert schedule.predicted.compute_ms == pytest.approx(10 * 1.0 + 4 * 2.0)
    with pytest.raises(InfeasibleBudgetError) as info:
        solve(chain, 4, "recompute-all")
    assert info.value.min_budget == 5


def test_chen_sqrt_segments():
    assert sqrt_segment_starts(16) == (0, 4, 8, 12)
    assert sqrt_segment_starts(10) == (0, 3, 6, 9)
    assert sqrt_segment_starts(1) == (0,)
    assert sqrt_segment_starts(2) == (0, 1)
    schedule = solve(uniform_chain(16), 100, "chen-sqrt")
    assert schedule.extra["segment_starts"] == [0, 4, 8, 12]
    # one extra forward of every stage outside the last segment
    assert schedule.predicted.recompute_ms == pytest.approx(12.0)


def test_chen_greedy_walk():
    assert greedy_starts([5, 5, 5, 5], 7) == (0, 2)  # 5, 10 > 7: cut after stage 1; 5, 10: at the end
    assert greedy_starts([5, 5, 5, 5], 4) == (0, 1, 2, 3)
    assert greedy_starts([5, 5, 5, 5], 20) == (0,)
    assert greedy_starts([1, 9, 1, 1, 1], 5) == (0, 2)
    assert greedy_starts([0, 0, 0], -1) == (0, 1, 2)
    assert candidate_thresholds([1, 2]) == [-1, 1, 2, 3]


def test_chen_greedy_uses_the_budget():
    chain = three_stage_chain()
    store_all_peak = solve(chain, 10**9, "store-all").predicted.peak_memory
    full = solve(chain, store_all_peak, "chen-greedy")
    assert full.predicted.recompute_ms == 0
    tight = solve(chain, store_all_peak - 1, "chen-greedy")
    assert tight.predicted.peak_memory < store_all_peak
    assert tight.predicted.recompute_ms > 0


@pytest.mark.parametrize("name", ["recompute-all", "sequential", "chen-sqrt", "chen-greedy", "revolve"])
def test_strategies_on_examples_are_valid(name):
    """Every baseline on every bundled chain, at a budget it states it can meet."""
    from remat.schedules import load_profile
    from tests.conftest import EXAMPLES

    for path in ("homogeneous.json", "resnet_like.json", "transformer_like.json"):
        profile = load_profile(EXAMPLES / path)
        try:
            schedule = solve(profile, 0, name)
        except InfeasibleBudgetError as error:
            schedule = solve(profile, error.min_budget, name)
        result = check_schedule(profile, schedule)
        assert result.peak_memory <= schedule.budget
        assert result == simulate(profile, schedule.ops, timeline=False)


def test_chain_strategies_refuse_graphs():
    from remat.schedules import GraphNode, GraphProfile, ProfileError

    graph = GraphProfile(name="g", nodes=(GraphNode("v", 1.0, 1),), edges=())
    from remat.solver import get_strategy

    # Called directly: solve() would dispatch names that also exist for graphs to the graph strategy.
    for name in ("recompute-all", "sequential", "chen-sqrt", "chen-greedy", "revolve"):
        with pytest.raises((ProfileError, RematError)):
            get_strategy(name, "chain").solve(graph, 10)


def test_examples_are_what_make_examples_writes():
    """The bundled profiles are the script's output (numbers traceable to shapes and FLOPs)."""
    import importlib.util
    import json

    from tests.conftest import EXAMPLES

    spec = importlib.util.spec_from_file_location("make_examples", EXAMPLES / "make_examples.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for filename, build in module.EXAMPLES.items():
        assert json.loads((EXAMPLES / filename).read_text()) == json.loads(json.dumps(build())), filename


def test_examples_load_with_sources_and_realistic_sizes():
    from remat.schedules import ChainProfile, GraphProfile, load_profile
    from tests.conftest import EXAMPLES

    for filename in ("homogeneous.json", "resnet_like.json", "transformer_like.json"):
        profile = load_profile(EXAMPLES / filename)
        assert isinstance(profile, ChainProfile)
        assert "make_examples.py" in profile.metadata["source"]
        peak = solve(profile, 2**62, "store-all").predicted.peak_memory
        assert 2**30 <= peak <= 64 * 2**30, (filename, peak)  # GBs, as on a real accelerator
    homogeneous = load_profile(EXAMPLES / "homogeneous.json")
    assert len({dataclasses.replace(stage, name="") for stage in homogeneous.stages}) == 1
    graph = load_profile(EXAMPLES / "small_graph.json")
    assert isinstance(graph, GraphProfile)
    # a skip connection: some node reads a node other than its immediate predecessor in the order
    assert any(u < v - 1 for u, v in graph.edges)
    assert graph.nodes[-1].backward and not graph.nodes[0].backward
    order = [("compute", v) for v in range(graph.size)]
    assert simulate(graph, order).recompute_ms == 0.0


def test_recompute_all_is_least_memory_on_identical_stages():
    """On identical stages no other baseline meets a smaller budget than recompute-all (on
    heterogeneous chains it can: its recomputations run while a gradient is held)."""

    def smallest(profile, name):
        try:
            return solve(profile, 0, name).predicted.peak_memory
        except InfeasibleBudgetError as error:
            return error.min_budget

    for length in range(1, 25):
        for output, saved in ((1, 1), (1, 5), (3, 4), (10, 11)):
            chain = uniform_chain(length, output, saved)
            least = smallest(chain, "recompute-all")
            for name in ("store-all", "sequential", "chen-sqrt", "chen-greedy", "revolve"):
                assert smallest(chain, name) >= least, (length, output, saved, name)
