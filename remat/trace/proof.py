"""Prove a cut model equal to the user's model before anything runs it (docs/models.md).

One training step of each, from the same state and RNG: the outputs, every parameter gradient
and every buffer (BatchNorm running statistics) after the step must be ``torch.equal`` (bit for
bit on CPU fp32). A cut that differs is refused with one line naming the first stage whose value
differs. The models are left as they were (buffers, gradients and RNG restored).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
from torch import nn
from torch.utils.checkpoint import checkpoint
from torch.utils.hooks import RemovableHandle

from remat.model_errors import first_line, where_in_model
from remat.schedules import RematError
from remat.trace.boundary import Boundary, can_have_grad, detached, each, is_boundary, tensors
from remat.trace.capture import TrainingStep
from remat.trace.chain import Chain
from remat.trace.cut import cut_step
from remat.trace.fuse import fuse_unsaved_handoffs
from remat.trace.repeatable import changes, describe_op, shared_change
from remat.trace.stage_errors import running_stage
from remat.trace.stages import CutChain


class _Saved:
    """Buffers, parameter gradients and RNG of ``module``, to put back after a trial step."""

    def __init__(self, module: nn.Module) -> None:
        with torch.no_grad():
            self.buffers = [(b, b.detach().clone()) for b in module.buffers()]
        self.grads = [(p, p.grad) for p in module.parameters()]
        self.rng = torch.get_rng_state()
        self.cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None

    def reset(self) -> None:
        """Back to the saved state, with parameter gradients cleared (``None``) for a fresh step."""
        with torch.no_grad():
            for b, saved in self.buffers:
                b.copy_(saved)
        for p, _ in self.grads:
            p.grad = None
        torch.set_rng_state(self.rng)
        if self.cuda_rng is not None:
            torch.cuda.set_rng_state_all(self.cuda_rng)

    def restore(self) -> None:
        self.reset()
        for p, grad in self.grads:
            p.grad = grad


@dataclass(frozen=True)
class StepResult:
    """Output (detached), parameter gradients and buffers after one step."""

    output: torch.Tensor
    grads: tuple[torch.Tensor | None, ...]
    buffers: tuple[torch.Tensor, ...]


def _weight(output: torch.Tensor) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)  # fixed, so both steps differentiate the same sum
    return torch.randn(output.shape, generator=generator, dtype=torch.float64).to(output)


def one_step(module: nn.Module, run: Callable[[], torch.Tensor]) -> StepResult:
    """``out = run()``; backward of ``out`` (a scalar) or of ``(out * r).sum()`` with a fixed ``r``."""
    out = run()
    if not isinstance(out, torch.Tensor) or not out.is_floating_point():
        raise RematError("model: the training step must return a floating-point tensor (the loss or the output)")
    if out.requires_grad:
        (out if out.dim() == 0 else (out * _weight(out)).sum()).backward()
    with torch.no_grad():
        grads = tuple(None if p.grad is None else p.grad.detach().clone() for p in module.parameters())
        buffers = tuple(b.detach().clone() for b in module.buffers())
    return StepResult(out.detach(), grads, buffers)


def _same(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)


def _same_boundary(a: Any, b: Any) -> bool:
    """:func:`_same` for a stage boundary: one tensor, or tuples of them (remat.trace.boundary)."""
    if isinstance(a, tuple) or isinstance(b, tuple):
        return (
            isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b)
            and all(_same(x, y) for x, y in zip(a, b, strict=True))
        )  # fmt: skip
    return _same(a, b)


def _first_difference(module: nn.Module, ref: StepResult, got: StepResult) -> str | None:
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

    def __init__(self, gm: fx.GraphModule, keep: set[str]) -> None:
        super().__init__(gm)
        self.keep = keep
        self.kept: dict[str, Any] = {}

    def run_node(self, n: fx.Node) -> Any:
        value = super().run_node(n)
        if n.name in self.keep and isinstance(value, torch.Tensor):
            self.kept[n.name] = value.detach().clone()
        return value


def _run_hooked(run: Callable[[], Any], handles: list[RemovableHandle]) -> None:
    """``run()`` without grad, with the hooks of ``handles`` removed afterwards (even on an error)."""
    try:
        with torch.no_grad():
            run()
    finally:
        for handle in handles:
            handle.remove()


def _stage_outputs(chain: Chain, run: Callable[[], torch.Tensor]) -> list[Any]:
    outputs: list[Any] = [None] * len(chain)

    def hook(index: int) -> Callable[..., None]:
        def record(_module: nn.Module, _inputs: Any, output: Any) -> None:
            if is_boundary(output):
                outputs[index] = each(lambda t: t.detach().clone(), output)

        return record

    _run_hooked(run, [stage.register_forward_hook(hook(i)) for i, stage in enumerate(chain.stages)])
    return outputs


def _locate_cut(step: TrainingStep, chain: CutChain, saved: _Saved, args: tuple, kwargs: dict, target: Any) -> str:
    """The first stage whose output differs from the traced graph's value at that point."""
    plan_ = chain.plan
    cuts = [tuple(n.name for n in handoff) for handoff in plan_.handoffs]
    leaves = torch.utils._pytree.tree_leaves((args, kwargs, target))
    values = []
    for node in (n for n in plan_.gm.graph.nodes if n.op == "placeholder"):
        source = plan_.sources[node]
        values.append(leaves[source.index] if source.kind == "input" else source.value)
    saved.reset()
    recorder = _Recorder(plan_.gm, {name for names in cuts for name in names})
    with torch.no_grad():
        traced = recorder.run(*values)
        saved.reset()
        reference = step(args, kwargs, target)
    traced_out = torch.utils._pytree.tree_leaves(traced)[0]
    if not _same(traced_out.detach(), reference.detach()):
        return "the traced program itself (TorchDynamo's graph differs from the eager model)"
    saved.reset()
    got = _stage_outputs(chain, lambda: chain.run(*args, target=target, **kwargs))
    for name, names, value in zip(chain.names, cuts, got, strict=True):
        kept = tuple(recorder.kept.get(node) for node in names)
        if value is None or not _same_boundary(kept if len(kept) > 1 else kept[0], value):
            return f"stage '{name}'"
    saved.reset()
    traced_step = one_step(step, lambda: torch.utils._pytree.tree_leaves(plan_.gm(*values))[0])
    saved.reset()
    eager_step = one_step(step, lambda: step(args, kwargs, target))
    if _first_difference(step, eager_step, traced_step) is not None:
        return (
            "the traced program itself: TorchDynamo's graph takes another code path than the eager model, with"
            " equal outputs but other gradients (Hugging Face models do so when no token is padded: eager then"
            " skips the causal mask and the trace cannot; give the model remat_stages() to cut it by hand)"
        )
    saved.reset()
    return f"stage '{_locate_backward(step, chain, plan_.gm, values, args, kwargs, target, saved)}' (its backward)"


