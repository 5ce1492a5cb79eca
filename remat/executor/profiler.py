"""Moved to :mod:`remat.profile.chain`; this old path stays an alias of it (the same module object)."""

import sys

import remat.profile.chain

sys.modules[__name__] = remat.profile.chain
