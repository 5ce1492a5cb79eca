"""Moved to :mod:`remat.trace.chain`; this old path stays an alias of it (the same module object)."""

import sys

import remat.trace.chain

sys.modules[__name__] = remat.trace.chain
