"""Models TorchDynamo would trace on another path than eager's (NOTE [The eager path, traced]) and
losses it cannot trace (NOTE [A loss outside the trace]), trained through ``remat.checkpoint``."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import remat
from remat.models.compat import import_torchvision
from remat.schedules import RematError
from remat.trace.proof import cut_model


def _step_grads(model, run):
    for p in model.parameters():
        p.grad = None
    torch.manual_seed(7)
    out = run()
    out.backward()
    return out.detach(), [p.grad.clone() for p in model.parameters()]


@pytest.mark.slow
def test_hf_mamba_default_config_trains_exactly_on_its_eager_scan():
    """Its default config asks ``is_torchdynamo_compiling()`` and scans with ``associative_scan``
    when compiled, which fails run eagerly inside a stage; the trace takes eager's loop."""
    import_torchvision()
    from transformers import MambaConfig, MambaForCausalLM

    torch.manual_seed(0)
    config = MambaConfig(vocab_size=64, hidden_size=32, state_size=4, num_hidden_layers=1, expand=2, conv_kernel=4)
    assert config.use_associative_scan  # the default this test is about
    model = MambaForCausalLM(config).train()
    plain = copy.deepcopy(model)
    ids = torch.randint(0, 64, (2, 4))
    wrapped = remat.checkpoint(model, {"input_ids": ids, "labels": ids}, budget=1.0, repeats=1, warmup=0)
    assert len(wrapped.profile.stages) > 1
    got = _step_grads(model, lambda: wrapped(input_ids=ids, labels=ids).loss)
    expected = _step_grads(plain, lambda: plain(input_ids=ids, labels=ids).loss)
    assert torch.equal(got[0], expected[0])
    assert all(torch.equal(a, b) for a, b in zip(got[1], expected[1], strict=True))


class Speech(nn.Module):
    """A conv front end, a stack of linear layers and a CTC head: log-probabilities (T, N, C) out."""

    def __init__(self, classes: int = 10, width: int = 32, depth: int = 4) -> None:
        super().__init__()
        self.front = nn.Sequential(nn.Conv1d(8, width, 5, stride=2, padding=2), nn.GELU())
        self.layers = nn.Sequential(*(nn.Sequential(nn.Linear(width, width), nn.Tanh()) for _ in range(depth)))
        self.head = nn.Linear(width, classes)

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        h = self.layers(self.front(feats).transpose(1, 2))
        return self.head(h).log_softmax(-1).transpose(0, 1)


def ctc(log_probs: torch.Tensor, target: tuple) -> torch.Tensor:
    labels, lengths = target
    frames = torch.full((log_probs.shape[1],), log_probs.shape[0], dtype=torch.long)
    return F.ctc_loss(log_probs, labels, frames, lengths)


def ignoring(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """A loss with a Python branch on tensor values (TorchDynamo breaks the graph there)."""
    if (labels == -100).all():
        return logits.sum() * 0.0
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)


def _speech_example():
    torch.manual_seed(0)
    feats = torch.randn(4, 8, 64)
    return feats, (torch.randint(1, 10, (4, 12)), torch.full((4,), 12, dtype=torch.long))


@pytest.mark.slow
def test_ctc_loss_runs_eagerly_after_the_chain_exact_and_predicted():
    feats, target = _speech_example()
    model = Speech().train()
    plain = copy.deepcopy(model)
    wrapped = remat.checkpoint(model, feats, budget=0.7, loss=ctc, target=target, repeats=1, warmup=0)
    assert wrapped.profile.stages[-1].name == "eager_loss"
    assert any(op in ("F_n", "F_ck") for op, _ in wrapped.schedule.ops)  # below store-all: it recomputes
    got = _step_grads(model, lambda: wrapped(feats, target=target))
    expected = _step_grads(plain, lambda: ctc(plain(feats), target))
    assert torch.equal(got[0], expected[0])
    assert all(torch.equal(a, b) for a, b in zip(got[1], expected[1], strict=True))
    report = wrapped.report(steps=1, warmup=0)
    assert abs(report.measured_peak - report.predicted_peak) <= 0.02 * report.predicted_peak


class Tagger(nn.Module):
    """Token ids in, ``{"logits": ...}`` out (the Hugging Face shape, without labels)."""

    def __init__(self) -> None:
        super().__init__()
        layers = [nn.Sequential(nn.Linear(16, 16), nn.Tanh()) for _ in range(3)]
        self.body = nn.Sequential(nn.Embedding(20, 16), *layers, nn.Linear(16, 20))

    def forward(self, ids: torch.Tensor) -> dict:
        return {"logits": self.body(ids)}


def ignoring_dict(out: dict, labels: torch.Tensor) -> torch.Tensor:
    return ignoring(out["logits"], labels)


@pytest.mark.slow
def test_a_loss_branching_on_tensor_values_runs_eagerly_on_either_branch():
    torch.manual_seed(0)
    model = Tagger().train()
    plain = copy.deepcopy(model)
    ids = torch.randint(0, 20, (2, 6))
    wrapped = remat.checkpoint(model, ids, budget=1.0, loss=ignoring_dict, target=ids.clone(), repeats=1, warmup=0)
    assert wrapped.profile.stages[-1].name == "eager_loss"
    for labels in (ids.clone(), torch.full_like(ids, -100)):  # the example's branch, then the other one
        got = _step_grads(model, lambda labels=labels: wrapped(ids, target=labels))
        expected = _step_grads(plain, lambda labels=labels: ignoring_dict(plain(ids), labels))
        assert torch.equal(got[0], expected[0])
        assert all(torch.equal(a, b) for a, b in zip(got[1], expected[1], strict=True))


class OwnCTC(Speech):
    """The loss inside the model's own forward: the graph break is in the model."""

    def forward(self, feats: torch.Tensor, labels: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        return ctc(super().forward(feats), (labels, lengths))


@pytest.mark.slow
def test_refusals_advise_what_the_entry_point_reads():
    feats, (labels, lengths) = _speech_example()
    with pytest.raises(RematError) as refused:
        remat.checkpoint(OwnCTC().train(), (feats, labels, lengths), budget=1.0)
    message = str(refused.value)
    assert "remat_stages" not in message and "Dynamic shape operator" in message
    assert "runs eagerly after the chain when forward returns the tensor it reads" in message  # what works
    with pytest.raises(RematError) as refused:  # loss= given, the break in the model itself: named as such
        remat.checkpoint(OwnCTC().train(), (feats, labels, lengths), loss=lambda out: out * 1.0)
    assert "Dynamic shape operator" in str(refused.value) and "remat_stages" not in str(refused.value)
    with pytest.raises(RematError) as refused:  # the CLI's name-based chains do read remat_stages()
        cut_model(OwnCTC().train(), (feats, labels, lengths), {})
    assert "remat_stages()" in str(refused.value)


def test_a_loss_outside_the_trace_needs_one_output_tensor():
    feats, target = _speech_example()

    class Pair(Speech):
        def forward(self, feats):
            out = super().forward(feats)
            return out, out.detach()

    with pytest.raises(RematError, match="holds no single tensor"):
        remat.checkpoint(Pair().train(), feats, loss=lambda o, t: ctc(o[0], t), target=target)
