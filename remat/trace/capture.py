"""The two tracers of remat. A model's training step as one TorchDynamo graph, for chains
(docs/models.md, "How a model is cut"); a model as a torch.fx graph (``torch.fx.symbolic_trace``,
standard ``torch.nn`` modules as leaves), for graph profiles (:func:`trace_fx`). Both graphs are
read by the one node classification, :mod:`remat.rewrite.nodes`.

The training step is the model's forward followed by :func:`remat.trace.loss.reduce_output` (its
output reduced to what is differentiated: the user's loss, the model's own ``.loss``, or its one
output tensor).
:func:`trace` runs it under ``torch.compile(fullgraph=True, dynamic=False)`` with a backend that
only keeps the graph; :mod:`remat.trace.cut` explains why dynamo is the tracer.

NOTE [A trace runs nothing]
Dynamo traces the step on fake tensors: the graph it hands the backend has been built without one
real activation. A backend that returned ``gm.forward`` would then be called on the real inputs,
a whole recording forward (every activation the step stores) for a result nobody reads; on a
model that does not fit, that forward is what fails. The backend here keeps the graph and returns
a callable that raises :class:`_Captured` instead of running it, which :func:`trace` takes as
success: the capture allocates no activations (only the eager no-grad run of
:mod:`remat.rewrite.branches` for a Hugging Face model, which holds one layer's values at a time).

NOTE [Dimensions a trace is general in]
A trace may be asked to keep some input dimensions symbolic (``maybe_mark_dynamic``: a sequence
length, a batch size). Dynamo then writes sizes as expressions of graph inputs (SymInt
placeholders, bound per call from the input's shape) where the model lets it, and specialises a
dimension the model's code fixes (a ``view`` to a literal size); only the dimensions still
symbolic after the trace are general (:class:`DynamicDims`). What dynamo assumed of them (two
dimensions equal, a size at least 2, ...) is its shape environment's guard, kept as an expression
and evaluated on every call's inputs: a call that fails it is not run on this graph.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
from torch import nn
from torch.utils import _pytree as pytree

from remat.measure.oom import is_out_of_memory
from remat.rewrite import branches
from remat.rewrite.eager_path import eager_answers, model_files
from remat.schedules import ProfileError, RematError
from remat.trace.loss import own_loss, reduce_output


@dataclass(frozen=True)
class OutputForm:
    """What a training step differentiates, read from one eager call of the model (NOTE [One
    meaning per step]): ``kind`` is ``"loss"`` (the user's ``loss=``), ``"tensor"`` (the model's
    one output tensor), ``"own"`` (the ``loss`` its output carries), ``"first"`` (the first
    tensor of a tuple) or ``"none"`` (a mapping without a loss: nothing a user chose); ``output``
    is the type of the model's output, ``keys`` a mapping's keys."""

    kind: str
    output: type
    keys: tuple[str, ...] = ()

    @classmethod
    def of(cls, output: Any, loss: Callable[..., torch.Tensor] | None) -> OutputForm:
        """The form of one eager ``output``."""
        keys = tuple(map(str, output.keys())) if isinstance(output, Mapping) else ()
        if loss is not None:
            return cls("loss", type(output))
        if isinstance(output, torch.Tensor):
            return cls("tensor", type(output))
        if own_loss(output) is not None:
            return cls("own", type(output), keys)
        return cls("none" if isinstance(output, Mapping) else "first", type(output), keys)

    def said(self) -> str:
        """The step's value in words, for a refusal."""
        name = self.output.__name__
        return {
            "loss": "the loss= given",
            "tensor": "the model's output tensor",
            "own": f"the loss the model's {name} carries",
            "first": f"the first tensor of the model's {name}",
            "none": f"nothing (the model's {name} carries no loss: {', '.join(self.keys) or 'no keys'})",
        }[self.kind]


