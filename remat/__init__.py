"""remat: optimal activation checkpointing (rematerialization) under a memory budget."""

import sys as _sys

__version__ = "0.1.0"


def _run_as_the_command() -> bool:
    """Whether this process is ``python -m remat`` or the ``remat`` console script (never a
    program that merely imports remat): read from the interpreter's own command line."""
    argv = list(getattr(_sys, "orig_argv", ()))
    if "-m" in argv:
        return argv[argv.index("-m") + 1 : argv.index("-m") + 2] == ["remat"]
    return len(argv) > 1 and argv[1].replace("\\", "/").rsplit("/", 1)[-1] in ("remat", "remat.exe")


def _interrupted_before_main(number, frame) -> None:  # noqa: ANN001 - signal API
    import os

    try:
        os.write(2, b"remat: interrupted\n")
    finally:
        os._exit(130)


# NOTE [Ctrl-C from remat's first line]: run as the command, a Ctrl-C that arrives before
# remat.cli.main has started (runpy is still importing this package and remat.cli) would end in
# the interpreter's KeyboardInterrupt traceback. Nothing has been written yet, so until main takes
# the signal over (remat/cli/__init__.py) it ends the process at once with its one line, exit 130.
# A SIGINT the process was started ignoring (a shell's background job, nohup) stays ignored, as
# Python itself leaves it (NOTE [An ignored Ctrl-C stays ignored], remat/cli/__init__.py).
if _run_as_the_command():
    import signal as _signal

    if _signal.getsignal(_signal.SIGINT) is not _signal.SIG_IGN:
        _signal.signal(_signal.SIGINT, _interrupted_before_main)


def checkpoint(*args, **kwargs):  # noqa: ANN002, ANN003 - forwards to remat.api.checkpoint
    """``remat.checkpoint(model, example_inputs, budget=...)``: see :func:`remat.api.checkpoint`.

    Imported lazily so that ``import remat`` (and the solvers) stay free of torch.
    """
    from remat.api import checkpoint as _checkpoint

    return _checkpoint(*args, **kwargs)


def __getattr__(name: str):  # noqa: ANN202 - module attribute hook
    """``remat.RematModel`` (the model ``remat.checkpoint`` returns), imported lazily like it."""
    if name == "RematModel":
        from remat.api import RematModel

        return RematModel
    raise AttributeError(f"module 'remat' has no attribute {name!r}")


def compile(*args, **kwargs):  # noqa: A001, ANN002, ANN003 - forwards to remat.joint.compile.compile
    """``remat.compile(model, budget=...)``: see :func:`remat.joint.compile.compile`.

    Imported lazily so that ``import remat`` stays free of torch.
    """
    from remat.joint.compile import compile as _compile

    return _compile(*args, **kwargs)
