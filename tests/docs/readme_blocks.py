"""The README's fenced blocks, as the docs tests read them: code (```bash, ```python) and the
output blocks that show what the code printed.

NOTE [README output blocks]: a block with no language tag is an output block; it shows what the
code block right before it printed (for a ```bash block, the stdout of its last ``remat``
command). The tests run the code found in the README (never a copy of it), so that whatever the
README says is what is checked, and compare what it prints with the output block:

* exactly, for a command that reads only the bundled files (``remat solve
  examples/resnet_like.json ...``): its every number, times included, comes from the profile's
  JSON and the simulator, so it is the same on every machine;
* by shape, for code that measures a model on the machine it runs on (``--model``, a python
  block): sizes and times differ from machine to machine (and times from run to run), so every
  number with its unit matches any number with a unit, and column padding any run of spaces;
  every word, row and column is compared as written.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import shlex

from tests.conftest import ROOT

FENCE = re.compile(r"^```([\w-]*)\n(.*?)^```$", re.S | re.M)
_NUMBER_SHAPE = r"[+-]?\d+(?:\.\d+)?(?: (?:B|KiB|MiB|GiB|TiB)\b)?"
_NUMBER = re.compile(_NUMBER_SHAPE)


@dataclasses.dataclass(frozen=True)
class Block:
    """One fenced block of README.md: its language tag ('' for an output block), its text and the
    line its fence opens on (1-based)."""

    lang: str
    text: str
    line: int

    @property
    def where(self) -> str:
        return f"README.md:{self.line}"


@functools.cache
def blocks() -> tuple[Block, ...]:
    """Every fenced block of README.md, in order (read once per test session)."""
    text = (ROOT / "README.md").read_text()
    return tuple(Block(m[1], m[2], text.count("\n", 0, m.start()) + 1) for m in FENCE.finditer(text))


def output_of(block: Block) -> Block | None:
    """The output block that shows what ``block`` printed (NOTE [README output blocks]), if any."""
    found = blocks()
    index = found.index(block)
    after = found[index + 1] if index + 1 < len(found) else None
    return after if after is not None and after.lang == "" else None


def python_blocks() -> list[Block]:
    return [b for b in blocks() if b.lang == "python"]


def remat_commands(block: Block) -> list[list[str]]:
    """The ``remat ...`` commands of a ```bash block, in order, as argument lists without the
    leading ``remat`` (lines split at ``&&``; comments and other programs, pip and pytest, left out)."""
    commands = []
    for line in block.text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        for part in line.split("&&"):
            words = shlex.split(part.strip())
            if words[:1] == ["remat"]:
                commands.append(words[1:])
    return commands


def exact_lines(shown: str) -> list[str]:
    return shown.rstrip("\n").splitlines()


def shape_pattern(line: str) -> re.Pattern[str]:
    """A regex that ``line``'s shape matches: numbers (with their unit) any number, runs of two or
    more spaces (column padding) any run of spaces, everything else as written."""
    pieces = []
    for chunk in re.split(r"( {2,})", line):
        if chunk.startswith("  ") and chunk.strip() == "":
            pieces.append(" +")
            continue
        at = 0
        for m in _NUMBER.finditer(chunk):
            pieces.append(re.escape(chunk[at : m.start()]) + _NUMBER_SHAPE)
            at = m.end()
        pieces.append(re.escape(chunk[at:]))
    return re.compile("".join(pieces) + r"\Z")


def shape_mismatches(shown: str, printed: str) -> list[str]:
    """Lines of ``printed`` whose shape differs from the README's ``shown`` (empty: they agree)."""
    want, got = exact_lines(shown), exact_lines(printed)
    if len(want) != len(got):
        return [f"{len(got)} lines printed, {len(want)} shown:\n" + printed]
    return [
        f"shown:   {w}\nprinted: {g}" for w, g in zip(want, got, strict=True) if not shape_pattern(w).match(g.rstrip())
    ]
