"""The README and docs/*.md import only from ``remat`` itself: its names (``remat.__all__``) are the
API, every submodule path is internal (docs/architecture.md). Every ```python block is read from
the files themselves, never copied here."""

from __future__ import annotations

import ast
import re

import pytest

import remat
from tests.conftest import ROOT
from tests.docs.readme_blocks import FENCE

DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# ``from remat.x import ...``, ``import remat.x``, ``import torch, remat.x``: a path below remat
DEEP = re.compile(r"^\s*(?:from\s+remat\.\w|import\s+(?:[\w.]+\s*,\s*)*remat\.\w)", re.M)


def python_blocks() -> list[tuple[str, str]]:
    """(where, code) of every ```python block of the documents, where as ``file:line``."""
    found = []
    for path in DOCUMENTS:
        text = path.read_text()
        for match in FENCE.finditer(text):
            if match[1] == "python":
                line = text.count("\n", 0, match.start()) + 1
                found.append((f"{path.relative_to(ROOT)}:{line}", match[2]))
    return found


def deep_imports(code: str) -> list[str]:
    return [line.strip() for line in code.splitlines() if DEEP.match(line)]


def names_from_remat(code: str) -> list[str]:
    """The names of every ``from remat import a, b`` in ``code`` (a block that does not parse as
    Python, such as one with ``...`` in an argument list, gives none)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    return [
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "remat" and not node.level
        for alias in node.names
    ]


def test_the_documents_have_python_blocks_that_import_remat():
    """The check below reads something: the README's hand-built loop imports from remat."""
    blocks = python_blocks()
    assert any(where.startswith("README.md") for where, _ in blocks)
    assert any("from remat import" in code for _, code in blocks)


@pytest.mark.parametrize(("where", "code"), python_blocks(), ids=lambda value: value if ":" in value else "")
def test_a_docs_snippet_imports_only_from_remat(where, code):
    deep = deep_imports(code)
    assert not deep, f"{where}: imports a path below remat (use `from remat import ...`): {deep}"
    unknown = [name for name in names_from_remat(code) if name not in remat.__all__]
    assert not unknown, f"{where}: imports names remat does not export: {unknown}"


def test_the_pattern_tells_a_deep_import_from_the_public_one():
    assert deep_imports("from remat.solver import solve\nimport torch, remat.api\n    import remat.cli") == [
        "from remat.solver import solve",
        "import torch, remat.api",
        "import remat.cli",
    ]
    assert deep_imports("import remat\nfrom remat import solve\nimport torch, remat\nfrom rematx.y import z") == []
