"""A stage that runs any number of times: it never changes a side value or its input in place.

Side values (masks, position tables, T5's ``relative_buckets``) are computed once per call
(:meth:`remat.trace.stages.CutChain.bind`) and handed to every stage that reads them. A stage that
changes one in place (T5's relative-position bucketing does ``relative_buckets += ...``) computes
the right thing the first time only: its recompute, and the profiler's second run, would start
from the changed value (T5: buckets 0..16 became 0..27, and ``F.embedding`` failed). The model
itself never sees this, because it computes the value afresh each call. The same holds for a
stage's input ``x`` (the chain input a_0 that the model changes in place; a hand-off value is never
changed later, :mod:`remat.trace.positions` does not cut there) and for a view of either: an
in-place op on ``x.flatten(1)`` changes ``x``.

:func:`copy_mutated_sides` gives such a stage its own copy: the placeholder is cloned at the
stage's entry and the stage's nodes (views of it included) read the copy. The copy is allocated
inside the stage, so the allocator-measured profile counts it, and it computes, bit for bit, what
the model computes there (the model's value was equally fresh).

A copy is exact only while no other stage reads the value the change made. :func:`shared_change`
finds the case where it is not: stage ``k`` changes a side value in place and a later stage
reads it afterwards (the model hands a value from stage to stage through the change). No copy
can make that stage repeatable (its recompute would change the value a second time, or the
later stage would miss the change), so the proof refuses it in one line naming both stages and
the op. The proof (:mod:`remat.trace.proof`) then runs every stage at least twice and checks
that no side value and no input changed.
"""

from __future__ import annotations

import torch.fx as fx

from remat.rewrite.nodes import aliases, mutates, node_name
from remat.trace.positions import Plan
from remat.trace.stage_errors import source_line


def changes(node: fx.Node) -> list[fx.Node]:
    """The in-place ops that change ``node``'s storage: on ``node`` itself or on a view of it."""
    return [u for alias in aliases(node) for u in alias.users if mutates(u) and u.args and u.args[0] is alias]


def _mutated_inputs(graph: fx.Graph) -> list[fx.Node]:
    return [n for n in graph.nodes if n.op == "placeholder" and changes(n)]


def copy_mutated_sides(gm: fx.GraphModule) -> fx.GraphModule:
    """``gm`` with each placeholder (side value or input) that it changes in place, directly or
    through a view, cloned at entry (rewritten in place); ``gm`` unchanged when it changes none."""
    mutated = _mutated_inputs(gm.graph)
    if not mutated:
        return gm
    for placeholder in mutated:
        anchor = [n for n in gm.graph.nodes if n.op == "placeholder"][-1]  # after every placeholder
        with gm.graph.inserting_after(anchor):
            copy = gm.graph.call_method("clone", (placeholder,))
        placeholder.replace_all_uses_with(copy, delete_user_cb=lambda user, copy=copy: user is not copy)
    gm.graph.lint()
    gm.recompile()
    return gm


def describe_op(node: fx.Node) -> str:
    """``iadd at modeling_t5.py:398``: the op's name and the user's source line (or, when Dynamo
    recorded none, the node's name in the traced graph)."""
    line = source_line(node)
    return f"{node_name(node)} at {line}" if line else f"{node_name(node)} (node {node.name})"


def shared_change(plan_: Plan) -> tuple[str, str, str, str] | None:
    """(stage that changes, side value, op, later stage that reads the changed value) for the first
    side value that one stage changes in place and another reads afterwards, or None."""
    stage_of = {n: k for k, nodes in enumerate(plan_.stages) for n in nodes}
    order = {n: i for i, n in enumerate(plan_.gm.graph.nodes)}
    # parameters and buffers are not copied: the replay restores buffers for a recompute, and a
    # buffer's change (BatchNorm's counter) is the model's state, seen by every stage alike
    weights = {n for n, s in plan_.sources.items() if s.kind in ("param", "buffer")}
    sides = [n for n in plan_.gm.graph.nodes if n not in stage_of and n not in weights and n.op != "output"]
    for side in sides:
        group = aliases(side)
        for op in changes(side):
            k = stage_of.get(op)
            if k is None:
                continue
            readers = [u for alias in group for u in alias.users if u in stage_of and stage_of[u] != k]
            later = [u for u in readers if order[u] > order[op]]
            if later:
                j = stage_of[min(later, key=order.__getitem__)]
                return plan_.names[k], side.name, describe_op(op), plan_.names[j]
    return None


__all__ = ["aliases", "changes", "copy_mutated_sides", "describe_op", "shared_change"]
