"""NOTE [Grad mode inside a stage]: a stage runs in the grad mode the replay sets.

A traced step keeps the model's grad-mode regions as calls: Hugging Face's rotary embedding runs
under ``torch.no_grad()``, which TorchDynamo records as ``torch._C._set_grad_enabled(False)`` ...
``torch._C._set_grad_enabled(True)``. The ``(True)`` is the mode the model saw while it was traced
(a training step, grad on). The replay runs the same stage under ``no_grad`` for its checkpoint
and non-recording forwards (``F_ck``, ``F_n``, docs/model.md): there the ``(True)`` would turn
grad back on, the stage would record a graph, and its output would hold saved tensors the profile
never counted (tiny Llama at its least budget: +70% over the prediction, measured by the allocator).

The rule, applied to every stage body as an fx rewrite: **a stage may lower the grad mode, never
raise it above the mode it was entered in, and it leaves the mode as it found it.** Each
``_set_grad_enabled(m)`` becomes ``_set_grad_enabled(m and entry)``, ``entry`` being
``torch.is_grad_enabled()`` read when the stage starts. Under a recording forward (``entry`` on)
this is the model's own sequence of calls, so the stage computes what the model computes; under
``no_grad`` every region stays off. Since a cut never falls inside an open region
(:mod:`remat.trace.positions`), each region closes inside its stage, and its closing call now
restores ``entry``. ``torch.enable_grad()`` regions are the same calls with ``True`` first.
"""

from __future__ import annotations

import torch
import torch.fx as fx

from remat.trace.nodes import node_name

GRAD_MODE_SETTERS = ("_set_grad_enabled", "set_grad_enabled")


def set_grad_enabled_within(mode: bool, entry: bool) -> None:
    """Set the grad mode to ``mode``, but never above ``entry`` (the mode the stage was entered in)."""
    torch._C._set_grad_enabled(bool(mode) and entry)


def _setters(graph: fx.Graph) -> list[fx.Node]:
    return [n for n in graph.nodes if n.op == "call_function" and node_name(n) in GRAD_MODE_SETTERS and n.args]


def within_entry_grad_mode(gm: fx.GraphModule) -> fx.GraphModule:
    """``gm`` with every grad-mode setter bounded by the mode at entry (NOTE [Grad mode inside a
    stage]); ``gm`` itself, unchanged, when it sets no grad mode. Rewrites ``gm`` in place."""
    setters = _setters(gm.graph)
    if not setters:
        return gm
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    anchor = placeholders[-1] if placeholders else None
    if anchor is None:
        with gm.graph.inserting_before(next(iter(gm.graph.nodes))):
            entry = gm.graph.call_function(torch.is_grad_enabled)
    else:
        with gm.graph.inserting_after(anchor):
            entry = gm.graph.call_function(torch.is_grad_enabled)
    for node in setters:
        with gm.graph.inserting_after(node):
            bounded = gm.graph.call_function(set_grad_enabled_within, (node.args[0], entry))
        node.replace_all_uses_with(bounded)
        gm.graph.erase_node(node)
    gm.graph.lint()
    gm.recompile()
    return gm


__all__ = ["GRAD_MODE_SETTERS", "set_grad_enabled_within", "within_entry_grad_mode"]
