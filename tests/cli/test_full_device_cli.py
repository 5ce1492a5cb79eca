"""Every output flag of every command pointed at ``/dev/full`` (issue 43): the failed write is one
line on stderr and exit status 2, never "wrote" and exit 0 (NOTE [A write is done only once it is
checked] and NOTE [Special files are written in place], remat/schedules/files.py).

The commands run in this process (``remat.cli.parser.main``): the torch ones (profile, plan,
execute) on the small zoo CNN with one thread. :data:`OUTPUTS` names each output flag's command
line; a test reads the parser so that a new output flag without a row here fails.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import threading
from pathlib import Path

import pytest

from remat.cli.args import output_file, plot_file
from remat.cli.parser import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
FULL = "/dev/full"
CNN = ["--model", "remat.zoo.small:cnn", "--input-shape", "4,3,16,16"]

# (command, output flag, the command line before the flag; {chain}/{schedule}: the fixture's files)
OUTPUTS = [
    ("solve", "-o", ["solve", str(EXAMPLES / "resnet_like.json")]),
    ("simulate", "--plot", ["simulate", str(EXAMPLES / "resnet_like.json"), "{resnet_schedule}"]),
    ("pareto", "--plot", ["pareto", str(EXAMPLES / "resnet_like.json"), "--points", "4"]),
    ("pareto", "--csv", ["pareto", str(EXAMPLES / "resnet_like.json"), "--points", "4"]),
    ("pareto", "--json", ["pareto", str(EXAMPLES / "resnet_like.json"), "--points", "4"]),
    ("profile", "-o", ["profile", *CNN, "--threads", "1", "--repeats", "1"]),
    ("plan", "-o", ["plan", *CNN, "--memory", "20MB", "--max-size", "8"]),
    ("plan", "--save-profile", ["plan", *CNN, "--memory", "20MB", "--max-size", "8"]),
    ("plan", "--plot", ["plan", *CNN, "--memory", "20MB", "--max-size", "8"]),
    ("execute", "--json", ["execute", *CNN, "--threads", "1", "--schedule", "{cnn_schedule}", "--steps", "1"]),
    ("execute", "--plot", ["execute", *CNN, "--threads", "1", "--schedule", "{cnn_schedule}", "--steps", "1"]),
]
# Those that run a model (torch) or draw (matplotlib's import): over a second each.
SLOW = {"profile", "plan", "execute", ("pareto", "--plot"), ("simulate", "--plot")}


@pytest.fixture(autouse=True)
def _dev_full_stays_a_device():
    """A regression would rename a regular file over /dev/full (as root: the device gone for every
    program of the machine); put it back at once and fail."""
    if not os.path.exists(FULL) or not stat.S_ISCHR(os.stat(FULL).st_mode):
        pytest.skip("no /dev/full character device here")
    yield
    if not stat.S_ISCHR(os.stat(FULL).st_mode):
        aside = f"{FULL}.restored"
        os.mknod(aside, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
        os.chmod(aside, 0o666)
        os.replace(aside, FULL)
        pytest.fail("/dev/full was replaced by a regular file (restored)")


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    """A store-all schedule of the bundled ResNet-like chain, and one of the small CNN (its chain
    profiled here) for ``remat execute``."""
    folder = tmp_path_factory.mktemp("full-device")
    resnet_schedule = folder / "resnet_schedule.json"
    assert main(["solve", str(EXAMPLES / "resnet_like.json"), "-o", str(resnet_schedule)]) == 0
    found = {"resnet_schedule": str(resnet_schedule)}
    return found


@pytest.fixture(scope="module")
def cnn_files(files, tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("full-device-cnn")
    chain, schedule = folder / "cnn.json", folder / "cnn_schedule.json"
    assert main(["profile", *CNN, "--threads", "1", "--repeats", "1", "-o", str(chain)]) == 0
    assert main(["solve", str(chain), "-o", str(schedule)]) == 0
    return {**files, "cnn_schedule": str(schedule)}


def _argv(prefix: list[str], flag: str, paths: dict[str, str]) -> list[str]:
    return [part.format(**paths) for part in prefix] + [flag, FULL]


def _refused(argv: list[str], capsys) -> None:
    """``argv`` exits 2 with one line naming /dev/full on stderr, and prints no "wrote"."""
    capsys.readouterr()
    status = main(argv)
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert status == 2, (argv, status, out, err)
    assert len(lines) == 1 and lines[0].startswith("remat: error: ") and FULL in lines[0], err
    assert "wrote" not in out and "Traceback" not in err, (out, err)


@pytest.mark.parametrize(
    ("command", "flag", "prefix"),
    [pytest.param(*row, marks=[pytest.mark.slow] if {row[0], row[:2]} & SLOW else []) for row in OUTPUTS],
    ids=[f"{command} {flag}" for command, flag, _ in OUTPUTS],
)
def test_an_output_that_cannot_be_written_is_one_line_and_exit_2(command, flag, prefix, request, capsys):
    needs = "".join(prefix)
    paths = request.getfixturevalue("cnn_files" if "{cnn_" in needs else "files")
    _refused(_argv(prefix, flag, paths), capsys)


def test_every_output_flag_of_every_command_is_tried():
    """The table above holds every option of every command whose value is a file to write."""
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    found = {
        (name, action.option_strings[0])
        for name, sub in commands.items()
        for action in sub._actions
        if action.type in (output_file, plot_file)
    }
    assert found == {(command, flag) for command, flag, _ in OUTPUTS}


def test_a_failed_standard_output_is_one_line_and_exit_2(monkeypatch, capsys):
    """``remat strategies > /dev/full``: stdout's failed write is reported, not lost (it used to be
    an "internal error", exit 1)."""
    with open(FULL, "w") as full:
        monkeypatch.setattr(sys, "stdout", full)
        status = main(["strategies"])
    monkeypatch.undo()
    err = capsys.readouterr().err
    assert status == 2 and err.strip().splitlines() == [
        "remat: error: cannot write the standard output (no space left on the device)"
    ], err


def test_a_special_file_is_written_in_place(tmp_path, capsys):
    """``-o FIFO`` (like ``-o /dev/null`` or ``-o /dev/stdout`` on a pipe) writes into the file
    itself: it used to be replaced by a regular file renamed over it (as root, /dev/null too). A
    FIFO of this test's own, read by a thread, stands for the shared devices."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []

    def read() -> None:
        with open(fifo, "rb") as stream:
            received.append(stream.read())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert main(["solve", str(EXAMPLES / "resnet_like.json"), "-o", str(fifo)]) == 0
    finally:
        if reader.is_alive() and not received:  # a failed run never opened it: let the reader end
            with open(fifo, "wb"):
                pass
        reader.join(10)
    assert f"wrote {fifo}" in capsys.readouterr().out
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert json.loads(received[0])["strategy"] == "optimal"  # the default strategy of a chain
