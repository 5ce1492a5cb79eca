"""The README's "Any model in one call" snippet (a Hugging Face GPT-2) runs exactly as written."""

from __future__ import annotations

import re

import pytest
import torch

from remat.solver.chain.store_all import store_all_peak
from tests.conftest import ROOT

SECTION = "### Any model in one call"


def snippet() -> str:
    text = (ROOT / "README.md").read_text()
    match = re.search(r"```python\n(.*?)```", text[text.index(SECTION) :], re.S)
    assert match, f"README.md: no python block after {SECTION!r}"
    return match[1]


@pytest.mark.slow
def test_the_readme_hugging_face_snippet_trains_under_its_budget(capsys):
    pytest.importorskip("transformers")
    namespace: dict = {}
    exec(compile(snippet(), "README.md", "exec"), namespace)  # noqa: S102 - the README's own code
    printed = capsys.readouterr().out
    assert "peak activation memory" in printed
    wrapped, loss = namespace["wrapped"], namespace["loss"]
    assert wrapped.schedule.budget < store_all_peak(wrapped.profile)  # it recomputes
    assert torch.isfinite(loss) and loss.requires_grad
    # the head and the loss are one stage (remat/executor/fuse.py: the logits are saved by neither)
    assert {"transformer.h.0", "transformer.h.3", "lm_head+loss"} <= {s.name for s in wrapped.profile.stages}
    assert all(p.grad is None or not p.grad.any() for p in namespace["model"].parameters())  # zero_grad ran
    # 128 on the example's cut; 96 traced once, general in the length; 64 on that cut, untraced;
    # and the size (96/2 = 48) at which the general cut was proven by the replay of its schedule
    # (NOTE [Order of a new cut]: a proof runs the plan that will train, so that size has one)
    assert wrapped.retraces == 1 and sorted(p.cut.signature.shapes[0][1] for p in wrapped.plans) == [48, 64, 96, 128]
    plans = {plan.cut.signature.shapes[0][1]: plan for plan in wrapped.plans}
    assert plans[64].cut.chain is plans[96].cut.chain and plans[96].cut.chain.dynamic is not None
