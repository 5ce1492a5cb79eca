"""The ``remat`` command line: ``main(argv)`` runs one command (docs/architecture.md, "cli").

One module per command (solve, simulate, pareto, strategies, profile, execute, plan), each with
its ``add_parser`` next to its ``run``; remat.cli.parser builds the parser and turns errors into one
line.

This file imports nothing heavy: the console script (``remat = "remat.cli:main"``) imports it
first, and Ctrl-C during the imports of the commands (solvers, tqdm, jsonschema: ~0.5 s) must
exit 130 with one line too, which only a ``main`` that does those imports itself can promise.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C
EXIT_TERMINATED = 143  # 128 + SIGTERM


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``remat`` command (remat.cli.parser.main); returns the exit status. With ``argv`` None
    (the console script, ``python -m remat``) it also owns the process's signals: Ctrl-C at any
    moment, start-up imports included, and SIGTERM end in one line (exit 130, 143)."""
    console = argv is None
    try:  # first: a signal between taking it over and the imports must unwind into the except below
        if console:
            _interrupt_as_exception()  # from here Ctrl-C unwinds (NOTE [Ctrl-C from remat's first line])
            _terminate_as_exception()
        from remat.cli.parser import main as run

        return run(argv)
    except KeyboardInterrupt:
        return _stopped("interrupted", EXIT_INTERRUPTED, console)
    except _Terminated:
        return _stopped("terminated", EXIT_TERMINATED, console)
    finally:
        if console:  # a second Ctrl-C while Python shuts down would print a traceback
            _ignore_interrupts()


# NOTE [Ctrl-C from remat's first line]: the command takes SIGINT and SIGTERM over in the first
# lines of ``main``, before the commands' imports (solvers, tqdm, jsonschema: ~0.5 s), so a Ctrl-C
# at any moment from there ends in one line, exit 130. Before it run only the interpreter's
# start-up and the imports of ``remat`` and ``remat.cli``, which load nothing (a millisecond).
# This is the only place remat takes a signal: ``import remat`` and the library take none
# (NOTE [import remat takes no signal], remat/__init__.py), remat/__main__.py only calls main, and
# the HiGHS child, a process of its own, ignores SIGINT (NOTE [No solver takes a signal]).
class _Terminated(BaseException):
    """SIGTERM in the remat process: unwinds like Ctrl-C, so that temporary files are removed."""


# NOTE [An ignored Ctrl-C stays ignored]: a process started with SIGINT ignored (a shell's
# background job `remat solve ... &`, nohup, a supervisor) must not be stopped by the terminal's
# Ctrl-C meant for the foreground job; Python leaves such a SIGINT ignored at start-up, and so does
# remat: it takes the signal over only when the process was started listening to it.
def _interrupt_as_exception() -> None:
    import signal

    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _terminate_as_exception() -> None:
    import os
    import signal

    owner = os.getpid()

    def handler(number, frame) -> None:  # noqa: ANN001 - signal API
        if os.getpid() != owner:  # a forked solver process: die as SIGTERM asks, at once
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        raise _Terminated

    signal.signal(signal.SIGTERM, handler)


def _ignore_interrupts() -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _stopped(what: str, code: int, console: bool) -> int:
    if console:
        _ignore_interrupts()
    try:
        print(f"remat: {what}", file=sys.stderr)
    except (OSError, ValueError):  # stderr closed or a broken pipe: the exit status says it
        pass
    return code


def __getattr__(name: str):  # the package's other names, imported when first used
    if name == "build_parser":
        from remat.cli.parser import build_parser

        return build_parser
    raise AttributeError(f"module 'remat.cli' has no attribute {name!r}")


__all__ = ["build_parser", "main"]
