"""Moved to :mod:`remat.runtime.policies`; this old path stays an alias of it (the same module object)."""

import sys

import remat.runtime.policies

sys.modules[__name__] = remat.runtime.policies
