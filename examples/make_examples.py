"""Write the bundled example profiles (``python examples/make_examples.py``).

The numbers are computed, not measured: activation sizes from tensor shapes times dtype bytes,
times from FLOP counts and bytes moved at an assumed throughput. They are meant to be realistic
in magnitude (MBs to GBs, milliseconds), not to match a particular GPU. Assumed device, an
A100-class GPU at sustained (not peak) rates:

* ``FP32_FLOPS``: 15 TFLOP/s for fp32/TF32 convolutions and matmuls,
* ``BF16_FLOPS``: 120 TFLOP/s for bf16 matmuls,
* ``BANDWIDTH``: 1.5 TB/s for memory-bound ops (BatchNorm, ReLU, add, LayerNorm, softmax...).

A stage's forward time is ``flops / throughput + bytes_moved / BANDWIDTH``; its backward takes
twice the FLOPs (gradients w.r.t. inputs and weights) and twice the bytes. What each stage saves
for its backward follows the autograd rules of the PyTorch ops named in each function.
"""

from __future__ import annotations

import json
from pathlib import Path

FP32_FLOPS = 15e12
BF16_FLOPS = 120e12
BANDWIDTH = 1.5e12
HERE = Path(__file__).resolve().parent
DEVICE = "assumed A100-class GPU: 15 TFLOP/s fp32/TF32, 120 TFLOP/s bf16, 1.5 TB/s (sustained)"


def _ms(flops: float, moved_bytes: float, throughput: float) -> float:
    return round(1e3 * (flops / throughput + moved_bytes / BANDWIDTH), 4)


def _stage(name, flops, moved, throughput, output_size, saved_size, fwd_over, bwd_over, params) -> dict:
    return {
        "name": name,
        "forward_ms": _ms(flops, moved, throughput),
        "backward_ms": _ms(2 * flops, 2 * moved, throughput),
        "output_size": int(output_size),
        "saved_size": int(saved_size),
        "forward_overhead": int(fwd_over),
        "backward_overhead": int(bwd_over),
        "param_size": int(params),
    }


def homogeneous(blocks: int = 32, tokens: int = 16384, width: int = 1024) -> dict:
    """Identical bf16 MLP blocks ``x + Linear(4d->d)(GELU(Linear(d->4d)(x)))`` on ``tokens`` rows.

    Saved per block: Linear1's output (GELU's input) and GELU's output (Linear2's input), 4d each,
    plus the block output (d); Linear1's input is the block input a_i (not counted). Transient:
    Linear2's output before the residual add (d). Backward transient: the gradients of the two
    4d tensors. FLOPs: two matmuls of 2 * tokens * d * 4d. Parameters: fp32 master weights.
    """
    bf16 = 2
    d4 = tokens * 4 * width * bf16
    out = tokens * width * bf16
    flops = 2 * (2 * tokens * width * 4 * width)
    moved = 2 * d4 + 3 * out  # GELU reads and writes 4d; the add reads two d and writes one
    params = (8 * width * width + 5 * width) * 4
    stage = _stage("mlp", flops, moved, BF16_FLOPS, out, 2 * d4 + out, out, 2 * d4, params)
    return {
        "format": "remat-chain-v1",
        "name": f"mlp{blocks}-d{width}-tokens{tokens}-bf16",
        "input_size": out,
        "stages": [dict(stage, name=f"block{i}") for i in range(blocks)],
        "metadata": {
            "source": "computed by examples/make_examples.py: shapes x dtype bytes, FLOPs at an assumed throughput",
            "model": f"{blocks} identical residual MLP blocks, width {width}, hidden {4 * width}",
            "dtype": "bfloat16 activations (autocast)",
            "batch_size": tokens,
            "batch_note": "tokens (rows) per step, e.g. 16 sequences of 1024",
            "device": DEVICE,
        },
    }


