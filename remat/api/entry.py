"""One call for the common case: ``remat.checkpoint(model, example_inputs, budget=...)`` (docs/models.md).

It cuts the model's training step into a chain from its traced forward and proves the cut equal
to the model (:func:`remat.trace.proof.cut_model`), profiles the chain
(:func:`remat.profile.chain.profile_chain`), solves a schedule under the budget (the optimal
chain DP by default), and returns an ``nn.Module`` that trains by replaying it: a
:class:`~remat.api.model.RematModel`, which does the same for each new input shape
(:mod:`remat.api.shapes`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from remat.api.inputs import (
    check_count,
    check_inputs,
    check_strategy,
    described,
    resolve_budget,
    scalar_loss,
    split_inputs,
)
from remat.api.model import OVER_BUDGET, RematModel
from remat.api.shapes import ShapeCuts
from remat.measure.oom import is_out_of_memory
from remat.model_errors import one_line_errors
from remat.schedules import RematError
from remat.trace.capture import HAND_CUT, GraphBreakError, OutputForm, TrainingStep
from remat.trace.proof import cut_model, prove_cut

# the trace room's advice (HAND_CUT) is the CLI's: remat.checkpoint never reads remat_stages(), and
# cuts only what TorchDynamo traces as one graph, a loss it cannot trace aside (passed as loss=:
# NOTE [A loss outside the trace], remat/trace/stages.py)
_ONE_GRAPH = (
    "remat.checkpoint needs the model's forward as one graph: remove the graph break it names"
    " (torch._dynamo.explain lists them); a loss TorchDynamo cannot trace (F.ctc_loss, a branch on tensor"
    " values) runs eagerly after the chain when forward returns the tensor it reads and the loss is"
    " passed as remat.checkpoint(..., loss=...)"
)
_ONE_PATH = "make the model take the same code path under TorchDynamo as eagerly; remat.checkpoint cuts the trace"


def _advised(error: RematError) -> RematError:
    """``error`` with the trace room's advice replaced by one that works for ``remat.checkpoint``."""
    if HAND_CUT not in str(error) or is_out_of_memory(error):  # memory: named by the caller's phase
        return error
    advice = _ONE_GRAPH if isinstance(error, GraphBreakError) else _ONE_PATH
    return RematError(str(error).replace(HAND_CUT, advice))


def _cut(
    step: TrainingStep, args: tuple, kwargs: dict, target: Any, what: str, dynamic: frozenset = frozenset()
) -> Any:
    """:func:`cut_model`, unproven (NOTE [Order of a new cut]), with an exception raised inside the
    user's model (or loss) as one line naming the stage, the module and the user's source line
    (:mod:`remat.model_errors`)."""
    try:
        with one_line_errors(f"{what} ({described(args, kwargs)})"):
            return cut_model(
                step.model, args, kwargs, loss=step.loss, target=target, dynamic=dynamic, prove=False, step=step
            )
    except RematError as error:
        advised = _advised(error)
        if advised is error:
            raise
        raise advised from None


