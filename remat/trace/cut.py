"""Cut a model into a chain of stages from its own traced forward (docs/models.md).

The model's training step (forward, then its output reduced to what is differentiated: the
user's loss, the model's own ``.loss``, or its one output tensor) is traced by TorchDynamo
(``torch.compile(fullgraph=True, dynamic=False)`` with a backend that only keeps the graph).
Dynamo is the tracer because it is the one that traces Hugging Face models (keyword inputs,
``ModelOutput``, ``**kwargs`` decorators, mask and rotary code) as well as torchvision and timm;
``torch.fx.symbolic_trace`` fails on every Hugging Face model here ("co_varnames is too small")
and ``torch.export`` fails on their cache outputs and rewrites in-place ops. Dynamo's graph calls
the same torch functions as the eager model, in the same order, so a stage computes bit for bit
what the model computes.

Nodes of the graph are split in two kinds:

* **side values**: nodes that depend on no trainable tensor (parameters, inputs that require
  grad) and not on a floating-point chain input, and are neither random nor in-place (except an
  in-place op that finishes a tensor the step made from side values, before any stage reads it:
  BART's shifted labels): position ids, attention masks, rotary tables, shifted labels, views of
  token ids. They are computed once
  per call (:meth:`CutChain.bind`), before the chain, and handed to the stages that read them, so
  they are not activations of any stage and are never recomputed.
* **stage nodes**: the rest, in graph order. The chain is cut after stage node ``v`` when ``v`` is
  the only stage value still needed later (an articulation point of the forward), ``v`` is a
  floating-point tensor that is not a view, no later node modifies ``v`` in place (a cut there
  would hand an in-place op a leaf that requires grad), and no grad-mode/inference-mode/autocast
  region is open. Between two calls of the model's repeated blocks a cut may hand on several
  values, as a tuple (:mod:`remat.trace.boundary`; NOTE [Cuts that hand on several tensors],
  :mod:`remat.trace.positions`).

Consecutive pieces whose nodes share a module path are merged into one stage named by that path
(``transformer.h.3``, ``layer2.1``, ``features.denseblock2``). Every cut is then proven equal to
the model by :func:`remat.trace.proof.prove_cut` before it is returned.

The parts, one module each: :mod:`remat.trace.capture` (the training step and its trace),
:mod:`remat.rewrite.nodes` (what a node does: in place, random, a view, its module path),
:mod:`remat.trace.positions` (side values, cut positions, the :class:`Plan`),
:mod:`remat.trace.naming` (stage names, merging), :mod:`remat.trace.stages` (:class:`CutStage`,
:class:`CutChain`), :mod:`remat.rewrite.grad_mode` and :mod:`remat.trace.repeatable` (the rewrites
that let a stage run in any grad mode and any number of times) and :mod:`remat.trace.stage_errors`
(a failing stage as one line), :mod:`remat.rewrite.inline` (the user's own checkpoint regions,
inlined) and :mod:`remat.rewrite.functions` (custom autograd Functions, run so that autograd sees what
they save). This module puts them together (:func:`cut_step`) and re-exports their names.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import torch
from torch.utils import _pytree as pytree

from remat.measure.memory import storage_key
from remat.rewrite.functions import saving_functions
from remat.rewrite.inline import inline_checkpoints
from remat.rewrite.nodes import module_path, mutates
from remat.trace.boundary import storage_keys
from remat.trace.capture import TrainingStep, first_tensor_index, trace
from remat.trace.positions import Plan, Source, plan
from remat.trace.stage_errors import running_stage
from remat.trace.stages import CutChain, CutStage, LeafCheck, leaf_check


def _aliasing_stage(chain: CutChain, x: torch.Tensor) -> int | None:
    """The first stage whose output shares storage with its input or a parameter/buffer (dropout
    with p=0 returns its input): such a stage cannot stand alone (the chain model needs a new a_i+1).
    Of a tuple boundary (remat.trace.boundary), a tensor handed on unchanged from the stage's
    input is no such alias: it is the value the next block reads (Stage.handed_on)."""
    with torch.no_grad():
        for k, stage in enumerate(chain.stages):
            weights = {storage_key(t) for t in (*stage.parameters(), *stage.buffers())}
            inputs = set(storage_keys(x))
            with running_stage(chain.names[k], stage, x):  # a model error: one line naming where
                out = stage(x)
            passed = inputs if isinstance(out, tuple) else set()
            if any(key in weights or (key in inputs and key not in passed) for key in storage_keys(out)):
                return k
            x = out
    return None


def cut_step(
    step: TrainingStep,
    args: tuple,
    kwargs: dict,
    target: Any = None,
    dynamic: frozenset[tuple[int, int]] = frozenset(),
    tail: Any = None,
) -> CutChain:
    """Trace ``step`` on the example and cut it (not yet proven: see :func:`remat.trace.proof.cut_model`),
    general in the ``dynamic`` input dimensions where the model lets it (:func:`trace`). ``tail``:
    a loss run eagerly after the traced stages (NOTE [A loss outside the trace]), for a ``step``
    that ends at the model's one output tensor.

    The caller saves and restores the model's state (the trace and the aliasing check run it)."""
    leaves, spec = pytree.tree_flatten((args, kwargs, target))
    input_index = first_tensor_index(leaves)
    gm, examples, general = trace(step, args, kwargs, target, dynamic)
    regions = inline_checkpoints(gm)  # NOTE [The user's checkpoint regions]
    if regions:
        logging.getLogger("remat").warning(
            "remat: inlined the model's own activation checkpointing (%d region%s); remat decides what to recompute",
            regions,
            "" if regions == 1 else "s",
        )
    saving_functions(gm)  # NOTE [What a custom autograd.Function saves]
    plan_ = plan(step, gm, examples, leaves, input_index)
    check = dataclasses.replace(leaf_check(leaves, spec), dynamic=general)
    chain = CutChain(plan_, check, input_index, tail)
    while len(plan_.stages) > 1:
        k = _aliasing_stage(chain, chain.bind(*args, target=target, **kwargs))
        if k is None or k >= len(plan_.stages):  # (the eager loss is a function's result, not a graph's)
            break
        plan_ = plan_.merged(min(k, len(plan_.stages) - 2))
        chain = CutChain(plan_, check, input_index, tail)
    return chain


__all__ = [
    "CutChain",
    "CutStage",
    "LeafCheck",
    "Plan",
    "Source",
    "TrainingStep",
    "cut_step",
    "first_tensor_index",
    "leaf_check",
    "module_path",
    "mutates",
    "plan",
    "trace",
]
