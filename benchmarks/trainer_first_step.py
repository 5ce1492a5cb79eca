"""Time to the first optimizer step under a stock ``transformers.Trainer``: a wrapped model
(``remat.checkpoint`` then ``Trainer(model=wrapped)``) against the plain model with
``gradient_checkpointing=True`` (docs/models.md, "Hugging Face's Trainer").

The model is the Llama of docs/models.md's table (8 layers, hidden 128, GQA 4/2 heads, vocabulary
32000), batches of 2 x 128 tokens (no padding, so one input shape), random weights, CPU. Each
side runs in a subprocess of its own (imports, dynamo's caches and the allocator start cold for
both). The clock starts before ``remat.checkpoint`` (remat) or before the Trainer is built
(plain) and stops at the end of the first optimizer step (a TrainerCallback's ``on_step_end``).

For remat the time is split into its phases, each summed over every cut made before the first
step (the example's, and the Trainer's first batch, which adds ``num_items_in_batch``: another
input structure, so another cut): ``trace`` (TorchDynamo's trace and the cut, one eager no-grad
forward first), ``profile`` (each stage's memory and time), ``solve`` (the schedule) and
``proof`` (the cut and the replay against the model, one step each), measured by wrapping
those functions; ``other`` is the rest (the Trainer's setup, the step itself).

Usage: ``python -m benchmarks.trainer_first_step [--steps 1]``; prints a table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import defaultdict

from benchmarks import common

LLAMA = {"num_hidden_layers": 8, "hidden_size": 128, "intermediate_size": 256, "num_attention_heads": 4,
         "num_key_value_heads": 2, "vocab_size": 32000}  # fmt: skip
QUICK_LLAMA = {**LLAMA, "num_hidden_layers": 2, "vocab_size": 1000}  # --quick
BATCH, LENGTH = 2, 128


def _timed(module, name: str, totals: dict) -> None:
    """``module.name`` replaced by the same function that adds its wall seconds to ``totals[name]``."""
    original = getattr(module, name)

    def run(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            totals[name] += time.perf_counter() - start

    setattr(module, name, run)


def _side(side: str, steps: int, quick: bool = False) -> dict:
    start = time.perf_counter()
    import torch

    import remat
    from remat.models.compat import import_torchvision

    import_torchvision()  # before transformers: CPU torch beside a CUDA torchvision wheel
    import transformers

    torch.manual_seed(0)
    config = QUICK_LLAMA if quick else LLAMA
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**config, use_cache=False)).train()
    rows = [{"input_ids": torch.randint(0, config["vocab_size"], (LENGTH,)).tolist()} for _ in range(BATCH * steps)]

    def collate(features: list[dict]) -> dict:
        ids = torch.tensor([f["input_ids"] for f in features])
        return {"input_ids": ids, "labels": ids}

    first: list[float] = []

    class FirstStep(transformers.TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            first.append(time.perf_counter())

    totals: dict = defaultdict(float)
    setup = time.perf_counter()
    if side == "remat":
        import remat.api.entry as front
        import remat.api.model as model_module
        import remat.api.shapes as shapes

        for module, name in (
            (front, "cut_model"),
            (shapes, "profile_chain"),
            (model_module, "solve"),
            (front, "prove_cut"),
        ):
            _timed(module, name, totals)
        trained = remat.checkpoint(
            model, collate(rows[:BATCH]), budget="90%"
        )  # its least is 85% (the logits of a 32000-word vocabulary)
    else:
        trained = model
    args = transformers.TrainingArguments(
        output_dir="/tmp/trainer_first_step", per_device_train_batch_size=BATCH, max_steps=steps, report_to=[],
        save_strategy="no", use_cpu=True, logging_strategy="no", disable_tqdm=True, seed=0,
        gradient_checkpointing=side == "plain",
    )  # fmt: skip
    trainer = transformers.Trainer(
        model=trained, args=args, train_dataset=rows, data_collator=collate, callbacks=[FirstStep()]
    )
    trainer.train()
    names = {"cut_model": "trace", "profile_chain": "profile", "solve": "solve", "prove_cut": "proof"}
    phases = {names[k]: round(v, 2) for k, v in totals.items()}
    seconds = first[0] - setup
    phases["other"] = round(seconds - sum(totals.values()), 2)
    return {"side": side, "first_step_s": round(seconds, 2), "imports_s": round(setup - start, 2), "phases": phases,
            "cuts": 1 + getattr(trained, "retraces", 0) if side == "remat" else 0}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--side", choices=("remat", "plain"), help=argparse.SUPPRESS)
    common.add_quick(parser, "a Llama of 2 layers and a vocabulary of 1,000")
    common.add_out(parser, "trainer_first_step")
    options = parser.parse_args()
    if options.side:
        print(json.dumps(_side(options.side, options.steps, options.quick)))
        return
    sides = []
    for side in ("plain", "remat"):
        command = [sys.executable, "-m", "benchmarks.trainer_first_step", "--side", side, "--steps", str(options.steps)]
        done = subprocess.run([*command, *(["--quick"] if options.quick else [])], capture_output=True, text=True,
                              check=False, cwd=common.ROOT)  # fmt: skip
        if done.returncode != 0:
            sys.exit(f"{side}: exit status {done.returncode}: {done.stderr.strip().splitlines()[-1:]}")
        print(done.stdout.strip().splitlines()[-1])
        sides.append(json.loads(done.stdout.strip().splitlines()[-1]))
    data = {"machine": common.machine(), "llama": QUICK_LLAMA if options.quick else LLAMA, "sides": sides}
    common.write_result(data, common.out_path(options, "trainer_first_step"))


if __name__ == "__main__":
    main()
