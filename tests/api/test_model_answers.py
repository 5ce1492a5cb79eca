"""The wrapped model answers as the user's model does (NOTE [The wrapped model answers as the
model], NOTE [The wrapped model is the model's state]) and never silently changes what its step
differentiates (NOTE [One meaning per step])."""

from __future__ import annotations

import inspect

import pytest
import torch
from torch import nn

import remat
from remat.schedules import RematError
from tests.api.test_api import TokenModel


@pytest.fixture(scope="module")
def wrapped_token_model() -> tuple[nn.Module, remat.RematModel, torch.Tensor]:
    """One wrapped model for the tests below (each leaves it as it found it)."""
    torch.manual_seed(0)
    model = TokenModel(depth=2).train()
    ids = torch.randint(0, 40, (2, 12))
    return model, remat.checkpoint(model, {"input_ids": ids, "labels": ids}, repeats=1, warmup=0), ids


@pytest.mark.slow
def test_a_call_without_the_examples_labels_is_refused_before_any_trace(wrapped_token_model):
    """Labels forgotten (by name or with the ids passed positionally): the model would return its
    logits, and the step differentiate them instead of the loss; one line says what to pass."""
    model, wrapped, ids = wrapped_token_model
    for call in (lambda: wrapped(input_ids=ids), lambda: wrapped(ids)):
        with pytest.raises(RematError) as info:
            call()
        message = str(info.value)
        assert "\n" not in message and "labels=" in message, message
        assert "the loss the model's dict carries" in message and "no loss: logits" in message
    assert wrapped.retraces == 0 and all(p.grad is None for p in model.parameters())  # nothing cut, no step


def test_an_output_mapping_without_a_loss_is_refused_in_one_line():
    torch.manual_seed(0)
    model = TokenModel(depth=1).train()
    with pytest.raises(RematError) as info:
        remat.checkpoint(model, {"input_ids": torch.randint(0, 40, (2, 12))}, repeats=1, warmup=0)
    message = str(info.value)
    assert "\n" not in message and "dict with no loss (logits)" in message and "labels=" in message


@pytest.mark.slow
def test_the_answer_is_the_models_type_with_its_loss_and_the_signature_is_the_models(wrapped_token_model):
    model, wrapped, ids = wrapped_token_model
    torch.manual_seed(0)
    out = wrapped(input_ids=ids, labels=ids)
    assert type(out) is dict and list(out) == ["loss"]  # a dict as the model's; nothing else kept alive
    torch.manual_seed(0)
    want = model(input_ids=ids, labels=ids)["loss"]
    assert torch.equal(out["loss"], want)
    assert inspect.signature(wrapped.forward) == inspect.signature(model.forward)  # the Trainer's columns


@pytest.mark.slow
def test_state_dict_is_the_models_and_loads_back(wrapped_token_model):
    """Each tensor once, under the model's names (the chain's and the replay's copies named them
    twice over, which safetensors refused); a state loads into the model the chain trains."""
    model, wrapped, ids = wrapped_token_model
    state = wrapped.state_dict()
    assert list(state) == list(model.state_dict())
    saved = {k: v.clone() for k, v in state.items()}
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    wrapped.load_state_dict(saved)
    assert all(torch.equal(v, saved[k]) for k, v in model.state_dict().items())
    with pytest.raises(RematError, match="assign=True"):
        wrapped.load_state_dict(saved, assign=True)
    assert wrapped.__class__ is remat.RematModel  # not a Hugging Face model: no other class claimed


@pytest.mark.slow
def test_the_trainers_weight_decay_groups_are_the_models(wrapped_token_model):
    """The Trainer names the parameters to decay by walking children (its get_parameter_names): the
    wrapper's children are the model's first, so the groups hold the same parameters in the same order."""
    transformers = pytest.importorskip("transformers")
    from remat.models.compat import import_torchvision

    import_torchvision()  # first: transformers.Trainer imports torchvision (remat/models/compat.py)
    model, wrapped, _ = wrapped_token_model
    groups = []
    for net in (model, wrapped):
        decay = set(transformers.Trainer.get_decay_parameter_names(None, net))
        groups.append([[id(p) for n, p in net.named_parameters() if (n in decay) == d] for d in (True, False)])
    assert groups[0] == groups[1] and groups[0][0] and groups[0][1]


@pytest.mark.slow
def test_eval_mode_runs_the_model_itself(wrapped_token_model):
    """Evaluation trains nothing: the call is the model's own, its whole output (the Trainer's
    evaluate reads the logits); train mode goes back to the replay."""
    model, wrapped, ids = wrapped_token_model
    wrapped.eval()
    assert not model.training
    out = wrapped(input_ids=ids, labels=ids)
    assert set(out) == {"logits", "loss"}
    wrapped.train()
    assert model.training and list(wrapped(input_ids=ids, labels=ids)) == ["loss"]
