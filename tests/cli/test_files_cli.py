"""Outputs that cannot lose data (remat.schedules.files) and the process-level exits of ``remat``:
a write killed at any point leaves the old file or the complete new one; a failed write (file-size
limit, full disk) leaves the old file and no temporary; Ctrl-C exits 130 with one line; a closed
pipe ends quietly; ``-o NAME`` writes NAME exactly."""

from __future__ import annotations

import errno
import os
import random
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from remat.schedules import RematError, save_schedule
from remat.schedules.files import atomic_file, check_distinct, write_text_atomic
from tests.cli.cli_cases import EXAMPLES, run_case

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "TQDM_DISABLE": "1"}


def _big_text() -> str:
    """A 100k-stage schedule's JSON (~4 MB): the text a schedule write puts on disk."""
    ops = [["F_ck", i] for i in range(100_000)] + [["B", i] for i in reversed(range(100_000))]
    return '{"format": "remat-schedule-v1", "ops": ' + repr(ops).replace("'", '"') + "}\n"


def _killed_child(target: Path, text: str, kill_at: int, phase: str) -> None:
    """Fork a child that writes ``text`` to ``target`` atomically and SIGKILLs itself after
    ``kill_at`` bytes (phase ``write``) or in ``fsync`` / just before or after ``os.replace``."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            die = lambda: os.kill(os.getpid(), signal.SIGKILL)  # noqa: E731
            real_fdopen, real_fsync, real_replace = os.fdopen, os.fsync, os.replace

            class Dying:
                def __init__(self, handle):
                    self.handle, self.written = handle, 0

                def write(self, data):
                    if phase == "write" and self.written + len(data) >= kill_at:
                        self.handle.write(data[: kill_at - self.written])
                        self.handle.flush()
                        die()
                    self.written += len(data)
                    return self.handle.write(data)

                def __getattr__(self, name):
                    return getattr(self.handle, name)

                def __enter__(self):
                    return self

                def __exit__(self, *exc):
                    return self.handle.__exit__(*exc)

            os.fdopen = lambda *a, **k: Dying(real_fdopen(*a, **k))
            os.fsync = lambda fd: die() if phase == "fsync" else real_fsync(fd)
            os.replace = lambda a, b: (
                die() if phase == "before-replace" else (real_replace(a, b), phase == "after-replace" and die())
            )
            with atomic_file(target, "w") as handle:
                for start in range(0, len(text), 1 << 16):  # many writes, as a JSON encoder makes
                    handle.write(text[start : start + (1 << 16)])
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    return status


@pytest.mark.slow
def test_a_write_killed_anywhere_leaves_the_old_or_the_new_file(tmp_path):
    """100 SIGKILLs at points drawn from a seeded RNG (byte offsets and the fsync/rename steps):
    the target is always byte for byte the old file or the complete new one."""
    text = _big_text()
    old = '{"old": true}\n'
    target = tmp_path / "schedule.json"
    rng = random.Random(24)
    seen = {"old": 0, "new": 0}
    for attempt in range(100):
        target.write_text(old)
        phase = rng.choice(["write"] * 6 + ["fsync", "before-replace", "after-replace", "none"])
        _killed_child(target, text, rng.randrange(len(text) + 1), phase)
        now = target.read_text()
        assert now in (old, text), f"try {attempt} ({phase}): {len(now)} bytes, neither file"
        seen["new" if now == text else "old"] += 1
    assert seen["old"] and seen["new"]  # the draws hit both sides of the rename


def test_a_kill_before_the_rename_keeps_the_old_file(tmp_path):
    target = tmp_path / "s.json"
    target.write_text("old\n")
    _killed_child(target, "new\n" * 1000, 10, "write")
    assert target.read_text() == "old\n"


@pytest.mark.slow
def test_a_write_past_the_file_size_limit_keeps_the_old_file(tmp_path):
    """RLIMIT_FSIZE in a child (Python ignores SIGXFSZ, so the write fails with EFBIG): one line,
    the old file intact, no temporary left."""
    target = tmp_path / "front.csv"
    target.write_text("old\n")
    script = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))\n"
        "from remat.cli import main\n"
        f"sys.exit(main(['pareto', {str(EXAMPLES / 'resnet_like.json')!r}, '--csv', {str(target)!r}, "
        f"'--json', {str(tmp_path / 'f.json')!r}, '--points', '400']))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], env=ENV, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "file too large" in done.stderr, done.stderr
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["front.csv"]
    assert resource.getrlimit(resource.RLIMIT_FSIZE)  # the limit was the child's only


def test_a_full_disk_keeps_the_old_file_and_removes_the_temporary(tmp_path, monkeypatch):
    target = tmp_path / "s.json"
    target.write_text("old\n")

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(RematError, match="no space left"):
        write_text_atomic(target, "new\n")
    assert target.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["s.json"]


def test_an_exception_mid_write_keeps_the_old_file(tmp_path):
    target = tmp_path / "s.json"
    target.write_text("old\n")
    with pytest.raises(KeyboardInterrupt), atomic_file(target) as handle:
        handle.write("half")
        raise KeyboardInterrupt
    assert target.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["s.json"]


def test_links_and_modes_survive_a_replace(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("old\n")
    real.chmod(0o640)
    link = tmp_path / "link.json"
    link.symlink_to(real)
    write_text_atomic(link, "new\n")
    assert link.is_symlink() and real.read_text() == "new\n"
    assert real.stat().st_mode & 0o777 == 0o640


def test_distinct_outputs_by_file_identity(tmp_path):
    a = tmp_path / "a.json"
    a.write_text("{}")
    os.link(a, tmp_path / "hard.json")
    for same in (str(a), str(tmp_path / "." / "a.json"), str(tmp_path / "hard.json")):
        with pytest.raises(RematError, match="same file as PROFILE"):
            check_distinct({"PROFILE": str(a)}, {"-o": same})
    with pytest.raises(RematError, match="same file as --csv"):
        check_distinct({}, {"--csv": str(tmp_path / "new"), "--json": str(tmp_path / "new")})
    check_distinct({"PROFILE": str(a)}, {"-o": str(tmp_path / "b.json"), "--csv": None})


def test_output_names_are_written_exactly(tmp_path):
    chain = str(EXAMPLES / "resnet_like.json")
    schedule = tmp_path / "schedule"
    code, _, err = run_case(["solve", chain, "-o", str(schedule)])
    assert code == 0, err
    code, out, err = run_case(["simulate", chain, str(schedule), "--plot", str(tmp_path / "timeline")])
    assert code == 0, err
    assert f"wrote {tmp_path / 'timeline'}\n" in out
    assert (tmp_path / "timeline").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # PNG, the documented default
    assert sorted(p.name for p in tmp_path.iterdir()) == ["schedule", "timeline"]
    code, _, err = run_case(["solve", chain, "-o", str(tmp_path / "missing") + "/"])
    assert code == 2 and "names a directory" in err and not (tmp_path / "missing").exists()


def test_save_schedule_goes_through_the_atomic_writer(tmp_path, monkeypatch):
    from remat.schedules import load_profile
    from remat.solver import solve

    profile = load_profile(EXAMPLES / "resnet_like.json")
    target = tmp_path / "s.json"
    target.write_text("old\n")
    monkeypatch.setattr(os, "replace", lambda a, b: (_ for _ in ()).throw(OSError(errno.EIO, "I/O error")))
    with pytest.raises(RematError, match="cannot write"):
        save_schedule(solve(profile, 10**12, "store-all"), target)
    assert target.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["s.json"]


def _listening() -> None:
    """A child's SIGINT as a terminal's foreground job has it, whatever this test process inherited
    (a test run started in the background ignores SIGINT, and its children would too)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _ignoring() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _remat(*argv: str, env: dict | None = None, preexec_fn=_listening, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "remat", *argv],
        env=ENV if env is None else env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=preexec_fn,
        **kwargs,
    )


