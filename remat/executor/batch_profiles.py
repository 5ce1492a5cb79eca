"""Moved to :mod:`remat.profile.batch`; this old path stays an alias of it (the same module object)."""

import sys

import remat.profile.batch

sys.modules[__name__] = remat.profile.batch
