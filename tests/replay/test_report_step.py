"""report() measures the user's step: their loss, the model's own loss, or the documented default."""

from __future__ import annotations

import torch
from torch import nn

import remat
from remat.replay.report import STEPS, plain_step_peak
from tests.api.test_api import TokenModel


class TiedAutoencoder(nn.Module):
    """Encoder and decoder share weights (the decoder uses their transposes)."""

    def __init__(self, width: int = 64, code: int = 32) -> None:
        super().__init__()
        self.enc = nn.ModuleList([nn.Linear(width, width) for _ in range(2)])
        self.code = nn.Linear(width, code)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.enc:
            x = torch.tanh(layer(x))
        y = nn.functional.linear(torch.tanh(self.code(x)), self.code.weight.t())
        for layer in reversed(self.enc):
            y = torch.tanh(nn.functional.linear(y, layer.weight.t()))
        return y


def test_a_loss_that_holds_its_elementwise_buffer_is_measured_as_the_user_steps_it():
    # mse_loss reduces in place: its scalar is a view of a (32, 64) buffer (8 KiB), which the
    # caller's `loss` kept alive through the backward (the report measured 8 KiB less than the
    # user's step, and the user's step was 6.9% above the prediction)
    torch.manual_seed(0)
    model = TiedAutoencoder().train()
    x = torch.randn(32, 64)
    assert nn.functional.mse_loss(x, x * 2).untyped_storage().nbytes() == x.numel() * 4
    wrapped = remat.checkpoint(model, x, loss=nn.functional.mse_loss, target=x, repeats=1, warmup=0)
    report = wrapped.report(steps=1)
    user = plain_step_peak(model, lambda: wrapped(x, target=x), x)
    assert report.step == "loss" and "step: your loss" in report.table()
    assert report.to_dict()["step"]["kind"] == "loss"
    assert report.measured_peak == user
    assert user <= report.predicted_peak * 1.02


def test_a_model_loss_from_labels_is_the_step_measured():
    torch.manual_seed(0)
    model = TokenModel(depth=2).train()
    ids = torch.randint(0, 40, (2, 8))
    wrapped = remat.checkpoint(model, {"input_ids": ids, "labels": ids.clone()}, budget=0.7, repeats=1, warmup=0)
    report = wrapped.report(steps=1)
    user = plain_step_peak(model, lambda: wrapped(input_ids=ids, labels=ids.clone())["loss"], torch.empty(0))
    assert report.step == "model loss" and STEPS["model loss"] in report.table()
    # the same step, the same meter (the labels' copy is made outside the meter in both)
    assert abs(report.measured_peak - user) <= 64 + wrapped.profile.input_size
    assert report.measured_peak <= report.predicted_peak * 1.02


def test_without_a_loss_the_report_says_it_measured_the_default_step():
    torch.manual_seed(0)
    model = TiedAutoencoder().train()
    x = torch.randn(16, 64)
    wrapped = remat.checkpoint(model, x, repeats=1, warmup=0)
    report = wrapped.report(steps=1)
    assert report.step == "output"
    assert "pass loss=" in report.table() and "pass loss=" in report.to_dict()["step"]["differentiates"]
