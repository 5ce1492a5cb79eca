"""torch's own min-cut partitions as remat.compile candidates (remat/joint/min_cut.py), on
AOTAutograd's joint graphs of small models (no inductor: fast)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import fx
from torch._functorch import partitioners as tp

import remat
from remat.joint.min_cut import MIN_CUT_RATIOS, min_cut_save_sets
from remat.joint.partition import Session
from remat.joint.plan import realize
from remat.schedules import RematError
from tests.joint.helpers import Block, aot_step, grads, mlp


def _handed(jp, forward: fx.GraphModule) -> set[int]:
    """The joint profile's values whose tensors a forward graph hands to its backward (a
    parameter, or a view of one such as a weight's transpose, is no value: no bytes of the step)."""
    (output,) = forward.graph.find_nodes(op="output")
    names = [n.name for n in output.args[0][jp.num_fwd_outputs :] if isinstance(n, fx.Node)]
    return {jp.group[n] for n in names if n in jp.group}


def _session(model: torch.nn.Module, x: torch.Tensor, budget: float | int, **options) -> Session:
    step, session = aot_step(model, budget, **options)
    step(x).sum().backward()
    return session


@pytest.mark.slow
@pytest.mark.parametrize(
    ("model", "x"),
    [(mlp(depth=4), torch.randn(64, 16)), (Block(), torch.randn(2, 8, 16))],
    ids=["mlp", "transformer-block"],
)
def test_each_ratio_is_a_candidate_realized_as_torch_partitions_it(model: torch.nn.Module, x: torch.Tensor) -> None:
    """At every ratio, the candidate's forward hands the backward exactly the tensors torch's own,
    unpatched partitioner hands it at that ratio (the one-call read of NOTE [Every ratio in one
    partitioner call] changes nothing), and it is in the front."""
    session = _session(model, x, 1.0)
    (plan,) = session.plans
    jp, gm = plan.joint, plan.graph
    (front,) = [front for _, front in session.joints.values()]
    torch_sources = [s for s in front.sources if s.startswith("torch min-cut at ")]
    assert torch_sources, front.sources
    joint_inputs = [n.meta["val"] for n in gm.graph.find_nodes(op="placeholder")]
    sets = dict(min_cut_save_sets(jp, gm, joint_inputs, [], MIN_CUT_RATIOS))
    assert sorted(sets) == list(MIN_CUT_RATIOS)
    assert len({sets[0.0], sets[0.5], sets[1.0]}) == 3  # torch saves more as the ratio grows
    for ratio in MIN_CUT_RATIOS:
        graph = copy.deepcopy(gm)
        with torch._functorch.config.patch(activation_memory_budget=ratio):
            forward, _ = tp.min_cut_rematerialization_partition(graph, joint_inputs, num_fwd_outputs=jp.num_fwd_outputs)
        mine, theirs = realize(jp, gm, sets[ratio]), _handed(jp, forward)
        assert realize(jp, gm, frozenset(theirs)).saved == mine.saved, ratio
        assert _handed(jp, mine.forward) == mine.saved, ratio
        # remat saves what torch hands over, and the random values its backward would replay
        # (torch's chooser at 0.0 saves only the inputs, even where an op is seeded)
        assert theirs <= mine.saved and mine.saved - theirs <= jp.pinned, ratio
        assert any(c.saved == mine.saved for c in front.candidates), ratio


def test_torch_candidates_only_add_to_the_front_and_train_exactly() -> None:
    """With torch's partitions the least realized peak is at most remat's alone, and a budget at
    that least trains with eager's gradients; ``min_cut_ratios=()`` leaves them out."""
    x = torch.randn(64, 16)
    alone = _session(mlp(depth=4), x, 1.0, min_cut_ratios=())
    both = _session(mlp(depth=4), x, 1.0)
    (front_alone,) = [f for _, f in alone.joints.values()]
    (front_both,) = [f for _, f in both.joints.values()]
    assert not any(s.startswith("torch") for s in front_alone.sources)
    assert front_both.least <= front_alone.least
    model, eager = mlp(depth=4), mlp(depth=4)
    step, session = aot_step(model, front_both.least)
    step(x).sum().backward()
    eager(x).sum().backward()
    assert session.plans[0].chosen.peak == front_both.least
    for got, want in zip(grads(model), grads(eager), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("ratios", ["0.5", (0.5, 1.5), (-0.1,), (True,), 0.5, (None,)])
def test_odd_ratios_are_one_line_refusals(ratios) -> None:
    with pytest.raises(RematError, match="min_cut_ratios") as raised:
        remat.compile(mlp(), budget=1.0, min_cut_ratios=ratios)
    assert "\n" not in str(raised.value)
