"""Trace-based cutting (remat/trace/cut.py) and the proof that refuses a changed model (proof.py)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from remat.profile.chain import profile_chain
from remat.schedules import RematError
from remat.trace.chain import Chain, as_chain
from remat.trace.cut import TrainingStep, cut_step, mutates
from remat.trace.proof import cut_model, one_step, prove_chain, prove_cut


class MaskedMLP(nn.Module):
    """Keyword inputs, a mask passed through every block, a residual stream, a loss from labels."""

    def __init__(self, vocab: int = 50, width: int = 16, depth: int = 3) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.blocks = nn.ModuleList([nn.Linear(width, width) for _ in range(depth)])
        self.head = nn.Linear(width, vocab)

    def forward(self, input_ids, attention_mask=None, labels=None):
        mask = (attention_mask if attention_mask is not None else torch.ones_like(input_ids)).unsqueeze(-1).float()
        h = self.embed(input_ids)
        for block in self.blocks:
            h = h + torch.relu(block(h)) * mask
        logits = self.head(h)
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten()) if labels is not None else None
        return {"loss": loss, "logits": logits}


def _tokens(batch: int = 2, length: int = 8, vocab: int = 50):
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (batch, length), generator=generator)
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[1, -3:] = 0
    return {"input_ids": ids, "attention_mask": mask, "labels": torch.randint(0, vocab, (batch, length))}


def test_keyword_inputs_mask_is_a_side_value_and_loss_is_the_last_stage():
    torch.manual_seed(0)
    model = MaskedMLP()
    inputs = _tokens()
    chain = cut_model(model, (), inputs)
    # the logits are saved by neither the head nor the loss: one stage, as plain PyTorch frees them (fuse.py)
    assert chain.names == ["embed", "blocks.0", "blocks.1", "blocks.2", "head+loss"]
    # the mask is computed once, before the chain, and read by every block: not an activation
    x = chain.bind(**inputs)
    assert x is inputs["input_ids"]
    assert all(stage.sides for stage in list(chain.stages)[1:4])
    out = chain(x)
    assert out.dim() == 0 and torch.equal(out, model(**inputs)["loss"])


def test_cut_chain_profiles_and_outputs_are_stage_sized():
    torch.manual_seed(0)
    model = MaskedMLP(width=32)
    inputs = _tokens()
    chain = cut_model(model, (), inputs)
    profile = profile_chain(chain, chain.bind(**inputs), repeats=1, warmup=0)
    hidden = 2 * 8 * 32 * 4
    assert [s.output_size for s in profile.stages[:4]] == [hidden] * 4
    assert profile.stages[-1].output_size < hidden  # the scalar loss


def test_bind_refuses_another_shape_and_changed_constants():
    model = MaskedMLP()
    inputs = _tokens()
    chain = cut_model(model, (), inputs)
    with pytest.raises(RematError, match="cut and profiled for"):
        chain.bind(**_tokens(batch=3))
    with pytest.raises(RematError, match="not the same arguments"):
        chain.bind(input_ids=inputs["input_ids"])


class TamperedStage(nn.Module):
    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x) * 1.0001


def test_a_cut_that_changes_the_function_is_refused_naming_the_stage():
    torch.manual_seed(0)
    model = MaskedMLP()
    inputs = _tokens()
    step = TrainingStep(model)
    chain = cut_step(step, (), inputs)
    chain.stages[2] = TamperedStage(chain.stages[2])
    with pytest.raises(RematError, match=r"first difference at stage 'blocks\.1'"):
        prove_cut(step, chain, (), inputs)


class _ScaledGradient(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad * 1.0001


class BackwardTamperedStage(nn.Module):
    """The same forward as ``inner``, bit for bit; its backward hands on a scaled gradient."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(_ScaledGradient.apply(x))


def test_a_cut_whose_backward_differs_is_refused_naming_that_stage():
    torch.manual_seed(0)
    model = MaskedMLP()
    inputs = _tokens()
    step = TrainingStep(model)
    chain = cut_step(step, (), inputs)
    chain.stages[2] = BackwardTamperedStage(chain.stages[2])
    with pytest.raises(
        RematError, match=r"gradient of parameter .*first difference at stage 'blocks\.1' \(its backward\)"
    ):
        prove_cut(step, chain, (), inputs)


class NamedLikeResNet(nn.Module):
    """Has the attribute names the ResNet hint knows, but its stem uses one it does not (``act0``)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.act0 = nn.ReLU()
        self.layer1 = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU())
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        x = self.layer1(self.act0(self.bn1(self.conv1(x))))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def test_the_name_hint_that_drops_an_activation_is_refused_and_the_trace_cuts_it_right():
    torch.manual_seed(0)
    model = NamedLikeResNet()
    x = torch.randn(2, 3, 8, 8)
    hinted = as_chain(model)  # stem = conv1, bn1 (act0 silently missing)
    with pytest.raises(RematError, match="first difference at stage 'stem'"):
        prove_chain(model, hinted, x)
    chain = cut_model(model, (x,), {})
    assert "act0" in "".join(chain.names) or any("bn1" in n for n in chain.names)
    assert torch.equal(chain.run(x), model(x))


def test_inplace_children_join_the_stage_before_and_profile():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(inplace=True), nn.Conv2d(4, 4, 3), nn.ReLU(inplace=True))
    chain = as_chain(model)
    assert chain.names == ["0-1", "2-3"]
    x = torch.randn(2, 3, 10, 10)
    prove_chain(model, chain, x)
    assert profile_chain(chain, x, repeats=1, warmup=0).length == 2


class InPlaceAfterConv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(3, 4, 3)
        self.b = nn.Conv2d(4, 4, 3)

    def forward(self, x):
        y = self.a(x)
        y.relu_()  # in place on what would be a stage input: no cut may fall between a and relu_
        return self.b(y)


def test_traced_cut_never_hands_an_inplace_op_its_input():
    torch.manual_seed(0)
    model = InPlaceAfterConv()
    x = torch.randn(2, 3, 10, 10)
    chain = cut_model(model, (x,), {})
    assert chain.names == ["a", "b"]
    profile = profile_chain(chain, chain.bind(x), repeats=1, warmup=0)
    assert profile.length == 2


def test_mutates_detects_inplace_forms():
    model = InPlaceAfterConv()
    gm = torch.fx.symbolic_trace(model)
    flags = {n.name: mutates(n) for n in gm.graph.nodes}
    assert flags["relu_"] and not flags["a"] and not flags["b"]


def test_integer_and_float_chain_inputs_and_a_proof_that_leaves_the_model_unchanged():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU())
    x = torch.randn(2, 3, 6, 6)
    before = [b.clone() for b in model.buffers()]
    prove_chain(model, as_chain(model), x)
    assert all(torch.equal(a, b) for a, b in zip(before, model.buffers(), strict=True))
    result = one_step(model, lambda: model(x))
    assert result.grads[0] is not None and not torch.equal(result.buffers[0], before[0])


def test_a_model_that_cannot_be_traced_gives_one_line():
    class Branchy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            if self.lin(x).sum().item() > 0:  # data-dependent Python control flow
                return self.lin(x)
            return -self.lin(x)

    with pytest.raises(RematError, match="cannot trace") as info:
        cut_model(Branchy(), (torch.randn(2, 4),), {})
    assert "\n" not in str(info.value)


def test_chain_of_model_modules_must_match():
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
    other = Chain([("0", model[0])])  # drops the Tanh
    with pytest.raises(RematError, match="first difference at stage '0'"):
        prove_chain(model, other, torch.randn(2, 4))
