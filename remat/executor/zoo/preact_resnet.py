"""Moved to :mod:`remat.zoo.preact_resnet`; this old path stays an alias of it (the same module object)."""

import sys

import remat.zoo.preact_resnet

sys.modules[__name__] = remat.zoo.preact_resnet
