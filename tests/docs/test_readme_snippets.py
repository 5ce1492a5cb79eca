"""Every python block of the README runs as written, top to bottom in one namespace as a reader
runs them (the ``remat.compile`` block uses "the GPT-2 above"), does what the README says of it,
and prints what the output block after it shows (NOTE [README output blocks] in
tests/docs/readme_blocks.py: by shape, since sizes and times are this machine's). The blocks are
read from the README, never copied here.

Each block's checks run right after it, before the next block runs: a later block may change the
objects an earlier one made (the compile block trains the GPT-2 of the block before it)."""

from __future__ import annotations

import contextlib
import io
import math
import os
from collections.abc import Callable

import pytest
import torch

from remat.solver.chain.store_all import store_all_peak
from tests.docs.readme_blocks import Block, output_of, python_blocks, shape_mismatches

# which block is which: a block is found by the call it shows (a README that reorders or rewords
# its blocks is still checked; one that adds a block must add a check here)
KINDS: dict[str, Callable[[str], bool]] = {
    "hand-built": lambda text: "profile_chain(" in text and "RematChain(" in text,
    "hugging face": lambda text: "remat.checkpoint(" in text,
    "trainer": lambda text: "Trainer(" in text,
    "compile": lambda text: "remat.compile(" in text,
}


def kind_of(block: Block) -> str:
    kinds = [name for name, found in KINDS.items() if found(block.text)]
    assert len(kinds) == 1, f"{block.where}: a python block the docs tests do not know ({kinds})"
    return kinds[0]


def block(kind: str) -> Block:
    return next(b for b in python_blocks() if kind_of(b) == kind)


def check_hand_built(ns: dict, printed: str) -> None:
    """issue 43: the loop failed on the Flatten, a stage whose output is a view of its input."""
    profile, schedule, model, wrapped = ns["profile"], ns["schedule"], ns["model"], ns["wrapped"]
    assert isinstance(model[-2], torch.nn.Flatten)
    names = [s.name for s in profile.stages]
    assert len(names) == len(model) - 1 and f"{len(model) - 3}-{len(model) - 2}" in names  # pool+flatten
    assert schedule.budget < store_all_peak(profile)
    forwards = [i for op, i, *_ in schedule.ops if op != "B"]
    assert len(forwards) > len(set(forwards))  # it recomputes
    assert torch.isfinite(ns["loss"])
    # the wrapper's gradients are the plain model's (the README's claim right after the loop)
    x, y = ns["loader"][0]
    grads = []
    for module in (model, wrapped):
        model.zero_grad()
        ns["crit"](module(x), y).backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*grads, strict=True))


def check_hugging_face(ns: dict, printed: str) -> None:
    assert "peak activation memory" in printed
    wrapped, loss = ns["wrapped"], ns["loss"]
    assert wrapped.schedule.budget < store_all_peak(wrapped.profile)  # it recomputes
    assert torch.isfinite(loss) and loss.requires_grad
    # the head and the loss are one stage (remat/trace/fuse.py: the logits are saved by neither)
    assert {"transformer.h.0", "transformer.h.3", "lm_head+loss"} <= {s.name for s in wrapped.profile.stages}
    assert all(p.grad is None or not p.grad.any() for p in ns["model"].parameters())  # zero_grad ran
    # 128 on the example's cut; 96 traced once, general in the length; 64 on that cut, untraced;
    # and the size (96/2 = 48) at which the general cut was proven by the replay of its schedule
    # (NOTE [Order of a new cut]: a proof runs the plan that will train, so that size has one)
    assert wrapped.retraces == 1 and sorted(p.cut.signature.shapes[0][1] for p in wrapped.plans) == [48, 64, 96, 128]
    plans = {plan.cut.signature.shapes[0][1]: plan for plan in wrapped.plans}
    assert plans[64].cut.chain is plans[96].cut.chain and plans[96].cut.chain.dynamic is not None


def check_trainer(ns: dict, printed: str) -> None:
    trainer = ns["trainer"]
    assert trainer.state.global_step == 2, trainer.state.global_step
    losses = [row["train_loss"] for row in trainer.state.log_history if "train_loss" in row]
    assert losses and all(math.isfinite(v) for v in losses), trainer.state.log_history


def check_compile(ns: dict, printed: str) -> None:
    compiled, out = ns["compiled"], ns["out"]
    assert torch.isfinite(out.loss)
    assert any(p.grad is not None and p.grad.any() for p in ns["model"].parameters())  # out.loss.backward() ran
    assert isinstance(compiled.predicted_peak, int) and 0 < compiled.predicted_peak <= 6 * 2**30


CHECKS: dict[str, Callable[[dict, str], None]] = {
    "hand-built": check_hand_built,
    "hugging face": check_hugging_face,
    "trainer": check_trainer,
    "compile": check_compile,
}


class ReadmeRun:
    """The README's python blocks run in order in one namespace, each once, as far as a test asks;
    each block's check runs right after it, its failure kept for the test that asks for it.

    A block that imports transformers, and every block after it (it may use its names), is
    skipped where transformers is not installed."""

    def __init__(self, workdir: str) -> None:
        self.workdir = workdir  # the blocks' files (the Trainer's output folder) go there
        self.namespace: dict = {"__name__": "__readme__"}
        self.printed: dict[int, str] = {}
        self.failed: dict[int, BaseException | None] = {}

    def upto(self, wanted: Block) -> str:
        """What ``wanted`` printed, once it and every block before it ran and passed its check."""
        for b in python_blocks():
            if b.line not in self.printed:
                if "transformers" in b.text:
                    pytest.importorskip("transformers")
                self.failed[b.line] = self._run(b)
            if self.failed[b.line] is not None:
                raise AssertionError(f"{b.where}: {self.failed[b.line]!r}") from self.failed[b.line]
            if b == wanted:
                return self.printed[b.line]
        raise AssertionError(f"{wanted.where}: not a python block of the README")

    def _run(self, b: Block) -> BaseException | None:
        printed = io.StringIO()
        # padded so that a traceback names the README's own line
        code = compile("\n" * (b.line) + b.text, "README.md", "exec")
        here = os.getcwd()
        try:
            os.chdir(self.workdir)
            with contextlib.redirect_stdout(printed):
                exec(code, self.namespace)  # noqa: S102 - the README's own code
            self.printed[b.line] = printed.getvalue()
            CHECKS[kind_of(b)](self.namespace, self.printed[b.line])
        except Exception as error:  # noqa: BLE001 - kept for every test that needs this block
            self.printed.setdefault(b.line, printed.getvalue())
            return error
        finally:
            os.chdir(here)
        return None


@pytest.fixture(scope="module")
def readme(tmp_path_factory: pytest.TempPathFactory) -> ReadmeRun:
    return ReadmeRun(str(tmp_path_factory.mktemp("readme")))


def test_every_python_block_of_the_readme_is_checked_here():
    assert [kind_of(b) for b in python_blocks()] == list(KINDS), [b.where for b in python_blocks()]
    assert set(CHECKS) == set(KINDS)


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(KINDS))
def test_a_readme_python_block_runs_does_what_it_says_and_prints_what_the_readme_shows(readme, kind):
    b = block(kind)
    printed = readme.upto(b)
    shown = output_of(b)
    if shown is not None:
        mismatches = shape_mismatches(shown.text, printed)
        assert not mismatches, f"{shown.where}:\n" + "\n".join(mismatches)
