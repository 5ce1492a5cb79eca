"""Signals to a running ``remat solve --strategy ilp`` (issue 43): it ends within 2 s of a SIGTERM,
or of a Ctrl-C in the foreground, at any moment of the solve; started in the background (SIGINT
ignored, as ``cmd &`` and nohup leave it) a SIGINT changes nothing: no hang, the time limit and a
later SIGTERM are honoured (NOTE [No solver takes a signal], remat/solver/deadline.py).

Each run is a real ``python -m remat`` child; every wait is bounded and the child is killed in a
``finally``. The moments are counted from the child's opening of the profile, which it does once
its imports are done and right before the solve starts (a sitecustomize audit hook marks it), so
that a slow start-up on a loaded machine does not move them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from remat.solver.deadline import MARGIN_FRACTION, MARGIN_SECONDS, Deadline, TimeUp

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "examples" / "graph_resnet50.json"
# The ResNet-50 graph at 50%: baselines, the hierarchical warm starts, then Moccasin's CP-SAT search
# in a thread beside the build of Checkmate's model, all within the first seconds.
SOLVE = ["solve", str(PROFILE), "--budget", "50%", "--strategy", "ilp", "--workers", "1"]
ENDS_WITHIN = 2.0  # seconds after the signal (the promise)
START_WITHIN = 120.0  # seconds for the child's imports, however loaded the machine

_MARK = """
import os, sys
def _hook(event, args, _mark=os.environ["REMAT_TEST_SOLVING"], _profile=os.environ["REMAT_TEST_PROFILE"]):
    if event == "open" and str(args[0]).endswith(_profile) and not os.path.exists(_mark):
        open(_mark, "w").close()
sys.addaudithook(_hook)
"""


def _foreground() -> None:
    """SIGINT as a terminal's foreground job has it, whatever this test process inherited."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _background() -> None:
    """SIGINT as ``cmd &`` in a script or nohup leaves it: ignored, inherited by the child."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _solving(
    tmp_path: Path, time_limit: float, preexec_fn, command: list[str] = SOLVE
) -> tuple[subprocess.Popen, float]:
    """A ``remat`` child solving ``command`` and the monotonic time at which it started solving."""
    (tmp_path / "sitecustomize.py").write_text(_MARK)
    mark = tmp_path / "solving"
    env = {
        **os.environ,
        "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}",
        "REMAT_TEST_SOLVING": str(mark),
        "REMAT_TEST_PROFILE": Path(command[1]).name,
        "TQDM_DISABLE": "1",
    }
    argv = [sys.executable, "-m", "remat", *command, "--time-limit", f"{time_limit:g}"]
    child = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=preexec_fn)
    give_up = time.monotonic() + START_WITHIN
    while not mark.exists() and child.poll() is None and time.monotonic() < give_up:
        time.sleep(0.005)
    if not mark.exists():
        child.kill()
        _, err = child.communicate()
        pytest.fail(f"the child never started solving: {err.decode()[-500:]}")
    return child, time.monotonic()


def _at(started: float, moment: float) -> None:
    time.sleep(max(0.0, started + moment - time.monotonic()))


def _ended(child: subprocess.Popen, within: float, what: str) -> tuple[int, str]:
    """The child's exit status and stderr, or a failure if it has not ended ``within`` seconds."""
    try:
        _, err = child.communicate(timeout=within)
    except subprocess.TimeoutExpired:
        pytest.fail(f"remat solve was still running {within:g} s after {what}")
    return child.returncode, err.decode()


def _left_behind(tmp_path: Path) -> list[int]:
    """The processes still running, ``ENDS_WITHIN`` seconds at most after the child ended, that it
    started (its solver processes, HiGHS's children): found by the marker in their environment."""
    needle = f"REMAT_TEST_SOLVING={tmp_path / 'solving'}".encode()
    give_up = time.monotonic() + ENDS_WITHIN
    while True:
        found = []
        for entry in Path("/proc").iterdir():
            try:
                if entry.name.isdigit() and needle in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:  # ended meanwhile, or not ours to read
                continue
        if not found or time.monotonic() > give_up:
            return found
        time.sleep(0.05)


def _described(pids: list[int]) -> list[str]:
    """Each process as pid, parent and command line, for the failure message."""
    out = []
    for pid in pids:
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[-120:]
            parent = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[1]
        except OSError:
            command, parent = "(ended)", "?"
        out.append(f"{pid} (parent {parent}): {command}")
    return out


def _kill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _signalled_ends(child: subprocess.Popen, number: int, name: str, tmp_path: Path) -> None:
    """Send ``number`` (``name``): the child ends within :data:`ENDS_WITHIN` with exit 130/143 and
    the CLI's one line, leaving no process of its own running."""
    child.send_signal(number)
    status, err = _ended(child, ENDS_WITHIN, name)
    expected = {"SIGINT": (130, "remat: interrupted"), "SIGTERM": (143, "remat: terminated")}[name]
    assert (status, err.strip().splitlines()) == (expected[0], [expected[1]]), err
    left = _left_behind(tmp_path)
    assert left == [], f"processes left running: {_described(left)}"


