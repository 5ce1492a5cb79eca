"""Stages that the traced cut finds on library models built from configs, and the proof's verdict.

    python -m benchmarks.cut_models [--only gpt2,llama] [--image 64] [--train]

For each model (random weights, batch 2): trace + cut + proof (remat.trace.proof.cut_model),
then the stage names. With ``--train``, also one step through ``remat.checkpoint`` at 50% of the
store-all budget (or the least budget the DP meets, if more): fp32 gradients ``torch.equal`` to
the plain step's, and under bf16 autocast the max-abs difference of loss and gradients from
plain autocast training next to that of per-block ``torch.utils.checkpoint`` (non-reentrant,
around each module the cut names). Prints a table and writes benchmarks/results/cut_models.json
(``--train``: under its key ``train``) with the machine it ran on. Times are wall-clock seconds
of the trace, cut and proof together (noisy on a shared machine; they say how long a user
waits, not how fast anything trains).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import time
from pathlib import Path

import torch
import torch.utils.checkpoint
from torch import nn

import remat
from benchmarks import common
from remat.models.hub import build_library_model
from remat.schedules import RematError
from remat.trace.proof import cut_model

SEQ = 128


def _tokens(vocab: int, mask: bool) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (2, SEQ), generator=g)
    inputs = {"input_ids": ids, "labels": torch.randint(0, vocab, (2, SEQ), generator=g)}
    if mask:
        inputs["attention_mask"] = torch.ones(2, SEQ, dtype=torch.long)
    return inputs


def _padded_tokens(vocab: int) -> dict[str, torch.Tensor]:
    """Token ids with right padding on the second row (a quarter of it), labels -100 there."""
    inputs = _tokens(vocab, True)
    inputs["attention_mask"][1, -SEQ // 4 :] = 0
    inputs["labels"] = inputs["labels"].masked_fill(inputs["attention_mask"] == 0, -100)
    return inputs


def _decoder(layers: int, **more: object) -> dict:
    """A small decoder-only config (Llama family): ``layers`` layers of width 128, 4 heads, 2 KV heads."""
    return {"num_hidden_layers": layers, "hidden_size": 128, "intermediate_size": 256, "num_attention_heads": 4,
            "num_key_value_heads": 2, "vocab_size": 8000, **more}  # fmt: skip


def models(image: int) -> dict[str, tuple[str, dict, object, bool]]:
    """name -> (spec, config, example inputs, image model with a cross-entropy loss): the nine models
    of issue 10, then the eleven of issue 22 (encoder-decoders, a mixture of experts with its router
    loss, Gemma2, Phi3, ALBERT, padded Llama, windowed ViTs, ConvNeXt, EfficientNet)."""
    return {**issue10_models(image), **issue22_models(image)}


def issue22_models(image: int) -> dict[str, tuple[str, dict, object, bool]]:
    x = torch.randn(2, 3, image, image, generator=torch.Generator().manual_seed(1))
    seq2seq = {"d_model": 128, "vocab_size": 8000}
    return {
        "t5": ("transformers:t5", {**seq2seq, "d_ff": 256, "d_kv": 32, "num_layers": 4, "num_decoder_layers": 4,
                                   "decoder_start_token_id": 0, "pad_token_id": 0,
                                   "num_heads": 4}, _tokens(8000, True), False),
        "bart": ("transformers:bart", {**seq2seq, "encoder_layers": 4, "decoder_layers": 4,
                                       "encoder_attention_heads": 4, "decoder_attention_heads": 4,
                                       "encoder_ffn_dim": 256, "decoder_ffn_dim": 256}, _tokens(8000, True), False),
        "mixtral": ("transformers:mixtral", _decoder(4, num_local_experts=4, num_experts_per_tok=2,
                                                     output_router_logits=True, router_aux_loss_coef=0.02),
                    _tokens(8000, True), False),
        "gemma2": ("transformers:gemma2", _decoder(4, head_dim=32, sliding_window=64), _tokens(8000, True), False),
        "phi3": ("transformers:phi3", _decoder(4, pad_token_id=0), _tokens(8000, True), False),
        "albert": ("transformers:albert", {"num_hidden_layers": 4, "hidden_size": 128, "intermediate_size": 256,
                                           "num_attention_heads": 4, "embedding_size": 64, "vocab_size": 8000},
                   _tokens(8000, True), False),
        "llama-padded": ("transformers:llama", _decoder(8), _padded_tokens(8000), False),
        "timm-swin": ("timm:swin_tiny_patch4_window7_224", {"img_size": image, "window_size": 4, "num_classes": 10},
                      x, True),
        "torchvision-swin_t": ("torchvision:swin_t", {"num_classes": 10}, x, True),
        "timm-convnext": ("timm:convnext_tiny", {"num_classes": 10}, x, True),
        "torchvision-efficientnet_b0": ("torchvision:efficientnet_b0", {"num_classes": 10}, x, True),
    }  # fmt: skip


def issue10_models(image: int) -> dict[str, tuple[str, dict, object, bool]]:
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


def _step(model: nn.Module, run, initial: list[torch.Tensor], bf16: bool) -> list[torch.Tensor]:
    """Loss and parameter gradients of one step from ``initial`` buffers and a fixed RNG."""
    with torch.no_grad():
        for b, saved in zip(model.buffers(), initial, strict=True):
            b.copy_(saved)
    for p in model.parameters():
        p.grad = None
    torch.manual_seed(3)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss = run()
    loss.backward()
    return [loss.detach()] + [p.grad.clone() for p in model.parameters()]


def _difference(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max((x.double() - y.double()).abs().max().item() for x, y in zip(a, b, strict=True))


@contextlib.contextmanager
def _per_block_checkpoint(model: nn.Module, names: list[str]):
    patched = []
    for name in names:
        try:
            module = model.get_submodule(name)
        except AttributeError:
            continue  # 'loss', ranges such as 'features.0-1'
        if module is not model:
            module.forward = functools.partial(torch.utils.checkpoint.checkpoint, module.forward, use_reentrant=False)
            patched.append(module)
    try:
        yield len(patched)
    finally:
        for module in patched:
            del module.forward


def train_one(spec: str, config: dict, inputs: object, image_model: bool) -> dict:
    """fp32 and bf16-autocast steps through remat.checkpoint(budget="50%") against the plain model."""
    torch.manual_seed(0)
    model = build_library_model(spec, config).train()
    target = torch.tensor([1, 7]) if image_model else None
    loss = nn.functional.cross_entropy if image_model else None
    example = inputs if isinstance(inputs, dict) else (inputs,)
    try:
        wrapped = remat.checkpoint(model, example, budget=1.0, loss=loss, target=target, repeats=1, warmup=0)
    except RematError as error:
        return {"spec": spec, "error": str(error)}
    # 50% of store-all, or the least the DP can meet where that is more (VGG: its classifier's transients)
    store_all = wrapped.store_all_peak
    wrapped = wrapped.with_budget(max(store_all // 2, wrapped.least_peak))

    def plain() -> torch.Tensor:
        if isinstance(inputs, dict):
            return model(**inputs).loss
        return nn.functional.cross_entropy(model(inputs), target)

    def replay() -> torch.Tensor:
        return wrapped(**inputs).loss if isinstance(inputs, dict) else wrapped(inputs, target=target)

    initial = [b.clone() for b in model.buffers()]
    fp32 = _step(model, plain, initial, False)
    remat_fp32 = _step(model, replay, initial, False)
    bf16 = _step(model, plain, initial, True)
    remat_bf16 = _step(model, replay, initial, True)
    with _per_block_checkpoint(model, [s.name for s in wrapped.profile.stages]) as blocks:
        checkpointed_bf16 = _step(model, plain, initial, True)
    recomputed = sum(op in ("F_ck", "F_n") for op, _ in wrapped.schedule.ops)
    return {"spec": spec, "stages": wrapped.profile.length, "budget": wrapped.budget,
            "budget_of_store_all": round(wrapped.budget / store_all, 3),
            "recomputing_forwards": recomputed, "fp32_equal": all(map(torch.equal, fp32, remat_fp32)),
            "bf16_remat_max_abs": _difference(bf16, remat_bf16),
            "bf16_checkpoint_max_abs": _difference(bf16, checkpointed_bf16), "checkpointed_blocks": blocks,
            "bf16_differs_from_fp32": not all(map(torch.equal, fp32, bf16))}  # fmt: skip


def quick_models() -> dict[str, tuple[str, dict, object, bool]]:
    """The quick form's model: real_models.py's tiny GPT-2 (2 layers of 32, 8 tokens)."""
    from benchmarks.real_models import quick_models as tiny

    return {"gpt2": tiny()["gpt2"]}


def main_train(table: dict, chosen: list[str], image: int, out: Path) -> None:
    rows = {}
    print(f"{'model':<32} {'fp32 equal':>10}  {'bf16 remat':>10}  {'bf16 ckpt':>10}  recomputed forwards")
    for name in chosen:
        row = train_one(*table[name])
        rows[name] = row
        if "error" in row:
            print(f"{name:<32} {row['error']}")
        else:
            print(f"{name:<32} {str(row['fp32_equal']):>10}  {row['bf16_remat_max_abs']:>10.3g}  "
                  f"{row['bf16_checkpoint_max_abs']:>10.3g}  {row['recomputing_forwards']}", flush=True)  # fmt: skip
        # into the result's "train", after each model: a long run keeps what it did
        train = {"machine": common.machine(), "batch": 2, "seq": SEQ, "image": image, "budget": "50%", "models": rows}
        common.update_result(out, "train", train)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated model names")
    parser.add_argument("--image", type=int, default=64, help="image side for the vision models")
    parser.add_argument("--train", action="store_true", help="fp32 and bf16 steps through remat.checkpoint")
    common.add_quick(parser, "a GPT-2 of 2 layers of 32 (real_models.quick_models)")
    common.add_out(parser, "cut_models")
    args = parser.parse_args()
    table = quick_models() if args.quick else models(args.image)
    chosen = args.only.split(",") if args.only else list(table)
    if args.train:
        main_train(table, chosen, args.image, common.out_path(args, "cut_models"))
        return
    rows = {}
    print(f"{'model':<32} {'stages':>6}  {'proven':>6}  {'cut+proof s':>11}  first stages")
    for name in chosen:
        row = run_one(*table[name])
        rows[name] = row
        names = ", ".join(row.get("names", [])[:4]) + (" ..." if row.get("stages", 0) > 4 else "")
        print(f"{name:<32} {row.get('stages', '-'):>6}  {str(row['proven_equal']):>6}  "
              f"{row.get('cut_and_proof_s', '-'):>11}  {names or row.get('error', '')}")  # fmt: skip
    data = {"machine": common.machine(), "batch": 2, "seq": SEQ, "image": args.image, "models": rows}
    common.write_result(data, common.out_path(args, "cut_models"), keep=("train",))


if __name__ == "__main__":
    main()
