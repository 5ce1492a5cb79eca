"""remat.compile's least is at most torch.compile's over its ``activation_memory_budget`` sweep
(issue 42 item 8, NOTE [Every torch partition is measured before a refusal] in remat/joint/compile.py)."""

from __future__ import annotations

import copy
import re

import pytest
import torch
from torch import nn

import remat
from remat.joint.compile import TORCH_BELOW
from remat.joint.joint_profile import is_random
from remat.joint.min_cut import MIN_CUT_RATIOS, min_cut_save_sets
from remat.joint.plan import realize
from remat.schedules import RematError
from tests.joint.helpers import Block, aot_step, grads, mlp

TOL = {"rtol": 1e-4, "atol": 1e-5}  # inductor's CPU code reorders float sums: its usual tolerance against eager
FUSED = 0.6  # the stood-in allocator: the chosen torch partition measures this share of its simulated peak


@pytest.fixture(autouse=True)
def coarse_grid(monkeypatch):
    """The hierarchical solver at 4 budgets instead of 12, as tests/joint/test_compile.py (fast)."""
    import remat.joint.solve

    monkeypatch.setattr(remat.joint.solve, "GRID", 4)


def test_torchs_partitions_of_attention_are_realized_exactly_as_torch_hands_them_over() -> None:
    """Attention without dropout is not random (torch's partitioner recomputes it): at every
    ratio, remat's graphs of torch's save set hand the backward exactly what torch's own,
    unpatched partitioner hands it, no attention output more (they were pinned: a 4-layer
    decoder's 0.1 partition measured 8273544 bytes under remat.compile, 9245320 under
    torch.compile). With dropout the attention stays pinned."""
    import torch._functorch.config as functorch_config
    from torch import fx

    from remat.joint import torch_private as tp

    torch.manual_seed(0)
    step, session = aot_step(Block(), 1.0)
    step(torch.randn(2, 8, 16)).sum().backward()
    (plan,) = session.plans
    jp, gm = plan.joint, plan.graph
    attention = [n for n in gm.graph.nodes if "scaled_dot_product" in str(n.target)]
    assert attention and not any(is_random(n) for n in attention)
    joint_inputs = [n.meta["val"] for n in gm.graph.find_nodes(op="placeholder")]
    sets = dict(min_cut_save_sets(jp, gm, joint_inputs, [], MIN_CUT_RATIOS))
    for ratio in MIN_CUT_RATIOS:
        with functorch_config.patch(activation_memory_budget=ratio):
            forward, _ = tp.min_cut_rematerialization_partition(
                copy.deepcopy(gm), joint_inputs, num_fwd_outputs=jp.num_fwd_outputs
            )
        (output,) = forward.graph.find_nodes(op="output")
        names = [n.name for n in output.args[0][jp.num_fwd_outputs :] if isinstance(n, fx.Node)]
        theirs = {jp.group[n] for n in names if n in jp.group}
        assert realize(jp, gm, sets[ratio]).saved == theirs, ratio
    # and each torch partition with the attention outputs saved is a candidate of its own
    (front,) = [front for _, front in session.joints.values()]
    outputs = frozenset(jp.group[n.name] for n in attention if jp.group.get(n.name) in jp.forward)
    for _, saved in front.torch_cuts:
        assert realize(jp, gm, saved | outputs).saved in {c.saved for c in front.candidates}
    graph = fx.Graph()
    q = graph.placeholder("q")
    dropped = graph.call_function(attention[0].target, (q, q, q, 0.1))  # dropout_p: the fourth argument
    assert is_random(dropped)


