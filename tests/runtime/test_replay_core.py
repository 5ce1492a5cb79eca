"""What a recomputation preserves (remat.runtime.core), for the chain replay and the graph
replay alike: autocast, RNG of ops on no list, parameter gradients for torch.autograd.grad and
backward(inputs=...), GradScaler, integer inputs; each checked against the plain model's step.
Also the graph store-all's memory against the plain step (live tensors and the CPU allocator)."""

from __future__ import annotations

import copy
import functools

import pytest
import torch
import torch.utils.checkpoint as torch_checkpoint
from torch import nn

import tests.solver.chain.chain_ops as chain_ops
from remat.graph.profiler import profile_graph
from remat.replay.chain import RematChain
from remat.replay.graph import GraphReplay
from tests.solver.graph.graph_schedules import checkpoint_schedule

KINDS = ("chain", "graph")


class Noisy(nn.Module):
    """Random ops that are on no list of 'random' ops: log_normal_, bernoulli_, randn_like."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = torch.empty_like(x).log_normal_(0.0, 0.25)
        keep = torch.empty_like(x).bernoulli_(0.8)
        return x * scale * keep + 0.1 * torch.randn_like(x)


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(16, 32),
        nn.BatchNorm1d(32),
        Noisy(),
        nn.GELU(),
        nn.Linear(32, 32),
        nn.Dropout(0.3),
        nn.Linear(32, 8),
    ).train()


def _input() -> torch.Tensor:
    return torch.randn(12, 16, generator=torch.Generator().manual_seed(1))


@functools.cache
def _graph_profile():
    return profile_graph(_model(), example_inputs=_input(), name="noisy")


def _wrap(kind: str, model: nn.Module) -> nn.Module:
    """Every piece recomputed: the least-memory schedule of each replay."""
    if kind == "chain":
        return RematChain(model, chain_ops.recompute_all(len(model)))
    profile = _graph_profile()
    return GraphReplay(model, checkpoint_schedule(profile, []), profile)


def _pair(kind: str) -> tuple[nn.Module, nn.Module, nn.Module]:
    """(plain model, its copy, the copy wrapped)."""
    plain = _model()
    copied = copy.deepcopy(plain)
    return plain, copied, _wrap(kind, copied)


def _weight() -> torch.Tensor:
    return torch.randn(12, 8, generator=torch.Generator().manual_seed(2))


def _loss(module: nn.Module, x: torch.Tensor, seed: int = 7) -> torch.Tensor:
    torch.manual_seed(seed)
    return (module(x).float() * _weight()).sum()


def _assert_same_state(a: nn.Module, b: nn.Module) -> None:
    for (name, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
        assert (p.grad is None) == (q.grad is None), name
        if p.grad is not None:
            assert torch.equal(p.grad, q.grad), name
    for (name, buf), other in zip(a.named_buffers(), b.buffers(), strict=True):
        assert torch.equal(buf, other), f"buffer {name}: BatchNorm statistics must be updated once per step"


@pytest.mark.parametrize("kind", KINDS)
def test_random_ops_on_no_list_are_replayed_exactly(kind):
    plain, copied, wrapped = _pair(kind)
    x = _input()
    _loss(plain, x).backward()
    rng_plain = torch.get_rng_state()
    _loss(wrapped, x).backward()
    assert torch.equal(torch.get_rng_state(), rng_plain), "the replay left the global RNG elsewhere"
    _assert_same_state(plain, copied)
    # the check can fail: a recompute that draws fresh numbers gives other gradients
    _loss(plain, x, seed=8).backward()
    assert not torch.equal(plain[0].weight.grad, 2 * copied[0].weight.grad)


def _autocast_grads(module: nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    for p in module.parameters():
        p.grad = None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = _loss(module, x)
    loss.backward()  # outside autocast, as training loops do
    return [p.grad.clone() for p in module.parameters()]


def _checkpointed(model: nn.Sequential) -> nn.Module:
    class PerLayer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = model

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for layer in self.layers:
                x = torch_checkpoint.checkpoint(layer, x, use_reentrant=False)
            return x

    return PerLayer()


@pytest.mark.parametrize("kind", KINDS)
def test_bf16_autocast_recomputes_in_bf16(kind):
    x = _input()
    plain, copied, wrapped = _pair(kind)
    reference = _autocast_grads(plain, x)
    ours = _autocast_grads(wrapped, x)
    torch_ckpt = _autocast_grads(_checkpointed(copy.deepcopy(_model())), x)
    # the bound: what torch.utils.checkpoint itself differs from plain autocast training
    bound = max((a - b).abs().max().item() for a, b in zip(torch_ckpt, reference, strict=True))
    error = max((a - b).abs().max().item() for a, b in zip(ours, reference, strict=True))
    assert error <= bound, f"gradients {error:.3g} off plain autocast training; torch.utils.checkpoint: {bound:.3g}"
    # autocast really changed the numbers (a recompute in fp32 would be caught)
    for p in plain.parameters():
        p.grad = None
    _loss(plain, x).backward()
    assert max((p.grad - r).abs().max().item() for p, r in zip(plain.parameters(), reference, strict=True)) > 1e-4


@pytest.mark.parametrize("kind", KINDS)
def test_autograd_grad_returns_the_plain_gradients(kind):
    plain, copied, wrapped = _pair(kind)
    x = _input()
    params = list(plain.parameters())
    expected = torch.autograd.grad(_loss(plain, x), params)
    mine = list(copied.parameters())
    marker = torch.full_like(mine[0], 5.0)
    mine[0].grad = marker.clone()
    got = torch.autograd.grad(_loss(wrapped, x), mine)
    for a, b in zip(got, expected, strict=True):
        assert torch.equal(a, b)
    assert torch.equal(mine[0].grad, marker), "torch.autograd.grad must not touch .grad"
    assert all(p.grad is None for p in mine[1:])
    # a subset, and with the input too
    subset = torch.autograd.grad(_loss(wrapped, x), [mine[4], mine[2]])
    assert torch.equal(subset[0], expected[4]) and torch.equal(subset[1], expected[2])


@pytest.mark.parametrize("kind", KINDS)
def test_backward_inputs_fills_only_the_chosen_gradients(kind):
    plain, copied, wrapped = _pair(kind)
    x = _input()
    chosen = [0, 5]
    _loss(plain, x).backward(inputs=[list(plain.parameters())[k] for k in chosen])
    _loss(wrapped, x).backward(inputs=[list(copied.parameters())[k] for k in chosen])
    _assert_same_state(plain, copied)
    assert sum(p.grad is not None for p in copied.parameters()) == len(chosen)


@pytest.mark.parametrize("kind", KINDS)
def test_grad_scaler_trains_as_the_plain_model(kind):
    plain, copied, wrapped = _pair(kind)
    x = _input()
    for module, params in ((plain, plain.parameters()), (wrapped, copied.parameters())):
        opt = torch.optim.SGD(list(params), lr=0.1)
        scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
        for step in range(2):
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = _loss(module, x, seed=step)
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            scaler.step(opt)
            scaler.update()
    _assert_same_state(plain, copied)
    for p, q in zip(plain.parameters(), copied.parameters(), strict=True):
        assert torch.equal(p, q)


def test_integer_token_input_has_no_input_gradient():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(50, 16), nn.Linear(16, 16), nn.Dropout(0.2), nn.Linear(16, 8)).train()
    copied = copy.deepcopy(model)
    wrapped = RematChain(copied, chain_ops.recompute_all(len(model)))
    ids = torch.randint(0, 50, (12,), generator=torch.Generator().manual_seed(3))
    _loss(model, ids).backward()
    _loss(wrapped, ids).backward()
    _assert_same_state(model, copied)
    grads = torch.autograd.grad(_loss(wrapped, ids), list(copied.parameters()))
    assert all(torch.equal(g, p.grad) for g, p in zip(grads, copied.parameters(), strict=True))


def _allocator_peak(step) -> int:
    """Peak bytes the CPU allocator had allocated during ``step()`` above what it held before (the
    c10 allocator's running total, from torch.profiler's memory events)."""
    from torch._C._profiler import _ExtraFields_Allocation

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    events, stack = [], list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        event = stack.pop()
        stack.extend(event.children)
        fields = event.extra_fields
        if isinstance(fields, _ExtraFields_Allocation) and fields.device.type == "cpu":
            events.append((event.start_time_ns, fields.total_allocated, fields.alloc_size))
    events.sort()
    base = events[0][1] - events[0][2]
    return max(total for _, total, _ in events) - base


def _peaks(module: nn.Module, step) -> tuple[int, int]:
    """(live-tensor peak, allocator peak) of one training step, parameter gradients pre-allocated."""
    from remat.measure.memory import memory_meter
    from remat.replay.report import prepare_grads

    prepare_grads(module)
    step()  # warm-up
    prepare_grads(module)
    with memory_meter("cpu") as meter:
        step()
    prepare_grads(module)
    return meter.peak_bytes, _allocator_peak(step)


class _Bottleneck(nn.Module):
    """torchvision's layout: in-place ReLU, ``out += identity``, a downsample branch."""

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, 4 * width, 1, bias=False), nn.BatchNorm2d(4 * width)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or cin != 4 * width:
            self.downsample = nn.Sequential(nn.Conv2d(cin, 4 * width, 1, stride, bias=False), nn.BatchNorm2d(4 * width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        out += identity
        return self.relu(out)


def _torchvision_like_resnet() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, 1, 1, bias=False),
        nn.BatchNorm2d(16),
        nn.ReLU(inplace=True),
        _Bottleneck(16, 8, 1),
        _Bottleneck(32, 8, 1),
        _Bottleneck(32, 16, 2),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, 10),
    ).train()


