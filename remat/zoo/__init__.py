"""Small model definitions (no downloads) used by tests, examples and benchmarks.

``vision``: VGG16, ResNet-50, MobileNetV2, U-Net. ``resnet18``: torchvision's ResNet-18 layout.
``small``: an MLP, a CNN with BatchNorm and residual blocks, a small transformer with dropout.
Load any with ``--model remat.zoo.small:mlp``.
"""
