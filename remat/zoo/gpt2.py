"""A GPT-2-like decoder in plain torch (no ``transformers``), cut at its blocks by ``as_chain``.

``gpt2_small()`` has GPT-2 small's shapes: 12 layers, width 768, 12 heads, context 1024, vocabulary
50,257 (124M parameters, the head's weight being the tied token embedding). Attention is written
out (scores ``q k^T`` of N x heads x T x T are saved for the backward, as in the original GPT-2), so
its activation memory has the quadratic term in the sequence length that ``remat plan --vary dim=1``
detects. As in :mod:`remat.zoo.small`, the input is the token embeddings (N x T x 768
floats), so a[0] has a gradient; the ``embed`` stage adds learned positions.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

INPUT_SHAPES = {"gpt2_small": (1, 1024, 768), "gpt2_tiny": (2, 16, 32)}


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with explicit scores and softmax."""

    def __init__(self, dim: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, t, c = x.shape
        q, k, v = self.qkv(x).view(n, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // self.heads))
        future = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        weights = self.drop(F.softmax(scores.masked_fill(future, float("-inf")), dim=-1))
        return self.proj((weights @ v).transpose(1, 2).reshape(n, t, c))


class GPT2Block(nn.Module):
    """Pre-LayerNorm block: attention and a 4x GELU MLP, each on a residual branch with dropout."""

    def __init__(self, dim: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads, dropout)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(approximate="tanh"), nn.Linear(4 * dim, dim))
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.drop(self.mlp(self.ln2(x)))


class Positions(nn.Module):
    """Adds learned position embeddings to token embeddings, then dropout."""

    def __init__(self, context: int, dim: int, dropout: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(context, dim) * 0.01)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(x + self.weight[: x.shape[1]])


class GPT2(nn.Module):
    """``embed`` (positions), ``blocks``, ``norm`` and ``head`` (logits over the vocabulary)."""

    def __init__(self, layers: int, dim: int, heads: int, context: int, vocab: int, dropout: float) -> None:
        super().__init__()
        self.embed = Positions(context, dim, dropout)
        self.blocks = nn.ModuleList([GPT2Block(dim, heads, dropout) for _ in range(layers)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def gpt2_small(dropout: float = 0.1) -> GPT2:
    """GPT-2 small's shapes: 12 layers, 768 wide, 12 heads, context 1024, vocabulary 50,257."""
    return GPT2(layers=12, dim=768, heads=12, context=1024, vocab=50257, dropout=dropout)


def gpt2_tiny(dropout: float = 0.1) -> GPT2:
    """The same architecture at test size: 2 layers, 32 wide, 4 heads, context 64, vocabulary 100."""
    return GPT2(layers=2, dim=32, heads=4, context=64, vocab=100, dropout=dropout)


__all__ = ["GPT2", "INPUT_SHAPES", "GPT2Block", "gpt2_small", "gpt2_tiny"]
