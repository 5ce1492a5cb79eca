"""Moved to :mod:`remat.models.compat`; this old path stays an alias of it (the same module object)."""

import sys

import remat.models.compat

sys.modules[__name__] = remat.models.compat
