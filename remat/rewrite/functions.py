"""Custom ``torch.autograd.Function``s in a traced step, run so that what they save is seen.

NOTE [What a custom autograd.Function saves]
TorchDynamo traces ``MyFunction.apply(x)`` as the higher-order op ``autograd_function_apply(fwd,
bwd, x, ...)``: ``fwd`` is the user's ``forward`` as a graph that returns ``(outputs, saved)``,
``bwd`` the user's ``backward`` as a graph of ``(*output grads, *saved)``. Run eagerly (a cut
stage is a graph module run eagerly), the op makes a fresh ``autograd.Function`` class per call
that keeps ``saved`` in a closure (torch/_functorch/autograd_function.py), not in autograd's saved
tensors. So ``torch.autograd.graph.saved_tensors_hooks`` never sees them: the fuse pass
(:mod:`remat.trace.fuse`) found no stage saving its input where a block began with a Swish
Function, and fused all six blocks of the issue's net into one stage (least memory 5.28 MiB
against per-block checkpointing's 3.17); the proof's offload (:mod:`remat.measure.offload`) and
the profile's pack hook missed them too.

:func:`saving_functions` rewrites each such node of the traced graph to :func:`apply_saving`,
which runs the same two graphs through one module-level Function that keeps ``saved`` where
eager PyTorch keeps a custom Function's saved tensors: what the user's ``forward`` passed to
``ctx.save_for_backward`` (the op's ``saved_for_backward_idx``) through ``ctx.save_for_backward``,
with its version-counter check, as the user's Function runs without remat; a tensor the user kept
on ``ctx`` as an attribute (``ctx.mask = mask``) through ``ctx.save_for_backward`` of an alias of
its storage with a version counter of its own (eager checks no version there either), so the hooks
see that one too; anything else (not a plain strided tensor) on ``ctx``, as eager keeps it. An
item of the op's output tuple is no view (:data:`remat.rewrite.nodes.FRESH_TUPLES`), so a cut may fall
right after the Function, where the block ends.

Why this is the same function: the forward and backward are the traced graphs themselves, run on
the same arguments in the same order (the op's ``Interpreter`` runs the same nodes); the outputs'
dirty and non-differentiable marks are set as the op sets them; the backward receives the same
tensors (an alias reads the same storage, offset, sizes and strides). Only where the saved tensors
are kept changes, and the proof (:func:`remat.trace.proof.prove_cut`) compares the cut against the
user's model, with its own Function, as always.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx

_HOP_NAME = "autograd_function_apply"


def _alias(t: torch.Tensor) -> torch.Tensor:
    """A tensor on ``t``'s storage, offset, sizes and strides with a version counter of its own
    (saving it checks no version, as a tensor kept on ``ctx`` is not checked)."""
    alias = torch.empty((0,), dtype=t.dtype, device=t.device)
    with torch.no_grad():
        alias.set_(t.untyped_storage(), t.storage_offset(), t.size(), t.stride())
    return alias


def _plain(t: Any) -> bool:
    return type(t) is torch.Tensor and t.layout == torch.strided


def _selected(output: Any, idx: list[int]) -> list[Any]:
    if isinstance(output, (tuple, list)):
        return [x for i, x in enumerate(output) if i in set(idx)]
    return [output] if 0 in idx else []


class _SavingFunction(torch.autograd.Function):
    """``autograd_function_apply`` with its saved values in autograd's saved tensors (NOTE [What a
    custom autograd.Function saves])."""

    @staticmethod
    def forward(ctx: Any, fwd: fx.GraphModule, bwd: fx.GraphModule, options: dict, *args: Any) -> Any:  # type: ignore[override]
        output, saved = fwd(*args)
        checked = set(options.get("saved_for_backward_idx", ()))
        to_save: list[torch.Tensor] = []
        slots: list[tuple[str, Any]] = []  # per saved value: ("saved", index) or ("kept", the value)
        for k, value in enumerate(saved):
            if isinstance(value, torch.Tensor) and (k in checked or _plain(value)):
                slots.append(("saved", len(to_save)))
                to_save.append(value if k in checked else _alias(value))
            else:
                slots.append(("kept", value))
        ctx.save_for_backward(*to_save)
        ctx.slots = slots
        ctx.bwd = bwd
        if options.get("dirty_idx"):
            ctx.mark_dirty(*_selected(output, options["dirty_idx"]))
        if options.get("non_differentiable_idx"):
            ctx.mark_non_differentiable(*_selected(output, options["non_differentiable_idx"]))
        return output

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        tensors = ctx.saved_tensors
        saved = [tensors[value] if kind == "saved" else value for kind, value in ctx.slots]
        result = ctx.bwd(*grads, *saved)
        result = tuple(result) if isinstance(result, (tuple, list)) else (result,)
        return (None, None, None, *result)


def apply_saving(fwd: fx.GraphModule, bwd: fx.GraphModule, *args: Any, **options: Any) -> Any:
    """What ``torch.ops.higher_order.autograd_function_apply(fwd, bwd, *args, **options)``
    computes, with its saved values where autograd keeps saved tensors (NOTE [What a custom
    autograd.Function saves])."""
    return _SavingFunction.apply(fwd, bwd, options, *args)


def saving_functions(gm: fx.GraphModule) -> int:
    """Rewrite every ``autograd_function_apply`` node of ``gm`` (in place) to :func:`apply_saving`;
    the number rewritten."""
    nodes = [n for n in gm.graph.nodes if n.op == "call_function" and getattr(n.target, "_name", None) == _HOP_NAME]
    for node in nodes:
        node.target = apply_saving
    if nodes:
        gm.recompile()
    return len(nodes)


__all__ = ["apply_saving", "saving_functions"]
