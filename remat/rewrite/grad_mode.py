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
restores ``entry``. ``torch.enable_grad()`` regions are the same calls with ``True`` first, and the
``torch.set_grad_enabled(m)`` spelling (a call or a ``with``) traces to the same setter; both
are bounded alike.

Why this is exact. Write ``e`` for the entry mode and ``m_1 .. m_k`` for the model's setters in
order. Under ``e = True`` the rewritten setters set ``m_i and True = m_i``: the model's own
sequence, so every op runs in the mode it ran in while traced, and the recording forward
(``F_all``, each option) records what the model records. Under ``e = False`` every setter sets
``False``: nothing records, which is what ``F_ck``/``F_n`` promise (docs/model.md: their output
has no graph and holds nothing but itself); an op's value does not depend on the grad mode, so
the stage still computes what the model computes. Nothing else changes.

"Leaves it as it found it": the stage's last node before its output sets ``entry`` again. A region
closes inside its stage, so that restore is a no-op for a well-formed stage; it makes the stage's
exit mode ``entry`` whatever the traced sequence was. (An exception raised between two setters
leaves the mode where the body stopped, as the model's own ``no_grad`` would not; the proof runs
every stage under :func:`remat.trace.stage_errors.running_stage`, which puts the mode back.)
"""

from __future__ import annotations

import torch
import torch.fx as fx

from remat.rewrite.nodes import node_name

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
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    with gm.graph.inserting_before(output):  # leave the mode as it was found (see the NOTE)
        gm.graph.call_function(set_grad_enabled_within, (True, entry))
    gm.graph.lint()
    gm.recompile()
    return gm


__all__ = ["GRAD_MODE_SETTERS", "set_grad_enabled_within", "within_entry_grad_mode"]