class TrainingStep(nn.Module):
    """``model`` followed by :func:`~remat.trace.loss.reduce_output`: the function that a cut must reproduce.

    NOTE [One meaning per step]
    Each eager call (never under a trace) records the :class:`OutputForm` of the model's output
    in ``form`` when ``checked`` (``remat.checkpoint``'s steps): an output mapping without a loss
    is refused in one line (its "first value" is no meaning a user chose), and, given the
    ``example``'s form (from the example's proof), so is a call whose step would differentiate
    something else than the example's (labels left out: the logits instead of the loss). Eager
    calls come before any trace (the first in :func:`remat.trace.proof.cut_model`), so a refusal
    costs one no-grad forward."""

    def __init__(
        self,
        model: nn.Module,
        loss: Callable[..., torch.Tensor] | None = None,
        checked: bool = False,
        example: OutputForm | None = None,
    ) -> None:
        super().__init__()
        self.model = model
        self.loss = loss
        self.checked = checked
        self.example = example
        self.form: OutputForm | None = None

    def forward(self, args: tuple, kwargs: dict, target: Any = None) -> torch.Tensor:
        output = self.model(*args, **kwargs)
        if self.checked and not torch.compiler.is_compiling():
            self.form = form = OutputForm.of(output, self.loss)
            if self.example is not None and form.kind != self.example.kind:
                raise RematError(
                    f"inputs: this call's step would differentiate {form.said()}, where the example's differentiates"
                    f" {self.example.said()}; call the model with the inputs the example had (labels= for a Hugging"
                    " Face model's loss), or wrap it again on an example like this call"
                )
            if form.kind == "none":
                raise RematError(
                    f"model: its output is a {form.output.__name__} with no loss ({', '.join(form.keys) or 'no keys'}),"
                    " so the step has nothing to differentiate: pass the inputs that make the model compute its loss"
                    " (labels= for a Hugging Face model) or loss=... to reduce its output"
                )
        return reduce_output(output, self.loss, target)


def _quiet_logging() -> set:
    # Logger calls inside a model (transformers' warning_once) stop dynamo; they only print
    logger = logging.Logger
    names = ("debug", "info", "warning", "warn", "error", "warning_once", "info_once")
    return {getattr(logger, n) for n in names if hasattr(logger, n)}


@dataclass(frozen=True, eq=False)
class DynamicDims:
    """The input dimensions a trace is general in (NOTE [Dimensions a trace is general in]).

    Attributes:
        dims: ``(leaf index, dimension)`` pairs of the flattened call inputs left symbolic.
        leaves: the flattened inputs the guard reads, in its order.
        guard: dynamo's shape guard over those leaves (a Python expression), None: no condition.
        shape_env: the shape environment that evaluates it.
    """

    dims: frozenset[tuple[int, int]]
    leaves: tuple[int, ...]
    guard: str | None
    shape_env: Any

    def accepts(self, leaves: list[Any]) -> bool:
        """Whether a call's flattened inputs satisfy what the trace assumed of its symbolic sizes."""
        if self.guard is None:
            return True
        return bool(self.shape_env.evaluate_guards_expression(self.guard, [leaves[i] for i in self.leaves]))


def _symbolic(size: Any) -> bool:
    """A size still symbolic after the trace (not replaced by a number by a later specialisation)."""
    return isinstance(size, torch.SymInt) and not size.node.expr.is_number


def input_fakes(gm: fx.GraphModule, examples: list[Any], leaves: list[Any]) -> dict[int, torch.Tensor]:
    """The traced (fake) tensor of each flattened input the graph reads: leaf index (the first
    leaf, for inputs that are one tensor) -> its placeholder's ``example_value``."""
    index_of = {id(leaf): i for i, leaf in reversed(list(enumerate(leaves))) if isinstance(leaf, torch.Tensor)}
    fakes: dict[int, torch.Tensor] = {}
    for node, value in zip((n for n in gm.graph.nodes if n.op == "placeholder"), examples, strict=True):
        fake = node.meta.get("example_value")
        if isinstance(value, torch.Tensor) and id(value) in index_of and isinstance(fake, torch.Tensor):
            fakes.setdefault(index_of[id(value)], fake)
    return fakes


def _dynamic_dims(gm: fx.GraphModule, examples: list[Any], leaves: list[Any], asked: frozenset) -> DynamicDims | None:
    """The asked dimensions that stayed symbolic in ``gm``, with the guard on them (None: none did)."""
    fakes = input_fakes(gm, examples, leaves)
    # a dimension stays general where the graph reads it as a symbol, or never reads its input
    kept = frozenset((i, d) for i, d in asked if i not in fakes or _symbolic(fakes[i].shape[d]))
    if not any(i in fakes for i, _ in kept):
        return None
    order = tuple(sorted(fakes))
    shape_env = fakes[order[0]].fake_mode.shape_env
    guard = shape_env.produce_guards_expression([fakes[i] for i in order])
    return DynamicDims(kept, order, guard, shape_env)


