"""Moved to :mod:`remat.models.loading`; this old path stays an alias of it (the same module object)."""

import sys

import remat.models.loading

sys.modules[__name__] = remat.models.loading