# NOTE [Ctrl-C from remat's first line]: the interpreter's own start-up (site.py and the .pth files
# of site-packages, before any line of remat runs) answers a SIGINT with its own "Fatal Python
# error: init_import_site" and a traceback; no program can change that. How long that start-up
# takes depends on the machine's load, so a signal sent a fixed time after the process starts
# lands there on a busy machine. The signal's moment is therefore measured from the moment remat
# has taken the signal over: a sitecustomize (the last step of site's start-up) adds an audit hook
# that touches a file when ``remat.cli.parser`` is imported (the first of the commands' imports, right
# after ``remat.cli.main()``'s first lines take the signal: NOTE [Ctrl-C from remat's first line]
# in remat/cli/__init__.py), and the test waits for that file.
_STARTED = """
import os, sys
def _hook(event, args, _path=os.environ["REMAT_TEST_STARTED"]):
    if event == "import" and args[0] == "remat.cli.parser":
        open(_path, "w").close()
sys.addaudithook(_hook)
"""


@pytest.mark.parametrize("delay", [0.0, 0.05, 0.3])
def test_ctrl_c_at_any_moment_exits_130_with_one_line(delay, tmp_path):
    """SIGINT ``delay`` seconds after remat's import starts: during its start-up imports (0 s,
    0.05 s) or while the DP runs: exit 130, one line. (A run that ends before the signal arrives
    exits 0; what is asserted holds either way.)"""
    (tmp_path / "sitecustomize.py").write_text(_STARTED)
    started = tmp_path / "started"
    env = {**ENV, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}", "REMAT_TEST_STARTED": str(started)}
    child = _remat("pareto", str(EXAMPLES / "resnet_like.json"), "--slots", "3000", env=env)
    deadline = time.monotonic() + 120
    while not started.exists() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)
    assert started.exists(), "the child never imported remat"
    time.sleep(delay)
    child.send_signal(signal.SIGINT)
    _, err = child.communicate(timeout=120)
    err = err.decode()
    assert "Traceback" not in err, err
    if child.returncode != 0:
        assert child.returncode == 130 and err.strip().splitlines() == ["remat: interrupted"], err


