"""remat.checkpoint refuses odd input in one line (a RematError naming the problem), never a raw
torch error or a silently accepted value."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import remat
from remat.schedules import RematError


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x)))


X = torch.randn(4, 8)
FAST = {"repeats": 1, "warmup": 0}


def ck(inputs=X, model=None, **options):
    """remat.checkpoint of a fresh Block (or ``model``) on ``inputs``, profiled once."""
    return remat.checkpoint(Block() if model is None else model, inputs, **{**FAST, **options})


CASES = [
    ("int64 input to a float model", lambda: ck(torch.randint(0, 5, (4, 8))),
     r"running it on the example inputs \(\(4, 8\) torch.int64\) failed \(in Linear, at test_api_inputs.py:\d+"),
    ("wrong width", lambda: ck(torch.randn(4, 7)), r"in Linear.*shapes cannot be multiplied"),
    ("meta input", lambda: ck(torch.randn(4, 8, device="meta")), "meta device"),
    ("non-scalar loss", lambda: ck(X, loss=lambda o: o * 2), r"loss: returned a tensor of shape \(4, 4\)"),
    ("a list of ints", lambda: ck([1, 2]), r"Block.forward cannot take them"),
    ("no inputs", lambda: ck(()), r"cannot take them"),
    ("no tensor", lambda: ck([3], nn.Identity()), "no tensor"),
    ("repeats=0", lambda: ck(X, repeats=0), r"repeats: expected an integer >= 1, got 0"),
    ("repeats=1.5", lambda: ck(X, repeats=1.5), "repeats"),
    ("warmup=-1", lambda: ck(X, repeats=1, warmup=-1), "warmup"),
    ("budget=True", lambda: ck(X, budget=True), "budget: expected"),
    ("budget=None", lambda: ck(X, budget=None), "budget: expected"),
    ("budget=nan", lambda: ck(X, budget=float("nan")), "fraction"),
    ("budget='lots'", lambda: ck(X, budget="lots"), "size 'lots'"),
    ("budget=-5", lambda: ck(X, budget=-5), "negative"),
    ("strategy=3", lambda: ck(X, strategy=3), "strategy: expected"),
    ("graph strategy", lambda: ck(X, strategy="ilp"), "unknown strategy 'ilp' for a chain"),
    ("fp16 input, fp32 model", lambda: ck(X.half()), "float16, the model's parameters torch.float32"),
    ("NaN input", lambda: ck(torch.full((4, 8), float("nan"))), "NaN"),
    ("eval mode", lambda: ck(model=Block().eval()), "eval mode"),
    ("loss=3", lambda: ck(X, loss=3), "loss: expected a callable"),
    ("target without loss", lambda: ck(X, target=torch.tensor([1, 2])), "target: given without loss"),
    ("compile='yes'", lambda: ck(X, compile="yes"), "compile: expected True or False"),
    ("a loss that raises", lambda: ck(X, loss=nn.functional.cross_entropy, target=torch.tensor([9, 9, 9, 9])),
     r"failed \(in the loss.*IndexError: Target 9 is out of bounds"),
    ("dict with non-string keys", lambda: ck({1: X}), "string keys"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "call", "message"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line(name, call, message):
    with pytest.raises(RematError, match=message) as caught:
        call()
    assert "\n" not in str(caught.value)
    assert caught.value.__cause__ is None or isinstance(caught.value.__cause__, RematError)


def test_report_and_with_budget_refuse_odd_arguments():
    torch.manual_seed(0)
    wrapped = ck()
    with pytest.raises(RematError, match="steps: expected an integer >= 1"):
        wrapped.report(steps=0)
    with pytest.raises(RematError, match="strategy: expected"):
        wrapped.with_budget(1.0, strategy=["optimal"])
    with pytest.raises(RematError, match="budget: expected"):
        wrapped.with_budget(None)
