"""Option checks for the ``remat`` command: argparse ``type=`` functions and argv fix-ups.

Every check raises :class:`argparse.ArgumentTypeError` with a message that is true and names
what is wrong (argparse prefixes the option: ``argument --points: must be ...``), so a bad
option is refused before any work starts, never silently clamped or ignored.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path

# The longest --time-limit accepted (seconds): a million seconds is 11.6 days. Larger values
# (1e300, inf) are almost surely typos, and the solvers' int(milliseconds) would overflow.
MAX_SECONDS = 1e6
# The promise --time-limit makes (see docs/strategies.md#time-limits).
TIME_LIMIT_HELP = "seconds for the whole solve, every phase included (ends within the limit + 1 s + 5%%)"


def integer_at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer >= ``low`` (``1`` for counts like --points, --workers)."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value

    parse.__name__ = f"integer >= {low}"
    return parse


def seconds(text: str) -> float:
    """An argparse type: a time limit in seconds, finite, > 0 and at most :data:`MAX_SECONDS`."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if math.isnan(value):
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r} (not a number)")
    if math.isinf(value):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds, got {text!r}")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    if value > MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_SECONDS:.0f} seconds (11.6 days), got {text}")
    return value


def _writable_parent(text: str) -> Path:
    path = Path(text)
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a file name, got an empty string")
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"'{text}' is a directory; give a file name")
    parent = path.parent
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(f"cannot write '{text}': directory '{parent}' does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"cannot write '{text}': directory '{parent}' is not writable")
    if path.exists() and not os.access(path, os.W_OK):
        raise argparse.ArgumentTypeError(f"cannot write '{text}': the file exists and is not writable")
    return path


def output_file(text: str) -> str:
    """An argparse type: a file we can create or overwrite (its folder exists and is writable)."""
    _writable_parent(text)
    return text


# matplotlib's image types (``FigureCanvasBase.get_supported_filetypes()``; tests/plots/test_plots.py
# checks this copy against the installed matplotlib): reading them there costs ~0.25 s of imports
# before the solver starts, and the CLI imports matplotlib later, while the solver runs.
PLOT_TYPES = frozenset("avif eps gif jpeg jpg pdf pgf png ps raw rgba svg svgz tif tiff webp".split())


def plot_file(text: str) -> str:
    """An argparse type: like :func:`output_file`, with an image extension matplotlib can write
    (``.png``, ``.pdf``, ``.svg``, ...; no extension means PNG)."""
    path = _writable_parent(text)
    suffix = path.suffix.lower().lstrip(".")
    if suffix:
        if suffix not in PLOT_TYPES:
            raise argparse.ArgumentTypeError(
                f"cannot draw '{text}': unsupported image type '.{suffix}' (use one of "
                f"{', '.join('.' + s for s in sorted(PLOT_TYPES))})"
            )
    return text


def value_options(parser: argparse.ArgumentParser) -> tuple[set[str], set[str]]:
    """(option strings that take a value, every option string) over ``parser`` and its subcommands."""
    takes: set[str] = set()
    every: set[str] = set()
    pending = [parser]
    while pending:
        current = pending.pop()
        for action in current._actions:
            every.update(action.option_strings)
            if action.option_strings and action.nargs is None and not isinstance(action, argparse._StoreConstAction):
                takes.update(action.option_strings)
            if isinstance(action, argparse._SubParsersAction):
                pending.extend(action.choices.values())
    return takes, every


def join_negative_values(parser: argparse.ArgumentParser, argv: Sequence[str]) -> list[str]:
    """``--budget -5GB`` -> ``--budget=-5GB``: argparse would read ``-5GB`` as an unknown option and
    say "expected one argument"; joined, the option's own check says what is wrong with it."""
    takes, every = value_options(parser)
    joined: list[str] = []
    index = 0
    while index < len(argv):
        token = argv[index]
        following = argv[index + 1] if index + 1 < len(argv) else None
        if (
            token in takes
            and following is not None
            and following.startswith("-")
            and following not in every
            and following != "--"
        ):
            joined.append(f"{token}={following}")
            index += 2
            continue
        joined.append(token)
        index += 1
    return joined
