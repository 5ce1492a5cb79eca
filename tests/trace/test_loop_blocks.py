"""A module the step calls again in a Python loop (NOTE [A module called in a loop],
remat/rewrite/nodes.py ``repeated_blocks``): an ``nn.LSTMCell`` over the time steps, a shared MLP
block, is one stage per call (``cell``, ``cell#2``, ...), so a recurrent loop is cut between its
time steps; a module without parameters called again (an activation) is no block of its own."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import remat
from remat.rewrite.nodes import repeated_blocks
from remat.trace.proof import cut_model
from tests.step_grads import step_grads

STEPS = 16


class LSTMLoop(nn.Module):
    """One shared ``nn.LSTMCell`` over the sequence, a head on the last state."""

    def __init__(self, features: int = 4, hidden: int = 8) -> None:
        super().__init__()
        self.cell = nn.LSTMCell(features, hidden)
        self.head = nn.Linear(hidden, 3)
        self.hidden = hidden

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (time, batch, features)
        h = torch.zeros(x.shape[1], self.hidden)
        c = torch.zeros(x.shape[1], self.hidden)
        for t in range(x.shape[0]):
            h, c = self.cell(x[t], (h, c))
        return self.head(h)


class MLPLoop(nn.Module):
    """A shared two-layer block (a ``Sequential``) applied to its own output, once per step."""

    def __init__(self, width: int = 32, steps: int = STEPS) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.Linear(width, width), nn.Tanh(), nn.Linear(width, width))
        self.steps = steps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(self.steps):
            x = self.block(x)
        return x


class SharedActivation(nn.Module):
    """One ``nn.Tanh`` (no parameters) called after each of two linears."""

    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.a = nn.Linear(width, width)
        self.b = nn.Linear(width, width)
        self.act = nn.Tanh()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.b(self.act(self.a(x))))


def _loss(out: torch.Tensor, *_: object) -> torch.Tensor:
    return out.pow(2).mean()


def _calls(names: list[str], path: str) -> list[str]:
    """The stage names' parts that are calls of ``path`` (a fused stage names its parts)."""
    return [part for name in names for part in name.split("+") if part.split("#")[0] == path]


@pytest.mark.slow
@pytest.mark.parametrize(
    "make, example, path",
    [
        (LSTMLoop, lambda: torch.randn(STEPS, 2, 4, generator=torch.Generator().manual_seed(0)), "cell"),
        (MLPLoop, lambda: torch.randn(32, 32, generator=torch.Generator().manual_seed(0)), "block"),
    ],
    ids=["lstm_cell", "shared_mlp"],
)
def test_a_module_called_in_a_loop_is_cut_per_call_exact_and_least_well_below_store_all(make, example, path):
    torch.manual_seed(0)
    model = make().train()
    x = example()
    wrapped = remat.checkpoint(model, x, loss=_loss)  # proven equal to the plain step
    names = list(wrapped.chain.names)
    calls = _calls(names, path)
    assert calls[:3] == [path, f"{path}#2", f"{path}#3"], names
    assert len(names) >= STEPS // 2, names  # a stage per call, a few fused with their neighbour
    # one stage would make them equal; at these tiny sizes the true ratio is about 2.1 (it was over
    # 3 while every stage counted the input sequence its slice x[t] views: docs/model.md, "Every
    # byte counted once")
    assert wrapped.least_peak * 2 < wrapped.store_all_peak, (wrapped.least_peak, wrapped.store_all_peak)
    least = wrapped.with_budget(wrapped.least_peak)
    plain = step_grads(model, lambda: _loss(model(x)))
    ours = step_grads(model, lambda: least(x))
    assert all(torch.equal(a, b) for a, b in zip(plain, ours, strict=True))


@pytest.mark.slow
def test_only_a_module_with_parameters_called_again_is_a_block() -> None:
    def blocks(model: nn.Module, x: torch.Tensor) -> frozenset[str]:
        chain = cut_model(model, (x,), {}, loss=_loss, prove=False)
        return repeated_blocks(chain.plan.gm.graph.nodes)

    assert blocks(LSTMLoop(), torch.randn(3, 2, 4)) == {"cell"}
    assert blocks(SharedActivation(), torch.randn(4, 8)) == set()  # ``act`` has no parameters