# the advice of a refusal to cut a model from its trace: right for the CLI, whose name-based
# chains read remat_stages(); each entry point that never reads it replaces it with its own
HAND_CUT = "give the model a remat_stages() method to cut it by hand"


class GraphBreakError(RematError):
    """TorchDynamo cannot trace the step as one graph (a graph break): ``reason`` is its first line."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class _Captured(Exception):  # noqa: N818 - a signal, not an error
    """Raised in place of running the traced graph (NOTE [A trace runs nothing])."""


def trace(
    step: TrainingStep, args: tuple, kwargs: dict, target: Any, dynamic: Iterable[tuple[int, int]] = ()
) -> tuple[fx.GraphModule, list[Any], DynamicDims | None]:
    """Dynamo's graph of ``step(args, kwargs, target)``, the values of its placeholders, and the
    ``dynamic`` dimensions (``(leaf index, dimension)`` of the flattened inputs) it stayed general
    in (NOTE [Dimensions a trace is general in]; None: it is specialised to every size).

    The traced graph is not run (NOTE [A trace runs nothing]); a Hugging Face model runs once,
    eagerly under ``no_grad`` (:mod:`remat.rewrite.branches` records its mask decisions): the caller
    saves and restores its state around it. An allocation failure is raised as it came
    (:func:`~remat.measure.oom.is_out_of_memory`), not as a model that cannot be traced.
    Resets dynamo's caches (before and after) so that this trace neither hits nor leaves one.
    The inputs are marked in place (dynamo's attribute on the tensor): pass tensors of your own.
    """
    captured: list[tuple[fx.GraphModule, list[Any]]] = []
    asked = frozenset(dynamic)
    leaves = pytree.tree_leaves((args, kwargs, target))
    for i, d in asked:
        torch._dynamo.maybe_mark_dynamic(leaves[i], d)

    def keep(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        captured.append((gm, list(example_inputs)))

        def skip(*_: Any) -> Any:
            raise _Captured

        return skip

    torch._dynamo.reset()
    try:
        # transformers' mask code branches on mask values: the trace takes eager's branch, guarded
        with branches.pinned(step.model, lambda: step(args, kwargs, target)):
            # the model's is_compiling() branches take eager's path (NOTE [The eager path, traced])
            with (
                torch._dynamo.config.patch(ignore_logging_functions=_quiet_logging()),
                eager_answers(model_files(step.model, step.loss)),
            ):
                torch.compile(step, backend=keep, fullgraph=True, dynamic=False)(args, kwargs, target)
    except _Captured:
        pass  # the graph was kept, not run
    except RematError:
        raise
    except Exception as error:  # noqa: BLE001 - dynamo's many error types; one line for the user
        if is_out_of_memory(error):
            raise  # memory, not tracing: the caller names it as such
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise GraphBreakError(
            f"model: TorchDynamo cannot trace {type(step.model).__name__} as one graph ({first}); {HAND_CUT}", first
        ) from None
    finally:
        torch._dynamo.reset()
    if len(captured) != 1:
        raise RematError(f"model: tracing {type(step.model).__name__} gave {len(captured)} graphs, expected one")
    gm, examples = captured[0]
    return gm, examples, _dynamic_dims(gm, examples, leaves, asked) if asked else None


def first_tensor_index(leaves: list[Any]) -> int:
    """Index of the first tensor among the flattened inputs (the chain input a_0)."""
    index = next((i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)), None)
    if index is None:
        raise RematError("inputs: the example has no tensor")
    return index


def trace_fx(model: nn.Module) -> fx.GraphModule:
    """``torch.fx.symbolic_trace`` with a one-line error when the model cannot be traced."""
    try:
        return fx.symbolic_trace(model)
    except Exception as exc:  # fx raises many kinds (TraceError, TypeError, ...)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ProfileError(
            f"model: torch.fx cannot trace {type(model).__name__} ({first}), so it has no graph profile; profile it as"
            " a chain instead (remat profile without --graph, or remat.checkpoint: cut from its TorchDynamo trace)"
        ) from exc


__all__ = [
    "HAND_CUT",
    "DynamicDims",
    "GraphBreakError",
    "OutputForm",
    "input_fakes",
    "trace_fx",
    "TrainingStep",
    "first_tensor_index",
    "trace",
]
