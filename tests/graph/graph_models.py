"""Small models for the graph replay tests: a ResNet with skips, a U-Net with long skips, a transformer."""

from __future__ import annotations

import math

import torch
from torch import nn

from remat.zoo.vision import ResNet, UNet


def small_resnet() -> nn.Module:
    """Two bottleneck stages of two blocks each (projection and identity skips), BatchNorm."""
    return ResNet(layers=(2, 2), num_classes=10, width=8)


def small_unet() -> nn.Module:
    """Depth-2 U-Net: long skips by concatenation, BatchNorm, transposed convolutions."""
    return UNet(in_channels=3, num_classes=2, width=4, depth=2)


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 2 * dim)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(2 * dim, dim)
        self.drop_attn = nn.Dropout(dropout)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        q = q.reshape(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.reshape(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.reshape(b, t, self.heads, c // self.heads).transpose(1, 2)
        att = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(c // self.heads), dim=-1)
        y = (self.drop_attn(att) @ v).transpose(1, 2).reshape(b, t, c)
        x = x + self.drop(self.proj(y))
        return x + self.drop(self.fc2(self.act(self.fc1(self.ln2(x)))))


class TinyTransformer(nn.Module):
    """Token embedding + learned positions, pre-LN blocks with dropout, LM head."""

    def __init__(
        self, vocab: int = 50, dim: int = 32, heads: int = 4, depth: int = 2, length: int = 16, dropout: float = 0.1
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(1, length, dim) * 0.02)
        self.blocks = nn.Sequential(*[Block(dim, heads, dropout) for _ in range(depth)])
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.ln(self.blocks(self.embed(tokens) + self.pos)))
