"""Moved to :mod:`remat.profile.flops`; this old path stays an alias of it (the same module object)."""

import sys

import remat.profile.flops

sys.modules[__name__] = remat.profile.flops
