"""Moved to :mod:`remat.trace.proof`; this old path stays an alias of it (the same module object)."""

import sys

import remat.trace.proof

sys.modules[__name__] = remat.trace.proof
