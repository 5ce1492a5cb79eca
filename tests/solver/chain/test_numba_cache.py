"""numba with nowhere to write its cache (a read-only install, no home directory): the compiled
modules still import and work, through a private temporary cache directory or, failing that, an
uncached compile (remat/schedules/jit.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

SCRIPT = """
from remat.schedules import ChainProfile, Stage
from remat.solver import solve
stage = Stage("s", 1.0, 2.0, 10, 30, 5, 7)
profile = ChainProfile("c", 10, (stage,) * 12)
schedule = solve(profile, 200, "optimal")
print("ok", schedule.predicted.peak_memory)
"""


def _unwritable_install(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the package where no cache directory can be created (even by root): every
    ``__pycache__`` is a plain file, and the blocked directory below is under a file."""
    install = tmp_path / "install"
    shutil.copytree(ROOT / "remat", install / "remat", ignore=shutil.ignore_patterns("__pycache__"))
    for folder in [install / "remat", *(p for p in (install / "remat").rglob("*") if p.is_dir())]:
        (folder / "__pycache__").write_text("not a directory")
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, so nothing can be created below it")
    return install, blocker / "below"


def _run(install: Path, tmpdir: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_") and k != "HOME"}
    env.update(PYTHONPATH=str(install), PYTHONDONTWRITEBYTECODE="1", TMPDIR=tmpdir)
    env["XDG_CACHE_HOME"] = tmpdir if tmpdir.endswith("below") else str(Path(tmpdir) / "missing-home-cache" / "x")
    return subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, cwd=install)


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "getuid"), reason="per-user cache directories need POSIX uids")
def test_no_cache_anywhere_falls_back_to_an_uncached_compile(tmp_path):
    install, blocked = _unwritable_install(tmp_path)
    home_cache_block = tmp_path / "blocker"
    done = _run(install, str(blocked))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[0] == "ok"
    assert "cannot cache" not in done.stderr
    assert home_cache_block.is_file()


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "getuid"), reason="per-user cache directories need POSIX uids")
def test_writable_temp_dir_becomes_a_private_cache(tmp_path):
    install, blocked = _unwritable_install(tmp_path)
    temp = tmp_path / "tmp"
    temp.mkdir()
    (temp / "missing-home-cache").write_text("blocks the user-wide cache below it")
    done = _run(install, str(temp))
    assert done.returncode == 0, done.stderr
    private = temp / f"remat-numba-cache-{os.getuid()}"
    assert private.is_dir() and (private.stat().st_mode & 0o077) == 0
    assert any(private.rglob("*.nbi")), "numba wrote its cache index there"
