"""Replay a chain schedule as an ordinary training step.

:class:`RematChain` wraps a model (cut into stages by :func:`remat.trace.chain.as_chain`) and a
chain schedule. A training loop uses it unchanged::

    wrapped = RematChain(model, schedule, profile)
    out = wrapped(x); loss = crit(out, y); loss.backward(); opt.step()

Calling it runs the schedule's forward phase (the ops before the first ``B``) inside a custom
``autograd.Function``; that Function's ``backward`` runs the remaining ops. Each op maps onto
tensors exactly as in the simulator (docs/model.md):

* ``a[i]``: a tensor computed under ``no_grad`` (``F_ck``/``F_n``), or the caller's input for a[0];
* ``abar[i+1]``: ``(leaf, out)`` from a recording forward of stage i (``F_all``) on
  ``leaf = a_i.detach().requires_grad_()``: autograd keeps the stage's saved tensors alive through
  ``out``'s graph; ``F_all i k`` (option k >= 1, docs/model.md) records under the selective-
  checkpoint policy the profile's option k names (:mod:`remat.runtime.policies`), so
  ``out``'s graph keeps only what the policy saves and ``B i`` recomputes the rest (buffers such
  as BatchNorm's running statistics are restored after it, so they are updated once);
* ``g[i]``: ``leaf.grad`` after ``B i`` ran the stage's backward from ``out`` with ``g[i+1]``, laid
  out as autograd produced it (NOTE [Gradient layout at a cut], remat.runtime.core);
  parameter gradients go where the caller's backward wants them (``.grad`` for
  ``loss.backward()``/``backward(inputs=...)``, returned for ``torch.autograd.grad``).

Dropping an item drops the executor's last reference, so the memory is freed when the simulator
says. Consistency choices (explained in the report of issue 5):

* ``g[0]`` is computed where the profile counts it (metadata ``input_grad``, true unless the
  profile says otherwise, docs/model.md) or the caller's input requires grad; it is returned only
  in the second case. A profile measured without it (``remat.checkpoint``'s, for an input that
  needs no gradient: an image batch) lets ``B 0`` cost what plain autograd's does (a conv's input
  gradient on CPU has its own column buffer) and refuses an input that requires grad, in one
  line. A non-float input (token ids) cannot have a gradient: there g[0] is absent.
* Each ``B i`` hands the stage's output and output gradient to autograd and keeps no reference
  (NOTE [Early release at a stage's backward], remat.runtime.release), so they are freed as
  autograd goes, as the profile measured.
* ``g[n]`` is the gradient autograd hands to the Function's backward; autograd itself holds that
  tensor until the Function's backward returns, so after ``B n-1`` its storage is released
  (``resize_(0)``) when nothing else can see it (the simulator frees g[n] after ``B n-1``).
* A recomputed stage runs as its first forward in the step did (remat.runtime.core:
  autocast state, every device's RNG, buffers restored so BatchNorm statistics are updated once).
* Under ``torch.no_grad()`` or in eval mode the wrapper runs the plain model.
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Sequence

import torch
from torch import nn

from remat.measure.state import kept_buffers
from remat.replay.matching import solved_ops
from remat.runtime.core import (
    BufferSnapshots,
    GradLayout,
    GradSink,
    Recomputer,
    ReplayFunction,
    accelerator_devices,
    grad_input,
    grad_leaf,
    release_output_grad,
    shared_params,
    trainable_params,
    uncached_casts,
)
from remat.runtime.policies import require_policy, selective_forward
from remat.runtime.release import released_backward
from remat.schedules import ChainProfile, Op, RematError, Schedule, ScheduleError, Stage, parse_ops, simulate
from remat.trace.boundary import Boundary, detached, each, like, requires_grad, tensors
from remat.trace.chain import Chain, as_chain


def _dummy_profile(n: int) -> ChainProfile:
    stage = Stage(name="s", forward_ms=0.0, backward_ms=0.0, output_size=1, saved_size=1)
    return ChainProfile(name="check", input_size=1, stages=tuple(stage for _ in range(n)))


def check_ops_for_chain(ops: Sequence[Op], n: int, profile: ChainProfile | None = None) -> tuple[Op, ...]:
    """Validate chain ``ops`` for a model of ``n`` stages; raise a one-line :class:`RematError`."""
    ops = parse_ops(list(ops))
    if any(op[0] not in ("F_ck", "F_n", "F_all", "B") for op in ops):
        raise ScheduleError("schedule: the executor replays chain schedules (F_ck, F_n, F_all, B), not graph ones")
    if profile is None and any(len(op) == 3 for op in ops):
        raise ScheduleError("schedule records with stage options (F_all i k): pass the profile that names them")
    stages_in_schedule = sum(1 for op in ops if op[0] == "B")
    top = max((op[1] for op in ops), default=-1) + 1
    if stages_in_schedule != n or top > n:
        raise ScheduleError(
            f"schedule is for a chain of {max(stages_in_schedule, top)} stages, but the model has {n} stages"
        )
    if profile is not None and profile.length != n:
        raise ScheduleError(f"profile has {profile.length} stages, but the model has {n} stages")
    simulate(profile or _dummy_profile(n), ops, timeline=False)  # raises ScheduleError naming the op
    for op in ops:
        if len(op) == 3:
            require_policy(profile.stages[op[1]].recording(op[2]).name, f"stage {op[1]} option {op[2]}")
    return ops


def _option_names(ops: Sequence[Op], profile: ChainProfile | None) -> dict[tuple[int, int], str]:
    """(stage, option) -> the policy name of every option the schedule records with."""
    return {(op[1], op[2]): profile.stages[op[1]].recording(op[2]).name for op in ops if len(op) == 3}


def _check_compiled(chain: Chain, profile: ChainProfile | None) -> None:
    """Refuse a profile measured on compiled stages for an eager chain, or the other way round:
    its times and transients were those of other kernels (remat.runtime.compiled)."""
    if profile is None:
        return
    measured, here = profile.metadata.get("compiled"), chain.compiled_label
    if measured != here:
        raise RematError(
            f"profile '{profile.name}' was measured with {measured or 'eager stages'}, but the chain runs "
            f"{here or 'eager stages'}: profile the chain that is replayed (compile_chain)"
        )


class _Step:
    """State of one training step: the held items and the recomputation record (replay_core)."""

    def __init__(self, owner: RematChain, x: torch.Tensor) -> None:
        self.owner = owner
        self.n = len(owner.chain)
        self.a: dict[int, torch.Tensor] = {0: x}
        # g_0 for an input that requires grad, or where the profile counts it (input_grad)
        self.input_grad = requires_grad(x) or owner.profile_input_grad is True
        self.abar: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.recorded: dict[int, int] = {}  # abar[i+1] -> the option it was recorded with
        self.g: dict[int, torch.Tensor | None] = {}
        self.params = trainable_params(owner.chain.stages)
        self.shared = shared_params(stage.parameters() for stage in owner.chain.stages)
        self.output_ref: weakref.ref | None = None
        self.sink: GradSink | None = None
        devices = accelerator_devices([x, *self.params])
        self.recompute = Recomputer(
            devices, owner.recomputed, lambda i: list(owner.chain.stages[i].buffers()), owner.snapshots
        )

    # -- helpers --------------------------------------------------------------------------
    def _input(self, i: int) -> Boundary:
        if i in self.a:
            return self.a[i]
        if i in self.abar:
            return detached(self.abar[i][1])
        raise RematError(f"executor: a_{i} is not in memory (schedule and executor disagree)")

    # -- ops ------------------------------------------------------------------------------
    def run(self, op: str, i: int, grad_output: torch.Tensor | None = None, option: int = 0) -> None:
        stage = self.owner.chain.stages[i]
        if op == "B":
            self._backward(i, grad_output)
            return
        inp = self._input(i)
        with self.recompute.running(i):
            if op == "F_all":
                leaf = grad_leaf(inp, i > 0 or self.input_grad)
                with torch.enable_grad():
                    if option:
                        out = selective_forward(stage, grad_input(leaf), self.owner.option_names[i, option])
                    else:
                        out = stage(grad_input(leaf))
                self.abar[i + 1] = (leaf, out)
                self.recorded[i + 1] = option
            else:  # no graph: no cast kept to the autocast region's end (NOTE [Autocast's weight-cast cache])
                with torch.no_grad(), uncached_casts():
                    out = stage(inp)
                self.a[i + 1] = out
        del inp
        if op == "F_n" and i != 0:
            del self.a[i]

    def _backward(self, i: int, grad_output: torch.Tensor | None) -> None:
        release = None
        if i == self.n - 1:
            g = grad_output.contiguous() if grad_output is not None else None
            release = g if g is grad_output else None
            self.g[self.n] = g
        leaf, out = self.abar.pop(i + 1)
        option = self.recorded.pop(i + 1, 0)
        g_out = self.g.pop(i + 1)
        layouts = each(GradLayout, leaf)  # NOTE [Gradient layout at a cut], per tensor of a tuple
        if requires_grad(out) and any(g is not None for g in tensors(g_out)):
            # the backward gets the only references to out and g_out (NOTE [Early release at a
            # stage's backward]): autograd frees them as it goes, as the profile measured; the
            # last stage runs the plain backward (autograd holds g[n]; the profile so measured)
            pending = [(out, g_out)]
            del out, g_out
            if option:  # the backward reruns part of the forward: keep buffers as they are
                with kept_buffers(self.owner.chain.stages[i]):
                    self._stage_backward(i, leaf, pending)
            else:
                self._stage_backward(i, leaf, pending)
        else:
            del out, g_out
        # every tensor of the input that requires grad gets its gradient; one that cannot (an
        # int mask handed on beside the hidden state) has none
        self.g[i] = like(leaf, [
            layout.take(t) if t.requires_grad else None
            for layout, t in zip(tensors(layouts), tensors(leaf), strict=True)
        ])  # fmt: skip
        del leaf, layouts
        if i != 0:
            self.a.pop(i, None)
        release_output_grad(release, self.output_ref)

    def _stage_backward(self, i: int, leaf: Boundary, pending: list) -> None:
        sink, release = self.sink, i != self.n - 1
        if sink is None:
            released_backward(pending, release=release)
            return
        # shared parameters get the running sum of the stages before as their first gradient
        # (NOTE [Shared parameters under gradient accumulation], remat.runtime.core)
        if sink.everything:  # loss.backward(): accumulate wherever autograd reaches
            with sink.collecting(list(self.owner.chain.stages[i].parameters()), inject=True) as inject:
                released_backward(pending, release=release, inject=inject)
            return
        params = sink.targets(self.owner.chain.stages[i].parameters())
        targets = [t for t in tensors(leaf) if t.requires_grad] + params
        if targets:
            with sink.collecting(params, inject=True) as inject:
                released_backward(pending, inputs=targets, release=release, inject=inject)

    def _run_observed(self, position: int, op: Op, grad_output: torch.Tensor | None = None) -> None:
        observer = self.owner.observer
        name, i = op[0], op[1]
        if observer is not None:
            observer(position, name, i, "before")
        self.run(name, i, grad_output, option=op[2] if len(op) == 3 else 0)
        if observer is not None:
            observer(position, name, i, "after")

    def forward_phase(self) -> torch.Tensor:
        for position, op in enumerate(self.owner.forward_ops):
            self._run_observed(position, op)
        _, out = self.abar[self.n]
        # a_n stays in abar[n] until B n-1, as the chain model counts it (docs/executor.md, abar[n])
        if out.dim() == 0 and out.untyped_storage().nbytes() > out.element_size():
            # a scalar loss that is a view into its elementwise buffer (mse_loss reduces in place:
            # 4 bytes on an 8 KiB storage): the caller holds the loss through its backward, so a
            # view would keep that buffer past B n-1, where the chain model frees it. A copy holds
            # one element.
            return out.detach().clone()
        return out.detach()

    def backward_phase(self, grad_output: torch.Tensor, sink: GradSink) -> tuple[torch.Tensor | None]:
        self.sink = sink
        offset = len(self.owner.forward_ops)
        for position, op in enumerate(self.owner.backward_ops, start=offset):
            self._run_observed(position, op, grad_output)
            if op[0] == "B" and op[1] == self.n - 1:
                grad_output = None
        g0 = self.g.pop(0, None)
        self.a.clear()
        self.abar.clear()
        self.g.clear()
        self.sink = None
        return (g0,)


class RematChain(nn.Module):
    """A model (or list of stages) that trains by replaying a chain schedule.

    Args:
        model: anything :func:`as_chain` accepts (its stages are shared, not copied).
        schedule: a :class:`Schedule` or a raw op list.
        profile: optional; if given, the schedule must have been solved for it (same sha256) and
            it must have as many stages as the model.
    """

    def __init__(
        self,
        model: nn.Module | Sequence[nn.Module] | Chain,
        schedule: Schedule | Sequence[Op],
        profile: ChainProfile | None = None,
    ) -> None:
        super().__init__()
        self.chain = as_chain(model)
        self.ops = check_ops_for_chain(solved_ops(schedule, profile), len(self.chain), profile)
        _check_compiled(self.chain, profile)
        self.option_names = _option_names(self.ops, profile)
        first_b = next(k for k, op in enumerate(self.ops) if op[0] == "B")
        self.forward_ops = self.ops[:first_b]
        self.backward_ops = self.ops[first_b:]
        forwards = Counter(op[1] for op in self.ops if op[0] != "B")
        self.recomputed = frozenset(i for i, count in forwards.items() if count > 1)
        self.snapshots = BufferSnapshots(count_rng_reads=True)  # the chain profile covers them
        # whether the profile's stage 0 computed g_0 (None: no profile, nothing is predicted, so
        # g_0 only where plain autograd computes it)
        self.profile_input_grad = None if profile is None else bool(profile.metadata.get("input_grad", True))
        # called as observer(position, op, index, "before" | "after") around every op (measurement)
        self.observer = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.is_grad_enabled() or not self.training:
            return self.chain(x)
        if requires_grad(x) and self.profile_input_grad is False:
            raise RematError(
                "executor: the input requires grad, but the profile was measured for an input that needs "
                "none (metadata input_grad: false; its stage 0 backward computes no g_0): profile with "
                "an example input that requires grad"
            )
        step = _Step(self, x)
        # a 0-byte leaf that requires grad puts the Function in the graph even when neither x nor
        # any parameter requires grad (parameters are inputs so torch.autograd.grad can reach them)
        anchor = torch.empty(0, device=x.device, requires_grad=True)
        out = ReplayFunction.apply(step, anchor, 1, x, *step.params)
        step.output_ref = weakref.ref(out)
        return out


__all__ = ["RematChain", "check_ops_for_chain"]