class _GradRecorder(fx.Interpreter):
    """Runs the whole traced graph and records the gradients that reach the chosen nodes' values."""

    def __init__(self, gm: fx.GraphModule, keep: set[str], grads: dict[str, torch.Tensor]) -> None:
        super().__init__(gm)
        self.keep = keep
        self.grads = grads

    def run_node(self, n: fx.Node) -> Any:
        value = super().run_node(n)
        if n.name in self.keep and isinstance(value, torch.Tensor) and value.requires_grad:
            value.register_hook(_keeper(self.grads, n.name))
        return value


def _keeper(grads: dict, key: Any) -> Callable[[torch.Tensor], None]:
    def keep(grad: torch.Tensor) -> None:
        grads[key] = grad.detach().clone()

    return keep


def _chain_grads(chain: CutChain, run: Callable[[], torch.Tensor], grads: dict) -> Callable[[], torch.Tensor]:
    """``run`` with the gradient of each stage's output (its ``j``-th tensor, for a tuple
    boundary) recorded into ``grads[stage index, j]``."""

    def hook(index: int) -> Callable[..., None]:
        def record(_module: nn.Module, _inputs: Any, output: Any) -> None:
            if not is_boundary(output):
                return
            for j, t in enumerate(tensors(output)):
                if t.requires_grad:
                    t.register_hook(_keeper(grads, (index, j)))

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
    saved: _Saved,
) -> str:  # fmt: skip
    """The stage whose backward first (from the loss down) differs from the traced graph's, when
    every stage's forward is equal: stage ``k`` receives an equal gradient for its output and hands
    on another one for its input, or (if no hand-off gradient differs) makes other gradients for
    parameters only it uses."""
    handoffs = [tuple(n.name for n in handoff) for handoff in chain.plan.handoffs]
    traced_grads: dict[str, torch.Tensor] = {}
    recorder = _GradRecorder(gm, {name for names in handoffs for name in names}, traced_grads)
    traced = one_step(step, lambda: torch.utils._pytree.tree_leaves(recorder.run(*values))[0])
    saved.reset()
    chain_grads: dict[tuple[int, int], torch.Tensor] = {}
    cut = one_step(step, _chain_grads(chain, lambda: chain.run(*args, target=target, **kwargs), chain_grads))
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


