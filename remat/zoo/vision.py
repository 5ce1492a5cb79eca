"""Vision models written out (no torchvision, no downloads): VGG16, ResNet-50, MobileNetV2, U-Net.

Architectures follow the papers (and torchvision's layer layout) with two deliberate choices:
no in-place operations (a graph replay recomputes pieces, and an in-place op on a piece's input
would corrupt its producer's stored output) and plain ``forward`` code that ``torch.fx`` traces.
Build them on the meta device (``with torch.device("meta"): resnet50()``) to profile without
allocating parameters.
"""

from __future__ import annotations

import torch
from torch import nn

_VGG16 = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")


class VGG(nn.Module):
    """VGG (Simonyan & Zisserman 2014), configuration D, without BatchNorm."""

    def __init__(self, num_classes: int = 1000, width: float = 1.0, dropout: float = 0.5):
        super().__init__()
        layers: list[nn.Module] = []
        channels = 3
        for item in _VGG16:
            if item == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                out = max(1, int(item * width))
                layers += [nn.Conv2d(channels, out, 3, padding=1), nn.ReLU()]
                channels = out
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        hidden = max(1, int(4096 * width))
        self.classifier = nn.Sequential(
            nn.Linear(channels * 49, hidden),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


class Bottleneck(nn.Module):
    """ResNet bottleneck block (1x1, 3x3 with stride, 1x1 expanding by 4) with projection shortcut."""

    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1):
        super().__init__()
        out = planes * self.expansion
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.relu = nn.ReLU()
        self.downsample = None
        if stride != 1 or inplanes != out:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, out, 1, stride=stride, bias=False), nn.BatchNorm2d(out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    """ResNet with bottleneck blocks (He et al. 2016); ``layers=(3, 4, 6, 3)`` is ResNet-50."""

    def __init__(self, layers: tuple[int, ...] = (3, 4, 6, 3), num_classes: int = 1000, width: int = 64):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        inplanes = width
        stages = []
        for index, blocks in enumerate(layers):
            planes = width * 2**index
            stride = 1 if index == 0 else 2
            stage = []
            for b in range(blocks):
                stage.append(Bottleneck(inplanes, planes, stride if b == 0 else 1))
                inplanes = planes * Bottleneck.expansion
            stages.append(nn.Sequential(*stage))
        self.layer1, self.layer2, self.layer3, self.layer4 = (stages + [nn.Identity()] * 4)[:4]
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(inplanes, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class ConvBNReLU6(nn.Sequential):
    def __init__(self, cin: int, cout: int, kernel: int = 3, stride: int = 1, groups: int = 1):
        super().__init__(
            nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU6(),
        )


class InvertedResidual(nn.Module):
    """MobileNetV2 block: 1x1 expansion, 3x3 depthwise, 1x1 linear projection, residual if shapes match."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int):
        super().__init__()
        hidden = cin * expand
        layers: list[nn.Module] = []
        if expand != 1:
            layers.append(ConvBNReLU6(cin, hidden, 1))
        layers += [ConvBNReLU6(hidden, hidden, 3, stride, groups=hidden), nn.Conv2d(hidden, cout, 1, bias=False)]
        layers.append(nn.BatchNorm2d(cout))
        self.conv = nn.Sequential(*layers)
        self.use_residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.use_residual:
            return x + self.conv(x)
        return self.conv(x)


class MobileNetV2(nn.Module):
    """MobileNetV2 (Sandler et al. 2018)."""

    _SETTINGS = (
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    )

    def __init__(self, num_classes: int = 1000, width: float = 1.0, dropout: float = 0.2):
        super().__init__()

        def ch(c: int) -> int:
            return max(8, int(c * width + 4) // 8 * 8)

        cin = ch(32)
        last = ch(1280) if width > 1.0 else 1280
        blocks: list[nn.Module] = [ConvBNReLU6(3, cin, 3, 2)]
        for expand, c, repeats, stride in self._SETTINGS:
            for r in range(repeats):
                blocks.append(InvertedResidual(cin, ch(c), stride if r == 0 else 1, expand))
                cin = ch(c)
        blocks.append(ConvBNReLU6(cin, last, 1))
        self.features = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(last, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))


class DoubleConv(nn.Sequential):
    def __init__(self, cin: int, cout: int):
        super().__init__(
            nn.Conv2d(cin, cout, 3, padding=1, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(),
            nn.Conv2d(cout, cout, 3, padding=1, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(),
        )


class UNet(nn.Module):
    """U-Net (Ronneberger et al. 2015) with padded convolutions and BatchNorm; ``depth`` poolings,
    long skip connections by concatenation. Input height and width must be divisible by 2**depth."""

    def __init__(self, in_channels: int = 3, num_classes: int = 2, width: int = 64, depth: int = 4):
        super().__init__()
        self.down = nn.ModuleList()
        self.pool = nn.MaxPool2d(2)
        channels = [width * 2**i for i in range(depth + 1)]
        cin = in_channels
        for c in channels[:-1]:
            self.down.append(DoubleConv(cin, c))
            cin = c
        self.bottom = DoubleConv(cin, channels[-1])
        self.up = nn.ModuleList()
        self.up_conv = nn.ModuleList()
        for c in reversed(channels[:-1]):
            self.up.append(nn.ConvTranspose2d(c * 2, c, 2, stride=2))
            self.up_conv.append(DoubleConv(c * 2, c))
        self.head = nn.Conv2d(width, num_classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for block in self.down:
            x = block(x)
            skips.append(x)
            x = self.pool(x)
        x = self.bottom(x)
        for up, conv, skip in zip(self.up, self.up_conv, reversed(skips), strict=True):
            x = conv(torch.cat([skip, up(x)], dim=1))
        return self.head(x)


def vgg16(num_classes: int = 1000, width: float = 1.0) -> VGG:
    """VGG16 (138M parameters at width 1, 224x224 inputs)."""
    return VGG(num_classes, width)


def resnet50(num_classes: int = 1000, width: int = 64) -> ResNet:
    """ResNet-50 (25.6M parameters at width 64)."""
    return ResNet((3, 4, 6, 3), num_classes, width)


def mobilenet_v2(num_classes: int = 1000, width: float = 1.0) -> MobileNetV2:
    """MobileNetV2 (3.5M parameters at width 1)."""
    return MobileNetV2(num_classes, width)


def unet(in_channels: int = 3, num_classes: int = 2, width: int = 64, depth: int = 4) -> UNet:
    """U-Net (31M parameters at width 64, depth 4)."""
    return UNet(in_channels, num_classes, width, depth)
