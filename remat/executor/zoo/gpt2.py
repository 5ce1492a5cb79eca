"""Moved to :mod:`remat.zoo.gpt2`; this old path stays an alias of it (the same module object)."""

import sys

import remat.zoo.gpt2

sys.modules[__name__] = remat.zoo.gpt2
