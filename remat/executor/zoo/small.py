"""Moved to :mod:`remat.zoo.small`; this old path stays an alias of it (the same module object)."""

import sys

import remat.zoo.small

sys.modules[__name__] = remat.zoo.small
