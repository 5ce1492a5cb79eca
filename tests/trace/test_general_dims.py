"""A trace general in some input dimensions (NOTE [Dimensions a trace is general in],
remat/trace/capture.py): the sizes it keeps symbolic, the guard it keeps, the sizes a model fixes,
and the mask-branch pins that must not look at sizes (remat/rewrite/branches.py)."""

from __future__ import annotations

import types

import pytest
import torch
from torch import nn

from remat.rewrite import branches
from remat.schedules import RematError
from remat.trace.capture import TrainingStep
from remat.trace.proof import cut_model
from tests.api.test_api import TokenModel


def _tokens(batch: int, length: int) -> dict:
    ids = torch.randint(0, 40, (batch, length), generator=torch.Generator().manual_seed(length))
    return {"input_ids": ids, "labels": ids.roll(1, dims=1)}


LENGTH = frozenset({(0, 1), (1, 1)})  # input_ids and labels, dimension 1 (leaves in key order)


def test_a_cut_general_in_the_length_runs_other_lengths_as_the_model_does():
    torch.manual_seed(0)
    model = TokenModel(depth=2).eval()  # no dropout: the same output run after run
    chain = cut_model(model, (), _tokens(2, 8), dynamic=LENGTH)
    assert chain.dynamic is not None and chain.dynamic.dims == LENGTH
    step = TrainingStep(model)
    for length in (3, 8, 21):
        inputs = _tokens(2, length)
        with torch.no_grad():
            assert torch.equal(chain.run(**inputs), step((), inputs)), length
    with pytest.raises(RematError, match="inputs: argument 0 is \\(3, 8\\)"):
        chain.bind(**_tokens(3, 8))  # the batch is not a general dimension
    with pytest.raises(RematError) as info:
        chain.bind(**_tokens(2, 1))  # dynamo assumed a length of at least 2
    assert "\n" not in str(info.value) and "break what the trace assumed" in str(info.value)
    assert cut_model(model, (), _tokens(2, 8)).dynamic is None  # not asked: the example's sizes only


class FixedLength(nn.Module):
    """Reshapes to a literal length: the model's code fixes the size, so no cut is general in it."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(40, 8)
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(2)])

    def forward(self, input_ids, labels=None):
        h = self.embed(input_ids).reshape(2, 8, 8)
        for layer in self.layers:
            h = h + torch.tanh(layer(h))
        return {"loss": h.square().mean()}


def test_a_size_the_model_fixes_is_not_general():
    chain = cut_model(FixedLength(), (), _tokens(2, 8), dynamic=LENGTH)
    assert chain.dynamic is None
    with pytest.raises(RematError, match="inputs: argument 0 is \\(2, 9\\)"):
        chain.bind(**_tokens(2, 9))


def test_a_branch_pin_looks_at_sizes_only_where_the_calls_disagree():
    """The eager forward's verdicts are kept by function alone when every call agreed (a lookup by
    size would make dynamo specialise the length), by their static arguments otherwise."""
    name = "_ignore_causal_mask_sdpa"

    def table_of(verdicts: dict[int, bool]) -> dict:
        module = types.SimpleNamespace(**{name: lambda mask, length: verdicts[length]})
        originals = {name: getattr(module, name)}
        return branches._record(module, originals, lambda: [module._ignore_causal_mask_sdpa(None, n) for n in verdicts])

    same = table_of({8: True, 4: True})
    assert same[(name,)] is True and same[(name, 8)] is True
    mixed = table_of({8: True, 4: False})
    assert (name,) not in mixed and mixed[(name, 8)] is True and mixed[(name, 4)] is False
