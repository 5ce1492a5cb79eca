"""bf16 autocast as a step of its own: the autocast state is part of a call's signature (a cut
traced, proven and profiled under it), and autocast's weight-cast cache does not break the
prediction (NOTE [Autocast's weight-cast cache], remat.runtime.core)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.utils import _pytree as pytree

import remat
from remat.api.shapes import Signature, along


def _signature(x: torch.Tensor) -> Signature:
    leaves, spec = pytree.tree_flatten(((x,), {}, None))
    return Signature.of(leaves, spec)


def test_the_autocast_state_separates_signatures():
    x = torch.randn(4, 8)
    plain = _signature(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        bf16 = _signature(x)
        with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
            uncached = _signature(x)
    with torch.autocast("cpu", dtype=torch.float16):
        fp16 = _signature(x)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=False):
        disabled = _signature(x)
    assert len({plain, bf16, uncached, fp16}) == 4
    assert disabled == plain  # a disabled autocast changes nothing a trace sees
    assert along(plain, bf16) is None  # no growth line (no shared prediction) across states
    assert "bfloat16" in bf16.text() and "bfloat16" not in plain.text()
    assert bf16.autocast.key() == bf16.rest[-1]


class Net(nn.Module):
    """The issue's model: its softmax in fp32, cast back to ``h``'s dtype (bf16 under autocast)."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(64, 64) for _ in range(4))
        self.drop = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for lin in self.layers:
            h = lin(x)
            x = x + self.drop(torch.softmax(h, -1, dtype=torch.float32).to(h.dtype))
        return x.sum()


def _autocast_step(model: nn.Module, step) -> tuple[torch.Tensor, list[torch.Tensor]]:
    for p in model.parameters():
        p.grad = None
    torch.manual_seed(1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = step()
    loss.backward()
    return loss.detach(), [p.grad for p in model.parameters()]


@pytest.mark.slow
def test_a_model_cut_outside_autocast_called_inside_it_equals_plain_autocast():
    torch.manual_seed(0)
    model, x = Net().train(), torch.randn(8, 64)
    # cut in fp32; the bf16 call needs more than the fp32 store-all peak, so at 1.0 it runs its
    # least-memory schedule (over_budget="least"), and under a budget of 1 GiB it stores all
    wrapped = remat.checkpoint(copy.deepcopy(model), x, budget=1.0, over_budget="least", repeats=1, warmup=0)
    loss, grads = _autocast_step(model, lambda: model(x))
    forwards = set()
    for replay in (wrapped, wrapped.with_budget(2**30)):
        got, got_grads = _autocast_step(replay, lambda: replay(x))  # noqa: B023 - called at once
        assert torch.equal(got, loss)
        assert all(torch.equal(a, b) for a, b in zip(grads, got_grads, strict=True))
        (plan,) = [p for p in replay.plans if "bfloat16" in p.cut.signature.text()]
        forwards.add(sum(op[0] != "B" for op in plan.schedule.ops) - plan.cut.profile.length)
    assert len(wrapped.plans) == 2  # the fp32 example's cut and the bf16 call's own
    assert forwards == {0} | (forwards - {0}) and len(forwards) == 2  # one schedule recomputes


@pytest.mark.slow
def test_an_mlp_cut_under_autocast_is_predicted_within_2_percent():
    torch.manual_seed(0)
    model = nn.Sequential(*(m for _ in range(6) for m in (nn.Linear(512, 512), nn.Tanh()))).train()
    x = torch.randn(128, 512)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        wrapped = remat.checkpoint(model, x, budget=1.0, repeats=1, warmup=0)
    half = max(wrapped.least_peak, wrapped.store_all_peak // 2)  # 0.5, or the least if above it
    replay = wrapped.with_budget(half)
    assert sum(op[0] != "B" for op in replay.schedule.ops) > replay.profile.length  # it recomputes
    report = replay.report(steps=1)
    assert abs(report.peak_error) <= 0.02, report.table()


class DropoutAttention(nn.Module):
    """A block whose SDPA runs the math path (dropout in training): under bf16 autocast on CPU its
    backward, run inside the region, casts again what the recipe's backward (outside it) does not."""

    def __init__(self, width: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.qkv, self.out = nn.Linear(width, 3 * width, bias=False), nn.Linear(width, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, w = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, w // self.heads).permute(2, 0, 3, 1, 4)
        o = nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=0.1 if self.training else 0.0)
        return x + self.out(o.transpose(1, 2).reshape(b, t, w))


@pytest.mark.slow
def test_a_stage_backward_is_profiled_outside_autocast_as_the_step_runs_it():
    """The profile ran each stage's backward inside the caller's autocast region (where
    ``remat.checkpoint`` was called): -3.5% under the prediction at store-all before."""
    torch.manual_seed(0)
    model = nn.Sequential(*(DropoutAttention() for _ in range(3))).train()
    x = torch.randn(2, 160, 64)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        wrapped = remat.checkpoint(model, x, loss=lambda o: o.float().pow(2).mean(), budget=1.0, repeats=1, warmup=0)
    report = wrapped.report(steps=1)
    assert abs(report.peak_error) <= 0.01, report.table()