StageOptions = Callable[[nn.Module, torch.Tensor], Mapping[str, Callable[[torch.Tensor], torch.Tensor]]]
"""For a stage and its input: option name -> the stage's recording forward under that option, a
function of the leaf it records from (``remat.runtime.policies.selective_forward``; the trace
room cannot import the runtime's policies, so the caller that offers options hands them in)."""


def prove_cut(
    step: TrainingStep, chain: CutChain, args: tuple, kwargs: dict, target: Any = None,
    options: StageOptions | None = None, chain_step: Callable[[], torch.Tensor] | None = None,
) -> None:  # fmt: skip
    """Refuse (one-line :class:`RematError`) unless ``chain`` trains exactly like ``step`` and every
    stage runs as the replay runs it, any number of times (:func:`check_forward_kinds`, with the
    recording ``options`` the chain will offer). ``chain_step``: what runs the chain's half of the
    step (the replay of the schedule that will train; default ``chain.run`` on the call)."""
    shared = shared_change(chain.plan)
    if shared is not None:
        k, side, op, j = shared
        raise RematError(
            f"model: stage '{k}' changes side value '{side}' in place ({op}) and stage '{j}' reads the changed"
            " value, so no copy makes it repeatable (a recompute would change it again); refused"
        )
    saved = _Saved(step)
    try:
        saved.reset()
        check_forward_kinds(chain, args, kwargs, target, options)
        saved.reset()
        ref = one_step(step, lambda: step(args, kwargs, target))
        saved.reset()
        try:
            got = one_step(step, chain_step or (lambda: chain.run(*args, target=target, **kwargs)))
        except RematError:
            raise
        except Exception as error:  # noqa: BLE001 - the user's model failed inside a stage: one line
            raise _stage_failure(step, error) from None
        what = _first_difference(step, ref, got)
        if what is not None:
            where = _locate_cut(step, chain, saved, args, kwargs, target)
            raise RematError(
                f"model: the cut {type(step.model).__name__} computes a different {what}; first difference at "
                f"{where}; refused (a model is only run in a form proven equal to the user's)"
            )
    finally:
        saved.restore()


def _stage_failure(step: TrainingStep, error: BaseException) -> RematError:
    """One line for ``error``, raised while the cut ran as one step: where in the model, and why."""
    where = where_in_model(error)
    return RematError(
        f"model: the cut {type(step.model).__name__} fails to run" + (f" ({where})" if where else "")
        + f": {first_line(error)}; refused"
    )  # fmt: skip


def _mutation_of(stage: nn.Module, placeholder: str) -> str:
    """The in-place op of ``stage``'s body that changes its placeholder ``placeholder`` (or a view
    of it), or a phrase saying the graph shows none."""
    body = getattr(stage, "body", None)
    nodes = list(body.graph.nodes) if isinstance(body, fx.GraphModule) else []
    target = next((n for n in nodes if n.op == "placeholder" and n.name == placeholder), None)
    found = changes(target) if target is not None else []
    return describe_op(found[0]) if found else "an op the traced graph does not show as in place"


