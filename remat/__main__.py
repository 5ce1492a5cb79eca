"""``python -m remat``: the ``remat`` command (remat.cli.main)."""

import os
import signal
import sys


def _interrupted_before_main(number, frame) -> None:  # noqa: ANN001 - signal API
    try:
        os.write(2, b"remat: interrupted\n")
    finally:
        os._exit(130)


# NOTE [Ctrl-C from remat's first line]: a Ctrl-C that arrives before remat.cli.main has started
# (this file is still importing remat.cli) would end in the interpreter's KeyboardInterrupt
# traceback. Nothing has been written yet, so until main takes the signal over
# (remat/cli/__init__.py) it ends the process at once with its one line, exit 130. This file runs
# only as the command: importing remat takes no signal (NOTE [import remat takes no signal]). A
# SIGINT the process was started ignoring (a shell's background job, nohup) stays ignored, as
# Python itself leaves it (NOTE [An ignored Ctrl-C stays ignored], remat/cli/__init__.py).
if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
    signal.signal(signal.SIGINT, _interrupted_before_main)

from remat.cli import main  # noqa: E402 - after the signal is taken over

sys.exit(main())