def _cleaned(child: subprocess.Popen, tmp_path: Path) -> None:
    child.kill()
    child.wait()
    _kill(_left_behind(tmp_path))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "moment"), [("SIGINT", 0.5), ("SIGTERM", 2.0), ("SIGINT", 4.0)], ids=["int-0.5s", "term-2s", "int-4s"]
)
def test_a_foreground_solve_ends_at_once_on_a_signal(tmp_path, name, moment):
    """Ctrl-C (SIGINT) or SIGTERM ``moment`` seconds into the solve: exit 130 or 143 within 2 s,
    with the CLI's one line."""
    number = getattr(signal, name)
    child, started = _solving(tmp_path, 30, _foreground)
    try:
        _at(started, moment)
        assert child.poll() is None, "the solve ended before the signal"
        _signalled_ends(child, number, name, tmp_path)
    finally:
        _cleaned(child, tmp_path)


@pytest.mark.slow
def test_a_background_solve_ignores_sigint_and_ends_on_sigterm(tmp_path):
    """The issue's hang: started with SIGINT ignored, sent SIGINT while it solves (CP-SAT's own
    handler used to take SIGINT over and deadlock in it), it goes on solving; a SIGTERM then
    ends it within 2 s, with one line."""
    child, started = _solving(tmp_path, 30, _background)
    try:
        for moment in (0.5, 2.0, 4.0, 6.0):
            _at(started, moment)
            child.send_signal(signal.SIGINT)
        time.sleep(0.5)
        assert child.poll() is None, f"SIGINT was ignored at start, yet it ended: {child.returncode}"
        child.send_signal(signal.SIGTERM)
        status, err = _ended(child, ENDS_WITHIN, "SIGTERM")
        assert (status, err.strip().splitlines()) == (143, ["remat: terminated"]), err
    finally:
        child.kill()
        child.wait()


@pytest.mark.slow
def test_a_background_solve_sent_sigint_keeps_its_time_limit(tmp_path):
    """Started with SIGINT ignored and sent SIGINT during the solve: it ends by itself with its
    schedule, within its time limit's promise (remat.solver.deadline) and 2 s for the rest of the
    command (the simulator's check, the printing)."""
    limit = 5.0
    child, started = _solving(tmp_path, limit, _background)
    try:
        for moment in (1.0, 3.0, 4.5):
            _at(started, moment)
            child.send_signal(signal.SIGINT)
        promise = limit * (1 + MARGIN_FRACTION) + MARGIN_SECONDS + ENDS_WITHIN
        status, err = _ended(child, max(0.0, started + promise - time.monotonic()), f"its {limit:g} s time limit")
        assert status == 0 and err == "", err
    finally:
        child.kill()
        child.wait()


def _caught(number: int) -> bool:
    """Whether this process has a handler installed for signal ``number``, as the kernel sees it
    (Python's ``signal.getsignal`` only knows what Python itself installed)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (number - 1) & 1)
    pytest.skip("no /proc/self/status here")


@pytest.mark.slow
def test_an_ilp_solve_leaves_the_signals_as_it_found_them(tmp_path):
    """CP-SAT's own SIGINT handler is never installed: it used to be, for each search, and left
    SIGINT at SIG_DFL after it (a Ctrl-C then killed the process without a word)."""
    from remat.cli.parser import main

    small = ROOT / "examples" / "small_graph.json"
    assert _caught(signal.SIGINT), "Python's own SIGINT handler is not installed in this test process"
    assert main(["solve", str(small), "--budget", "80%", "--strategy", "ilp", "--time-limit", "5"]) == 0
    assert _caught(signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


_STOPS_AT_ONCE = """
import os, signal, threading
from remat.solver.deadline import interruptible

stopped, ended = threading.Event(), threading.Event()

def call():
    stopped.wait(60)
    ended.set()
    return "finished"

timer = threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGINT))
timer.start()
try:
    interruptible(call, stopped.set)
    print("no interrupt")
except KeyboardInterrupt:
    print("interrupted", stopped.is_set(), ended.wait(5))
print(interruptible(lambda: "answer", stopped.set))
"""


def test_a_signal_stops_a_native_call_at_once():
    """:func:`interruptible`: a Ctrl-C while the call blocks (here a wait that only ``stop`` ends,
    as CP-SAT's search ends only at StopSearch or its limit) reaches the main thread at once, stops
    the call and goes on as KeyboardInterrupt. In a child process of its own: a SIGINT sent to the
    test process itself could land in another test (or a gc callback) of this worker."""
    done = subprocess.run(
        [sys.executable, "-c", _STOPS_AT_ONCE],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        preexec_fn=_foreground,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["interrupted True True", "answer"], done.stdout


def test_a_cancelled_deadline_ends_every_share_of_it():
    """Deadline.cancel (the ilp solve's answer to a signal) ends the deadline and its shares."""
    deadline = Deadline(60.0)
    share = deadline.share(0.5)
    deadline.cancel()
    assert share.left() == 0.0 and deadline.left() == 0.0
    with pytest.raises(TimeUp):
        share.check("building")


@pytest.mark.slow
def test_a_front_of_solver_processes_ends_at_once_on_sigterm(tmp_path):
    """``remat pareto`` on a graph with two solver processes, each with a HiGHS child: a SIGTERM
    ends the command within 2 s, and none of its processes is left running (the pool used to wait
    for every solve in its queue, and the solves went on after the command had ended)."""
    command = ["pareto", str(ROOT / "examples" / "graph_unet.json"), "--strategies", "ilp", "--workers", "2"]
    child, started = _solving(tmp_path, 30, _foreground, command)
    try:
        _at(started, 4.0)
        assert child.poll() is None, "the front ended before the signal"
        _signalled_ends(child, signal.SIGTERM, "SIGTERM", tmp_path)
    finally:
        _cleaned(child, tmp_path)
