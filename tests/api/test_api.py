"""remat.checkpoint: one call from a model and an example to a module that trains under a budget."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import remat
from remat.api import resolve_budget
from remat.schedules import RematError
from remat.solver.chain.store_all import store_all_peak


class TokenModel(nn.Module):
    """Token ids in, a dict out (``loss`` when labels are given): the Hugging Face calling shape."""

    def __init__(self, vocab: int = 40, width: int = 24, depth: int = 4) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.layers = nn.ModuleList(
            [nn.Sequential(nn.LayerNorm(width), nn.Linear(width, 2 * width), nn.GELU(), nn.Dropout(0.1),
                           nn.Linear(2 * width, width)) for _ in range(depth)]
        )  # fmt: skip
        self.head = nn.Linear(width, vocab)

    def forward(self, input_ids, labels=None):
        h = self.embed(input_ids)
        for layer in self.layers:
            h = h + layer(h)
        logits = self.head(h)
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())
        return out


def _grads(model: nn.Module) -> list[torch.Tensor]:
    return [p.grad.clone() for p in model.parameters()]


def _plain_and_remat_grads(model, wrapped, call):
    """Gradients of one plain step and one replayed step, from the same RNG state."""
    for p in model.parameters():
        p.grad = None
    torch.manual_seed(7)
    plain = call(model)
    plain.backward()
    expected = _grads(model)
    for p in model.parameters():
        p.grad = None
    torch.manual_seed(7)
    replayed = call(wrapped)
    replayed.backward()
    return plain, replayed, expected, _grads(model)


@pytest.mark.slow
def test_keyword_integer_inputs_train_exactly_like_the_model_below_store_all():
    torch.manual_seed(0)
    model = TokenModel().train()
    ids = torch.randint(0, 40, (2, 12))
    labels = torch.randint(0, 40, (2, 12))
    wrapped = remat.checkpoint(model, {"input_ids": ids, "labels": labels}, budget=0.6, repeats=1, warmup=0)
    assert wrapped.schedule.budget < store_all_peak(wrapped.profile)
    assert any(op == "F_n" or op == "F_ck" for op, _ in wrapped.schedule.ops)  # it does recompute
    plain, replayed, expected, got = _plain_and_remat_grads(
        model, wrapped, lambda m: m(input_ids=ids, labels=labels)["loss"]
    )  # fmt: skip
    assert torch.equal(plain, replayed)
    assert all(torch.equal(a, b) for a, b in zip(expected, got, strict=True))


def test_parameters_are_the_models_in_its_order_and_under_its_names():
    """An optimizer over the wrapped model is the one over the model: the same parameters in the
    same order (a saved optimizer state loads across; a gradient clip sums the same norms in the
    same order), under the model's names; ``with_budget`` keeps them."""
    torch.manual_seed(0)
    model = TokenModel().train()
    ids = torch.randint(0, 40, (2, 12))
    wrapped = remat.checkpoint(model, {"input_ids": ids, "labels": ids}, budget=0.6, repeats=1, warmup=0)
    for view in (wrapped, wrapped.with_budget(0.8)):
        assert [id(p) for p in view.parameters()] == [id(p) for p in model.parameters()]
        assert [n for n, _ in view.named_parameters()] == [n for n, _ in model.named_parameters()]
    plain = torch.optim.AdamW(model.parameters())
    plain.step()  # no gradients: the state dict still names every parameter by its place
    torch.optim.AdamW(wrapped.parameters()).load_state_dict(plain.state_dict())


@pytest.mark.slow
def test_user_loss_with_a_target_is_inside_the_last_stage():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
                          nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(8, 5)).train()  # fmt: skip
    x = torch.randn(2, 3, 8, 8)
    y = torch.tensor([1, 3])
    wrapped = remat.checkpoint(model, x, budget="95%", loss=nn.functional.cross_entropy, target=y, repeats=1, warmup=0)
    assert wrapped.profile.stages[-1].name == "loss" or wrapped.profile.stages[-1].output_size <= 8
    buffers_before = [b.clone() for b in model.buffers()]
    plain, replayed, expected, got = _plain_and_remat_grads(
        model, wrapped, lambda m: nn.functional.cross_entropy(m(x), y) if m is model else m(x, target=y)
    )
    assert torch.equal(plain, replayed)
    assert all(torch.equal(a, b) for a, b in zip(expected, got, strict=True))
    # BatchNorm statistics moved once per step in both (restore, run both, compare)
    assert not torch.equal(buffers_before[0], model[1].running_mean)


