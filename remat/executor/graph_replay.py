"""Moved to :mod:`remat.replay.graph`; this old path stays an alias of it (the same module object)."""

import sys

import remat.replay.graph

sys.modules[__name__] = remat.replay.graph
