"""Moved to :mod:`remat.zoo.resnet18`; this old path stays an alias of it (the same module object)."""

import sys

import remat.zoo.resnet18

sys.modules[__name__] = remat.zoo.resnet18
