"""Small models for tests, examples and benchmarks (no downloads; seconds on a CPU).

Each factory takes only keyword arguments with defaults, so ``--model remat.zoo.small:mlp``
works; ``INPUT_SHAPES`` gives a matching small input shape for each.
"""

from __future__ import annotations

import torch
from torch import nn

INPUT_SHAPES = {"mlp": (16, 64), "cnn": (4, 3, 16, 16), "transformer": (4, 16, 32)}


def mlp(depth: int = 6, width: int = 128, in_features: int = 64, out_features: int = 10) -> nn.Sequential:
    """``depth`` blocks Linear+ReLU, then a Linear head; an ``nn.Sequential`` whose children are the stages."""
    blocks: list[nn.Module] = []
    features = in_features
    for _ in range(depth):
        blocks.append(nn.Sequential(nn.Linear(features, width), nn.ReLU()))
        features = width
    blocks.append(nn.Linear(features, out_features))
    return nn.Sequential(*blocks)


class BasicBlock(nn.Module):
    """ResNet basic block: conv-BN-ReLU-conv-BN plus the (projected) shortcut, then ReLU."""

    def __init__(self, in_channels: int, channels: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, channels, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU()
        self.downsample = None
        if stride != 1 or in_channels != channels:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_channels, channels, 1, stride, bias=False), nn.BatchNorm2d(channels)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        shortcut = x if self.downsample is None else self.downsample(x)
        return self.relu(out + shortcut)


class SmallResNet(nn.Module):
    """A torchvision-shaped ResNet (conv1 bn1 relu maxpool layer1..layerK avgpool fc), cut at its blocks."""

    def __init__(self, widths: tuple[int, ...] = (8, 16), blocks: int = 2, num_classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, widths[0], 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.relu = nn.ReLU()
        self.maxpool = nn.Identity()
        channels = widths[0]
        for index, width in enumerate(widths):
            layer = []
            for b in range(blocks):
                layer.append(BasicBlock(channels, width, stride=2 if (index > 0 and b == 0) else 1))
                channels = width
            setattr(self, f"layer{index + 1}", nn.Sequential(*layer))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        for index in range(1, 5):
            layer = getattr(self, f"layer{index}", None)
            if layer is not None:
                x = layer(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


def cnn(widths: tuple[int, ...] = (8, 16), blocks: int = 2, num_classes: int = 10) -> SmallResNet:
    """A small ResNet with BatchNorm and residual blocks (input N x 3 x H x W)."""
    return SmallResNet(tuple(widths), blocks, num_classes)


class Block(nn.Module):
    """Pre-LayerNorm transformer block: self-attention and an MLP, each with dropout on its residual branch."""

    def __init__(self, dim: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, dropout=dropout, batch_first=True)
        self.drop1 = nn.Dropout(dropout)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.drop2 = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.drop1(self.attn(h, h, h, need_weights=False)[0])
        return x + self.drop2(self.mlp(self.norm2(x)))


class SmallTransformer(nn.Module):
    """``embed`` (a Linear on float features), ``blocks``, ``norm`` + ``head``; input N x T x in_features.

    The input is float features rather than token ids so the model's input has a gradient, like a[0] in
    the chain model (see the executor notes on g[0]).
    """

    def __init__(
        self, in_features: int = 32, dim: int = 32, depth: int = 4, heads: int = 4, dropout: float = 0.1, out: int = 10
    ) -> None:
        super().__init__()
        self.embed = nn.Linear(in_features, dim)
        self.blocks = nn.ModuleList([Block(dim, heads, dropout) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def transformer(
    in_features: int = 32, dim: int = 32, depth: int = 4, heads: int = 4, dropout: float = 0.1, out: int = 10
) -> SmallTransformer:
    """A small pre-LN transformer with dropout (input N x T x in_features floats)."""
    return SmallTransformer(in_features, dim, depth, heads, dropout, out)


__all__ = ["INPUT_SHAPES", "BasicBlock", "Block", "SmallResNet", "SmallTransformer", "cnn", "mlp", "transformer"]
