"""Fuse neighbouring stages whose boundary tensor neither of them saves (docs/executor.md#measurement).

The chain model (docs/model.md) keeps a stage's output a_{i+1} inside abar[i+1] until that stage's
backward ``B i``. Plain PyTorch frees a tensor as soon as nothing references it: when stage i's
backward does not need its own output and stage i+1's recording forward does not save its input,
a_{i+1} dies right after ``F i+1``. The chain would hold it to ``B i``, one extra tensor per such
boundary, so store-all would peak above the plain model's step. The classic case is a language
model's ``lm_head`` feeding a cross-entropy loss: ``log_softmax`` saves its output, not the logits;
on GPT-2 (vocabulary 50,257) the held logits were +9.7% of the step.

:func:`fuse_unsaved_handoffs` finds such boundaries with one recording pass through the chain,
stage by stage, under ``torch.autograd.graph.saved_tensors_hooks`` (which sees every tensor
autograd saves, by storage), and merges each such pair into one stage named ``first+second``:
a_{i+1} then becomes a transient of the fused stage's forward, which the allocator-measured
profile records (``forward_overhead``), exactly as plain PyTorch holds it. The model's function
does not change (the same nodes run in the same order); the fused chain is proven equal to the
model by :func:`remat.trace.proof.prove_cut` like any cut.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch.autograd.graph import saved_tensors_hooks

from remat.measure.memory import storage_key
from remat.trace.boundary import Boundary, can_have_grad, detached, each, storage_keys
from remat.trace.chain import Chain
from remat.trace.stage_errors import running_stage
from remat.trace.stages import CutChain


def _stage_saves(name: str, stage: Any, a: Boundary) -> tuple[bool, bool, Boundary]:
    """Run ``stage``'s recording forward from ``a``: whether it saves its input, whether it saves its
    output, and its output, detached (the stage's graph is gone when this returns).

    NOTE [The fuse pass holds one stage]
    The ``pack`` hook records each saved tensor's storage key and keeps nothing: a hook that
    returned the tensor would keep every saved activation alive as long as the graph, and one that
    saves the stage's own output (``tanh``, ``exp``, ``log_softmax``) would make a cycle autograd
    node -> saved output -> node that the garbage collector never frees (the whole chain's
    activations held after the first call). A key is a weak reference to the storage
    (:func:`~remat.measure.memory.storage_key`): it keeps the storage's identity from being reused
    while it is held, not its bytes, so keys taken inside the forward compare truly with the input
    and output keys taken while those are alive. The pass so peaks at one stage's forward."""
    seen: set = set()

    def pack(t: torch.Tensor) -> None:
        seen.add(storage_key(t))

    def unpack(_: None) -> torch.Tensor:
        raise RuntimeError("remat's fuse pass keeps no saved tensors; its graph is not for backward")

    leaf = each(lambda t: t.detach().requires_grad_(can_have_grad(t)), a)
    with running_stage(name, stage, leaf), torch.enable_grad(), saved_tensors_hooks(pack, unpack):
        out = stage(leaf)
    saves_input = bool(set(storage_keys(leaf)) & seen)
    saves_output = bool(set(storage_keys(out)) & seen)
    return saves_input, saves_output, detached(out)


def unsaved_handoffs(chain: Chain, x: torch.Tensor) -> list[int]:
    """Indices k of the stages whose output a_{k+1} is saved neither by stage k's nor by stage
    k+1's recording forward (the last stage's output, the step's result, is never one).

    Storages are told apart by :func:`~remat.measure.memory.storage_key` (views share one). One
    stage runs at a time and keeps nothing of its graph (NOTE [The fuse pass holds one stage]):
    a_{k+1} is unsaved iff stage k does not save its output and stage k+1 does not save its input
    (the same storages: the input is the output, detached). A tuple boundary is unsaved only if
    none of its tensors is saved on either side. The caller restores buffers and RNG."""
    saves_input: list[bool] = []
    saves_output: list[bool] = []
    a = detached(x)
    for name, stage in zip(chain.names, chain.stages, strict=True):
        takes, gives, a = _stage_saves(name, stage, a)
        saves_input.append(takes)
        saves_output.append(gives)
    return [k for k in range(len(chain.stages) - 1) if not saves_output[k] and not saves_input[k + 1]]


def fuse_unsaved_handoffs(chain: CutChain, args: tuple, kwargs: dict, target: Any = None) -> CutChain:
    """``chain`` with every pair of stages around an unsaved boundary (:func:`unsaved_handoffs`)
    made one stage, on the example call ``(args, kwargs, target)``; ``chain`` itself if there is none.

    Runs of such boundaries fuse into one stage (``a+b+c``). The caller saves and restores the
    model's state (buffers, RNG) around this call, and proves the result."""
    if len(chain) < 2:
        return chain
    plan = chain.plan
    # the eager loss (NOTE [A loss outside the trace]) is no graph to merge into
    fused = [k for k in unsaved_handoffs(chain, chain.bind(*args, target=target, **kwargs)) if k < len(plan.stages) - 1]
    if not fused:
        return chain
    for k in reversed(fused):  # from the end, so earlier indices stay valid
        name = f"{plan.names[k]}+{plan.names[k + 1]}"
        merged = plan.merged(k)
        plan = dataclasses.replace(merged, names=(*merged.names[:k], name, *merged.names[k + 1 :]))
    return CutChain(plan, chain._check, chain._input_index, chain.tail)


__all__ = ["fuse_unsaved_handoffs", "unsaved_handoffs"]