@pytest.mark.slow
def test_report_puts_measured_next_to_predicted():
    torch.manual_seed(0)
    model = TokenModel(depth=2).train()
    ids = torch.randint(0, 40, (2, 8))
    wrapped = remat.checkpoint(model, {"input_ids": ids, "labels": ids.clone()}, budget=1.0, repeats=1, warmup=0)
    report = wrapped.report(steps=1, warmup=0)
    assert report.predicted_peak > 0 and report.measured_peak > 0
    assert "peak" in report.table()


def test_budget_forms():
    assert resolve_budget(1000, 4000) == 1000
    assert resolve_budget("1KiB", 4000) == 1024
    assert resolve_budget("25%", 4000) == 1000
    assert resolve_budget(0.5, 4000) == 2000
    with pytest.raises(RematError, match="fraction"):
        resolve_budget(1.5, 4000)


@pytest.mark.slow
def test_an_infeasible_budget_says_the_smallest_one():
    model = TokenModel(depth=2).train()
    ids = torch.randint(0, 40, (2, 8))
    with pytest.raises(RematError, match="smallest"):
        remat.checkpoint(model, {"input_ids": ids, "labels": ids.clone()}, budget=16, repeats=1, warmup=0)


def test_not_a_module_is_refused():
    with pytest.raises(RematError, match="nn.Module"):
        remat.checkpoint(lambda x: x, torch.randn(2))


class CausalModel(nn.Module):
    """Token blocks that each read a causal mask the forward makes from the length alone: a side
    value (it depends on no trainable tensor), computed before the replay and held through it."""

    def __init__(self, depth: int = 3, width: int = 32, vocab: int = 40) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.blocks = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
        self.head = nn.Linear(width, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        length = ids.shape[1]
        causal = torch.full((length, length), float("-inf")).triu(1).expand(ids.shape[0], length, length).contiguous()
        for block in self.blocks:
            h = h + torch.softmax(h @ h.transpose(1, 2) / 8 + causal, -1) @ torch.tanh(block(h))
        return self.head(h).pow(2).mean()


def test_side_values_are_inside_the_budget_and_the_prediction():
    """The mask is made by the call, so it is the user's memory: the budget covers it (the chain
    gets what the side values leave), the plan's prediction and report() count it, and the
    allocator's peak of the whole call stays within that prediction at every budget."""
    torch.manual_seed(0)
    model = CausalModel().train()
    ids = torch.randint(0, 40, (4, 64))
    wrapped = remat.checkpoint(model, (ids,), budget=1.0, repeats=1, warmup=0)
    plan = wrapped.plan_for(ids)
    assert plan.side_bytes >= 4 * 64 * 64 * 4  # the expanded mask
    assert wrapped.store_all_peak == store_all_peak(wrapped.profile) + plan.side_bytes == wrapped.budget
    for budget in (
        wrapped.store_all_peak,
        (wrapped.least_peak + wrapped.store_all_peak) // 2,
        wrapped.least_peak,
    ):
        tight = wrapped.with_budget(budget)
        assert tight.plan_for(ids).predicted_peak <= budget
        assert tight.schedule.budget == budget - plan.side_bytes
        report = tight.report(steps=1, warmup=1)
        assert report.predicted_peak == tight.plan_for(ids).predicted_peak
        assert 0.98 * report.predicted_peak <= report.measured_peak <= report.predicted_peak + 8, budget
    with pytest.raises(RematError, match="side values"):
        wrapped.with_budget(wrapped.least_peak - 1)
    with pytest.raises(RematError, match=f"smallest budget it can meet is .* \\({wrapped.least_peak} bytes\\)"):
        wrapped.with_budget(plan.side_bytes // 2)  # less than the side values alone
