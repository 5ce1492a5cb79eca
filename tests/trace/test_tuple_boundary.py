"""Cuts that hand on several tensors (remat.trace.boundary; NOTE [Cuts that hand on several tensors],
remat/trace/positions.py): a model whose blocks pass a hidden state, a position bias computed once
and an int tensor is cut at every block, each boundary a tuple in graph order, and proven equal;
more tensors than the bound is no cut; a side value that the step builds in place (BART's
shift of the labels) stays a side value."""

from __future__ import annotations

import torch
from torch import nn

import remat.trace.positions as positions
from remat.trace.proof import cut_model
from tests.trace.tuple_models import bias_model


def test_every_block_is_a_stage_and_hands_on_its_hidden_state_bias_and_int_tensor():
    model, x = bias_model()
    chain = cut_model(model, (x,), {})
    assert [n for n in chain.names if n.startswith("blocks.")] == [f"blocks.{k}" for k in range(4)]
    first = chain.names.index("blocks.0")
    # blocks 0-2 hand on (bias, picked, h): the last block's output is the hidden state alone
    assert [len(h) for h in chain.plan.handoffs[first : first + 4]] == [3, 3, 3, 1]
    a = chain.bind(x)
    with torch.no_grad():
        for stage in chain.stages[: first + 1]:
            a = stage(a)
    bias, picked, h = a
    assert bias.is_floating_point() and picked.dtype == torch.int64 and h.shape == x.shape
    with torch.no_grad():
        again = chain.stages[first + 1](a)
    assert again[0] is bias and again[1] is picked  # handed on unchanged, not copied


def test_more_tensors_than_the_bound_are_no_cut(monkeypatch):
    monkeypatch.setattr(positions, "MAX_TENSORS", 2)
    model, x = bias_model()
    chain = cut_model(model, (x,), {})
    assert "blocks.0" not in chain.names and all(len(h) == 1 for h in chain.plan.handoffs)


class Shifted(nn.Module):
    """BART's ``shift_tokens_right``: a tensor made by the step, filled in place from the labels,
    then read by a later block (the decoder)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 8)
        self.blocks = nn.ModuleList(nn.Linear(8, 8) for _ in range(3))

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        shifted = labels.new_zeros(labels.shape)
        shifted[:, 1:] = labels[:, :-1].clone()
        shifted.masked_fill_(shifted == -100, 0)
        h = torch.tanh(self.blocks[0](x))
        h = torch.tanh(self.blocks[1](h)) + self.embed(shifted)
        return self.blocks[2](h).pow(2).mean()


def test_a_side_value_the_step_builds_in_place_is_computed_before_the_stages():
    torch.manual_seed(0)
    labels = torch.tensor([[1, 2, -100, 4], [5, -100, 7, 8]])
    chain = cut_model(Shifted(), (torch.randn(2, 4, 8), labels), {})  # proven equal
    in_place = {"<built-in function setitem>", "masked_fill_"}
    assert in_place <= {str(n.target) for n in chain._prelude.graph.nodes}
    assert not in_place & {str(n.target) for s in chain.stages for n in s.body.graph.nodes}
    assert len(chain) >= 3
