"""``remat strategies``: every strategy, the profile kind it solves and one line about it."""

from __future__ import annotations

import argparse

from remat.solver import STRATEGIES


def run(args: argparse.Namespace) -> int:
    """One line per strategy: name, kind, description and the solve options it reads."""
    width = max(len(name) for _, name in STRATEGIES)
    for (kind, name), strategy in sorted(STRATEGIES.items()):
        options = (
            f"  [options: {', '.join('--' + o.replace('_', '-') for o in strategy.options)}]"
            if strategy.options
            else ""
        )
        print(f"{name:<{width}}  {kind:<5}  {strategy.description}{options}")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``strategies`` to ``remat``'s subcommands."""
    strategies = sub.add_parser(
        "strategies",
        help="list the strategies",
        description="List every strategy with the profile kind it solves and one line about it.",
        epilog="example: remat strategies",
    )
    strategies.set_defaults(func=run)


__all__ = ["add_parser", "run"]
