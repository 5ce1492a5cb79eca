"""Write the graph profiles of the zoo's and torchvision's models into examples/ (no download, no real compute).

    python examples/make_graph_profiles.py            # all of them
    python examples/make_graph_profiles.py vit_b16    # only the named ones

Sizes come from shapes on the meta device; times are FLOP-based estimates (rate in each file's
metadata), so the files are the same on every machine. The GPT-2-like graph is the zoo's
GPT-2 small (12 layers, width 768, 12 heads) at a fixed sequence length of 1024: torch.fx
cannot trace its shape-dependent lines (the causal mask built from ``x.shape``, ``math.sqrt`` of
a traced size), so here the mask is a buffer and the sizes are constants; the arithmetic is the
same.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent))

from remat.graph.profiler import profile_graph  # noqa: E402
from remat.models.compat import import_torchvision  # noqa: E402
from remat.schedules import save_profile, simulate  # noqa: E402
from remat.zoo import gpt2, vision  # noqa: E402

GPT2_CONTEXT = 1024


class FixedLengthAttention(nn.Module):
    """The zoo's causal self-attention (same weights) for sequences of exactly ``context`` tokens."""

    def __init__(self, attention: gpt2.CausalSelfAttention, dim: int, context: int) -> None:
        super().__init__()
        self.heads, self.dim, self.context = attention.heads, dim, context
        self.qkv, self.proj, self.drop = attention.qkv, attention.proj, attention.drop
        self.register_buffer("future", torch.ones(context, context, dtype=torch.bool).triu(1), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t, c, h = self.context, self.dim, self.heads
        q, k, v = self.qkv(x).view(-1, t, 3, h, c // h).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // h))
        weights = self.drop(F.softmax(scores.masked_fill(self.future, float("-inf")), dim=-1))
        return self.proj((weights @ v).transpose(1, 2).reshape(-1, t, c))


class FixedLengthPositions(nn.Module):
    """The zoo's learned positions (same weight) for sequences of the full context length."""

    def __init__(self, positions: gpt2.Positions) -> None:
        super().__init__()
        self.weight, self.drop = positions.weight, positions.drop

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(x + self.weight)


def fixed_length(model: gpt2.GPT2, dim: int, context: int) -> gpt2.GPT2:
    """``model`` (changed in place, same weights) for inputs of exactly ``context`` tokens, traceable by torch.fx."""
    model.embed = FixedLengthPositions(model.embed)
    for block in model.blocks:
        block.attn = FixedLengthAttention(block.attn, dim, context)
    return model


def gpt2_fixed_length() -> nn.Module:
    """GPT-2 small's shapes (12 layers, 768 wide, 12 heads, vocabulary 50,257) at GPT2_CONTEXT tokens."""
    return fixed_length(gpt2.gpt2_small(), 768, GPT2_CONTEXT)


def _torchvision(name: str):
    return lambda: getattr(import_torchvision().models, name)()


MODELS = (
    # (file stem, factory, input shape (batch first))
    ("vgg16", vision.vgg16, (32, 3, 224, 224)),
    ("resnet50", vision.resnet50, (32, 3, 224, 224)),
    ("mobilenetv2", vision.mobilenet_v2, (32, 3, 224, 224)),
    ("unet", vision.unet, (8, 3, 256, 256)),
    ("vit_b16", _torchvision("vit_b_16"), (32, 3, 224, 224)),
    ("densenet121", _torchvision("densenet121"), (32, 3, 224, 224)),
    ("gpt2", gpt2_fixed_length, (4, GPT2_CONTEXT, 768)),
)


def main() -> None:
    wanted = set(sys.argv[1:])
    for stem, factory, shape in MODELS:
        if wanted and stem not in wanted:
            continue
        with torch.device("meta"):
            model = factory()
        profile = profile_graph(model, shape, name=f"{stem}-b{shape[0]}-fx", time_source="flops")
        path = ROOT / f"graph_{stem}.json"
        save_profile(profile, path)
        ops = [("compute", v) for v in range(profile.size)]
        peak = simulate(profile, ops, timeline=False).peak_memory
        print(f"{path.name}: {profile.size} nodes, {len(profile.edges)} edges, store-all peak {peak / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
