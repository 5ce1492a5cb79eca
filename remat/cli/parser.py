"""The ``remat`` command. Thin: parse arguments, call schedules/solver/replay, print.

Each command is one module of this package with its ``add_parser(subparsers)`` next to its
``run(args)``; :func:`build_parser` adds them in :data:`COMMANDS` order (the order ``remat --help``
lists them). Every user error (bad file, bad budget, infeasible budget, invalid schedule) is printed
as one line ``remat: error: ...`` with exit status 2; no tracebacks.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence

from remat import __version__
from remat.cli import execute, pareto, plan, profile, simulate, solve, strategies
from remat.cli.args import join_negative_values
from remat.model_errors import model_error
from remat.schedules import RematError
from remat.schedules.files import describe_error as _describe

EXIT_USER_ERROR = 2
EXIT_INTERNAL_ERROR = 1
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a writer whose reader left

COMMANDS = (solve, simulate, pareto, strategies, profile, execute, plan)


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are one line and exit 2, like every other remat error."""

    def __init__(self, *args, **kwargs) -> None:
        # Keep examples in epilogs on one line each.
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # noqa: D102 - argparse API
        self.exit(EXIT_USER_ERROR, f"remat: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    """The ``remat`` parser: ``--version`` and one subcommand per module of :data:`COMMANDS`."""
    parser = _Parser(
        prog="remat",
        description="Optimal activation checkpointing under a memory budget.",
        epilog=f"example: {solve.EXAMPLE}",
    )
    parser.add_argument("--version", action="version", version=f"remat {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``remat`` command; returns the exit status (0 ok, 2 bad input, 1 internal error,
    130 Ctrl-C, 141 stdout's reader went away). The console script calls it through
    remat.cli.main, which also catches Ctrl-C during these imports."""
    parser = build_parser()
    args = None
    try:
        args = parser.parse_args(join_negative_values(parser, sys.argv[1:] if argv is None else list(argv)))
        if not getattr(args, "func", None):
            parser.print_help()
            print("remat: error: no command given (see 'remat --help')", file=sys.stderr)
            return EXIT_USER_ERROR
        with _checked_stdout():
            status = args.func(args)
            sys.stdout.flush()  # a closed pipe (``| head``) or a full device shows here, where it can be handled
        return status
    except BrokenPipeError:
        return _broken_pipe()
    except _StdoutFailed as failed:
        _broken_pipe()  # stdout now /dev/null: Python's own flush at exit must not fail on it again
        print(f"remat: error: cannot write the standard output ({_describe(failed.error)})", file=sys.stderr)
        return EXIT_USER_ERROR
    except RematError as error:
        print(f"remat: error: {_one_line(str(error))}", file=sys.stderr)
        return EXIT_USER_ERROR
    except SystemExit as done:  # argparse: --help, --version and usage errors (already printed)
        return done.code if isinstance(done.code, int) else EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("remat: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except RecursionError:  # deep input (nested metadata) is the one thing that makes remat recurse this far
        print("remat: error: input nested too deep (lists or objects inside each other)", file=sys.stderr)
        return EXIT_USER_ERROR
    except MemoryError:
        print("remat: error: out of memory (try a smaller --slots, model or input)", file=sys.stderr)
        return EXIT_USER_ERROR
    except Exception as error:  # noqa: BLE001 - the user's model failed, or a bug in remat: one line
        if os.environ.get("REMAT_DEBUG"):
            raise
        return _unexpected(error, args)


def _broken_pipe() -> int:
    """The reader of stdout went away (``remat strategies | head -1``): stop quietly, as ``yes | head``
    does. stdout is pointed at /dev/null so that Python's own flush at exit finds no pipe to fail on
    (the recipe of the Python docs, "Note on SIGPIPE")."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no real file behind sys.stdout (a test's StringIO)
        pass
    return EXIT_BROKEN_PIPE


class _StdoutFailed(Exception):
    """A write to stdout failed (``remat solve > /dev/full``: ENOSPC), with its ``OSError``."""

    def __init__(self, error: OSError):
        super().__init__(str(error))
        self.error = error


class _CheckedStdout:
    """stdout, whose failed writes (other than a closed pipe's) are :class:`_StdoutFailed`: told
    apart from every other ``OSError`` of a command, they end in one line and exit 2, never in a
    silent 0 or an "internal error" (NOTE [A write is done only once it is checked],
    remat/schedules/files.py)."""

    def __init__(self, stream) -> None:  # noqa: ANN001 - any text stream
        self._stream = stream

    def write(self, text: str) -> int:
        return self._checked(self._stream.write, text)

    def flush(self) -> None:
        self._checked(self._stream.flush)

    def __getattr__(self, name: str):  # noqa: ANN204 - everything else is the stream's
        return getattr(self._stream, name)

    @staticmethod
    def _checked(call, *args):  # noqa: ANN001, ANN205
        try:
            return call(*args)
        except BrokenPipeError:
            raise
        except OSError as error:
            raise _StdoutFailed(error) from None


@contextlib.contextmanager
def _checked_stdout():
    """sys.stdout as :class:`_CheckedStdout` while a command runs."""
    stream = sys.stdout
    sys.stdout = _CheckedStdout(stream)
    try:
        yield
    finally:
        sys.stdout = stream


def _unexpected(error: Exception, args: argparse.Namespace | None) -> int:
    """One line for an exception no check caught: the user's model's error (naming where it
    happened, remat.model_errors) when a command ran a ``--model``, else remat's own bug."""
    if getattr(args, "model", None):
        converted = model_error(error, args.model, args.input_shape)
        if converted is not None:
            print(f"remat: error: {converted}", file=sys.stderr)
            return EXIT_USER_ERROR
    print(
        f"remat: internal error: {type(error).__name__}: {_one_line(str(error))} "
        "(a bug in remat; rerun with REMAT_DEBUG=1 for the traceback and please report it)",
        file=sys.stderr,
    )
    return EXIT_INTERNAL_ERROR


def _one_line(text: str) -> str:
    """The first line of a message, so that every error stays one line on stderr."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] + (" ..." if len(lines) > 1 else "") if lines else "(no message)"


if __name__ == "__main__":
    sys.exit(main())
