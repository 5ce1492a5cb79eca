"""Moved to :mod:`remat.zoo.vision`; this old path stays an alias of it (the same module object)."""

import sys

import remat.zoo.vision

sys.modules[__name__] = remat.zoo.vision
