"""The joint graph as a profile, save sets realized as torch's graphs, and the choice under a
budget, on AOTAutograd's joint graphs of small models (no inductor: fast)."""

from __future__ import annotations

import copy
import time

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from remat.joint.joint_profile import END, tensor_bytes
from remat.joint.partition import resolve_budget
from remat.joint.plan import held_at_backward, realize
from remat.joint.solve import solve_front
from remat.joint.timing import node_times
from remat.schedules import RematError, simulate_graph
from tests.joint.helpers import Block, aot_step, grads, mlp


def test_budget_forms_match_remat_checkpoint() -> None:
    assert resolve_budget(1000, 5000) == 1000
    assert resolve_budget("2KiB", 5000) == 2048
    assert resolve_budget("40%", 5000) == 2000
    assert resolve_budget(0.4, 5000) == 2000
    with pytest.raises(RematError, match="fraction"):
        resolve_budget(1.5, 5000)


def _plan(model: torch.nn.Module, budget: float | int | str, x: torch.Tensor):
    step, session = aot_step(model, budget)
    step(x).sum().backward()
    assert len(session.plans) == 1
    return session.plans[0]


def test_profile_sizes_are_the_fake_tensors_bytes() -> None:
    plan = _plan(mlp(), 1.0, torch.randn(5, 16))
    nodes = {n.name: n for n in plan.graph.graph.nodes}
    profile = plan.joint.profile
    assert profile.nodes[-1].name == END
    for node in profile.nodes[:-1]:
        assert node.size == tensor_bytes(nodes[node.name].meta["val"])
    # a Linear's output: 5 x 16 float32
    addmm = next(n for n in profile.nodes if n.name == "addmm")
    assert addmm.size == 5 * 16 * 4 and not addmm.backward
    assert any(n.name.startswith("tangents") and not n.recompute for n in profile.nodes)


def test_store_all_budget_recomputes_nothing_and_schedule_is_the_simulators() -> None:
    plan = _plan(mlp(), 1.0, torch.randn(5, 16))
    assert plan.chosen == plan.store_all
    result = simulate_graph(plan.joint.profile, plan.schedule.ops)
    assert result.peak_memory == plan.chosen.peak == plan.schedule.predicted.peak_memory
    assert result.recompute_ms == 0.0


def _midway(model: torch.nn.Module, x: torch.Tensor) -> int:
    """A budget (bytes) halfway between the least and the store-all peak of ``model`` on ``x``."""
    plan = _plan(copy.deepcopy(model), 1.0, x)
    front, _ = solve_front(plan.joint, plan.graph, None)
    assert front.least < front.store_all.peak
    return (front.least + front.store_all.peak) // 2


