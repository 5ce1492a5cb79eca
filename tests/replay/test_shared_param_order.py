"""NOTE [Shared parameters under gradient accumulation] (remat/runtime/core.py): a parameter that
several stages read, some of them more than once (an LSTMCell called at every step of a Python
loop, stages of several steps; a tied weight read twice in a block), gets its uses' gradients
summed in plain autograd's order, so the replay's gradients are bit-equal to plain PyTorch's:
after ``zero_grad()`` (None or zeros), over micro-batches, and for ``torch.autograd.grad``, under
store-all and under a schedule that recomputes."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import remat
from remat.replay.chain import RematChain
from remat.trace.chain import as_chain
from remat.zoo.lstm import UnrolledLSTM, unrolled_loop

STARTS = ("none", "zeros", "micro-batches", "autograd.grad")


def _schedules(n: int) -> dict[str, list]:
    """Store-all, and the schedule that keeps only a_0 and recomputes every stage's input."""
    store_all = [("F_all", i) for i in range(n)] + [("B", i) for i in reversed(range(n))]
    recompute = [("F_ck", 0), *[("F_n", i) for i in range(1, n - 1)], ("F_all", n - 1), ("B", n - 1)]
    for i in reversed(range(n - 1)):
        recompute += [*([("F_ck", 0)] + [("F_n", j) for j in range(1, i)] if i else []), ("F_all", i), ("B", i)]
    return {"store-all": store_all, "recompute": recompute}


def _grads(model: nn.Module, run, inputs: list[torch.Tensor], start: str) -> list[torch.Tensor]:
    model.zero_grad(set_to_none=start != "zeros")
    params = list(model.parameters())
    if start == "autograd.grad":
        return list(torch.autograd.grad(run(inputs[0]), params))
    for x in inputs if start == "micro-batches" else inputs[:1]:
        run(x).backward()
    return [p.grad.clone() for p in params]


@pytest.mark.parametrize("start", STARTS)
@pytest.mark.parametrize("schedule", ["store-all", "recompute"])
def test_a_cell_called_at_every_step_trains_like_the_plain_loop(schedule: str, start: str) -> None:
    model = UnrolledLSTM(12, 3, 4, 8, steps_per_stage=3)  # 4 stages, the cell 3 times in each
    weight = torch.randn(3, 16, generator=torch.Generator().manual_seed(9))
    states = [torch.randn(3, 16, generator=torch.Generator().manual_seed(k)) for k in range(3)]
    wrapped = RematChain(as_chain(model), _schedules(4)[schedule])
    plain = _grads(model, lambda s: (unrolled_loop(model, s) * weight).sum(), states, start)
    replayed = _grads(model, lambda s: (wrapped(s) * weight).sum(), states, start)
    names = [name for name, _ in model.named_parameters()]
    assert [n for n, a, b in zip(names, plain, replayed, strict=True) if not torch.equal(a, b)] == []


class TiedBlock(nn.Module):
    """A tied autoencoder's block: encode with W, decode with its transpose (W read twice)."""

    def __init__(self, tied: nn.Linear) -> None:
        super().__init__()
        self.tied = tied

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + torch.tanh(torch.tanh(self.tied(h)) @ self.tied.weight)


class Loss(nn.Module):
    def __init__(self, tied: nn.Linear) -> None:
        super().__init__()
        self.tied = tied

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.tied(h).logsumexp(-1).mean()


def _tied_stages(width: int = 12, depth: int = 3) -> nn.Sequential:
    torch.manual_seed(0)
    tied = nn.Linear(width, 2 * width)
    return nn.Sequential(*[TiedBlock(tied) for _ in range(depth)], Loss(tied))


@pytest.mark.parametrize("start", STARTS)
@pytest.mark.parametrize("schedule", ["store-all", "recompute"])
def test_a_tied_weight_read_twice_in_every_stage_trains_like_plain_pytorch(schedule: str, start: str) -> None:
    stages = _tied_stages()
    xs = [torch.randn(5, 12, generator=torch.Generator().manual_seed(k)) for k in range(3)]
    wrapped = RematChain(list(stages), _schedules(len(stages))[schedule])
    plain = _grads(stages, stages, xs, start)
    replayed = _grads(stages, wrapped, xs, start)
    assert all(torch.equal(a, b) for a, b in zip(plain, replayed, strict=True))


def test_a_tensor_hook_on_a_shared_parameter_sees_each_stages_gradient_once() -> None:
    """A hook is not handed the running sum (it would see the earlier stages' gradients again)."""
    stages = _tied_stages()
    x = torch.randn(5, 12, generator=torch.Generator().manual_seed(0))
    weight = stages[0].tied.weight
    seen: list[torch.Tensor] = []
    handle = weight.register_hook(lambda g: seen.append(g.clone()) if g is not None else None)
    try:
        RematChain(list(stages), _schedules(len(stages))["store-all"])(x).backward()
    finally:
        handle.remove()
    assert len(seen) == len(stages)
    torch.testing.assert_close(sum(seen), weight.grad, rtol=1e-6, atol=1e-7)


class TwoSteps(nn.Module):
    """Two time steps of the recurrent cell every block shares (a block per two steps)."""

    def __init__(self, cell: nn.LSTMCell) -> None:
        super().__init__()
        self.cell = cell

    def forward(self, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        for t in range(2):
            h, c = self.cell(x[:, t], (h, c))
        return h, c


class CellLoop(nn.Module):
    """An LSTMCell over a sequence in a Python loop, then a linear head and a loss."""

    def __init__(self, width: int = 8, hidden: int = 16, steps: int = 8) -> None:
        super().__init__()
        cell = nn.LSTMCell(width, hidden)
        self.hidden = hidden
        self.blocks = nn.ModuleList(TwoSteps(cell) for _ in range(steps // 2))
        self.head = nn.Linear(hidden, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = c = x.new_zeros(x.shape[0], self.hidden)
        for k, block in enumerate(self.blocks):
            h, c = block(x[:, 2 * k : 2 * k + 2], h, c)
        return self.head(h).square().mean()


@pytest.mark.slow
def test_remat_checkpoint_trains_a_cell_loop_like_plain_pytorch_for_three_adamw_steps() -> None:
    torch.manual_seed(0)
    model = CellLoop().train()
    x = torch.randn(4, 8, 8)
    ours = copy.deepcopy(model)
    store_all = remat.checkpoint(ours, x, budget=1.0, repeats=1, warmup=0)
    for wrapped in (store_all, store_all.with_budget(store_all.least_peak)):
        stages = wrapped.plan_for(x).replay.chain.stages
        in_stages = [p for stage in stages for p in stage.parameters()]
        assert len({id(p) for p in in_stages}) < len(in_stages)  # the cell is in several stages
        reference = copy.deepcopy(ours)
        mine = torch.optim.AdamW(ours.parameters(), lr=1e-2)
        theirs = torch.optim.AdamW(reference.parameters(), lr=1e-2)
        for _ in range(3):
            mine.zero_grad()
            theirs.zero_grad()
            wrapped(x).backward()
            reference(x).backward()
            names = [name for name, _ in ours.named_parameters()]
            pairs = zip(names, ours.parameters(), reference.parameters(), strict=True)
            assert [n for n, a, b in pairs if not torch.equal(a.grad, b.grad)] == []
            mine.step()
            theirs.step()