def _bottleneck(name, batch, c_in, hw, mid, stride, downsample) -> dict:
    """torchvision ResNet-50 v1.5 Bottleneck (stride on the 3x3 conv), fp32, in-place ReLUs.

    Saved: conv1 out (bn1 input), relu1 out (conv2 input), conv2 out (bn2 input), relu2 out (conv3
    input), conv3 out (bn3 input), the downsample conv out (its BN's input) when present, and the
    block output (relu after the add, saved by the ReLU). Transient: bn3's output (and the
    downsample BN's) until the add; or conv1+bn1 outputs together when larger. Backward
    transient: two intermediate gradients of the largest intermediate size.
    """
    f32 = 4
    out_hw = hw // stride
    big = 4 * mid * out_hw * out_hw * batch * f32
    wide = mid * hw * hw * batch * f32
    narrow = mid * out_hw * out_hw * batch * f32
    output = big
    saved = 2 * wide + 2 * narrow + big + (big if downsample else 0) + output
    fwd_over = max(big * (2 if downsample else 1), 2 * wide)
    bwd_over = 2 * max(big, wide)
    flops = 2 * batch * (hw * hw * c_in * mid + out_hw * out_hw * 9 * mid * mid + out_hw * out_hw * mid * 4 * mid)
    params = c_in * mid + 9 * mid * mid + 4 * mid * mid + 2 * (mid + mid + 4 * mid)
    if downsample:
        flops += 2 * batch * out_hw * out_hw * c_in * 4 * mid
        params += c_in * 4 * mid + 2 * 4 * mid
    # BatchNorms read twice and write once; ReLUs read and write; the add reads two and writes one.
    moved = 3 * wide + 2 * wide + 3 * narrow + 2 * narrow + 3 * big + 3 * big + 2 * big + (3 * big if downsample else 0)
    return _stage(name, flops, moved, FP32_FLOPS, output, saved, fwd_over, bwd_over, params * f32)


def resnet_like(batch: int = 64) -> dict:
    """ResNet-50 (torchvision v1.5) at 224x224, fp32: stem, 16 bottlenecks, head with the loss.

    Stem: conv 7x7/2 (3->64), BN, ReLU, max-pool 3x3/2. Saved: conv out (BN input), ReLU out
    (max-pool input), max-pool out and its int64 indices. Head: global average pool, fc
    2048->1000, cross-entropy; saved: fc input, log-softmax output, loss (4 bytes, the output).
    """
    f32 = 4
    image = 3 * 224 * 224 * batch * f32
    stem_big = 64 * 112 * 112 * batch * f32
    pooled = 64 * 56 * 56 * batch * f32
    stem_flops = 2 * batch * 112 * 112 * 3 * 64 * 49
    stages = [
        _stage(
            "stem",
            stem_flops,
            3 * stem_big + 2 * stem_big + stem_big + 3 * pooled,
            FP32_FLOPS,
            pooled,
            2 * stem_big + pooled + 2 * pooled,  # pooled + int64 indices (twice the fp32 size)
            stem_big,
            2 * stem_big,
            (3 * 64 * 49 + 2 * 64) * f32,
        )
    ]
    c_in, hw = 64, 56
    for layer, (blocks, mid, stride) in enumerate([(3, 64, 1), (4, 128, 2), (6, 256, 2), (3, 512, 2)], start=1):
        for block in range(blocks):
            s = stride if block == 0 else 1
            stages.append(_bottleneck(f"layer{layer}.{block}", batch, c_in, hw, mid, s, downsample=block == 0))
            c_in, hw = 4 * mid, hw // s
    features = 2048 * batch * f32
    logits = 1000 * batch * f32
    stages.append(
        _stage(
            "head",
            2 * batch * 2048 * 1000,
            2048 * 7 * 7 * batch * f32 + 3 * logits,
            FP32_FLOPS,
            4,
            features + logits + 4,
            2 * logits,
            2048 * 7 * 7 * batch * f32 + 2 * logits,
            (2048 * 1000 + 1000) * f32,
        )
    )
    return {
        "format": "remat-chain-v1",
        "name": f"resnet50-like-b{batch}-fp32",
        "input_size": image,
        "stages": stages,
        "metadata": {
            "source": "computed by examples/make_examples.py from torchvision ResNet-50 v1.5 shapes "
            "(He et al. 2016) x 4 bytes; times from conv FLOPs and memory-bound bytes at an assumed throughput",
            "model": "resnet50 (torchvision v1.5), 224x224 images",
            "dtype": "float32",
            "batch_size": batch,
            "device": DEVICE,
        },
    }


