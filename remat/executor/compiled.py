"""Moved to :mod:`remat.runtime.compiled`; this old path stays an alias of it (the same module object)."""

import sys

import remat.runtime.compiled

sys.modules[__name__] = remat.runtime.compiled
