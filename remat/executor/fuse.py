"""Moved to :mod:`remat.trace.fuse`; this old path stays an alias of it (the same module object)."""

import sys

import remat.trace.fuse

sys.modules[__name__] = remat.trace.fuse
