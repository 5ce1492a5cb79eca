"""A stage's backward that lets autograd free the stage's output and its gradient as it goes.

NOTE [Early release at a stage's backward]: ``torch.autograd.backward(out, g_out)`` keeps ``out``
and ``g_out`` alive until it returns: the caller's frame holds them, and so does autograd's
``GraphRoot``, which keeps the gradients it was handed for the whole backward. Plain autograd,
and per-block ``torch.utils.checkpoint``, free a block's output gradient once the block's last
op has consumed it, and its output once nothing saved it. On DenseNet-121 and ViT-B/16 the
difference (one output and one gradient held through the heaviest backward of the step) was what
put remat's least memory above per-block checkpointing's (docs/models.md).

So the backward starts from a one-element *seed*: :class:`_Seed` takes the outputs as inputs,
holds the output gradients in a list that nothing else refers to, and hands them over (and drops
them) when autograd calls its backward. The caller passes its only references in ``pending`` and
this module pops them, so once the seed's backward has run, the engine's input buffers hold the
gradients until the stage's ops consume them, and the outputs live only where the stage's
ops saved them. The seed costs one element and its gradient of one element (autograd's ``1.0``).

The chain model counts what this frees in the stage's ``backward_overhead``, which the profiler
measures the same way (:func:`remat.profile.stage.record_and_backward_memory`): the backward's
peak above what ``B i`` starts with plus ``g_i``, negative when the release comes before the peak
(docs/model.md, "Chains").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from remat.trace.boundary import Boundary, tensors


class _Seed(torch.autograd.Function):
    """One element whose gradient is the stage's output gradients, handed over once (and the
    running sums of shared parameters, the first gradients to reach their AccumulateGrad)."""

    @staticmethod
    def forward(ctx: Any, grads: list, *tensors: torch.Tensor) -> torch.Tensor:
        ctx.grads = grads  # the only reference besides the caller's, which it drops
        return torch.zeros((), dtype=tensors[0].dtype, device=tensors[0].device)

    @staticmethod
    def backward(ctx: Any, _: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        grads = ctx.grads.pop()
        ctx.grads = None
        return (None, *grads)


def released_backward(
    pending: list[tuple[Boundary, Any]],
    inputs: Sequence[torch.Tensor] | None = None,
    release: bool = True,
    inject: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
) -> None:
    """``torch.autograd.backward`` of ``(out, grad) = pending.pop()`` (shaped alike; the tensors
    of ``out`` that require grad and have a gradient), keeping no reference to either: each is
    freed when autograd no longer needs it (NOTE [Early release at a stage's backward]). The
    caller must hold no other reference for the release to happen. ``release=False``: the plain
    backward, holding both to its end (a chain's last stage: its caller holds the output).

    ``inject``: ``(param, running sum)`` pairs, popped (the list is left empty when the backward
    runs): each sum is handed to ``param``'s AccumulateGrad by the seed, before any op of the stage
    adds to it (NOTE [Shared parameters under gradient accumulation], remat.runtime.core)."""
    out, grad = pending.pop()
    pairs = [(o, g) for o, g in zip(tensors(out), tensors(grad), strict=True) if o.requires_grad and g is not None]
    if not pairs:
        return
    if not release and not inject:
        outs, grads = zip(*pairs, strict=True)
        torch.autograd.backward(list(outs), list(grads), inputs=None if inputs is None else list(inputs))
        return
    del out, grad
    params, sums = [p for p, _ in inject or ()], [s for _, s in inject or ()]
    if inject:
        inject.clear()
    held = [(*(g for _, g in pairs), *sums)]
    outs = [o for o, _ in pairs]
    del pairs, sums
    with torch.enable_grad():
        seed = _Seed.apply(held, *outs, *params)
    del outs, held
    torch.autograd.backward(seed, inputs=None if inputs is None else list(inputs))


__all__ = ["released_backward"]