def transformer_like(batch: int = 8, seq: int = 1024, width: int = 768, heads: int = 12, layers: int = 12) -> dict:
    """GPT-2 small (Radford et al. 2019) in bf16 mixed precision, eager attention (no flash attention).

    Per block, the saved activations follow Korthikanti et al. 2022 ("Reducing Activation
    Recomputation in Large Transformer Models", section 4.1): ``s*b*h*(34 + 5*a*s/h)`` bytes with
    16-bit activations and 1-byte dropout masks. Their count includes the block input (2sbh, the
    first LayerNorm's input) and not the output; ours counts the output instead, same total.
    Transient: the attention scores QK^T (2*a*s^2*b bytes) before the softmax; backward: the
    gradients of scores and probabilities together. FLOPs per block: 24*b*s*h^2 + 4*b*s^2*h
    (Narayanan et al. 2021). Embedding stage: token + position embeddings and dropout. Head stage:
    final LayerNorm, tied LM head (vocabulary 50257) and the cross-entropy in fp32 (autocast), whose
    log-softmax output (4 bytes per logit) is saved; output: the loss.
    """
    vocab = 50257
    sbh = seq * batch * width
    act = 2 * sbh  # bf16
    block_saved = sbh * 34 + 5 * heads * seq * seq * batch
    scores = 2 * heads * seq * seq * batch
    block_flops = 24 * batch * seq * width * width + 4 * batch * seq * seq * width
    block_params = (12 * width * width + 13 * width) * 4  # fp32 master weights
    stages = [
        _stage(
            "embed",
            0,
            3 * act,
            BF16_FLOPS,
            act,
            act + sbh,  # output + dropout mask
            act,
            act,
            (vocab * width + 1024 * width) * 4,
        )
    ]
    for i in range(layers):
        stages.append(
            _stage(
                f"h.{i}", block_flops, 2 * block_saved, BF16_FLOPS, act, block_saved, scores, 2 * scores, block_params
            )
        )
    logits = seq * batch * vocab
    stages.append(
        _stage(
            "ln_f+lm_head+loss",
            2 * batch * seq * width * vocab,
            2 * logits + 3 * 4 * logits,
            BF16_FLOPS,
            4,
            act + 4 * logits + 4,
            2 * logits + 4 * logits,
            4 * logits + 2 * logits,
            2 * width * 4,
        )
    )
    return {
        "format": "remat-chain-v1",
        "name": f"gpt2-small-like-b{batch}-s{seq}-bf16",
        "input_size": seq * batch * 8,  # int64 token ids
        "stages": stages,
        "metadata": {
            "source": "computed by examples/make_examples.py: GPT-2 small shapes, activation memory per "
            "Korthikanti et al. 2022, FLOPs per Narayanan et al. 2021, at an assumed throughput",
            "model": f"gpt2-small: {layers} layers, width {width}, {heads} heads, vocab {vocab}",
            "dtype": "bfloat16 activations (autocast), fp32 loss",
            "batch_size": batch,
            "sequence_length": seq,
            "device": DEVICE,
        },
    }


def small_graph(batch: int = 32) -> dict:
    """A residual block's forward+backward graph (Checkmate-style), fp32, 64 channels at 56x56.

    Forward: input -> conv1 -> conv2 -> add(conv1, conv2) (the skip connection) -> loss.
    Backward: grad of the add's output (needs the add output and the loss), grad through conv2
    (needs conv1's output), the summed gradient of conv1's output (skip + conv2 path), grad through
    conv1 (needs the input), last.
    """
    f32 = 4
    fmap = 64 * 56 * 56 * batch * f32
    conv_flops = 2 * batch * 56 * 56 * 64 * 64 * 9
    conv_ms = _ms(conv_flops, 2 * fmap, FP32_FLOPS)
    nodes = [
        ("input", 0.0, fmap, False),
        ("conv1", conv_ms, fmap, False),
        ("conv2", conv_ms, fmap, False),
        ("add", _ms(0, 3 * fmap, FP32_FLOPS), fmap, False),
        ("loss", _ms(0, fmap, FP32_FLOPS), 4, False),
        ("grad_add", _ms(0, 2 * fmap, FP32_FLOPS), fmap, True),
        ("grad_conv2", 2 * conv_ms, fmap, True),
        ("grad_conv1_out", _ms(0, 3 * fmap, FP32_FLOPS), fmap, True),
        ("grad_conv1", 2 * conv_ms, fmap, True),
    ]
    edges = [[0, 1], [1, 2], [1, 3], [2, 3], [3, 4], [3, 5], [4, 5], [5, 6], [1, 6], [5, 7], [6, 7], [7, 8], [0, 8]]
    return {
        "format": "remat-graph-v1",
        "name": f"resblock-graph-b{batch}-fp32",
        "nodes": [{"name": n, "time_ms": t, "size": int(s), "backward": b} for n, t, s, b in nodes],
        "edges": edges,
        "metadata": {
            "source": "computed by examples/make_examples.py: a residual block with two 3x3 convs, "
            "64 channels, 56x56 maps, fp32; times from FLOPs at an assumed throughput",
            "dtype": "float32",
            "batch_size": batch,
            "device": DEVICE,
        },
    }


EXAMPLES = {
    "homogeneous.json": homogeneous,
    "resnet_like.json": resnet_like,
    "transformer_like.json": transformer_like,
    "small_graph.json": small_graph,
}


def main() -> None:
    for filename, build in EXAMPLES.items():
        path = HERE / filename
        path.write_text(json.dumps(build(), indent=1) + "\n")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
