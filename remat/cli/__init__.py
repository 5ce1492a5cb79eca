"""The ``remat`` command line: ``main(argv)`` runs one command (docs/architecture.md, "cli").

One module per command (solve, simulate, pareto, strategies, profile, execute, plan), each with
its ``add_parser`` next to its ``run``; remat.cli.main builds the parser and turns errors into one
line.
"""

from remat.cli.budget import reference_peak
from remat.cli.main import build_parser, main

__all__ = ["build_parser", "main", "reference_peak"]
