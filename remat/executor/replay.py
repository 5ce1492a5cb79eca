"""Moved to :mod:`remat.replay.chain`; this old path stays an alias of it (the same module object)."""

import sys

import remat.replay.chain

sys.modules[__name__] = remat.replay.chain
