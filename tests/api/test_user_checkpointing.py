"""The user's own activation checkpointing inside the model (issue 42, item 4): regions of
``torch.utils.checkpoint`` (a hand net's blocks; Hugging Face's per-layer checkpointing) are
inlined in the trace (NOTE [The user's checkpoint regions], remat/rewrite/inline.py) and said so in
one line; the model is cut at every block and trains bit for bit like the model as the user has
it, checkpointing on, with dropout and without, at its least memory, which is at most what the
user's own per-block checkpointing takes."""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint as torch_checkpoint

import remat
from remat.replay.report import step_allocator_peak
from remat.schedules import RematError
from tests.step_grads import step_grads

DEPTH = 4


class CheckpointedNet(nn.Module):
    """Residual blocks, each run under ``torch.utils.checkpoint`` (non-reentrant) by the model itself."""

    def __init__(self, p: float, width: int = 64) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(), nn.Dropout(p), nn.Linear(2 * width, width))
            for _ in range(DEPTH)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = x + torch_checkpoint(block, x, use_reentrant=False)
        return x


def _loss(out: torch.Tensor) -> torch.Tensor:
    return out.pow(2).mean()


def _every_block_a_stage(names: list[str], parent: str, depth: int) -> bool:
    parts = {part for name in names for part in name.split("+")}
    return all(f"{parent}.{k}" in parts for k in range(depth))


@pytest.mark.slow
@pytest.mark.parametrize("p", [0.0, 0.1])
def test_torch_checkpoint_regions_are_inlined_cut_per_block_and_exact(p, caplog):
    torch.manual_seed(0)
    model = CheckpointedNet(p).train()
    x = torch.randn(32, 64)
    with caplog.at_level(logging.WARNING, logger="remat"):
        wrapped = remat.checkpoint(model, (x,), budget=1.0, loss=_loss, repeats=1, warmup=0)
    assert f"activation checkpointing ({DEPTH} regions)" in caplog.text
    names = [s.name for s in wrapped.profile.stages]
    assert _every_block_a_stage(names, "blocks", DEPTH), names
    least = wrapped.with_budget(wrapped.least_peak)
    theirs = step_grads(model, lambda: _loss(model(x)), seed=3)  # the model as the user has it: checkpointing on
    ours = step_grads(model, lambda: least(x), seed=3)
    assert all(torch.equal(a, b) for a, b in zip(theirs, ours, strict=True))
    cpu = torch.device("cpu")
    least_peak = step_allocator_peak(model, lambda: least(x), cpu)
    assert least_peak <= step_allocator_peak(model, lambda: _loss(model(x)), cpu), least_peak


def _hf(name: str) -> nn.Module:
    from remat.models.hub import build_library_model, parse_config
    from tests.api.test_real_models import VOCAB, gpt2  # skips without transformers

    if name == "gpt2":
        return gpt2()  # dropout 0.1 (embeddings, attention, residual)
    config = "num_hidden_layers=2,hidden_size=32,intermediate_size=64,num_attention_heads=4,num_key_value_heads=2"
    return build_library_model("transformers:llama", {**parse_config(config), "vocab_size": VOCAB,
                                                      "attention_dropout": 0.1})  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(("name", "layers"), [("gpt2", "transformer.h"), ("llama", "model.layers")])
def test_hugging_face_checkpointing_on_is_inlined_cut_per_layer_and_exact(name, layers):
    from tests.api.test_real_models import _tokens

    torch.manual_seed(0)
    model = _hf(name).train()
    enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
    enable()
    inputs = _tokens()
    wrapped = remat.checkpoint(model, inputs, budget=1.0, repeats=1, warmup=0)
    names = [s.name for s in wrapped.profile.stages]
    assert _every_block_a_stage(names, layers, 2), names
    least = wrapped.with_budget(wrapped.least_peak)
    theirs = step_grads(model, lambda: model(**inputs).loss, seed=3)  # checkpointing on, as the user has it
    ours = step_grads(model, lambda: least(**inputs).loss, seed=3)
    assert all(torch.equal(a, b) for a, b in zip(theirs, ours, strict=True))


class UnpreservedNet(CheckpointedNet):
    """The user's regions recompute dropout without its RNG state: their backward draws new masks."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = x + torch_checkpoint(block, x, use_reentrant=False, preserve_rng_state=False)
        return x


@pytest.mark.slow
def test_regions_that_do_not_preserve_the_rng_are_refused_naming_the_users_checkpointing():
    torch.manual_seed(0)
    model = UnpreservedNet(0.1).train()
    with pytest.raises(RematError, match="model's own checkpointed regions .*preserve_rng_state=False"):
        remat.checkpoint(model, (torch.randn(32, 64),), budget=1.0, loss=_loss, repeats=1, warmup=0)