@pytest.mark.slow
def test_a_closed_pipe_ends_quietly():
    """``remat strategies | head -1`` and ``remat solve ... | head -1``: no error text, exit 0 or 141."""
    for argv in (["strategies"], ["solve", str(EXAMPLES / "resnet_like.json")]):
        read, write = os.pipe()
        child = subprocess.Popen([sys.executable, "-m", "remat", *argv], env=ENV, stdout=write, stderr=subprocess.PIPE)
        os.close(write)
        os.close(read)  # the reader is gone before remat writes a byte
        _, err = child.communicate(timeout=60)
        assert child.returncode in (0, 141) and err.decode() == "", (argv, child.returncode, err)


def test_importing_remat_takes_no_signal_over():
    """A program that imports remat keeps Python's own Ctrl-C (NOTE [import remat takes no signal]):
    only ``python -m remat`` and the ``remat`` console script take it over."""
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            "import signal, remat, remat.cli, remat.solver; "
            "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler, "
            "signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)",
        ],
        env=ENV,
        capture_output=True,
        text=True,
        check=True,
        preexec_fn=_listening,
    )
    assert child.stdout.strip() == "True True"


@pytest.mark.slow
def test_a_ctrl_c_the_process_was_started_ignoring_stays_ignored(tmp_path):
    """``remat ... &`` in a script: the process starts with SIGINT ignored (NOTE [An ignored Ctrl-C
    stays ignored]); a SIGINT after remat's import neither stops it nor prints anything."""
    (tmp_path / "sitecustomize.py").write_text(_STARTED)
    started = tmp_path / "started"
    env = {**ENV, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}", "REMAT_TEST_STARTED": str(started)}
    out = tmp_path / "s.json"
    child = _remat("solve", str(EXAMPLES / "resnet_like.json"), "-o", str(out), env=env, preexec_fn=_ignoring)
    deadline = time.monotonic() + 120
    while not started.exists() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)
    assert started.exists(), "the child never imported remat"
    child.send_signal(signal.SIGINT)
    _, err = child.communicate(timeout=120)
    assert child.returncode == 0 and err.decode() == "", (child.returncode, err)
    assert out.exists()
