"""Moved to :mod:`remat.measure.memory`; this old path stays an alias of it (the same module object)."""

import sys

import remat.measure.memory

sys.modules[__name__] = remat.measure.memory
