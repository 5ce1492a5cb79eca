"""Moved to :mod:`remat.graph.profile`; this old path stays an alias of it (the same module object)."""

import sys

import remat.graph.profile

sys.modules[__name__] = remat.graph.profile
