"""Replaying chain schedules on real models: same gradients, same BatchNorm statistics, same RNG,
and the allocator's measured peak activation memory within 5% of the simulator's prediction (the
live-tensor tracker sees a subset of it)."""

from __future__ import annotations

import copy

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tests.solver.chain.chain_ops as chain_ops
from remat.profile.chain import profile_chain
from remat.replay.chain import RematChain
from remat.replay.report import compare, measure_steps
from remat.schedules import InfeasibleBudgetError, RematError, simulate
from remat.solver import solve, strategy_names
from remat.solver.common import make_schedule
from remat.trace.chain import as_chain
from remat.zoo import small

MODELS = ("mlp", "cnn", "transformer")
BUDGET_FRACTIONS = (1.0, 0.5, 0.15)


@pytest.fixture(scope="module")
def setups():
    """name -> (model, input, profile); each model profiled once for the whole module."""
    result = {}
    for name in MODELS:
        torch.manual_seed(0)
        model = getattr(small, name)().train()
        x = torch.randn(*small.INPUT_SHAPES[name])
        profile = profile_chain(model, x, repeats=1, warmup=0)
        result[name] = (model, x, profile)
    return result


def _close(measured: int, predicted: int) -> bool:
    return abs(measured - predicted) <= 0.05 * predicted


