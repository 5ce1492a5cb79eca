"""Store-all is plain PyTorch, and predictions are the allocator's, on library models (issue 10).

On small configs of GPT-2, a torchvision ResNet (resnet50's bottleneck layout) and BERT, with the
loss inside the step: store-all's allocator-measured peak within 1% of the plain model's training
step (same meter, same accounting: remat.replay.report.plain_step_peak), and the predicted peak
within 2% of the allocator's for store-all and for an optimal schedule at the DP's least memory.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import remat
from remat.models.compat import import_torchvision
from remat.models.hub import build_library_model
from remat.replay.report import plain_step_peak
from remat.trace.chain import Chain
from remat.trace.fuse import unsaved_handoffs

try:  # first: transformers imports torchvision (remat/models/compat.py)
    torchvision = import_torchvision()
except ModuleNotFoundError:
    pytest.skip("torchvision is not installed (.ci/run installs it)", allow_module_level=True)
transformers = pytest.importorskip("transformers")

VOCAB, SEQ = 1000, 32  # logits (2 x 32 x 1000 fp32, 256 kB) are the largest tensor of the step
IMAGE = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
TARGET = torch.tensor([1, 7])


def _tokens(mask: bool) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, VOCAB, (2, SEQ), generator=generator)
    inputs = {"input_ids": ids, "labels": torch.randint(0, VOCAB, (2, SEQ), generator=generator)}
    if mask:
        inputs["attention_mask"] = torch.ones(2, SEQ, dtype=torch.long)
    return inputs


def gpt2() -> nn.Module:
    return build_library_model("transformers:gpt2", {"n_layer": 2, "n_embd": 32, "n_head": 2, "vocab_size": VOCAB})


def bert() -> nn.Module:
    config = {"num_hidden_layers": 2, "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 2}
    return build_library_model("transformers:bert", {**config, "vocab_size": VOCAB, "max_position_embeddings": 64})


def tv_resnet() -> nn.Module:
    from torchvision.models.resnet import Bottleneck, ResNet

    return ResNet(Bottleneck, [1, 1, 1, 1], num_classes=10)


# name: (factory, example inputs, the stage the logits must be fused into, if any)
CASES = {
    "gpt2": (gpt2, _tokens(False), "lm_head+loss"),
    "bert": (bert, _tokens(True), "cls.predictions.decoder+loss"),
    "torchvision-resnet": (tv_resnet, IMAGE, None),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_store_all_measures_like_the_plain_step_and_predictions_like_the_allocator(case):
    factory, inputs, fused = CASES[case]
    torch.manual_seed(0)
    model = factory().train()
    if isinstance(inputs, dict):
        plain = plain_step_peak(model, lambda: model(**inputs).loss, inputs["input_ids"])
        wrapped = remat.checkpoint(model, inputs, budget=1.0, repeats=1, warmup=1)
    else:
        plain = plain_step_peak(model, lambda: nn.functional.cross_entropy(model(inputs), TARGET), inputs)
        loss = nn.functional.cross_entropy
        wrapped = remat.checkpoint(model, (inputs,), budget=1.0, loss=loss, target=TARGET, repeats=1, warmup=1)
    # the language models' logits: lm_head saves its input and the loss's log_softmax its output;
    # as a stage boundary they would outlive the loss's forward by the whole step (fuse.py)
    assert fused is None or wrapped.profile.stages[-1].name == fused, [s.name for s in wrapped.profile.stages]
    store_all = wrapped.report(steps=2, warmup=1)
    assert abs(store_all.measured_peak - plain) <= 0.01 * plain, (store_all.measured_peak, plain)
    assert abs(store_all.peak_error) <= 0.02, store_all.table()
    least = wrapped.with_budget(wrapped.least_peak)
    assert any(op in ("F_ck", "F_n") for op, _ in least.schedule.ops)  # below store-all: it recomputes
    report = least.report(steps=2, warmup=1)
    assert report.predicted_peak < store_all.predicted_peak
    assert abs(report.peak_error) <= 0.02, report.table()


class _AddOne(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1  # saves nothing for its backward


def test_unsaved_handoffs_are_the_boundaries_neither_neighbour_saves():
    torch.manual_seed(0)
    # Linear saves its input; LogSoftmax and ReLU their output; x + 1 nothing
    stages = [nn.Linear(8, 16), nn.LogSoftmax(-1), _AddOne(), nn.ReLU(), nn.Linear(16, 4), _AddOne()]
    chain = Chain([(str(i), s) for i, s in enumerate(stages)])
    # 0: Linear's output, saved by neither Linear nor LogSoftmax; 1: LogSoftmax's, saved by itself;
    # 2: x + 1's, saved by neither (ReLU keeps its output); 3: ReLU's (both); 4: Linear's, then x + 1
    assert unsaved_handoffs(chain, torch.randn(3, 8)) == [0, 2, 4]
