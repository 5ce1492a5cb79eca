"""The ``remat`` command line: ``main(argv)`` runs one command (docs/architecture.md, "cli")."""

from remat.cli.main import build_parser, main, reference_peak

__all__ = ["build_parser", "main", "reference_peak"]
