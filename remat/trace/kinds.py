"""Every stage of a cut run as each forward kind of the replay runs it, and the comparisons the
proof shares (docs/models.md, "The proof"): :func:`check_forward_kinds`, split from
:mod:`remat.trace.proof`, which calls it before its whole steps and re-exports it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.fx as fx
from torch import nn
from torch.utils.checkpoint import checkpoint

from remat.measure.offload import Kept, OffDevice
from remat.measure.state import StepState
from remat.schedules import RematError
from remat.trace.boundary import Boundary, can_have_grad, detached, each, is_boundary, tensors
from remat.trace.loss import step_loss
from remat.trace.repeatable import changes, describe_op
from remat.trace.stage_errors import running_stage
from remat.trace.stages import CutChain


def _weight(output: torch.Tensor) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)  # fixed, so both steps differentiate the same sum
    return torch.randn(output.shape, generator=generator, dtype=torch.float64).to(output)


def _same(a: torch.Tensor | Kept | None, b: torch.Tensor | Kept | None) -> bool:
    """``torch.equal`` with equal shape and dtype; a copy off the device is read back piecewise."""
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, Kept) and isinstance(b, Kept):
        return a.equal(b.get())
    if isinstance(a, Kept) or isinstance(b, Kept):
        kept, live = (a, b) if isinstance(a, Kept) else (b, a)
        assert isinstance(kept, Kept) and isinstance(live, torch.Tensor)
        return kept.equal(live)
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)


def _same_boundary(a: Any, b: Any) -> bool:
    """:func:`_same` for a stage boundary: one tensor, or tuples of them (remat.trace.boundary)."""
    if isinstance(a, tuple) or isinstance(b, tuple):
        return (
            isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b)
            and all(_same(x, y) for x, y in zip(a, b, strict=True))
        )  # fmt: skip
    return _same(a, b)


StageOptions = Callable[[nn.Module, torch.Tensor], Mapping[str, Callable[[torch.Tensor], torch.Tensor]]]
"""For a stage and its input: option name -> the stage's recording forward under that option, a
function of the leaf it records from (``remat.runtime.policies.selective_forward``; the trace
room cannot import the runtime's policies, so the caller that offers options hands them in)."""


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
            grads = torch.autograd.grad(step_loss(live, _weight), targets, allow_unused=True)
    return detached(out), tuple(None if g is None else g.detach() for g in grads)


def _refuse(name: str, why: str) -> RematError:
    return RematError(f"model: stage '{name}' {why}; it cannot be recomputed as the replay runs it; refused")


def _no_grad_twice(name: str, stage: nn.Module, x: Boundary, inputs: _Inputs, rerun: StepState) -> Boundary:
    """The stage as ``F_ck``/``F_n`` run it (under ``no_grad``), twice: no graph, equal outputs."""
    kind = "a no-grad forward (F_ck, F_n)"
    outputs = []
    for _ in range(2):
        rerun.restore()
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
    # what a run changes legitimately (buffers, as the replay restores them for a recompute; the
    # RNG, which a recompute replays), put back before the next run
    inputs, rerun = _Inputs(x, sides), StepState(stage)
    params = list({id(p): p for p in stage.parameters() if p.requires_grad}.values())
    with running_stage(name, stage, x, "a no-grad forward (F_ck, F_n)"):
        first = _no_grad_twice(name, stage, x, inputs, rerun)
        kinds = _recording_kinds(stage, x, options)
    reference = None
    place = OffDevice()  # F_all's gradients wait off the device (NOTE [The proof's memory])
    for kind, forward in kinds.items():
        rerun.restore()
        with running_stage(name, stage, x, kind):
            out, grads = _recorded(forward, x, params)
        inputs.check(name, stage, kind)
        if not _same_boundary(out, first):
            raise _refuse(name, f"gives another output in {kind} than in a no-grad forward from the same input")
        if reference is not None and not all(_same(a, b) for a, b in zip(reference, grads, strict=True)):
            raise _refuse(name, f"gives other gradients in {kind} than in its recording forward (F_all)")
        if reference is None:
            reference = tuple(None if g is None else place.put(g) for g in grads)
        del out, grads  # the next kind runs without this one's values (NOTE [The proof's memory])
    rerun.restore()
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


__all__ = ["StageOptions", "check_forward_kinds"]
