"""Stages run in the grad mode the replay sets (NOTE [Grad mode inside a stage]) and any number of
times (remat.trace.repeatable; the proof's reruns): the Llama rotary case, T5's in-place
``relative_buckets``, EfficientNet's in-place dropout on a view, and the proof's refusals."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

import remat
from remat.schedules import RematError
from remat.trace.proof import check_forward_kinds


class NoGradScale(nn.Module):
    """A block with a ``torch.no_grad()`` region on its own activations (as HF's rotary embedding
    has one on its position tables): traced, it becomes ``_set_grad_enabled(False) ... (True)``."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.lin = nn.Linear(width, width)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.lin(h))
        with torch.no_grad():
            scale = h.abs().mean() + 1.0
        return h / scale + h


def _toggling_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*[NoGradScale(64) for _ in range(6)])


def _grads(model: nn.Module, step) -> list[torch.Tensor]:
    for p in model.parameters():
        p.grad = None
    torch.manual_seed(5)
    step().backward()
    return [p.grad.clone() for p in model.parameters()]


def test_a_no_grad_region_inside_a_stage_does_not_turn_grad_on_in_a_no_grad_forward():
    model, x = _toggling_model(), torch.randn(16, 64)
    wrapped = remat.checkpoint(model, (x,), budget=1.0, loss=lambda out: out.square().mean())
    a = wrapped.chain.bind(x)
    with torch.no_grad():  # how F_ck / F_n run a stage
        for stage in wrapped.chain.stages:
            a = stage(a)
            assert a.grad_fn is None
    with torch.enable_grad():  # a recording forward still records
        assert wrapped.chain.stages[0](x.detach().requires_grad_()).grad_fn is not None


@pytest.mark.slow
def test_at_the_least_budget_the_allocator_stays_within_the_prediction():
    model, x = _toggling_model(), torch.randn(16, 64)
    loss = lambda out: out.square().mean()  # noqa: E731
    least = remat.checkpoint(model, (x,), budget=1.0, loss=loss)
    least = least.with_budget(least.least_peak)
    assert any(op in ("F_ck", "F_n") for op, _ in least.schedule.ops)  # the toggling stages are recomputed
    report = least.report(steps=2, warmup=1)
    assert report.measured_peak <= report.predicted_peak * 1.02, (report.measured_peak, report.predicted_peak)
    assert all(map(torch.equal, _grads(model, lambda: least(x)), _grads(model, lambda: loss(model(x)))))


def _library(spec: str, config: dict) -> nn.Module:
    pytest.importorskip("transformers")
    from remat.models.compat import import_torchvision

    import_torchvision()
    from remat.models.hub import build_library_model

    torch.manual_seed(0)
    return build_library_model(spec, config).train()


@pytest.mark.slow
def test_llama_rotary_at_the_least_budget_within_the_prediction():
    config = {"num_hidden_layers": 3, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
              "num_key_value_heads": 2, "vocab_size": 256}  # fmt: skip
    model = _library("transformers:llama", config)
    ids = torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(0))
    wrapped = remat.checkpoint(model, {"input_ids": ids, "labels": ids}, budget=1.0)
    least = wrapped.with_budget(wrapped.least_peak)
    assert any(op in ("F_ck", "F_n") for op, _ in least.schedule.ops)
    a = wrapped.chain.bind(input_ids=ids, labels=ids)
    with torch.no_grad():  # as F_ck / F_n run the stages: no graph, grad still off after each
        for stage in wrapped.chain.stages:
            a = stage(a)
            assert a.grad_fn is None and not torch.is_grad_enabled()
    report = least.report(steps=2, warmup=1)
    # before NOTE [Grad mode inside a stage]: +68% over the prediction on this model
    # KNOWN: the measured peak can exceed the prediction by one fp32 scalar (4 bytes: 367,116 against
    # 367,112 on this model; in a script of its own before and after every byte was counted once,
    # in this test only after); not yet traced to the value it is. Anything larger fails here.
    assert report.measured_peak <= report.predicted_peak + 4, (report.measured_peak, report.predicted_peak)
    assert abs(report.peak_error) <= 0.02, report.peak_error


@pytest.mark.slow
def test_t5_relative_buckets_changed_in_place_run_any_number_of_times():
    config = {"d_model": 32, "d_ff": 64, "d_kv": 8, "num_layers": 2, "num_decoder_layers": 2, "num_heads": 2,
              "vocab_size": 100, "decoder_start_token_id": 0, "pad_token_id": 0}  # fmt: skip
    model = _library("transformers:t5", config)
    ids = torch.randint(1, 100, (2, 16), generator=torch.Generator().manual_seed(0))
    wrapped = remat.checkpoint(model, {"input_ids": ids, "labels": ids}, budget="50%")
    ours = [_grads(model, lambda: wrapped(input_ids=ids, labels=ids).loss) for _ in range(2)]  # twice: repeatable
    plain = _grads(model, lambda: model(input_ids=ids, labels=ids).loss)
    assert all(map(torch.equal, ours[0], plain)) and all(map(torch.equal, ours[1], plain))


@pytest.mark.slow
def test_efficientnet_inplace_dropout_on_a_view_of_the_pooled_features():
    model = _library("torchvision:efficientnet_b0", {"num_classes": 10})
    x, y = torch.randn(2, 3, 32, 32), torch.tensor([1, 7])
    loss = nn.functional.cross_entropy
    wrapped = remat.checkpoint(model, (x,), budget="50%", loss=loss, target=y)
    buffers = [b.clone() for b in model.buffers()]

    def step(run):
        with torch.no_grad():
            for b, saved in zip(model.buffers(), buffers, strict=True):
                b.copy_(saved)
        return _grads(model, run)

    assert all(map(torch.equal, step(lambda: wrapped(x, target=y)), step(lambda: loss(model(x), y))))


class _Chain(SimpleNamespace):
    def bind(self, *args, target=None, **kwargs):
        return self.a


def _fake_chain(stage: nn.Module, side: torch.Tensor | None = None) -> _Chain:
    values = {"a": torch.ones(3)} if side is None else {"mask": side}
    return _Chain(a=torch.ones(3), context=SimpleNamespace(values=values), names=["block"], stages=[stage])


class _ChangesSide(nn.Module):
    def __init__(self, side: torch.Tensor) -> None:
        super().__init__()
        self.side = side

    def forward(self, x):
        self.side.add_(1)
        return x + self.side


class _RecordsAnyway(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(3))

    def forward(self, x):
        with torch.enable_grad():
            return x * self.w


def test_the_proof_refuses_a_stage_that_changes_a_side_value_in_one_line():
    side = torch.zeros(3)
    with pytest.raises(RematError, match=r"stage 'block' changes side value 'mask' in place .*cannot run twice"):
        check_forward_kinds(_fake_chain(_ChangesSide(side), side), (), {}, None)


def test_the_proof_refuses_a_stage_that_records_under_no_grad_in_one_line():
    with pytest.raises(RematError, match=r"stage 'block' records a graph under no_grad \(MulBackward0\)"):
        check_forward_kinds(_fake_chain(_RecordsAnyway()), (), {}, None)
