"""Moved to :mod:`remat.zoo.lstm`; this old path stays an alias of it (the same module object)."""

import sys

import remat.zoo.lstm

sys.modules[__name__] = remat.zoo.lstm