@pytest.mark.slow
@pytest.mark.parametrize("budget_at", ["the torch partition's measured peak", "1 byte below it"])
def test_a_torch_partition_that_measures_below_remats_least_is_found(monkeypatch, budget_at: str) -> None:
    """A budget below the least simulated peak, met by none of remat's plans but by one of torch's
    partitions (inductor fuses more of it away): the least plans are measured, then torch's
    partitions in order of their simulated peak until one fits; it is kept and trains exactly.
    A budget 1 byte below it is refused after every torch partition was measured, naming the
    least measured: that partition's. Before NOTE [Every torch partition is measured before a
    refusal], the refusal named the least simulated plans' measured peak. The allocator is
    stood in for by a step that fuses nothing, except FUSED of the one torch partition."""
    import remat.joint.compile as front_door

    model, x = mlp(width=32, depth=4), torch.randn(256, 32)
    probe = remat.compile(copy.deepcopy(model), budget=1.0, times="estimate", measure=False)
    probe(x).sum().backward()
    (front,) = probe._current.fronts
    least_plan, _ = front.choose(front.least)
    # the torch partition simulated highest while still able to meet a budget below the least
    cuts = {saved for _, saved in front.torch_cuts if saved != least_plan.saved}
    reachable = [front.candidate(s) for s in cuts if front.least <= front.candidate(s).peak < front.least / FUSED]
    assert reachable, "a torch partition simulated within reach of a budget below the least"
    target = max(reachable, key=lambda c: (c.peak, sorted(c.saved)))
    lower = sorted({c.peak for c in map(front.candidate, cuts) if c.peak < target.peak})

    measured: list[frozenset[int]] = []

    def measure(self, args, kwargs) -> int:
        (plan,) = self._session.call_plans
        measured.append(plan.chosen.saved)
        return int(FUSED * plan.chosen.peak) if plan.chosen.saved == target.saved else plan.chosen.peak

    monkeypatch.setattr(front_door.RematCompiled, "_measure", measure)
    monkeypatch.setattr(front_door.RematCompiled, "_time_step", lambda self, call, args, kwargs: 1.0)
    torch_least = int(FUSED * target.peak)
    budget = torch_least if budget_at.startswith("the") else torch_least - 1
    assert budget < front.least  # remat's own plans cannot meet it, simulated or measured
    eager = copy.deepcopy(model)
    compiled = remat.compile(model, budget=budget, times="estimate")
    if budget < torch_least:
        with pytest.raises(RematError) as refused:
            compiled(x)
        named = int(re.search(r"give a budget of at least (\d+) bytes", str(refused.value))[1])
        assert named == torch_least
        assert "\n" not in str(refused.value)
        assert measured[0] == least_plan.saved and target.saved in measured
        return
    compiled(x).sum().backward()
    eager(x).sum().backward()
    assert measured[0] == least_plan.saved  # the least simulated plans first
    assert measured[-1] == target.saved  # torch's partitions after, the one that fits last
    assert len(measured) <= 2 + len(lower)  # in order of their simulated peak: the lower ones before it
    assert compiled.plan.chosen.saved == target.saved
    assert compiled.plan.source.endswith(f"({TORCH_BELOW})")
    assert compiled.measured_peak == torch_least <= budget
    for got, want in zip(grads(model), grads(eager), strict=True):
        torch.testing.assert_close(got, want, **TOL)


class Decoder(nn.Module):
    """Two pre-norm attention blocks and a language-model head with its cross-entropy (tiny)."""

    def __init__(self, vocab: int = 256, dim: int = 32, heads: int = 2, layers: int = 2) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, batch_first=True, norm_first=True)
            for _ in range(layers)
        )
        self.head = nn.Linear(dim, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.emb(ids)
        mask = nn.Transformer.generate_square_subsequent_mask(ids.shape[1])
        for block in self.blocks:
            x = block(x, src_mask=mask, is_causal=True)
        logits = self.head(x)
        return nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())


def torch_compile_peak(model: nn.Module, ids: torch.Tensor, ratio: float) -> int:
    """The allocator's peak (bytes) of a step of ``torch.compile(model)`` at ``activation_memory_budget = ratio``."""
    import torch._functorch.config as functorch_config

    from remat.replay.report import step_allocator_peak

    def backend(gm: torch.fx.GraphModule, example_inputs: list):  # the ratio while AOTAutograd partitions
        with functorch_config.patch(activation_memory_budget=ratio, enable_autograd_cache=False):
            return torch._dynamo.lookup_backend("inductor")(gm, example_inputs)

    compiled = torch.compile(model, backend=backend, isolate_recompiles=True)
    return step_allocator_peak(model, lambda: compiled(ids), torch.device("cpu"), steps=1)


@pytest.mark.slow
def test_remat_compiles_least_is_at_most_torch_compiles_over_its_sweep() -> None:
    """On the allocator: torch.compile at each ratio of a sweep, then remat.compile at torch's least
    measured peak (bytes) runs within it, and trains with eager's gradients."""
    torch.manual_seed(0)
    model, ids = Decoder(), torch.randint(0, 256, (4, 64))
    ratios = (0.0, 0.2, 1.0)  # the sweep's two ends and a low ratio, where torch's least falls on this decoder
    peaks = {r: torch_compile_peak(model, ids, r) for r in ratios}
    torch_least = min(peaks.values())
    torch._dynamo.reset()
    eager = copy.deepcopy(model)
    compiled = remat.compile(model, budget=torch_least, times="estimate", min_cut_ratios=ratios)
    compiled(ids).backward()
    eager(ids).backward()
    assert compiled.measured_peak <= torch_least, (compiled.measured_peak, peaks, compiled.plan.source)
    for got, want in zip(grads(model), grads(eager), strict=True):
        torch.testing.assert_close(got, want, **TOL)
