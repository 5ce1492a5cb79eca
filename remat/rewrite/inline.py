"""The user's own activation checkpointing, inlined: remat decides what to recompute.

NOTE [The user's checkpoint regions]
A model on which the user called Hugging Face's ``gradient_checkpointing_enable()``, or whose
forward wraps blocks in ``torch.utils.checkpoint.checkpoint``, traces (TorchDynamo) into
``tag_activation_checkpoint(body, *args)`` nodes, one per region, ``body`` the region's graph.
Left in a cut stage, each runs eagerly as ``torch.utils.checkpoint`` with
``preserve_rng_state=False`` (torch/_higher_order_ops/wrap.py: under torch.compile inductor
replays the RNG, eagerly nothing does), so a region with dropout draws new masks when it
recomputes in the backward: the proof refused the cut. Without dropout the region saves only
its inputs, so no stage seemed to save the block boundary and the fuse pass
(:mod:`remat.trace.fuse`) made one stage of every checkpointed block.

:func:`inline_checkpoints` replaces each such node by the nodes of its body, in place: the body's
placeholders become the node's arguments, its outputs the node's items. Why this is the same
function: checkpointing changes what a step keeps, never what it computes. ``torch.utils.checkpoint``
runs the body's forward once, then recomputes it in the backward from the same inputs with the
RNG state put back (``preserve_rng_state=True``, its default, which both spellings above use), so
the values and gradients are those of the body run once without it, which is what the inlined
nodes are (the same nodes, in the same order, with their module paths and source lines). The
region then is plain stage code: remat saves or recomputes it as its schedule says, which makes
the user's region redundant. The proof (:func:`remat.trace.proof.prove_cut`) still compares the
cut against the user's model as it is, with its checkpointing on: a region the user runs with
``preserve_rng_state=False`` and random ops recomputes other numbers than its forward drew, and the
proof refuses it, naming the user's checkpointing (:data:`INLINED` marks the inlined nodes).
"""

from __future__ import annotations

import operator

import torch.fx as fx

_CHECKPOINT_NAME = "tag_activation_checkpoint"
INLINED = "remat_user_checkpoint"
"""The meta key marking a node inlined from one of the user's checkpoint regions (the proof names them)."""


def _is_checkpoint(node: fx.Node) -> bool:
    return node.op == "call_function" and getattr(node.target, "_name", None) == _CHECKPOINT_NAME


def _inline_one(gm: fx.GraphModule, node: fx.Node) -> bool:
    """Replace one checkpoint node of ``gm`` by its body's nodes; False (nothing changed) when a
    user of it is not an item of its output tuple."""
    if not all(u.op == "call_function" and u.target is operator.getitem for u in node.users):
        return False
    body_node = node.args[0]
    body = getattr(gm, body_node.target)
    env: dict[fx.Node, fx.Node] = {}
    placeholders = [n for n in body.graph.nodes if n.op == "placeholder"]
    for placeholder, arg in zip(placeholders, node.args[1:], strict=True):
        env[placeholder] = arg
    out: tuple = ()
    with gm.graph.inserting_before(node):
        for inner in body.graph.nodes:
            if inner.op == "placeholder":
                continue
            if inner.op == "output":
                out = tuple(inner.args[0]) if isinstance(inner.args[0], (tuple, list)) else (inner.args[0],)
                continue
            if inner.op == "get_attr":  # a nested region's body (or a constant): moved up to gm
                name = f"{body_node.target}_{inner.target}".replace(".", "_")
                setattr(gm, name, getattr(body, inner.target))
                env[inner] = gm.graph.get_attr(name)
                env[inner].meta = dict(inner.meta)
                continue
            env[inner] = gm.graph.node_copy(inner, lambda n: env[n])
            env[inner].meta[INLINED] = True
    for user in list(node.users):
        item = out[user.args[1]]
        user.replace_all_uses_with(env[item] if isinstance(item, fx.Node) else item)
        gm.graph.erase_node(user)
    gm.graph.erase_node(node)
    if not body_node.users:
        gm.graph.erase_node(body_node)
        delattr(gm, body_node.target)
    return True


def inline_checkpoints(gm: fx.GraphModule) -> int:
    """Inline every ``tag_activation_checkpoint`` region of ``gm`` (in place, nested ones too;
    NOTE [The user's checkpoint regions]); the number of regions inlined."""
    count = 0
    while True:
        done = [node for node in list(gm.graph.nodes) if _is_checkpoint(node) and _inline_one(gm, node)]
        count += len(done)
        if not done:
            break
    if count:
        gm.graph.lint()
        gm.recompile()
    return count


__all__ = ["INLINED", "inline_checkpoints"]