def _schedules(profile):
    """Every registered chain strategy at several budgets, plus hand-written op lists."""
    n = profile.length
    high = simulate(profile, chain_ops.store_all(n), timeline=False).peak_memory
    low = simulate(profile, chain_ops.recompute_all(n), timeline=False).peak_memory
    found = []
    for strategy in strategy_names("chain"):
        for fraction in BUDGET_FRACTIONS:  # of the way from the recompute-all peak to the store-all peak
            try:
                budget = int(low + fraction * (high - low))
                found.append((f"{strategy}@{fraction:.0%}", solve(profile, budget, strategy)))
            except InfeasibleBudgetError:
                continue
    hand = {
        "segments-3": chain_ops.segments(n, [n // 3, 2 * n // 3]),
        "segments-2": chain_ops.segments(n, [n // 2]),
        "recompute-all": chain_ops.recompute_all(n),
        "mixed": chain_ops.mixed(n),
        "every-stage": chain_ops.segments(n, list(range(1, n))),
    }
    for label, ops in hand.items():
        found.append((label, make_schedule(profile, 2**62, label, ops)))
    unique = {}
    for label, schedule in found:  # strategies often agree at loose budgets: replay each op list once
        unique.setdefault(schedule.ops, (label, schedule))
    return list(unique.values())


def _step(module, x, weight, seed):
    torch.manual_seed(seed)
    for p in module.parameters():
        p.grad = None
    out = module(x)
    (out * weight).sum().backward()
    return out.detach(), torch.get_rng_state()


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_replay_equals_plain_training_and_prediction(name, setups):
    model, x, profile = setups[name]
    schedules = _schedules(profile)
    assert len(schedules) >= 5
    torch.manual_seed(1)
    weight = torch.randn_like(model(x))
    for label, schedule in schedules:
        plain = copy.deepcopy(model)
        remat_model = copy.deepcopy(model)
        wrapped = RematChain(remat_model, schedule, profile)
        torch.manual_seed(123)
        for p in plain.parameters():
            p.grad = torch.zeros_like(p)  # the measured step pre-allocates gradients too
        (plain(x) * weight).sum().backward()
        rng_plain = torch.get_rng_state()
        torch.manual_seed(123)
        # one measured training step: the same step gives the gradients and the peak memory
        measured = measure_steps(wrapped, x, steps=1, warmup=0, timeline=False, timed=False, weight=weight)
        assert torch.equal(rng_plain, torch.get_rng_state()), f"{label}: the global RNG advanced differently"
        for (pname, p), q in zip(plain.named_parameters(), remat_model.parameters(), strict=True):
            assert torch.equal(p.grad, q.grad), f"{label}: gradient of {pname} differs"
        for (bname, b), c in zip(plain.named_buffers(), remat_model.buffers(), strict=True):
            assert torch.equal(b, c), f"{label}: buffer {bname} differs from one plain step's"
        predicted = schedule.predicted.peak_memory
        assert measured.tensor_peak <= measured.peak_memory  # the tracker sees a subset of the allocations
        assert _close(measured.peak_memory, predicted), (
            f"{name} {label}: predicted {predicted} bytes, allocator measured {measured.peak_memory}"
        )


def test_report_compares_prediction_and_measurement(setups):
    model, x, profile = setups["cnn"]
    schedule = make_schedule(profile, 2**62, "hand", chain_ops.mixed(profile.length))
    report = compare(profile, schedule, RematChain(copy.deepcopy(model), schedule, profile), x, steps=1)
    assert report.predicted_peak == schedule.predicted.peak_memory
    assert report.measured_tensor_peak <= report.measured_peak
    assert _close(report.measured_peak, report.predicted_peak)
    # the replay's copies of the generators' states were made in the warm-up step; each measured
    # step's reads of them are counted (docs/model.md, "What remat allocates itself")
    assert report.bookkeeping_peak == 0
    assert report.measured_ms > 0 and len(report.measured_timeline) == len(schedule.ops)
    data = report.to_dict()
    assert data["peak_memory"]["measured"] == report.measured_peak
    assert "peak activation memory" in report.table()


def test_dropout_masks_are_replayed(setups):
    """The transformer's dropout is live (different seeds differ) and recomputation reuses the mask."""
    model, x, _ = setups["transformer"]
    assert any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in model.modules())
    torch.manual_seed(1)
    a = model(x)
    torch.manual_seed(2)
    b = model(x)
    assert not torch.equal(a, b)
    n = len(as_chain(model))
    plain, remat_model = copy.deepcopy(model), copy.deepcopy(model)
    wrapped = RematChain(remat_model, chain_ops.recompute_all(n))
    weight = torch.randn_like(a)
    _step(plain, x, weight, seed=5)
    _step(wrapped, x, weight, seed=5)
    for p, q in zip(plain.parameters(), remat_model.parameters(), strict=True):
        assert torch.equal(p.grad, q.grad)


def test_input_gradient_and_optimizer_loop(setups):
    model, x, _ = setups["cnn"]
    n = len(as_chain(model))
    plain, remat_model = copy.deepcopy(model), copy.deepcopy(model)
    wrapped = RematChain(remat_model, chain_ops.segments(n, [2, 4]))
    opt_plain = torch.optim.SGD(plain.parameters(), lr=0.1)
    opt_remat = torch.optim.SGD(wrapped.parameters(), lr=0.1)
    criterion = torch.nn.CrossEntropyLoss()
    target = torch.arange(x.shape[0]) % 10
    for _ in range(2):  # an ordinary training loop, unchanged
        xp = x.clone().requires_grad_()
        xr = x.clone().requires_grad_()
        for module, opt, inp in ((plain, opt_plain, xp), (wrapped, opt_remat, xr)):
            opt.zero_grad()
            loss = criterion(module(inp), target)
            loss.backward()
            opt.step()
        assert torch.equal(xp.grad, xr.grad)
    for p, q in zip(plain.parameters(), remat_model.parameters(), strict=True):
        assert torch.equal(p, q)
    for b, c in zip(plain.buffers(), remat_model.buffers(), strict=True):
        assert torch.equal(b, c)


def test_no_grad_and_eval_run_the_plain_model(setups):
    model, x, _ = setups["cnn"]
    n = len(as_chain(model))
    wrapped = RematChain(copy.deepcopy(model), chain_ops.recompute_all(n))
    reference = copy.deepcopy(model).eval()
    wrapped.eval()
    with torch.no_grad():
        assert torch.equal(wrapped(x), reference(x))
    out = wrapped(x)  # eval with grad enabled: plain autograd, still differentiable
    out.sum().backward()
    wrapped.train()
    with torch.no_grad():
        y = wrapped(x)
    assert not y.requires_grad


def test_rejects_mismatched_schedules(setups):
    model, _, profile = setups["mlp"]
    n = profile.length
    with pytest.raises(RematError, match=f"chain of {n - 1} stages, but the model has {n} stages"):
        RematChain(model, chain_ops.store_all(n - 1))
    with pytest.raises(RematError, match=f"chain of {n + 1} stages"):
        RematChain(model, chain_ops.store_all(n + 1))
    other = profile_chain(small.mlp(), torch.randn(8, 64), repeats=1, warmup=0)
    schedule = make_schedule(other, 2**62, "hand", chain_ops.store_all(n))
    with pytest.raises(RematError, match="sha256"):
        RematChain(model, schedule, profile)
    with pytest.raises(RematError, match="op 1"):
        RematChain(model, [("F_all", 0), ("F_n", 2)] + [("B", i) for i in reversed(range(n))])
    with pytest.raises(RematError, match="graph"):
        RematChain(model, [("compute", 0)])


def test_measured_timeline_tracks_the_simulator(setups):
    model, x, profile = setups["mlp"]
    ops = chain_ops.segments(profile.length, [3])
    schedule = make_schedule(profile, 2**62, "hand", ops)
    measurement = measure_steps(RematChain(copy.deepcopy(model), schedule, profile), x, steps=1)
    predicted = simulate(profile, ops).timeline
    assert len(measurement.timeline) == len(measurement.tensor_timeline) == len(predicted)
    for sim, real, alloc in zip(predicted, measurement.tensor_timeline, measurement.timeline, strict=True):
        # memory after every op agrees to within the loss scalars the step keeps (a few bytes)
        assert abs(real.memory_after - sim.memory_after) <= 64, (sim, real)
        # the allocator sees the same (an MLP has no kernel-internal buffers left after an op)
        assert alloc.memory_after == real.memory_after, (real, alloc)
        assert alloc.peak >= real.peak


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bounds=st.sets(st.integers(min_value=1, max_value=6), max_size=5), record_first=st.booleans())
def test_random_checkpoint_sets_replay_exactly(setups, bounds, record_first):
    """Any set of segment boundaries (checkpoints kept with F_ck/F_n, segments recomputed with F_all):
    same gradients as the plain model, and the measured peak within 5% of the simulator's."""
    model, x, profile = setups["mlp"]
    ops = chain_ops.segments(profile.length, sorted(bounds))
    if record_first and ops[0] == ("F_ck", 0):
        # variant: record stage 0 in the forward phase and keep abar[1] to the end; a_1 then lives
        # inside abar[1] (F_ck 1 reads it there) and stage 0 is not recomputed
        recompute = len(ops) - 1 - ops[::-1].index(("F_all", 0))
        ops = (
            [("F_all", 0)] + [("F_ck", 1) if op == ("F_n", 1) else op for op in ops[1:recompute]] + ops[recompute + 1 :]
        )
    schedule = make_schedule(profile, 2**62, "random", ops)
    torch.manual_seed(3)
    weight = torch.randn(x.shape[0], 10)
    plain, remat_model = copy.deepcopy(model), copy.deepcopy(model)
    for p in plain.parameters():
        p.grad = torch.zeros_like(p)
    (plain(x) * weight).sum().backward()
    measured = measure_steps(
        RematChain(remat_model, schedule, profile), x, steps=1, warmup=0, timeline=False, timed=False, weight=weight
    )
    for p, q in zip(plain.parameters(), remat_model.parameters(), strict=True):
        assert torch.equal(p.grad, q.grad)
    assert measured.tensor_peak <= measured.peak_memory
    assert _close(measured.peak_memory, schedule.predicted.peak_memory)