def _unchanged(now: torch.Tensor, before: torch.Tensor) -> bool:
    """``torch.equal``, with NaN equal to NaN: a side value made by ``torch.empty`` (StochasticDepth's
    noise before its ``bernoulli_``) holds whatever the memory held, NaN bit patterns included."""
    if torch.equal(now, before):
        return True
    if not (now.is_floating_point() or now.is_complex()) or now.shape != before.shape:
        return False
    return bool(((now == before) | (now.isnan() & before.isnan())).all())


class _Inputs:
    """A stage's input and the call's side values, copied, to tell whether a run changed them."""

    def __init__(self, x: Boundary, sides: dict[str, Any]) -> None:
        mine = {id(t) for t in tensors(x)}
        self.x = tensors(x)
        self.sides = {k: v for k, v in sides.items() if isinstance(v, torch.Tensor) and id(v) not in mine}
        self.copies = {k: v.detach().clone() for k, v in self.sides.items()}
        self.x_copy = tuple(t.detach().clone() for t in self.x)
        self.versions = {k: v._version for k, v in self.sides.items()}

    def check(self, name: str, stage: nn.Module, kind: str) -> None:
        """Refuse if the last run of stage ``name`` (as ``kind``) changed its input or a side value."""
        # the version counter is the cheap first signal; torch.equal decides (a write through
        # ``.data`` does not move the counter, an in-place op that rewrites equal values does)
        moved = sorted(self.sides, key=lambda k: self.sides[k]._version == self.versions[k])
        changed = [k for k in moved if not _unchanged(self.sides[k], self.copies[k])]
        inputs = [j for j, (t, c) in enumerate(zip(self.x, self.x_copy, strict=True)) if not _unchanged(t, c)]
        if changed or inputs:
            what = f"side value '{changed[0]}'" if changed else "its input"
            placeholder = "x" if len(self.x) == 1 else f"x{inputs[0] if inputs else 0}"
            op = _mutation_of(stage, f"side_{changed[0]}" if changed else placeholder)
            raise RematError(f"model: stage '{name}' changes {what} in place ({op}) in {kind}, so it cannot "
                             "run twice (a recompute would see other values); refused")  # fmt: skip


class _Rerun:
    """Puts back what a stage's run changes legitimately (its buffers, as the replay restores them
    for a recompute, remat.runtime.core; the RNG, which a recompute replays) before the next run."""

    def __init__(self, stage: nn.Module) -> None:
        with torch.no_grad():
            self.buffers = [(b, b.detach().clone()) for b in stage.buffers()]
        self.rng = torch.get_rng_state()
        self.cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None

    def __call__(self) -> None:
        with torch.no_grad():
            for buffer, value in self.buffers:
                buffer.copy_(value)
        torch.set_rng_state(self.rng)
        if self.cuda_rng is not None:
            torch.cuda.set_rng_state_all(self.cuda_rng)


def _recorded(forward: Callable[[Boundary], Boundary], x: Boundary, params: list) -> tuple:
    """``forward`` recording from a leaf of ``x`` (of each of its tensors), then its backward for a
    fixed weighting of the output (of each of its tensors that requires grad): (output, gradients
    of the leaves and of ``params``), all detached."""
    leaf = each(lambda t: t.detach().requires_grad_(can_have_grad(t)), x)
    with torch.enable_grad():
        out = forward(leaf)
        targets = [t for t in tensors(leaf) if t.requires_grad] + params
        grads: tuple = ()
        live = [o for o in tensors(out) if o.requires_grad] if is_boundary(out) else []
        if live and targets:
            terms = [o if o.dim() == 0 else (o * _weight(o)).sum() for o in live]
            weighted = terms[0]
            for term in terms[1:]:
                weighted = weighted + term
            grads = torch.autograd.grad(weighted, targets, allow_unused=True)
    return detached(out), tuple(None if g is None else g.detach() for g in grads)


def _refuse(name: str, why: str) -> RematError:
    return RematError(f"model: stage '{name}' {why}; it cannot be recomputed as the replay runs it; refused")


