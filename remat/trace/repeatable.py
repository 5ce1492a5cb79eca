"""A stage that runs any number of times: it never changes a side value it reads.

Side values (masks, position tables, T5's ``relative_buckets``) are computed once per call
(:meth:`remat.trace.stages.CutChain.bind`) and handed to every stage that reads them. A stage that
changes one in place (T5's relative-position bucketing does ``relative_buckets += ...``) computes
the right thing the first time only: its recompute, and the profiler's second run, would start
from the changed value (T5: buckets 0..16 became 0..27, and ``F.embedding`` failed). The model
itself never sees this, because it computes the value afresh each call.

:func:`copy_mutated_sides` gives such a stage its own copy: the side placeholder is cloned at the
stage's entry and the stage's nodes read the copy. The copy is allocated inside the stage, so the
allocator-measured profile counts it, and it computes, bit for bit, what the model computes there
(the model's value was equally fresh). The proof (:mod:`remat.trace.proof`) then runs every stage
twice and checks that no side value and no input changed.
"""

from __future__ import annotations

import torch.fx as fx

from remat.trace.nodes import mutates


def _mutated_sides(graph: fx.Graph) -> list[fx.Node]:
    sides = [n for n in graph.nodes if n.op == "placeholder" and n.name.startswith("side_")]
    changed = {n.args[0] for n in graph.nodes if mutates(n) and n.args and isinstance(n.args[0], fx.Node)}
    return [n for n in sides if n in changed]


def copy_mutated_sides(gm: fx.GraphModule) -> fx.GraphModule:
    """``gm`` with each side placeholder that it changes in place cloned at entry (rewritten in
    place); ``gm`` unchanged when it changes none."""
    mutated = _mutated_sides(gm.graph)
    if not mutated:
        return gm
    for side in mutated:
        with gm.graph.inserting_after(side):
            copy = gm.graph.call_method("clone", (side,))
        side.replace_all_uses_with(copy, delete_user_cb=lambda user, copy=copy: user is not copy)
    gm.graph.lint()
    gm.recompile()
    return gm


__all__ = ["copy_mutated_sides"]