def test_tight_budget_recomputes_and_gradients_match_eager() -> None:
    model, x = mlp(depth=4), torch.randn(64, 16)
    eager = copy.deepcopy(model)
    plan_model = copy.deepcopy(model)
    step, session = aot_step(plan_model, _midway(model, x))
    step(x).sum().backward()
    eager(x).sum().backward()
    plan = session.plans[0]
    assert plan.chosen.peak <= plan.share < plan.store_all.peak
    assert plan.recomputed, "a budget under store-all must recompute something"
    assert simulate_graph(plan.joint.profile, plan.schedule.ops).recompute_ms > 0
    for got, want in zip(grads(plan_model), grads(eager), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_random_values_are_saved_never_recomputed() -> None:
    model, x = mlp(depth=3, dropout=0.5), torch.randn(64, 16)
    step, session = aot_step(model, _midway(model, x))
    torch.manual_seed(1)
    out = step(x)
    out.sum().backward()
    plan = session.plans[0]
    names = [plan.joint.profile.nodes[g].name for g in plan.joint.pinned]
    assert names and all("dropout" in n for n in names)
    assert not plan.joint.pinned & plan.chosen.recomputed
    # the backward used the forward's masks: the same seed in eager gives the same gradients
    eager = mlp(depth=3, dropout=0.5)
    torch.manual_seed(1)
    eager(x).sum().backward()
    for got, want in zip(grads(model), grads(eager), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_transformer_block_gradients_match_eager_at_a_tight_budget() -> None:
    torch.manual_seed(0)
    model, x = Block(), torch.randn(4, 16, 16)
    eager = copy.deepcopy(model)
    step, session = aot_step(model, _midway(model, x))
    step(x).sum().backward()
    eager(x).sum().backward()
    assert session.plans[0].chosen.peak <= session.plans[0].share
    for got, want in zip(grads(model), grads(eager), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_budget_below_the_least_is_one_line_naming_it() -> None:
    step, _ = aot_step(mlp(), 1)
    with pytest.raises(RematError) as raised:
        step(torch.randn(5, 16))
    message = str(raised.value)
    assert "\n" not in message and "below the least" in message
    least = int(message.rsplit("(", 1)[1].split()[0])
    step, session = aot_step(mlp(), least)
    step(torch.randn(5, 16)).sum().backward()
    assert session.plans[0].chosen.peak == least


def test_save_set_of_a_schedule_is_what_it_holds_at_the_backward() -> None:
    plan = _plan(mlp(), 1.0, torch.randn(5, 16))
    jp = plan.joint
    held = held_at_backward(jp, plan.store_all.ops)
    assert plan.store_all.saved <= held
    again = realize(jp, plan.graph, held)
    assert again.saved == plan.store_all.saved and again.peak == plan.store_all.peak


@pytest.fixture(scope="module")
def deep_front():
    plan = _plan(mlp(depth=5), 1.0, torch.randn(64, 16))
    return solve_front(plan.joint, plan.graph, None)[0]


@settings(max_examples=50, deadline=None)
@given(a=st.floats(0.0, 1.0), b=st.floats(0.0, 1.0))
def test_choice_is_within_budget_and_monotone(deep_front, a: float, b: float) -> None:
    front = deep_front
    low, top = front.least, front.store_all.peak
    small, large = sorted((low + int(a * (top - low)), low + int(b * (top - low))))
    chosen_small, _ = front.choose(small)
    chosen_large, _ = front.choose(large)
    assert chosen_small.peak <= small and chosen_large.peak <= large
    assert chosen_large.ms <= chosen_small.ms


_calls = {"fast_once": 0}


def _fast_once(x: torch.Tensor) -> torch.Tensor:
    """Fast on its first call (the warm-up), 30 ms on every later one."""
    _calls["fast_once"] += 1
    if _calls["fast_once"] > 1:
        time.sleep(0.03)
    return x + 1


def test_measured_times_leave_out_the_warm_up_run() -> None:
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    graph.output(graph.call_function(_fast_once, (x,)))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    x.meta["val"] = torch.zeros(4)
    times = node_times(gm, [torch.zeros(4)], "measured", repeats=1)
    assert _calls["fast_once"] == 2 and times.source == "measured"
    assert times.ms["_fast_once"] >= 25.0, times.ms  # the timed run's, not the warm-up's


def test_measured_times_run_real_tensors_inside_the_partitioner(monkeypatch) -> None:
    """NOTE [Timing real tensors inside a compile]: AOTAutograd partitions under its fake mode; the
    timed runs compute on real tensors (a fake op's time is its dispatch's, whatever the op)."""
    from torch._subclasses.fake_tensor import FakeTensor

    import remat.joint.timing as timing

    outputs: list[object] = []
    run_node = timing._Timer.run_node

    def spy(self, n):
        out = run_node(self, n)
        if n.op == "call_function":
            outputs.append(out)
        return out

    monkeypatch.setattr(timing._Timer, "run_node", spy)
    step, session = aot_step(mlp(), 1.0, times="measured")
    step(torch.randn(8, 16)).sum().backward()
    tensors = [t for t in outputs if isinstance(t, torch.Tensor)]
    assert tensors and not any(isinstance(t, FakeTensor) for t in tensors)
    assert session.plans[0].times == "measured"


@pytest.mark.parametrize("frozen_by_user", [False, True])
def test_the_solve_freezes_the_heap_only_while_it_runs(monkeypatch, frozen_by_user: bool) -> None:
    """NOTE [The solve's garbage collection] (remat/joint/heap.py): the compile's objects are frozen
    and automatic collections off while the front is solved, and both given back after; a process
    that froze objects itself is left as it is."""
    import gc

    import remat.joint.partition as partition

    seen: list[int] = []
    solve = partition.solve_front

    def spy(*args, **kwargs):
        seen.append((gc.get_freeze_count(), gc.isenabled()))
        return solve(*args, **kwargs)

    monkeypatch.setattr(partition, "solve_front", spy)
    if frozen_by_user:
        gc.freeze()
    try:
        step, _ = aot_step(mlp(), 1.0)
        step(torch.randn(8, 16)).sum().backward()
        # frozen while solving; automatic collections off only where remat froze the heap itself
        assert seen and seen[0][0] > 0 and seen[0][1] == frozen_by_user and gc.isenabled()
        # the user's frozen objects stay frozen (some may have died); remat's own freeze is gone
        assert (gc.get_freeze_count() > 0) == frozen_by_user
    finally:
        gc.unfreeze()
