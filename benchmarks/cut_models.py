"""Stages that the traced cut finds on library models built from configs, and the proof's verdict.

    python benchmarks/cut_models.py [--only gpt2,llama] [--image 64]

For each model (random weights, batch 2): trace + cut + proof (remat.executor.proof.cut_model),
then the stage names. Prints a table and writes benchmarks/results/cut_models.json with the
machine it ran on. Times are wall-clock seconds of the trace, cut and proof together (noisy on a
shared machine; they say how long a user waits, not how fast anything trains).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import machine_info  # noqa: E402  (benchmarks/machine_info.py: run as a script from the repo root)
import torch
from torch import nn

from remat.executor.hub import build_library_model
from remat.executor.proof import cut_model
from remat.schedules import RematError

RESULTS = Path(__file__).resolve().parent / "results" / "cut_models.json"
SEQ = 128


def _tokens(vocab: int, mask: bool) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (2, SEQ), generator=g)
    inputs = {"input_ids": ids, "labels": torch.randint(0, vocab, (2, SEQ), generator=g)}
    if mask:
        inputs["attention_mask"] = torch.ones(2, SEQ, dtype=torch.long)
    return inputs


def models(image: int) -> dict[str, tuple[str, dict, object, bool]]:
    """name -> (spec, config, example inputs, image model with a cross-entropy loss)"""
    x = torch.randn(2, 3, image, image, generator=torch.Generator().manual_seed(1))
    return {
        "gpt2": ("transformers:gpt2", {"n_layer": 12, "n_embd": 128, "n_head": 4}, _tokens(50257, False), False),
        "llama": (
            "transformers:llama",
            {
                "num_hidden_layers": 8,
                "hidden_size": 128,
                "intermediate_size": 256,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "vocab_size": 32000,
            },
            _tokens(32000, True),
            False,
        ),  # fmt: skip
        "bert": (
            "transformers:bert",
            {"num_hidden_layers": 12, "hidden_size": 128, "intermediate_size": 256, "num_attention_heads": 4},
            _tokens(30522, True),
            False,
        ),
        "torchvision-resnet50": ("torchvision:resnet50", {}, x, True),
        "torchvision-vgg16": ("torchvision:vgg16", {}, x, True),
        "torchvision-mobilenet_v3_large": ("torchvision:mobilenet_v3_large", {}, x, True),
        "torchvision-densenet121": ("torchvision:densenet121", {}, x, True),
        "torchvision-vit_b_16": ("torchvision:vit_b_16", {"image_size": image}, x, True),
        "timm-resnet50": ("timm:resnet50", {}, x, True),
    }


def machine() -> dict:
    return machine_info.machine()


def run_one(spec: str, config: dict, inputs: object, image_model: bool) -> dict:
    torch.manual_seed(0)
    model = build_library_model(spec, config).train()
    target = torch.tensor([1, 7]) if image_model else None
    loss = nn.functional.cross_entropy if image_model else None
    args, kwargs = ((inputs,), {}) if isinstance(inputs, torch.Tensor) else ((), inputs)
    begin = time.perf_counter()
    try:
        chain = cut_model(model, args, kwargs, loss=loss, target=target)
    except RematError as error:
        return {"spec": spec, "config": config, "proven_equal": False, "error": str(error)}
    seconds = time.perf_counter() - begin
    return {"spec": spec, "config": config, "stages": len(chain), "names": list(chain.names),
            "proven_equal": True, "cut_and_proof_s": round(seconds, 2)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated model names")
    parser.add_argument("--image", type=int, default=64, help="image side for the vision models")
    args = parser.parse_args()
    table = models(args.image)
    chosen = args.only.split(",") if args.only else list(table)
    rows = {}
    print(f"{'model':<32} {'stages':>6}  {'proven':>6}  {'cut+proof s':>11}  first stages")
    for name in chosen:
        row = run_one(*table[name])
        rows[name] = row
        names = ", ".join(row.get("names", [])[:4]) + (" ..." if row.get("stages", 0) > 4 else "")
        print(f"{name:<32} {row.get('stages', '-'):>6}  {str(row['proven_equal']):>6}  "
              f"{row.get('cut_and_proof_s', '-'):>11}  {names or row.get('error', '')}")  # fmt: skip
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"machine": machine(), "batch": 2, "seq": SEQ, "image": args.image,
                                   "models": rows}, indent=2) + "\n")  # fmt: skip
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
