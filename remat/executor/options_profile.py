"""Moved to :mod:`remat.profile.options`; this old path stays an alias of it (the same module object)."""

import sys

import remat.profile.options

sys.modules[__name__] = remat.profile.options
