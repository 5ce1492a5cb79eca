"""Models TorchDynamo would trace on another path than eager's (NOTE [The eager path, traced]) and
losses it cannot trace (NOTE [A loss outside the trace]), trained through ``remat.checkpoint``."""

from __future__ import annotations

import copy

import pytest
import torch

import remat
from remat.models.compat import import_torchvision


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
    got = _step_grads(model, lambda: wrapped(input_ids=ids, labels=ids))
    expected = _step_grads(plain, lambda: plain(input_ids=ids, labels=ids).loss)
    assert torch.equal(got[0], expected[0])
    assert all(torch.equal(a, b) for a, b in zip(got[1], expected[1], strict=True))