def checkpoint(
    model: nn.Module,
    example_inputs: Any,
    budget: int | float | str = 1.0,
    *,
    loss: Callable[..., torch.Tensor] | None = None,
    target: Any = None,
    strategy: str = "optimal",
    repeats: int = 3,
    warmup: int = 1,
    compile: bool = False,  # noqa: A002 - the option's name in the docs
    over_budget: str = "refuse",
) -> RematModel:
    """Cut, prove, profile and solve ``model``; return the :class:`RematModel` that trains under ``budget``.

    Args:
        model: any ``nn.Module`` (Hugging Face, torchvision, timm or your own), in train mode.
        example_inputs: a tensor, a tuple of positional inputs, or a dict of keyword inputs
            (``{"input_ids": ids, "labels": ids}``); integer token ids are fine. The budget's
            fraction or percentage is of this example's store-all peak. Calls with other shapes
            (or another mask branch) are profiled or predicted and solved the first time they come,
            on a cut general in the sizes that change (traced once per set of changing dimensions
            and branch: :mod:`remat.api.shapes`).
        budget: bytes (int), a size (``"6GiB"``), a percentage of the store-all peak (``"40%"``) or a
            fraction of it in (0, 1] (``0.4`` or ``"0.4"``; docs/formats.md, "Budgets"). Activation
            memory of the step, parameters excluded.
        loss: optional ``loss(output)`` or ``loss(output, target)``; without it the step
            differentiates the model's own ``loss`` (Hugging Face with ``labels``) or its output.
        target: the example's target when ``loss`` takes one (then pass ``target=`` on each call).
        strategy: a chain strategy of ``remat solve`` (``optimal``, ``revolve``, ``chen-sqrt``, ...).
        compile: run every stage through ``torch.compile`` (inductor), checked against the eager
            stage within a tolerance, for profiling and replay alike
            (:func:`remat.runtime.compiled.compile_chain`; docs/executor.md, "Compiled stages").
        over_budget: what a call does whose shape needs more memory than the budget: ``"refuse"``
            (a one-line :class:`RematError` naming the shape and the least it needs, before its
            step runs) or ``"least"`` (run its least-memory schedule, with a warning each time).
    """
    if not isinstance(model, nn.Module):
        raise RematError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    if not model.training:
        raise RematError("model: in eval mode; call model.train() first (remat profiles and replays the training step)")
    if loss is not None and not callable(loss):
        raise RematError(f"loss: expected a callable loss(output) or loss(output, target), got {type(loss).__name__}")
    if target is not None and loss is None:
        raise RematError("target: given without loss= (the target is loss(output, target)'s second argument)")
    if not isinstance(compile, bool):
        raise RematError(f"compile: expected True or False, got {compile!r}")
    check_count("repeats", repeats, 1)
    check_count("warmup", warmup, 0)
    check_strategy(strategy)
    resolve_budget(budget, None)  # its form only (a size, a share): a share's bytes need the profile
    if over_budget not in OVER_BUDGET:
        raise RematError(f"over_budget: expected one of {', '.join(map(repr, OVER_BUDGET))}, got {over_budget!r}")
    args, kwargs = split_inputs(example_inputs)
    check_inputs(model, args, kwargs)
    checked_loss = None if loss is None else scalar_loss(loss)
    calls = ["the example inputs"]  # then "a batch's inputs": the cuts made after the example's
    forms: dict[str, OutputForm] = {}  # "example": what its step differentiates (NOTE [One meaning per step])

    def training_step() -> TrainingStep:
        return TrainingStep(model, checked_loss, checked=True, example=forms.get("example"))

    def make_chain(call_args: tuple, call_kwargs: dict, call_target: Any, dynamic: frozenset) -> Any:
        check_inputs(model, call_args, call_kwargs)
        chain = _cut(training_step(), call_args, call_kwargs, call_target, calls[0], dynamic)
        calls[0] = "a batch's inputs"
        return chain

    def prove(chain: Any, call_args: tuple, call_kwargs: dict, call_target: Any, step: Any) -> None:
        check_inputs(model, call_args, call_kwargs)
        step_ = training_step()
        try:
            prove_cut(step_, chain, call_args, call_kwargs, call_target, chain_step=step)
        except RematError as error:
            advised = _advised(error)
            if advised is error:
                raise
            raise advised from None
        forms.setdefault("example", step_.form)

    cuts = ShapeCuts(make_chain, prove, repeats, warmup, compile, name=type(model).__name__.lower())
    # the example is cut, profiled, fitted to the budget (refused below the least), solved and
    # proven by the replay that will train, in that order (NOTE [Order of a new cut])
    return RematModel(
        cuts,
        budget,
        strategy,
        (args, kwargs, target),
        loss_given=loss is not None,
        over_budget=over_budget,
        source=model,
        forms=forms,
    )


__all__ = ["checkpoint"]