def _held_after_forward(module: nn.Module, inp: torch.Tensor) -> int:
    """Live bytes right after the forward (the output and everything kept for the backward)."""
    from remat.measure.memory import memory_meter

    with memory_meter("cpu") as meter:
        out = module(inp)
        held = meter.current_bytes
    (out**2).sum().backward()
    return held


@pytest.mark.slow
def test_graph_store_all_holds_what_the_plain_step_holds():
    """A piece output nobody saves (the last BatchNorm's before the residual add, the downsample
    branch's, a qkv projection read through copies) joins its reader's piece, so store-all does
    not hold it (it did: +31% on ResNet-50)."""
    from tests.graph.graph_models import TinyTransformer

    torch.manual_seed(0)
    image = torch.randn(4, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    tokens = torch.randint(0, 50, (8, 16), generator=torch.Generator().manual_seed(1))
    cases = [(_torchvision_like_resnet(), image), (TinyTransformer(dropout=0.0).train(), tokens)]
    for model, inp in cases:
        profile = profile_graph(copy.deepcopy(model), example_inputs=inp, name="m")
        forward = [v for v, node in enumerate(profile.nodes) if not node.backward]
        wrapped = GraphReplay(copy.deepcopy(model), checkpoint_schedule(profile, forward), profile)
        held, plain_held = _held_after_forward(wrapped, inp), _held_after_forward(model, inp)
        # equal up to the 1-element placeholders that stand in for released piece inputs (4 B each)
        inputs = sum(len(piece.inputs) for piece in wrapped.plan.pieces)
        assert 0 <= held - plain_held <= 4 * inputs, (type(model).__name__, held, plain_held)
    # the whole step, allocator included, where the forward's activations set the peak
    model, inp = cases[1]
    profile = profile_graph(copy.deepcopy(model), example_inputs=inp, name="m")
    forward = [v for v, node in enumerate(profile.nodes) if not node.backward]
    wrapped = GraphReplay(copy.deepcopy(model), checkpoint_schedule(profile, forward), profile)

    def step_of(module):
        return lambda: (module(inp) ** 2).sum().backward()

    plain_live, plain_alloc = _peaks(model, step_of(model))
    live, alloc = _peaks(wrapped, step_of(wrapped))
    assert abs(live - plain_live) <= 0.01 * plain_live, (live, plain_live)
    assert abs(alloc - plain_alloc) <= 0.01 * plain_alloc, (alloc, plain_alloc)
