"""Library models whose blocks hand on several tensors (remat.trace.boundary), through the one-call
API: T5 (the position bias, and the encoder output in the decoder), BART (the encoder output read by
every decoder layer) and Mixtral with ``output_router_logits=True`` (one router-logit tensor more
per layer) are cut at every block, train bit for bit like the plain model (fp32 ``torch.equal`` of
the loss and every gradient) at remat's least memory, and that least memory, measured by the
allocator, is at most what Hugging Face's per-layer checkpointing (``gradient_checkpointing_enable``)
takes (issue 22, "Cuts as fine as the model's blocks")."""

from __future__ import annotations

import pytest
import torch

import remat
from remat.models.compat import import_torchvision
from remat.models.hub import build_library_model
from remat.replay.report import step_allocator_peak
from tests.step_grads import step_grads

try:  # first: transformers imports torchvision (remat/models/compat.py)
    import_torchvision()
except ModuleNotFoundError:
    pass
transformers = pytest.importorskip("transformers")

from benchmarks.real_models import hf_checkpointing  # noqa: E402  (the same baseline)

SEQ, VOCAB = 32, 500
SEQ2SEQ = {"d_model": 64, "vocab_size": VOCAB}
CASES = {
    "t5": ("transformers:t5", {**SEQ2SEQ, "d_ff": 128, "d_kv": 16, "num_layers": 3, "num_decoder_layers": 3,
                               "num_heads": 4, "decoder_start_token_id": 0, "pad_token_id": 0},
           ("encoder.block", "decoder.block")),
    "bart": ("transformers:bart", {**SEQ2SEQ, "encoder_layers": 3, "decoder_layers": 3, "encoder_attention_heads": 4,
                                   "decoder_attention_heads": 4, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128},
             ("model.encoder.layers", "model.decoder.layers")),
    "mixtral": ("transformers:mixtral", {"num_hidden_layers": 3, "hidden_size": 64, "intermediate_size": 128,
                                         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": VOCAB,
                                         "num_local_experts": 4, "num_experts_per_tok": 2,
                                         "output_router_logits": True, "router_aux_loss_coef": 0.02},
                ("model.layers",)),
}  # fmt: skip


def _inputs() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, VOCAB, (2, SEQ), generator=g)
    labels = torch.randint(0, VOCAB, (2, SEQ), generator=g)
    return {"input_ids": ids, "labels": labels, "attention_mask": torch.ones(2, SEQ, dtype=torch.long)}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_cut_at_every_block_exact_and_least_memory_at_most_per_block_checkpointing(name):
    spec, config, blocks = CASES[name]
    torch.manual_seed(0)
    model = build_library_model(spec, config).train()
    inputs = _inputs()
    wrapped = remat.checkpoint(model, inputs, budget=1.0)
    names = [s.name for s in wrapped.profile.stages]
    for parent in blocks:  # every layer its own stage (a fused stage names its parts)
        for k in range(3):
            assert any(f"{parent}.{k}" in part.split("+") for part in names), (parent, k, names)
    least = wrapped.with_budget(wrapped.least_peak)
    plain = step_grads(model, lambda: model(**inputs).loss, seed=3)
    ours = step_grads(model, lambda: least(**inputs).loss, seed=3)
    assert all(torch.equal(a, b) for a, b in zip(plain, ours, strict=True))

    cpu = torch.device("cpu")
    least_peak = step_allocator_peak(model, lambda: least(**inputs).loss, cpu)
    with hf_checkpointing(model):
        per_block = step_allocator_peak(model, lambda: model(**inputs).loss, cpu)
    assert least_peak <= per_block, (least_peak, per_block)
