"""Option checks for the ``remat`` command: argparse ``type=`` functions and argv fix-ups.

Every check raises :class:`argparse.ArgumentTypeError` with a message that is true and names
what is wrong (argparse prefixes the option: ``argument --points: must be ...``), so a bad
option is refused before any work starts, never silently clamped or ignored.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from remat.schedules import RematError
from remat.schedules.files import check_distinct, is_special

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


def cpu_count() -> int:
    """CPUs this process may run on (the affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def integer_between(low: int, high: Callable[[], int], what: str) -> Callable[[str], int]:
    """An argparse type: an integer >= ``low`` and <= ``high()`` (a bound read when the option is
    parsed, e.g. the CPU count); ``what`` says what the bound is, for the message."""
    at_least = integer_at_least(low)

    def parse(text: str) -> int:
        value = at_least(text)
        limit = high()
        if value > limit:
            raise argparse.ArgumentTypeError(f"must be at most {limit} ({what}), got {value}")
        return value

    parse.__name__ = f"integer in [{low}, {what}]"
    return parse


# The most solver threads or processes an option may ask for: past this, more only costs memory
# (torch segfaulted creating 100000 threads); a bound read when the option is parsed.
def max_solver_workers() -> int:
    """CP-SAT search workers allowed: 4 x this machine's CPUs, at least 64."""
    return max(64, 4 * cpu_count())


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
    """``text`` as the path of a file to create or replace, or a one-line reason why it cannot be:
    the name is written exactly as given, so a name that denotes a folder (``out/``, ``.``), a
    missing folder or a name too long for the file system is refused here, before any work."""
    path = Path(text)
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a file name, got an empty string")
    if "\0" in text:
        raise argparse.ArgumentTypeError("a file name cannot hold a NUL character")
    if text.endswith(("/", os.sep)) or path.name in ("", ".", ".."):
        raise argparse.ArgumentTypeError(f"'{text}' names a directory (it ends in '/'); give a file name")
    _check_lengths(text, path)  # before any stat: a name too long makes stat raise, not answer
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"'{text}' is a directory; give a file name")
    if is_special(path):  # /dev/null, /dev/full, a FIFO: written in place (remat.schedules.files)
        if not os.access(path, os.W_OK):
            raise argparse.ArgumentTypeError(f"cannot write '{text}': the file exists and is not writable")
        return path
    parent = path.parent
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(f"cannot write '{text}': directory '{parent}' does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"cannot write '{text}': directory '{parent}' is not writable")
    if path.exists() and not os.access(path, os.W_OK):
        raise argparse.ArgumentTypeError(f"cannot write '{text}': the file exists and is not writable")
    return path


def _check_lengths(text: str, path: Path) -> None:
    """Refuse a path whose parts or whole exceed the file system's limits (255 and 4096 bytes on
    Linux), which would otherwise surface as ``OSError: File name too long`` at the write."""
    shown = f"{text[:40]}..." if len(text) > 40 else text
    for part in path.parts:
        name_max = _path_limit(path.parent if part == path.name else Path("."), "PC_NAME_MAX", 255)
        if len(os.fsencode(part)) > name_max:
            raise argparse.ArgumentTypeError(
                f"cannot write '{shown}': a name in it is {len(os.fsencode(part))} bytes long; "
                f"the file system allows at most {name_max}"
            )
    path_max = _path_limit(Path("."), "PC_PATH_MAX", 4096)
    if len(os.fsencode(os.path.abspath(text))) >= path_max:
        raise argparse.ArgumentTypeError(f"cannot write '{shown}': the path is longer than {path_max} bytes")


def _path_limit(folder: Path, name: str, default: int) -> int:
    """The file system's limit ``name`` (``PC_NAME_MAX``: bytes in one name) for ``folder``."""
    try:
        return os.pathconf(folder, name) if folder.is_dir() else default
    except (OSError, ValueError):
        return default


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
    (``.png``, ``.pdf``, ``.svg``, ...). A name without one is written as given, in PNG (the
    documented default; remat.plots.save_figure): ``-o front`` writes ``front``, not ``front.png``."""
    path = _writable_parent(text)
    suffix = path.suffix.lower().lstrip(".")
    if suffix:
        if suffix not in PLOT_TYPES:
            raise argparse.ArgumentTypeError(
                f"cannot draw '{text}': unsupported image type '.{suffix}' (use one of "
                f"{', '.join('.' + s for s in sorted(PLOT_TYPES))}, or no extension for PNG)"
            )
    return text


def check_paths(args: argparse.Namespace, inputs: Mapping[str, str], outputs: Mapping[str, str]) -> None:
    """Refuse, before any work, an output that is an input or another output (the same file after
    resolving links, hard links included: remat.schedules.files.check_distinct). ``inputs`` and
    ``outputs`` map the label to show (``PROFILE``, ``-o``, ``--csv``) to the ``args`` attribute."""
    check_distinct(
        {label: getattr(args, name, None) for label, name in inputs.items()},
        {label: getattr(args, name, None) for label, name in outputs.items()},
    )


def refuse_unless_applies(given: bool, option: str, why: str) -> None:
    """One line for an option given where it does not apply (an option is never silently ignored):
    ``--workers: does not apply to a chain profile (graphs: solver processes)``."""
    if given:
        raise RematError(f"{option}: does not apply {why}")


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
