"""A model that branches on "am I being compiled?" is traced on the path eager runs
(NOTE [The eager path, traced], remat/rewrite/eager_path.py)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import remat
from remat.models.compat import import_torchvision
from remat.rewrite.eager_path import eager_answers, model_files


def _transformers_ask():
    import_torchvision()  # transformers imports torchvision (remat.models.compat)
    from transformers.utils.import_utils import is_torchdynamo_compiling

    return is_torchdynamo_compiling


ASKS = {
    "torch.compiler.is_compiling": lambda: torch.compiler.is_compiling,
    "torch._dynamo.is_compiling": lambda: torch._dynamo.is_compiling,
    "transformers.is_torchdynamo_compiling": _transformers_ask,
}


class Branchy(nn.Module):
    """Blocks whose compiled path is another function than their eager one (a scale for a tanh)."""

    def __init__(self, ask, width: int = 16, depth: int = 3) -> None:
        super().__init__()
        self.ask = ask
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            h = layer(x)
            x = x + (h * 0.5 if self.ask() else torch.tanh(h))
        return x.pow(2).mean()


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(ASKS))
def test_the_trace_runs_the_eager_path_exactly(name):
    torch.manual_seed(0)
    model = Branchy(ASKS[name]()).train()
    plain = copy.deepcopy(model)
    x = torch.randn(8, 16)
    wrapped = remat.checkpoint(model, x, budget=1.0, repeats=1, warmup=0)
    assert len(wrapped.profile.stages) > 1
    got = wrapped(x)
    got.backward()
    expected = plain(x)
    expected.backward()
    assert torch.equal(got, expected)
    for a, b in zip(model.parameters(), plain.parameters(), strict=True):
        assert torch.equal(a.grad, b.grad)


def test_only_the_models_files_inside_the_context_get_eagers_answer():
    def f(x: torch.Tensor) -> torch.Tensor:
        return x * 3 if torch.compiler.is_compiling() else x + 1

    x = torch.ones(2)
    with eager_answers(model_files(f)) as patched:
        assert patched
        assert torch.equal(torch.compile(f, backend="eager", fullgraph=True)(x), x + 1)
    torch._dynamo.reset()
    with eager_answers(model_files(nn.Linear(2, 2))):  # torch's own files are never the model's
        assert torch.equal(torch.compile(f, backend="eager", fullgraph=True)(x), x * 3)
    torch._dynamo.reset()
    assert torch.equal(torch.compile(f, backend="eager", fullgraph=True)(x), x * 3)  # put back
    torch._dynamo.reset()
