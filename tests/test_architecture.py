"""docs/architecture.md names every module of ``remat/``, and only modules that exist.

The "Rooms" table has one row per folder of ``remat/`` (``trace/``, ``solver/chain/dp/``) and rows
for the modules at the package's top (``model_errors.py``). A module is named, in backticks, in
the row of the deepest folder that holds it, by its path from that folder (``cut.py`` in the row
of ``trace/``); a subpackage's ``__init__.py`` is its folder's face and needs no name. Each
``.py`` a row names must exist there, so a module renamed, moved or deleted without the page
fails here, and so does a page that names one that is gone.
"""

from __future__ import annotations

import re

from tests.test_layers import ARCHITECTURE, EXEMPT, PACKAGE

ALIASES = EXEMPT - {"__init__", "__main__"}  # rooms of aliases only, not described module by module
TICKED = re.compile(r"`([^`]+)`")


def rows(text: str) -> dict[str, str]:
    """Folder of ``remat/`` ('' for the package's top) -> the text of its rows in the Rooms table."""
    table = text.split("## Rooms", 1)[1].split("\n## ", 1)[0]
    found: dict[str, str] = {}
    for line in table.splitlines():
        cells = line.split(" | ")
        if not line.startswith("| `") or len(cells) < 3:
            continue
        first = TICKED.findall(cells[0])[0]
        folder = first if first.endswith("/") else ""
        found[folder] = found.get(folder, "") + line
    return found


def files() -> set[str]:
    """Every module's path from ``remat/``, the subpackages' ``__init__.py`` and the alias rooms left out."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        name = path.relative_to(PACKAGE).as_posix()
        if "/" in name and (path.name == "__init__.py" or name.split("/")[0] in ALIASES):
            continue
        found.add(name)
    return found


def home(name: str, folders: set[str]) -> str:
    """The deepest folder with a row that holds the module ``name`` ('' for the package's top)."""
    holders = [f for f in folders if f and name.startswith(f)]
    return max(holders, key=len, default="")


def test_every_module_is_named_in_the_row_of_its_folder():
    table = rows(ARCHITECTURE.read_text())
    missing = []
    for name in sorted(files()):
        folder = home(name, set(table))
        if name[len(folder) :] not in TICKED.findall(table.get(folder, "")):
            missing.append(f"{name} (row of {folder or 'the top'!r})")
    assert not missing, "modules docs/architecture.md does not name:\n" + "\n".join(missing)


def test_every_module_the_page_names_exists():
    table = rows(ARCHITECTURE.read_text())
    gone = [
        f"{folder}{named}"
        for folder, text in sorted(table.items())
        for named in TICKED.findall(text)
        if named.endswith(".py") and not (PACKAGE / folder / named).is_file()
    ]
    assert not gone, "docs/architecture.md names modules that do not exist:\n" + "\n".join(gone)


def test_the_check_sees_a_module_left_out_and_one_named_that_is_gone():
    """The parser on a made-up page: a module is found in its deepest folder's row, not a parent's."""
    page = (
        "## Rooms\n\n| room | layer | what |\n|---|---|---|\n"
        "| `solver/` | 2 | `budget.py`, `chain/optimal.py` |\n| `solver/chain/dp/` | 2 | `table.py`, `gone.py` |\n"
        "| `plots` (`plots.py`) | 2 | figures |\n\n## Layers\n"
    )
    table = rows(page)
    assert set(table) == {"solver/", "solver/chain/dp/", ""}
    assert home("solver/chain/dp/table.py", set(table)) == "solver/chain/dp/"
    assert home("solver/chain/optimal.py", set(table)) == "solver/"
    assert home("plots.py", set(table)) == ""
    assert "gone.py" in TICKED.findall(table["solver/chain/dp/"])