def _no_grad_twice(name: str, stage: nn.Module, x: Boundary, inputs: _Inputs, rerun: _Rerun) -> Boundary:
    """The stage as ``F_ck``/``F_n`` run it (under ``no_grad``), twice: no graph, equal outputs."""
    kind = "a no-grad forward (F_ck, F_n)"
    outputs = []
    for _ in range(2):
        rerun()
        with torch.no_grad():
            out = stage(x)
            recorded = [t.grad_fn for t in (tensors(out) if is_boundary(out) else ()) if t.grad_fn is not None]
            if recorded:
                raise _refuse(name, f"records a graph under no_grad ({recorded[0].name()}) in {kind}")
            if torch.is_grad_enabled():
                raise _refuse(name, f"turns grad back on in {kind}")
        inputs.check(name, stage, kind)
        outputs.append(out)
    if not _same_boundary(outputs[0], outputs[1]):
        raise _refuse(name, f"gives another output when {kind} runs it again from the same input, side values and RNG")
    return outputs[0]


def _recording_kinds(stage: nn.Module, x: Boundary, options: StageOptions | None) -> dict[str, Callable]:
    """The recording forwards of a stage: ``F_all`` (twice), one whose backward recomputes the
    whole forward (what every option's backward does for the ops it does not keep), each option."""
    kinds: dict[str, Callable] = {"its recording forward (F_all)": stage, "F_all run again": stage}
    kinds["a recording forward recomputed in its backward (torch.utils.checkpoint)"] = lambda leaf: checkpoint(
        stage, leaf, use_reentrant=False
    )
    for option, forward in (options(stage, x) if options is not None else {}).items():
        kinds[f"option '{option}'"] = forward
    return kinds


def _check_stage(name: str, stage: nn.Module, x: Boundary, sides: dict, options: StageOptions | None):
    """Run stage ``name`` on ``x`` as every forward kind of the replay runs it; return its output."""
    inputs, rerun = _Inputs(x, sides), _Rerun(stage)
    params = list({id(p): p for p in stage.parameters() if p.requires_grad}.values())
    with running_stage(name, stage, x, "a no-grad forward (F_ck, F_n)"):
        first = _no_grad_twice(name, stage, x, inputs, rerun)
        kinds = _recording_kinds(stage, x, options)
    reference = None
    for kind, forward in kinds.items():
        rerun()
        with running_stage(name, stage, x, kind):
            out, grads = _recorded(forward, x, params)
        inputs.check(name, stage, kind)
        if not _same_boundary(out, first):
            raise _refuse(name, f"gives another output in {kind} than in a no-grad forward from the same input")
        if reference is not None and not all(_same(a, b) for a, b in zip(reference, grads, strict=True)):
            raise _refuse(name, f"gives other gradients in {kind} than in its recording forward (F_all)")
        reference = grads if reference is None else reference
    rerun()
    return first


def check_forward_kinds(
    chain: CutChain, args: tuple, kwargs: dict, target: Any = None, options: StageOptions | None = None
) -> None:
    """Every stage of ``chain``, on the example call, run as every forward kind the replay runs
    (docs/model.md): under ``no_grad`` twice (``F_ck``, ``F_n``: its output has no ``grad_fn``,
    NOTE [Grad mode inside a stage]), recording twice (``F_all``), recording with the backward
    recomputing the forward, and each recording option of ``options``; each run from the same
    input, side values, buffers and RNG state. Every run must give the same output (and every
    recording the same gradients), and none may change the stage's input or a side value. A stage
    that fails is refused in one line naming it (and the op, for an in-place change); a model
    error raised meanwhile is one line naming the stage, the module and the source line. The
    caller restores the model's buffers and RNG afterwards."""
    with torch.no_grad():
        a = chain.bind(*args, target=target, **kwargs)
    sides = dict(chain.context.values)
    for name, stage in zip(chain.names, chain.stages, strict=True):
        a = _check_stage(name, stage, detached(a), sides, options)


