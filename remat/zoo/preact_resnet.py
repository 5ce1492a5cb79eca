"""Pre-activation bottleneck ResNet for ImageNet (He et al. 2016, "Identity Mappings in Deep Residual
Networks"), the network of Chen et al. 2016's 1,000-layer experiment, cut into a chain at its blocks.

Layout (224x224 input):

* stem: conv 7x7/2 (64 channels) - BN - ReLU - maxpool 3x3/2  -> 64 x 56 x 56;
* four stages of bottleneck blocks, output widths 256 / 512 / 1024 / 2048 at 56 / 28 / 14 / 7
  pixels, bottleneck width 1/4 of the output; the first block of stages 2-4 has stride 2 (in its
  3x3 conv) and every stage's first block a projection shortcut (1x1 conv on the pre-activated
  input, as in the paper's Torch code);
* a pre-activation block: BN - ReLU - conv1x1 - BN - ReLU - conv3x3 - BN - ReLU - conv1x1, plus
  the shortcut; no activation after the addition (that is what "pre-activation" means);
* head: BN - ReLU - global average pool - fc (1,000 classes).

Depth counts the weighted layers on the main path: 3 per block + the stem conv + the fc, so
``depth = 3 * blocks + 2``: depth 1001 has 333 blocks. Blocks per stage: the standard ResNet
splits for depths 50, 101, 152 and 200; any other depth splits proportionally to ResNet-152's
(3, 8, 36, 3) (one block a stage, the rest by largest remainders): depth 1001 -> (21, 53, 238, 21).
He et al.'s own 1001-layer net is the CIFAR one (3 stages of 111 blocks, 32x32 inputs); Chen
et al. used an ImageNet-style 1,000-layer network, whose exact split the paper does not give.

The chain (``remat_stages()``) is ``stem``, every block (``layer{k}.{i}``), ``head``:
``blocks + 2`` stages (335 at depth 1001). ReLUs are in place (as MXNet's planner made them in
the paper's runs); that changes transients, not what autograd saves.
"""

from __future__ import annotations

import torch
from torch import nn

WIDTHS = (256, 512, 1024, 2048)
STANDARD_BLOCKS = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3), 200: (3, 24, 36, 3)}
PROPORTIONS = (3, 8, 36, 3)


def blocks_for_depth(depth: int) -> tuple[int, int, int, int]:
    """Blocks per stage for ``depth = 3 * blocks + 2`` weighted layers (see the module docstring)."""
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 14 or (depth - 2) % 3 != 0:
        raise ValueError(f"depth: must be 3 * blocks + 2 with at least 4 blocks (14, 17, ..., 1001), got {depth!r}")
    if depth in STANDARD_BLOCKS:
        return STANDARD_BLOCKS[depth]
    total = (depth - 2) // 3
    spare = total - len(PROPORTIONS)  # one block per stage first, the rest proportionally
    weight = sum(PROPORTIONS)
    exact = [spare * p / weight for p in PROPORTIONS]
    counts = [int(e) for e in exact]
    order = sorted(range(len(exact)), key=lambda i: exact[i] - counts[i], reverse=True)
    for i in order[: spare - sum(counts)]:
        counts[i] += 1
    return tuple(c + 1 for c in counts)  # type: ignore[return-value]


class PreActBottleneck(nn.Module):
    """BN-ReLU-conv1x1, BN-ReLU-conv3x3 (stride), BN-ReLU-conv1x1, plus the (projected) shortcut."""

    def __init__(self, in_channels: int, channels: int, stride: int = 1) -> None:
        super().__init__()
        mid = channels // 4
        self.bn1 = nn.BatchNorm2d(in_channels)
        self.conv1 = nn.Conv2d(in_channels, mid, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(mid)
        self.conv2 = nn.Conv2d(mid, mid, 3, stride, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(mid)
        self.conv3 = nn.Conv2d(mid, channels, 1, bias=False)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut = None
        if stride != 1 or in_channels != channels:
            self.shortcut = nn.Conv2d(in_channels, channels, 1, stride, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pre = self.relu(self.bn1(x))
        shortcut = x if self.shortcut is None else self.shortcut(pre)
        out = self.conv1(pre)
        out = self.conv2(self.relu(self.bn2(out)))
        out = self.conv3(self.relu(self.bn3(out)))
        return out + shortcut


class PreActResNet(nn.Module):
    """The network; ``forward`` is the plain model, ``remat_stages()`` its chain (stem, blocks, head)."""

    def __init__(self, blocks: tuple[int, ...], num_classes: int = 1000) -> None:
        super().__init__()
        if len(blocks) != 4 or any(b < 1 for b in blocks):
            raise ValueError(f"blocks: four positive counts, got {blocks!r}")
        self.blocks_per_stage = tuple(int(b) for b in blocks)
        self.depth = 3 * sum(blocks) + 2
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2, 1),
        )
        channels = 64
        for index, (width, count) in enumerate(zip(WIDTHS, blocks, strict=True)):
            layer = []
            for b in range(count):
                layer.append(PreActBottleneck(channels, width, stride=2 if (index > 0 and b == 0) else 1))
                channels = width
            setattr(self, f"layer{index + 1}", nn.Sequential(*layer))
        self.head = nn.Sequential(
            nn.BatchNorm2d(channels),
            nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(1),
            nn.Linear(channels, num_classes),
        )

    def remat_stages(self) -> list[tuple[str, nn.Module]]:
        """``[("stem", ...), ("layer1.0", block), ..., ("head", ...)]``: the chain remat schedules."""
        stages: list[tuple[str, nn.Module]] = [("stem", self.stem)]
        for k in range(1, 5):
            for i, block in enumerate(getattr(self, f"layer{k}")):
                stages.append((f"layer{k}.{i}", block))
        stages.append(("head", self.head))
        return stages

    def stage_kinds(self) -> list[str]:
        """One label per chain stage naming its shape class (stages of one kind cost the same):
        ``stem``, ``layer{k}.first`` (stride/projection block), ``layer{k}.rest``, ``head``."""
        kinds = ["stem"]
        for k, count in enumerate(self.blocks_per_stage, start=1):
            kinds += [f"layer{k}.first"] + [f"layer{k}.rest"] * (count - 1)
        return kinds + ["head"]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _, stage in self.remat_stages():
            x = stage(x)
        return x


def preact_resnet(depth: int = 1001, num_classes: int = 1000, device: str = "cpu") -> PreActResNet:
    """The pre-activation bottleneck ResNet of ``depth`` layers (``3 * blocks + 2``; see the module
    docstring). ``device="meta"`` builds it without allocating weights (for profiling sizes only)."""
    with torch.device(device):
        return PreActResNet(blocks_for_depth(depth), num_classes=num_classes)


INPUT_SHAPES = {"preact_resnet": (32, 3, 224, 224)}

__all__ = ["PreActBottleneck", "PreActResNet", "blocks_for_depth", "preact_resnet", "INPUT_SHAPES"]
