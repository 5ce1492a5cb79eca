"""Moved to :mod:`remat.trace.branches`; this old path stays an alias of it (the same module object)."""

import sys

import remat.trace.branches

sys.modules[__name__] = remat.trace.branches
