"""``transformers.Trainer`` with a ``remat.checkpoint`` model (docs/models.md, "Hugging Face's
Trainer"): batches padded to their own longest sequence, labels -100 on padding, gradient
accumulation; the trained weights equal a plain Trainer's bit for bit (fp32, dropout on)."""

from __future__ import annotations

import random

import pytest
import torch

import remat
from tests.api.test_real_models import VOCAB, gpt2

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # transformers.Trainer needs it


class LossTrainer(transformers.Trainer):
    """The documented three lines: the wrapped model returns the loss itself."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        out = model(**inputs)
        loss = out if isinstance(out, torch.Tensor) else out.loss
        return (loss, {"loss": loss}) if return_outputs else loss


def _collate(rows: list[list[int]]) -> dict[str, torch.Tensor]:
    """DataCollatorWithPadding's result, by hand: right padding to the longest, labels -100 there."""
    longest = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), longest, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


def _train(model: torch.nn.Module, trained: torch.nn.Module, data: list[list[int]], tmp_path, name: str) -> None:
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / name), per_device_train_batch_size=3, gradient_accumulation_steps=2,
        max_steps=3, learning_rate=1e-2, report_to=[], save_strategy="no", use_cpu=True, seed=0,
        dataloader_num_workers=0, logging_strategy="no", disable_tqdm=True,
    )  # fmt: skip
    trainer = LossTrainer(model=model, args=args, train_dataset=data, data_collator=_collate)
    if isinstance(model, remat.RematModel):  # num_items_in_batch would be a new constant every batch
        assert trainer.model_accepts_loss_kwargs is False
    trainer.model_accepts_loss_kwargs = False  # the plain model's loss scaled as the wrapped one's
    trainer.train()


@pytest.mark.slow
def test_trainer_with_a_wrapped_model_trains_like_the_plain_trainer(tmp_path):
    rng = random.Random(0)
    data = [[rng.randrange(1, VOCAB) for _ in range(rng.randint(3, 10))] for _ in range(18)]
    torch.manual_seed(0)
    model = gpt2().train()
    reference = gpt2().train()
    reference.load_state_dict(model.state_dict())
    initial = [p.detach().clone() for p in model.parameters()]
    wrapped = remat.checkpoint(model, _collate(data[:3]), budget="80%", repeats=1, warmup=0, over_budget="least")
    _train(wrapped, model, data, tmp_path, "remat")
    _train(reference, reference, data, tmp_path, "plain")
    assert wrapped.retraces >= 1  # the loader's batches came in other lengths than the example
    assert not any(torch.equal(a, b) for a, b in zip(model.parameters(), initial, strict=True)), "nothing trained"
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), reference.parameters(), strict=True))
