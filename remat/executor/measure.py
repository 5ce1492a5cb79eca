"""Moved to :mod:`remat.replay.report`; this old path stays an alias of it (the same module object)."""

import sys

import remat.replay.report

sys.modules[__name__] = remat.replay.report
