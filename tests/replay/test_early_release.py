"""NOTE [Early release at a stage's backward]: a stage's output gradient and its unsaved output are
freed while its backward runs, in the replay and in the profile alike; the input gradient g_0 is
computed only for an input that requires grad."""

from __future__ import annotations

import copy
import weakref
from collections.abc import Callable

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint as torch_checkpoint

from remat.profile.chain import profile_chain
from remat.replay.chain import RematChain
from remat.replay.report import measure_steps, step_allocator_peak
from remat.runtime.release import released_backward
from remat.schedules import RematError
from remat.solver import solve
from remat.solver.chain.optimal import minimum_budget


def _block(width: int, factor: int) -> nn.Sequential:
    """Linear, tanh, Linear: the last Linear saves its input, not its output, so the block's
    output and its gradient are free once that Linear's backward has run."""
    return nn.Sequential(nn.Linear(width, factor * width), nn.Tanh(), nn.Linear(factor * width, width))


def _stage_and_grads(width: int = 32) -> tuple[nn.Module, torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    stage = _block(width, 4)
    leaf = torch.randn(8, width, requires_grad=True)
    out = stage(leaf)
    return stage, leaf, out, torch.randn_like(out)


def _alive_when_the_tanh_gradient_arrives(run: Callable[[list], None]) -> tuple[bool, bool]:
    """(output gradient alive, output alive) when autograd reaches the hidden activation: after
    the stage's last op (the outer Linear) has consumed the output gradient."""
    stage, leaf, out, grad = _stage_and_grads()
    seen = []
    weak_grad, weak_out = weakref.ref(grad), weakref.ref(out)
    tanh = next(f for f, _ in out.grad_fn.next_functions if f is not None and "Tanh" in f.name())
    # a pre-hook of the next node: the outer Linear's node has run and dropped its inputs
    tanh.register_prehook(lambda *_: seen.append((weak_grad() is not None, weak_out() is not None)))
    pending = [(out, grad)]
    del out, grad
    run(pending)
    return seen[0]


def test_the_released_backward_frees_the_output_and_its_gradient_once_consumed():
    assert _alive_when_the_tanh_gradient_arrives(released_backward) == (False, False)
    # the plain call keeps both to its end: what the replay did before
    assert _alive_when_the_tanh_gradient_arrives(lambda p: torch.autograd.backward(*p.pop())) == (True, True)


def test_the_released_backward_computes_what_the_plain_backward_computes():
    stage, leaf, out, grad = _stage_and_grads()
    expected = torch.autograd.grad(out, [leaf, *stage.parameters()], grad, retain_graph=True)
    pending = [(out, grad)]
    del out
    released_backward(pending, inputs=[leaf, *stage.parameters()])
    assert torch.equal(leaf.grad, expected[0])
    for p, g in zip(stage.parameters(), expected[1:], strict=True):
        assert torch.equal(p.grad, g)
    assert pending == []


def _chain(blocks: int = 6, width: int = 16, batch: int = 256) -> tuple[nn.Sequential, torch.Tensor]:
    torch.manual_seed(0)
    return nn.Sequential(*(_block(width, 8) for _ in range(blocks))), torch.randn(batch, width)


def test_the_profile_counts_the_release_and_every_schedule_measures_its_prediction():
    """A block's backward overhead is lower than the last stage's (the same block, which keeps its
    output and gradient) by exactly those two tensors, and the allocator agrees with the
    prediction at every budget from the least to store-all (above it by the caller's scalar loss
    at most, never 1% below)."""
    model, x = _chain()
    profile = profile_chain(model, x, repeats=1, warmup=1)
    *inner, last = profile.stages
    released = {s.backward_overhead for s in inner}
    assert len(released) == 1
    # less by the output and its gradient, plus the seed's own 8 bytes (remat.runtime.release)
    assert released.pop() - (last.backward_overhead - 2 * last.output_size) in range(0, 17)
    least, high = minimum_budget(profile), solve(profile, 10**12, "store-all").predicted.peak_memory
    for budget in sorted({least, (least + high) // 2, high}):
        schedule = solve(profile, budget, "optimal")
        measured = measure_steps(
            RematChain(copy.deepcopy(model), schedule, profile), x, steps=1, warmup=1, timeline=False, timed=False
        )
        predicted = schedule.predicted.peak_memory
        # + 8: the caller's scalar loss, (out * r).sum(), which is outside the chain
        # + 8: the caller's scalar loss, (out * r).sum(), which is outside the chain
        assert predicted * 0.99 <= measured.peak_memory <= predicted + 8, (budget, measured.peak_memory, predicted)


def test_least_memory_is_below_per_block_checkpointing():
    """remat's least-memory schedule measures less than torch.utils.checkpoint around every block
    (same allocator meter, both without the input's bytes; the input needs no gradient)."""
    model, x = _chain()
    profile = profile_chain(model, x, repeats=1, warmup=1)
    wrapped = RematChain(copy.deepcopy(model), solve(profile, minimum_budget(profile), "optimal"), profile)
    ours = step_allocator_peak(wrapped, lambda: wrapped(x).sum(), torch.device("cpu"), steps=1)

    def per_block() -> torch.Tensor:
        h = x
        for block in model:
            h = torch_checkpoint(block, h, use_reentrant=False)
        return h.sum()

    theirs = step_allocator_peak(model, per_block, torch.device("cpu"), steps=1)
    assert ours < theirs, (ours, theirs)


def test_the_input_gradient_is_computed_only_when_the_input_requires_grad():
    model, x = _chain(blocks=3)
    plain = profile_chain(model, x, repeats=1, warmup=0, input_grad=False)
    assert plain.metadata["input_grad"] is False
    wanting = profile_chain(model, x, repeats=1, warmup=0)
    assert wanting.metadata["input_grad"] is True

    schedule = solve(plain, 10**12, "store-all")
    wrapped = RematChain(copy.deepcopy(model), schedule, plain)
    measured = measure_steps(wrapped, x, steps=1, warmup=1, timeline=False, timed=False)
    assert measured.peak_memory <= schedule.predicted.peak_memory + 8  # + the caller's scalar loss
    assert all(p.grad is not None for p in wrapped.parameters())
    needs = x.clone().requires_grad_()
    with pytest.raises(RematError, match="input requires grad, but the profile was measured for an input that needs"):
        wrapped(needs)

    # with a profile that measured g_0, the input gets the plain model's gradient
    reference = x.clone().requires_grad_()
    copy.deepcopy(model)(reference).sum().backward()
    replayed = RematChain(copy.deepcopy(model), solve(wanting, 10**12, "store-all"), wanting)
    replayed(needs).sum().backward()
    assert torch.equal(needs.grad, reference.grad)
