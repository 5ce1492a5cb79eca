"""Moved to :mod:`remat.models.hub`; this old path stays an alias of it (the same module object)."""

import sys

import remat.models.hub

sys.modules[__name__] = remat.models.hub
