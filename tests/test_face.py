"""remat's face (remat/__init__.py): a small, deliberate set of names, imported lazily; ``import
remat`` changes nothing in the process (no torch, no signal handler); only the command takes a
signal; and no leftover alias modules remain (docs/architecture.md, CHANGELOG.md)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys

import pytest

import remat
from tests.conftest import EXAMPLES, ROOT

MOST_NAMES = 20  # issue 44: "at most ~20 names"


def _python(code: str) -> str:
    """stdout of ``code`` run by a fresh interpreter in the repository (its own sys.modules and signals)."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    return done.stdout.strip()


def test_dir_of_remat_is_its_all_and_small():
    shown = ast.literal_eval(_python("import remat; print(dir(remat))"))
    assert shown == sorted(remat.__all__) and len(shown) <= MOST_NAMES, shown
    assert len(set(remat.__all__)) == len(remat.__all__)


def test_import_remat_loads_no_torch_and_takes_no_signal():
    code = (
        "import signal, sys, remat; remat.checkpoint; remat.compile; remat.solve; remat.clear_caches()\n"
        "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler,"
        " signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, 'torch' in sys.modules)"
    )
    assert _python(code) == "True True False"


@pytest.mark.slow
def test_every_public_name_resolves_and_takes_no_signal():
    """Each name of ``__all__`` is there (its home imported on first use, torch included), and
    importing all of them leaves Python's own Ctrl-C and SIGTERM in place."""
    code = (
        "import signal, remat\n"
        "missing = [n for n in remat.__all__ if getattr(remat, n, None) is None]\n"
        "print(missing, signal.getsignal(signal.SIGINT) is signal.default_int_handler,"
        " signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)"
    )
    assert _python(code) == "[] True True"


def test_every_public_name_has_a_home_that_defines_it():
    """Fast, with no import: each lazily imported name's module is a file of remat that defines or
    imports the name (a module renamed without updating remat/__init__.py fails here)."""
    homes = remat._HOMES
    assert set(homes) | {"__version__", "checkpoint", "compile"} == set(remat.__all__)
    for name, home in homes.items():
        base = ROOT / home.replace(".", "/")
        path = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        assert path.is_file(), (name, home)
        assert re.search(rf"\b{name}\b", path.read_text()), (name, home)


def test_a_name_outside_the_face_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'store_all_peak'"):
        remat.store_all_peak  # noqa: B018 - the access is the test


def test_the_version_is_pyprojects_and_the_changelogs_first_entry():
    declared = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    first = re.search(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert declared and first and declared[1] == first[1] == remat.__version__


def _signal_calls(path) -> list[int]:
    tree = ast.parse(path.read_text())
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "signal"
    ]


# the HiGHS child is a program of its own (``python highs_child.py``, importing nothing of remat):
# it ignores the terminal's Ctrl-C, which its parent owns (NOTE [No solver takes a signal])
OWN_PROCESS = {"remat/solver/graph/ilp/highs_child.py"}


def test_only_the_command_sets_a_signal_handler():
    found = {
        str(path.relative_to(ROOT)): lines
        for path in sorted((ROOT / "remat").rglob("*.py"))
        if (lines := _signal_calls(path))
    }
    assert "remat/cli/__init__.py" in found  # the check sees the command's own calls
    outside = {p: lines for p, lines in found.items() if not p.startswith("remat/cli/") and p not in OWN_PROCESS}
    assert not outside, f"signal handlers set outside remat/cli/: {outside}"


def test_no_module_is_an_alias_of_another():
    """The old paths are gone (CHANGELOG.md, 0.2.0): no ``remat/executor/``, no module that
    replaces itself in sys.modules or only re-exports another's names under an old path."""
    assert not (ROOT / "remat" / "executor").exists()
    aliases = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "remat").rglob("*.py")
        if re.search(r"sys\.modules\[__name__\]\s*=", path.read_text())
    ]
    assert aliases == []
    for shim in ("remat/solver/chain/pareto.py", "remat/solver/graph/pareto.py"):
        assert not (ROOT / shim).exists(), shim


@pytest.mark.slow  # the optimal DP's first solve in a process (numba's cache loads)
def test_clear_caches_empties_the_solvers_caches():
    from remat.solver.chain import chen_greedy
    from remat.solver.chain.dp.cache import BOUNDS, CACHE

    profile = remat.load_profile(EXAMPLES / "resnet_like.json")
    for strategy in ("optimal", "chen-greedy"):
        remat.solve(profile, "50%", strategy)
    kept = {kind: CACHE.count(kind) for kind in BOUNDS}
    assert kept["table"] > 0 and kept["front"] > 0 and chen_greedy._CANDIDATES._items, kept
    remat.clear_caches()
    assert {kind: CACHE.count(kind) for kind in BOUNDS} == dict.fromkeys(BOUNDS, 0)
    assert not chen_greedy._CANDIDATES._items
