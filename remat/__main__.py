"""``python -m remat``: the ``remat`` command. remat.cli.main takes the process's signals over
(NOTE [Ctrl-C from remat's first line], remat/cli/__init__.py): nothing here touches them."""

import sys

from remat.cli import main

sys.exit(main())
