"""Moved to :mod:`remat.trace.cut`; this old path stays an alias of it (the same module object)."""

import sys

import remat.trace.cut

sys.modules[__name__] = remat.trace.cut
