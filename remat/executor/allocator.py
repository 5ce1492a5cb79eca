"""Moved to :mod:`remat.measure.allocator`; this old path stays an alias of it (the same module object)."""

import sys

import remat.measure.allocator

sys.modules[__name__] = remat.measure.allocator
