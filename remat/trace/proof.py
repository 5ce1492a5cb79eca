"""Prove a cut model equal to the user's model before anything runs it (docs/models.md).

One training step of each, from the same state and RNG: the outputs, every parameter gradient
and every buffer (BatchNorm running statistics) after the step must be ``torch.equal`` (bit for
bit on CPU fp32). A cut that differs is refused with one line naming the first stage whose value
differs. The models are left as they were (buffers, gradients and RNG restored).

Every whole step of the proof runs with autograd's saved tensors off the device
(:func:`remat.measure.offload.saved_off_device`, NOTE [Saved tensors off the device, bit for bit]):
the same function at full size, bit for bit, peaking at the forward's live values plus the
backward's transient rather than at every activation held at once (NOTE [The proof's memory]).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
from torch import nn
from torch.utils.hooks import RemovableHandle

from remat.measure.offload import Kept, OffDevice, existing_storages, saved_off_device
from remat.measure.state import StepState
from remat.model_errors import first_line, where_in_model
from remat.rewrite.inline import INLINED
from remat.rewrite.nodes import is_random
from remat.schedules import RematError
from remat.trace.boundary import each, is_boundary, tensors
from remat.trace.capture import HAND_CUT, GraphBreakError, TrainingStep
from remat.trace.chain import Chain
from remat.trace.cut import cut_step
from remat.trace.fuse import fuse_unsaved_handoffs
from remat.trace.kinds import StageOptions, _same, _same_boundary, _weight, check_forward_kinds
from remat.trace.loss import step_loss
from remat.trace.repeatable import shared_change
from remat.trace.stages import CutChain, OneTensor, Tail

# NOTE [The proof's memory]
# The proof exists for the user whose step does not fit, so it must not need the memory remat is
# asked to save: a plain step (and the chain's) holds every activation until its backward. Each
# whole step the proof runs (the plain step, the chain step, and the steps that locate a
# difference) runs inside ``saved_off_device``: the tensors autograd saves go to a file (CPU) or
# host memory (CUDA) as they are saved and come back, byte for byte at the same layout, when the
# backward reads them. The kernels see the same bytes at the same strides, offsets and alignment,
# so the outputs and gradients compared are the ones the steps compute without it: the proof still
# proves what it claims. What stays on the device is what existed before the step (parameters,
# buffers, the inputs), the values the forward has live at once, and the backward's transient.
# The stage-by-stage checks (``check_forward_kinds``) hold one stage's graph at a time.
#
# Results too: the budget sets aside one set of parameter gradients (the step's own ``.grad``), so
# the proof may not hold others: the gradients the model had (a model in training) wait off the
# device through the proof (``_saved``) and come back after it. The first step's output, gradients
# and buffers go off the device (``OffDevice``, NOTE [Copies kept off the device]) before the next
# step runs; the next step's are compared where they are (``_live``: its ``p.grad``, no copy),
# before anything resets them, read back a piece at a time; ``_first_difference`` keeps its order
# (output, gradient of each parameter, each buffer). The same for F_all's gradients in
# ``_check_stage``, the buffers ``_saved`` puts back, and what the failure-locating runs record.
# At its peak the proof holds the step's own gradients, the step's activations as above, and one
# piece (``PIECE_BYTES``).


def _off_device(*existing: Any) -> Any:
    """:func:`saved_off_device`, leaving alone the storages of ``existing`` (modules, inputs)."""
    return saved_off_device(existing_storages(*existing))


def _saved(module: nn.Module) -> StepState:
    """Buffers, parameter gradients and RNG of ``module``, to put back after a trial step. The
    gradients the module had wait off the device (NOTE [The proof's memory]): the trial steps make
    their own, and the device holds one set of gradients, not two."""
    return StepState(module, grads="copy", off_device=True)


@dataclass(frozen=True)
class StepResult:
    """Output (detached), parameter gradients and buffers after one step."""

    output: torch.Tensor
    grads: tuple[torch.Tensor | None, ...]
    buffers: tuple[torch.Tensor, ...]


def _step(module: nn.Module, run: Callable[[], torch.Tensor]) -> torch.Tensor:
    """``out = run()``; backward of its :func:`~remat.trace.loss.step_loss`: ``out`` (a scalar) or
    ``(out * r).sum()`` with a fixed ``r``; ``out`` detached. The gradients stay where the backward
    put them (``p.grad``)."""
    out = run()
    if not isinstance(out, torch.Tensor) or not out.is_floating_point():
        raise RematError("model: the training step must return a floating-point tensor (the loss or the output)")
    if out.requires_grad:
        step_loss(out, _weight).backward()
    return out.detach()


def one_step(module: nn.Module, run: Callable[[], torch.Tensor]) -> StepResult:
    """:func:`_step`, with copies of every parameter gradient and buffer afterwards."""
    out = _step(module, run)
    with torch.no_grad():
        grads = tuple(None if p.grad is None else p.grad.detach().clone() for p in module.parameters())
        buffers = tuple(b.detach().clone() for b in module.buffers())
    return StepResult(out, grads, buffers)


@dataclass(frozen=True)
class _Results:
    """A step's output, parameter gradients and buffers: live tensors (:func:`_live`) or copies off
    the device (:func:`_kept`). NOTE [The proof's memory]."""

    output: torch.Tensor | Kept
    grads: tuple[torch.Tensor | Kept | None, ...]
    buffers: tuple[torch.Tensor | Kept, ...]


def _live(module: nn.Module, out: torch.Tensor) -> _Results:
    """The step's results where they are, no copy: compare them before anything changes them."""
    return _Results(out, tuple(p.grad for p in module.parameters()), tuple(module.buffers()))


def _kept(module: nn.Module, out: torch.Tensor, place: OffDevice) -> _Results:
    """Copies of the step's results off the device (NOTE [Copies kept off the device])."""
    with torch.no_grad():
        grads = tuple(None if p.grad is None else place.put(p.grad) for p in module.parameters())
        return _Results(place.put(out), grads, tuple(place.put(b) for b in module.buffers()))


def _kept_step(module: nn.Module, run: Callable[[], torch.Tensor], place: OffDevice, existing: tuple) -> _Results:
    """:func:`_step` with saved tensors off the device (``existing``: what to leave where it is,
    with ``module``), its results copied off the device too (NOTE [The proof's memory])."""
    with _off_device(module, *existing):
        out = _step(module, run)
    return _kept(module, out, place)


def _first_difference(module: nn.Module, ref: _Results, got: _Results) -> str | None:
    if not _same(ref.output, got.output):
        return "output"
    names = [n for n, _ in module.named_parameters()]
    for name, a, b in zip(names, ref.grads, got.grads, strict=True):
        if not _same(a, b):
            return f"gradient of parameter '{name}'"
    buffer_names = [n for n, _ in module.named_buffers()]
    for name, a, b in zip(buffer_names, ref.buffers, got.buffers, strict=True):
        if not _same(a, b):
            return f"buffer '{name}' after one step"
    return None


class _Recorder(fx.Interpreter):
    """Runs the whole traced graph and keeps the values of the chosen nodes."""

    def __init__(self, gm: fx.GraphModule, keep: set[str], place: OffDevice) -> None:
        super().__init__(gm)
        self.keep = keep
        self.place = place
        self.kept: dict[str, Kept] = {}

    def run_node(self, n: fx.Node) -> Any:
        value = super().run_node(n)
        if n.name in self.keep and isinstance(value, torch.Tensor):
            self.kept[n.name] = self.place.put(value)
        return value


def _run_hooked(run: Callable[[], Any], handles: list[RemovableHandle]) -> None:
    """``run()`` without grad, with the hooks of ``handles`` removed afterwards (even on an error)."""
    try:
        with torch.no_grad():
            run()
    finally:
        for handle in handles:
            handle.remove()


def _stage_outputs(chain: Chain, run: Callable[[], torch.Tensor], place: OffDevice) -> list[Any]:
    outputs: list[Any] = [None] * len(chain)

    def hook(index: int) -> Callable[..., None]:
        def record(_module: nn.Module, _inputs: Any, output: Any) -> None:
            if is_boundary(output):
                outputs[index] = each(place.put, output)

        return record

    _run_hooked(run, [stage.register_forward_hook(hook(i)) for i, stage in enumerate(chain.stages)])
    return outputs


def _locate_cut(step: TrainingStep, chain: CutChain, saved: StepState, args: tuple, kwargs: dict, target: Any) -> str:
    """The first stage whose output differs from the traced graph's value at that point."""
    plan_ = chain.plan
    cuts = [tuple(n.name for n in handoff) for handoff in plan_.handoffs]
    leaves = torch.utils._pytree.tree_leaves((args, kwargs, target))
    values = []
    for node in (n for n in plan_.gm.graph.nodes if n.op == "placeholder"):
        source = plan_.sources[node]
        values.append(leaves[source.index] if source.kind == "input" else source.value)
    saved.reset()
    place = OffDevice()  # every value kept for a comparison waits off the device (NOTE [The proof's memory])
    recorder = _Recorder(plan_.gm, {name for names in cuts for name in names}, place)
    with torch.no_grad():
        traced = recorder.run(*values)
        saved.reset()
        reference = step(args, kwargs, target)
    chain.bind(*args, target=target, **kwargs)  # the call's target, for the eager loss (chain.finish)
    with torch.no_grad():
        traced_out = chain.finish(torch.utils._pytree.tree_leaves(traced)[0])
    if not _same(traced_out.detach(), reference.detach()):
        return "the traced program itself (TorchDynamo's graph differs from the eager model)"
    saved.reset()
    got = _stage_outputs(chain, lambda: chain.run(*args, target=target, **kwargs), place)
    for name, names, value in zip(chain.names[: len(cuts)], cuts, got[: len(cuts)], strict=True):
        kept = tuple(recorder.kept.get(node) for node in names)
        if value is None or not _same_boundary(kept if len(kept) > 1 else kept[0], value):
            return f"stage '{name}'"
    del got
    saved.reset()
    eager_step = _kept_step(step, lambda: step(args, kwargs, target), place, (args, kwargs, target))
    saved.reset()
    with _off_device(step, args, kwargs, target):
        out = _step(step, lambda: chain.finish(torch.utils._pytree.tree_leaves(plan_.gm(*values))[0]))
    if _first_difference(step, eager_step, _live(step, out)) is not None:
        if any(n.meta.get(INLINED) and is_random(n) for n in plan_.gm.graph.nodes):
            return (
                "the traced program itself: the model's own checkpointed regions (torch.utils.checkpoint, inlined"
                " by remat) draw random numbers, and the eager model's recompute draws others (preserve_rng_state"
                "=False); turn the model's checkpointing off (remat decides what to recompute) or preserve the RNG"
            )
        return (
            "the traced program itself: TorchDynamo's graph takes another code path than the eager model, with"
            " equal outputs but other gradients (Hugging Face models do so when no token is padded: eager then"
            f" skips the causal mask and the trace cannot; {HAND_CUT})"
        )
    saved.reset()
    del out
    saved.reset()
    return f"stage '{_locate_backward(step, chain, plan_.gm, values, args, kwargs, target, saved)}' (its backward)"


class _GradRecorder(fx.Interpreter):
    """Runs the whole traced graph and records the gradients that reach the chosen nodes' values."""

    def __init__(self, gm: fx.GraphModule, keep: set[str], grads: dict[str, Kept], place: OffDevice) -> None:
        super().__init__(gm)
        self.keep = keep
        self.grads = grads
        self.place = place

    def run_node(self, n: fx.Node) -> Any:
        value = super().run_node(n)
        if n.name in self.keep and isinstance(value, torch.Tensor) and value.requires_grad:
            value.register_hook(_keeper(self.grads, n.name, self.place))
        return value


def _keeper(grads: dict, key: Any, place: OffDevice) -> Callable[[torch.Tensor], None]:
    def keep(grad: torch.Tensor) -> None:
        grads[key] = place.put(grad)

    return keep


def _chain_grads(
    chain: CutChain, run: Callable[[], torch.Tensor], grads: dict, place: OffDevice
) -> Callable[[], torch.Tensor]:
    """``run`` with the gradient of each stage's output (its ``j``-th tensor, for a tuple
    boundary) recorded, off the device, into ``grads[stage index, j]``."""

    def hook(index: int) -> Callable[..., None]:
        def record(_module: nn.Module, _inputs: Any, output: Any) -> None:
            if not is_boundary(output):
                return
            for j, t in enumerate(tensors(output)):
                if t.requires_grad:
                    t.register_hook(_keeper(grads, (index, j), place))

        return record

    def hooked() -> torch.Tensor:
        handles = [stage.register_forward_hook(hook(i)) for i, stage in enumerate(chain.stages)]
        try:
            return run()
        finally:
            for handle in handles:
                handle.remove()

    return hooked


def _locate_backward(
    step: TrainingStep, chain: CutChain, gm: fx.GraphModule, values: list, args: tuple, kwargs: dict, target: Any,
    saved: StepState,
) -> str:  # fmt: skip
    """The stage whose backward first (from the loss down) differs from the traced graph's, when
    every stage's forward is equal: stage ``k`` receives an equal gradient for its output and hands
    on another one for its input, or (if no hand-off gradient differs) makes other gradients for
    parameters only it uses."""
    handoffs = [tuple(n.name for n in handoff) for handoff in chain.plan.handoffs]
    place = OffDevice()
    traced_grads: dict[str, Kept] = {}
    recorder = _GradRecorder(gm, {name for names in handoffs for name in names}, traced_grads, place)
    run_traced = lambda: chain.finish(torch.utils._pytree.tree_leaves(recorder.run(*values))[0])  # noqa: E731
    traced = _kept_step(step, run_traced, place, (args, kwargs, target))
    saved.reset()
    chain_grads: dict[tuple[int, int], Kept] = {}
    run_chain = _chain_grads(chain, lambda: chain.run(*args, target=target, **kwargs), chain_grads, place)
    with _off_device(step, args, kwargs, target):
        cut = _live(step, _step(step, run_chain))
    for k in range(len(handoffs) - 2, -1, -1):
        if not all(_same(traced_grads.get(n), chain_grads.get((k, j))) for j, n in enumerate(handoffs[k])):
            return chain.names[k + 1]
    owner: dict[int, int] = {}
    for k, stage in enumerate(chain.stages):
        for p in stage.parameters():
            owner[id(p)] = k if owner.get(id(p), k) == k else -1  # -1: used by several stages
    differing = [
        owner.get(id(p), -1)
        for p, a, b in zip(step.parameters(), traced.grads, cut.grads, strict=True)
        if not _same(a, b)
    ]
    return chain.names[max((k for k in differing if k >= 0), default=len(chain.names) - 1)]


def prove_cut(
    step: TrainingStep, chain: CutChain, args: tuple, kwargs: dict, target: Any = None,
    options: StageOptions | None = None, chain_step: Callable[[], torch.Tensor] | None = None,
) -> None:  # fmt: skip
    """Refuse (one-line :class:`RematError`) unless ``chain`` trains exactly like ``step`` and every
    stage runs as the replay runs it, any number of times (:func:`check_forward_kinds`, with the
    recording ``options`` the chain will offer). ``chain_step``: the chain's half of the proof,
    the caller's replay of the schedule that will train (returning the step's output, its backward
    run by the proof); default: ``chain.run`` on the example. Both whole steps run with saved
    tensors off the device (NOTE [The proof's memory])."""
    shared = shared_change(chain.plan)
    if shared is not None:
        k, side, op, j = shared
        raise RematError(
            f"model: stage '{k}' changes side value '{side}' in place ({op}) and stage '{j}' reads the changed"
            " value, so no copy makes it repeatable (a recompute would change it again); refused"
        )
    saved = _saved(step)
    try:
        saved.reset()
        check_forward_kinds(chain, args, kwargs, target, options)
        saved.reset()
        place = OffDevice()
        ref = _kept_step(step, lambda: step(args, kwargs, target), place, (args, kwargs, target))
        plain = lambda: chain.run(*args, target=target, **kwargs)  # noqa: E731
        saved.reset()
        try:
            with _off_device(step, args, kwargs, target):
                out = _step(step, plain if chain_step is None else chain_step)
        except RematError:
            raise
        except Exception as error:  # noqa: BLE001 - the user's model failed inside a stage: one line
            raise _stage_failure(step, error) from None
        what = _first_difference(step, ref, _live(step, out))
        del out
        if what is not None:
            if chain_step is not None and _plain_chain_equal(step, ref, plain, saved, (args, kwargs, target)):
                raise RematError(
                    f"model: the schedule's replay of the cut {type(step.model).__name__} computes a different"
                    f" {what} than the cut run plainly, which is equal to the model; refused (a model is only"
                    " run in a form proven equal to the user's)"
                )
            where = _locate_cut(step, chain, saved, args, kwargs, target)
            raise RematError(
                f"model: the cut {type(step.model).__name__} computes a different {what}; first difference at "
                f"{where}; refused (a model is only run in a form proven equal to the user's)"
            )
    finally:
        saved.restore()


def _plain_chain_equal(step: TrainingStep, ref: _Results, plain: Callable, saved: StepState, call: tuple) -> bool:
    """Whether the chain run plainly (not the caller's ``chain_step``) trains exactly like ``ref``."""
    saved.reset()
    with _off_device(step, *call):
        out = _step(step, plain)
    return _first_difference(step, ref, _live(step, out)) is None


def _stage_failure(step: TrainingStep, error: BaseException) -> RematError:
    """One line for ``error``, raised while the cut ran as one step: where in the model, and why."""
    where = where_in_model(error)
    return RematError(
        f"model: the cut {type(step.model).__name__} fails to run" + (f" ({where})" if where else "")
        + f": {first_line(error)}; refused"
    )  # fmt: skip


def cut_model(
    model: nn.Module, args: tuple, kwargs: dict, loss: Callable[..., torch.Tensor] | None = None, target: Any = None,
    options: StageOptions | None = None, dynamic: frozenset[tuple[int, int]] = frozenset(), prove: bool = True,
    step: TrainingStep | None = None,
) -> CutChain:  # fmt: skip
    """Trace, cut and prove ``model``'s training step on the example ``(args, kwargs)``; ``options``:
    the recording options the chain will offer, proven too (:func:`check_forward_kinds`);
    ``dynamic``: input dimensions to keep general where the model lets it
    (NOTE [Dimensions a trace is general in]; the cut is proven on this example's sizes only).
    ``prove=False``: the traced, cut and fused chain, not yet proven: the caller must run
    :func:`prove_cut` on it (``TrainingStep(model, loss)``, the same example) before anything
    trains with it. ``step``: the step to cut, when not ``TrainingStep(model, loss)`` (one that
    checks its output's form: NOTE [One meaning per step])."""
    step = TrainingStep(model, loss) if step is None else step
    saved = _saved(step)
    try:
        outputs: list[OneTensor | None] = []  # where the model's output holds its one tensor, if it does
        handle = model.register_forward_hook(lambda _m, _i, out: outputs.append(OneTensor.of(out)))
        try:
            with torch.no_grad():
                step(args, kwargs, target)  # eager first: bad inputs and outputs fail here, in plain terms
        finally:
            handle.remove()
        saved.reset()
        chain = _cut_step_or_tail(step, args, kwargs, target, dynamic, outputs[0] if outputs else None, saved)
        chain = fuse_unsaved_handoffs(chain, args, kwargs, target)
    finally:
        saved.restore()
    if prove:
        prove_cut(step, chain, args, kwargs, target, options)
    return chain


def _cut_step_or_tail(
    step: TrainingStep, args: tuple, kwargs: dict, target: Any, dynamic: frozenset, one_tensor: OneTensor | None,
    saved: StepState,
) -> CutChain:  # fmt: skip
    """:func:`cut_step`; where TorchDynamo cannot trace the step as one graph but can trace the
    model alone, and the model's output holds one tensor (``one_tensor``): the model's trace up to
    that tensor, with the user's ``loss=`` run eagerly after it (NOTE [A loss outside the trace])."""
    try:
        return cut_step(step, args, kwargs, target, dynamic)  # a stage that fails while it is cut: one line
    except GraphBreakError as error:
        if step.loss is None:
            raise
        whole = error
    name = type(step.model).__name__
    if one_tensor is None:
        raise RematError(
            f"model: TorchDynamo cannot trace {name}'s step with its loss as one graph ({whole.reason}); the loss"
            " could run eagerly after the chain, but the model's output holds no single tensor for it (or holds"
            " other objects than plain values): make forward return the tensor the loss reads"
        )
    saved.reset()
    # a break in the model itself is refused by this trace, naming it
    head = TrainingStep(step.model, one_tensor.pick)
    return cut_step(head, args, kwargs, target, dynamic, tail=Tail(step.loss, one_tensor))


_Call = tuple[int, int, int, Any, Kept]


def _leaf_calls(
    modules: list[nn.Module], run: Callable[[], Any], place: OffDevice, stages: list[nn.Module] | None = None
) -> list[_Call]:
    """Every call of a leaf module during ``run()``: (stage running or -1, module id, how many calls
    of that module came before, first input, output), the tensors kept off the device."""
    calls: list[_Call] = []
    counts: dict[int, int] = {}
    current = [-1]

    def record(module: nn.Module, inputs: Any, output: Any) -> None:
        if isinstance(output, torch.Tensor):
            key = id(module)
            first = place.put(inputs[0]) if inputs and isinstance(inputs[0], torch.Tensor) else None
            calls.append((current[0], key, counts.get(key, 0), first, place.put(output)))
            counts[key] = counts.get(key, 0) + 1

    def enter(index: int) -> Callable[..., None]:
        def pre(_module: nn.Module, _inputs: Any) -> None:
            current[0] = index

        return pre

    handles = [m.register_forward_hook(record) for m in modules]
    handles += [s.register_forward_pre_hook(enter(i)) for i, s in enumerate(stages or [])]
    _run_hooked(run, handles)
    return calls


def _locate_chain(holder: nn.Module, model: nn.Module, chain: Chain, x: torch.Tensor, saved: StepState) -> str:
    """The first stage that hands on a value the model does not compute there: its last leaf-module
    call's output, or the input of the next stage's first call, differs from the same call (same
    module, same call number) in ``model(x)``."""
    leaves = [m for m in holder.modules() if not list(m.children())]
    place = OffDevice()  # every call's values wait off the device (NOTE [The proof's memory])
    saved.reset()
    calls = _leaf_calls(leaves, lambda: model(x), place)
    original = {(key, count): (arg, out) for _, key, count, arg, out in calls}
    saved.reset()
    first: dict[int, _Call] = {}
    last: dict[int, _Call] = {}
    for call in _leaf_calls(leaves, lambda: chain(x), place, list(chain.stages)):
        first.setdefault(call[0], call)
        last[call[0]] = call
    missing = (None, None)
    for index, name in enumerate(chain.names):
        if index in first and index > 0:
            _, key, count, arg, _ = first[index]
            if not _same(original.get((key, count), missing)[0], arg):
                return f"stage '{chain.names[index - 1]}'"
        if index in last:
            _, key, count, _, out = last[index]
            if not _same(original.get((key, count), missing)[1], out):
                return f"stage '{name}'"
    return f"stage '{chain.names[-1]}'"


def prove_chain(
    model: nn.Module, chain: Chain, x: torch.Tensor, chain_step: Callable[[], torch.Tensor] | None = None
) -> None:
    """Refuse unless a chain made of ``model``'s own modules (``as_chain``'s name-based cuts, a
    ``remat_stages()`` list) trains exactly like ``model(x)``. The first stage that differs is
    found by comparing each stage's last leaf-module call with the same call (same module, same
    call number) in the model's own forward. ``chain_step``: the chain's half, as for
    :func:`prove_cut` (default ``chain(x)``); both whole steps run with saved tensors off the
    device (NOTE [The proof's memory])."""
    if chain is model and chain_step is None:
        return
    holder = nn.ModuleList([model, chain])
    saved = _saved(holder)
    try:
        saved.reset()
        ref = _kept_step(holder, lambda: model(x), OffDevice(), (holder, x))
        saved.reset()
        try:
            with _off_device(holder, x):
                out = _step(holder, (lambda: chain(x)) if chain_step is None else chain_step)
        except RematError:
            raise
        except Exception as error:  # noqa: BLE001 - the user's model failed inside a stage: one line
            where = where_in_model(error)
            raise RematError(
                f"model: the chain cut from {type(model).__name__} fails to run" + (f" ({where})" if where else "")
                + f": {first_line(error)}; refused"
            ) from None  # fmt: skip
        what = _first_difference(holder, ref, _live(holder, out))
        del out
        if what is not None:
            where = _locate_chain(holder, model, chain, x, saved)
            raise RematError(
                f"model: the chain cut from {type(model).__name__} computes a different {what}; first difference"
                f" at {where}; refused (a model is only run in a form proven equal to the user's)"
            )
    finally:
        saved.restore()


__all__ = ["StageOptions", "StepResult", "check_forward_kinds", "cut_model", "one_step", "prove_chain", "prove_cut"]
