"""A stock ``transformers.Trainer`` (no subclass) with a ``remat.checkpoint`` model (docs/models.md,
"Hugging Face's Trainer"): batches padded to their own longest sequence, labels -100 on padding,
gradient accumulation, clipping, periodic checkpoints and a resume; the losses, the trained
weights and the saved files equal a plain Trainer's bit for bit (fp32, dropout on), and the files
load into the plain model. The same for a PEFT LoRA model, and accelerate's own loop."""

from __future__ import annotations

import random

import pytest
import torch

import remat
from remat.models.compat import import_torchvision
from tests.api.test_real_models import VOCAB, gpt2, llama

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # transformers.Trainer needs it
safetensors = pytest.importorskip("safetensors.torch")

_rng = random.Random(0)
DATA = [[_rng.randrange(1, VOCAB) for _ in range(_rng.randint(3, 10))] for _ in range(18)]


def _collate(rows: list[list[int]]) -> dict[str, torch.Tensor]:
    """DataCollatorWithPadding's result, by hand: right padding to the longest, labels -100 there."""
    longest = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), longest, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


def _rows(features: list[dict]) -> dict[str, torch.Tensor]:
    return _collate([f["input_ids"] for f in features])


def _trainer(model: torch.nn.Module, out, data: list[list[int]] = DATA, **options) -> transformers.Trainer:
    """The stock Trainer with its defaults (remove_unused_columns, num_items_in_batch), a dataset of
    ``input_ids`` rows (and a column no model takes, which must go)."""
    settings = dict(per_device_train_batch_size=3, gradient_accumulation_steps=2, max_steps=3, learning_rate=1e-2,
                    max_grad_norm=1.0, save_steps=2, report_to=[], use_cpu=True, seed=0, dataloader_num_workers=0,
                    logging_steps=1, disable_tqdm=True)  # fmt: skip
    args = transformers.TrainingArguments(output_dir=str(out), **{**settings, **options})
    dataset = [{"input_ids": row, "source": "web"} for row in data]
    return transformers.Trainer(model=model, args=args, train_dataset=dataset, data_collator=_rows)


def _losses(trainer: transformers.Trainer) -> list[float]:
    return [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]


def _same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))


def _file(path) -> dict[str, torch.Tensor]:
    return safetensors.load_file(str(path))


def _train_save_resume(model: torch.nn.Module, reference: torch.nn.Module, tmp_path, weights: str) -> list:
    """Trains ``model`` wrapped and ``reference`` plainly, each under a stock Trainer; resumes the
    wrapped run from its step-2 checkpoint; checks losses, weights and the saved ``weights`` files.
    Returns the trained weights."""
    reference.load_state_dict(model.state_dict())
    initial = [p.detach().clone() for p in model.parameters()]
    wrapped = remat.checkpoint(model, _collate(DATA[:3]), budget="80%", repeats=1, warmup=0, over_budget="least")
    ours = _trainer(wrapped, tmp_path / "remat")
    ours.train()
    plain = _trainer(reference, tmp_path / "plain")
    plain.train()
    assert ours.model_accepts_loss_kwargs and plain.model_accepts_loss_kwargs  # num_items_in_batch, as plainly
    assert wrapped.retraces >= 1  # the loader's batches came in other lengths than the example
    assert not all(torch.equal(a, b) for a, b in zip(model.parameters(), initial, strict=True)), "nothing trained"
    assert len(_losses(ours)) == 3 and _losses(ours) == _losses(plain)
    assert _same(model, reference)
    for step in (2, 3):  # the periodic checkpoints hold the plain Trainer's files, bit for bit
        mine, theirs = (
            _file(tmp_path / f"remat/checkpoint-{step}/{weights}"),
            _file(tmp_path / f"plain/checkpoint-{step}/{weights}"),
        )
        assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)
    trained = [p.detach().clone() for p in model.parameters()]
    resumed = _trainer(wrapped, tmp_path / "resumed")  # from step 2: weights, optimizer, scheduler, RNG
    resumed.train(resume_from_checkpoint=str(tmp_path / "remat/checkpoint-2"))
    assert _losses(resumed) == _losses(plain)  # its log carries on from the checkpoint's
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), trained, strict=True))
    resumed.save_model(str(tmp_path / "final"))
    return trained


@pytest.mark.slow
def test_stock_trainer_trains_checkpoints_and_resumes_like_the_plain_trainer(tmp_path):
    """GPT-2 ties its embedding to its head: the wrapped model's own state named the tensors twice
    over and safetensors refused it; the files now load into the plain model."""
    torch.manual_seed(0)
    model, reference = gpt2().train(), gpt2().train()
    trained = _train_save_resume(model, reference, tmp_path, "model.safetensors")
    loaded = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "final"))
    assert all(torch.equal(a, b) for a, b in zip(loaded.parameters(), trained, strict=True))
    fresh = gpt2()
    fresh.load_state_dict(_file(tmp_path / "final/model.safetensors"), strict=False)  # the tied head: one tensor
    assert all(torch.equal(a, b) for a, b in zip(fresh.parameters(), trained, strict=True))


def _lora(peft) -> torch.nn.Module:
    torch.manual_seed(0)
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.1)
    return peft.get_peft_model(llama(), config).train()


@pytest.mark.slow
def test_stock_trainer_trains_a_peft_lora_model_like_the_plain_trainer(tmp_path):
    import_torchvision()  # before peft, which imports torchvision
    peft = pytest.importorskip("peft")
    model, reference = _lora(peft), _lora(peft)
    trained = _train_save_resume(model, reference, tmp_path, "adapter_model.safetensors")
    torch.manual_seed(0)  # the same base model as _lora's
    loaded = peft.PeftModel.from_pretrained(llama(), str(tmp_path / "final"))
    assert all(torch.equal(a, b) for a, b in zip(loaded.parameters(), trained, strict=True))


@pytest.mark.slow
def test_accelerate_loop_bf16_and_torch_compile(tmp_path):
    """accelerate's own loop trains the wrapped model as the plain one; the Trainer's bf16=True runs
    (autocast around the wrapped call); torch.compile leaves the wrapped call as it is."""
    from accelerate import Accelerator

    torch.manual_seed(0)
    model, reference = gpt2().train(), gpt2().train()
    reference.load_state_dict(model.state_dict())
    batch = _collate(DATA[:3])
    wrapped = remat.checkpoint(model, batch, budget="80%", repeats=1, warmup=0)
    accelerator = Accelerator(cpu=True)
    ours = accelerator.prepare(wrapped, torch.optim.AdamW(wrapped.parameters(), lr=1e-2))
    plain = accelerator.prepare(reference, torch.optim.AdamW(reference.parameters(), lr=1e-2))
    for step in range(2):
        losses = []
        for net, optimizer in (ours, plain):
            torch.manual_seed(step)
            out = net(**batch)
            assert type(out) is transformers.modeling_outputs.CausalLMOutputWithCrossAttentions
            accelerator.backward(out.loss)
            accelerator.clip_grad_norm_(net.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()
            losses.append(out.loss.detach())
        assert torch.equal(*losses) and _same(model, reference), step
    torch.manual_seed(0)
    compiled = torch.compile(wrapped)(**batch).loss
    torch.manual_seed(0)
    assert torch.equal(compiled, wrapped(**batch).loss)
    trainer = _trainer(wrapped, tmp_path, DATA[:3], bf16=True, max_steps=1, gradient_accumulation_steps=1)
    trainer.train()
    assert len(_losses(trainer)) == 1 and torch.isfinite(torch.tensor(_losses(trainer)))
