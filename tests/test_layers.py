"""The import layers of docs/architecture.md, enforced: every room imports only rooms below it,
and the rooms that must stay free of torch never import it.

The layer list is read from docs/architecture.md itself (the block after ``<!-- layers -->``), so
the documentation and this test cannot disagree. Imports are read with ``ast`` from every
module of ``remat/``, at module level and inside functions alike (a function-level import is an
arrow too).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "remat"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
EXEMPT = {"__init__", "__main__"}  # the package's face; python -m remat


def layers() -> dict[str, int]:
    """Room -> layer number (0 = the ground: the cache registry), from docs/architecture.md."""
    text = ARCHITECTURE.read_text()
    block = text.split("<!-- layers -->", 1)[1].split("```", 2)[1]
    found: dict[str, int] = {}
    for line in block.splitlines():
        match = re.match(r"\s*(\d+)\s+(.+?)\s*$", line)
        if match:
            for room in match.group(2).split():
                found[room] = int(match.group(1))
    return found


def room_of(module: str) -> str:
    """``remat.trace.cut`` -> ``trace``; a module at the package's top is its own room, except that
    the plots' two modules are one room."""
    parts = module.split(".")
    name = parts[1] if len(parts) > 1 else "__init__"
    return "plots" if name == "plot_labels" else name


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> file, for every module of ``root``'s remat package."""
    found = {}
    for path in (root / "remat").rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """(line, module) for every import of ``path``, absolute or relative, at any depth."""
    tree = ast.parse(path.read_text())
    package = path.relative_to(root).with_suffix("").parts[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = list(package[: len(package) - node.level + 1])
                base = ".".join([*anchor, base] if base else anchor)
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def violations(root: Path, layer: dict[str, int]) -> list[str]:
    """Every import of a module of ``root``'s remat into a room of the same or a higher layer
    (its own room excepted), or into an exempt room."""
    known = modules(root)
    wrong = []
    for module, path in sorted(known.items()):
        here = room_of(module)
        if here in EXEMPT:
            continue
        for line, target in imports(path, root):
            there = room_of(target)
            if target not in known or target == "remat" or there == here:  # the face: __version__
                continue
            if there in EXEMPT or layer[there] >= layer[here]:
                wrong.append(
                    f"{path.relative_to(root)}:{line} ({here}, layer {layer[here]}) imports {target} "
                    f"({there}, layer {layer.get(there, '-')})"
                )
    return sorted(set(wrong))


def test_every_room_is_in_the_layer_list():
    rooms = {room_of(m) for m in modules()} - EXEMPT
    missing = rooms - set(layers())
    assert not missing, f"rooms not in docs/architecture.md's layer list: {sorted(missing)}"
    gone = set(layers()) - rooms
    assert not gone, f"docs/architecture.md lists rooms that do not exist: {sorted(gone)}"


def test_no_room_imports_one_above_it_or_beside_it():
    wrong = violations(ROOT, layers())
    assert not wrong, "imports against docs/architecture.md's layers:\n" + "\n".join(wrong)


def test_the_checker_reports_an_import_up_and_one_beside(tmp_path):
    """The checker itself, on a made-up tree: the ground floor importing the replay is reported, and
    so is a room importing another of its own layer; an import inside a function counts too."""
    files = {
        "remat/schedules/bad.py": "def f():\n    from remat.replay.chain import RematChain\n",
        "remat/replay/chain.py": "from remat.schedules import bad\n",
        "remat/cli/parser.py": "import remat.zoo.small\n",
        "remat/zoo/small.py": "",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    wrong = violations(tmp_path, {"schedules": 1, "replay": 2, "cli": 3, "zoo": 3})
    assert [w.split(" ")[0] for w in wrong] == ["remat/cli/parser.py:1", "remat/schedules/bad.py:2"]


TORCH_FREE = ("cache", "schedules", "solver", "plots")


@pytest.mark.parametrize("room", TORCH_FREE)
def test_torch_free_rooms_never_import_torch(room):
    offenders = [
        f"{path.relative_to(ROOT)}:{line} imports {target}"
        for module, path in modules().items()
        if room_of(module) == room
        for line, target in imports(path)
        if target.split(".")[0] == "torch"
    ]
    assert not offenders, "\n".join(offenders)


@pytest.mark.slow
def test_importing_the_torch_free_rooms_loads_no_torch():
    """What the arrows cannot show (an import made by a dependency): a fresh interpreter that
    imports every module of the torch-free rooms ends with no torch module loaded."""
    names = sorted(m for m in modules() if room_of(m) in TORCH_FREE)
    code = "import sys\n" + "".join(f"import {m}\n" for m in names) + "print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "False", out.stderr
