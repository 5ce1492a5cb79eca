"""Moved to :mod:`remat.runtime.core`; this old path stays an alias of it (the same module object)."""

import sys

import remat.runtime.core

sys.modules[__name__] = remat.runtime.core