def cut_model(
    model: nn.Module, args: tuple, kwargs: dict, loss: Callable[..., torch.Tensor] | None = None, target: Any = None,
    options: StageOptions | None = None, dynamic: frozenset[tuple[int, int]] = frozenset(), prove: bool = True,
) -> CutChain:  # fmt: skip
    """Trace, cut and prove ``model``'s training step on the example ``(args, kwargs)``; ``options``:
    the recording options the chain will offer, proven too (:func:`check_forward_kinds`);
    ``dynamic``: input dimensions to keep general where the model lets it
    (NOTE [Dimensions a trace is general in]; the cut is proven on this example's sizes only);
    ``prove=False``: the fused chain unproven (the caller proves it with :func:`prove_cut`)."""
    step = TrainingStep(model, loss)
    saved = _Saved(step)
    try:
        with torch.no_grad():
            step(args, kwargs, target)  # eager first: bad inputs and outputs fail here, in plain terms
        saved.reset()
        chain = cut_step(step, args, kwargs, target, dynamic)  # a stage that fails while it is cut: one line
        chain = fuse_unsaved_handoffs(chain, args, kwargs, target)
    finally:
        saved.restore()
    if prove:
        prove_cut(step, chain, args, kwargs, target, options)
    return chain


_Call = tuple[int, int, int, Any, torch.Tensor]


def _leaf_calls(modules: list[nn.Module], run: Callable[[], Any], stages: list[nn.Module] | None = None) -> list[_Call]:
    """Every call of a leaf module during ``run()``: (stage running or -1, module id, how many calls
    of that module came before, first input, output)."""
    calls: list[_Call] = []
    counts: dict[int, int] = {}
    current = [-1]

    def record(module: nn.Module, inputs: Any, output: Any) -> None:
        if isinstance(output, torch.Tensor):
            key = id(module)
            first = inputs[0].detach().clone() if inputs and isinstance(inputs[0], torch.Tensor) else None
            calls.append((current[0], key, counts.get(key, 0), first, output.detach().clone()))
            counts[key] = counts.get(key, 0) + 1

    def enter(index: int) -> Callable[..., None]:
        def pre(_module: nn.Module, _inputs: Any) -> None:
            current[0] = index

        return pre

    handles = [m.register_forward_hook(record) for m in modules]
    handles += [s.register_forward_pre_hook(enter(i)) for i, s in enumerate(stages or [])]
    _run_hooked(run, handles)
    return calls


def _locate_chain(holder: nn.Module, model: nn.Module, chain: Chain, x: torch.Tensor, saved: _Saved) -> str:
    """The first stage that hands on a value the model does not compute there: its last leaf-module
    call's output, or the input of the next stage's first call, differs from the same call (same
    module, same call number) in ``model(x)``."""
    leaves = [m for m in holder.modules() if not list(m.children())]
    saved.reset()
    original = {(key, count): (arg, out) for _, key, count, arg, out in _leaf_calls(leaves, lambda: model(x))}
    saved.reset()
    first: dict[int, _Call] = {}
    last: dict[int, _Call] = {}
    for call in _leaf_calls(leaves, lambda: chain(x), list(chain.stages)):
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


def prove_chain(model: nn.Module, chain: Chain, x: torch.Tensor) -> None:
    """Refuse unless a chain made of ``model``'s own modules (``as_chain``'s name-based cuts, a
    ``remat_stages()`` list) trains exactly like ``model(x)``. The first stage that differs is
    found by comparing each stage's last leaf-module call with the same call (same module, same
    call number) in the model's own forward."""
    if chain is model:
        return
    holder = nn.ModuleList([model, chain])
    saved = _Saved(holder)
    try:
        saved.reset()
        ref = one_step(holder, lambda: model(x))
        saved.reset()
        try:
            got = one_step(holder, lambda: chain(x))
        except RematError:
            raise
        except Exception as error:  # noqa: BLE001 - the user's model failed inside a stage: one line
            where = where_in_model(error)
            raise RematError(
                f"model: the chain cut from {type(model).__name__} fails to run" + (f" ({where})" if where else "")
                + f": {first_line(error)}; refused"
            ) from None  # fmt: skip
        what = _first_difference(holder, ref, got)
        if what is not None:
            where = _locate_chain(holder, model, chain, x, saved)
            raise RematError(
                f"model: the chain cut from {type(model).__name__} computes a different {what}; first difference"
                f" at {where}; refused (a model is only run in a form proven equal to the user's)"
            )
    finally:
        saved.restore()


__all__ = ["StageOptions", "StepResult", "check_forward_kinds", "cut_model", "one_step", "prove_chain", "prove_cut"]
