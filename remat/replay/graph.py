"""Replay a graph schedule (compute/free ops) as an ordinary training step of a real model.

:class:`GraphReplay` wraps a model, the graph profile made from it by
:func:`remat.graph.profiler.profile_graph` and a graph schedule solved for that profile.
A training loop uses it unchanged::

    wrapped = GraphReplay(model, schedule, profile)
    out = wrapped(x); loss = crit(out, y); loss.backward(); opt.step()

Calling it runs the schedule's forward phase (the ops before ``compute grad:output``) inside a
custom ``autograd.Function``; that Function's ``backward`` runs the remaining ops. Node kinds map
onto tensors as the profile's mapping says (module docstring of :mod:`remat.graph.profiler`):

* ``compute fwd:p``: run piece p recording its autograd graph (``forward_piece``); the executor
  holds the piece's outputs and, through them, its saved tensors. Inputs come from the
  producers' held outputs; p's graph keeps no reference to them (saved-tensor hooks), so freeing
  a producer frees its memory, and p's backward reads the producer's *current* output.
* ``compute grad:output``: the gradient of the model output that autograd hands the Function.
* ``compute bwd:p``: sum the gradient contributions of p's consumers' backward nodes (and the seed
  for the model output), run p's backward over its recorded graph, keep the gradients w.r.t. p's
  inputs; parameter gradients are delivered (into ``.grad``, or returned for
  ``torch.autograd.grad``: remat.runtime.core) the first time ``bwd:p`` runs in the step
  (a recomputed backward does not add them twice).
* ``free v``: drop the executor's reference. Dropping the seed releases its storage when only
  autograd's own argument tuple could still see it (as the chain replay does for ``g[n]``).

Guarantees, as for the chain replay: gradients equal the plain model's; a recomputed piece runs
as its first run in the step did (remat.runtime.core: autocast state, every device's RNG
whatever op draws from it, buffers restored so BatchNorm statistics are updated once); a
schedule, profile and model that do not belong together are refused with a one-line error. Under
``torch.no_grad()`` or in eval mode the wrapper runs the plain model. Gradients w.r.t. the model
input are not produced (the profile does not count them): an input that requires grad is refused.
"""

from __future__ import annotations

import contextlib
import functools
import statistics
import warnings
import weakref
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from remat.graph.execution import ConstCache, fetch_attr
from remat.graph.pieces import GraphPlan
from remat.graph.profiler import graph_plan
from remat.graph.recording import RecordedPiece, backward_piece, forward_piece
from remat.graph.sizing import GRAD_OUTPUT_NAME
from remat.replay.matching import solved_ops
from remat.replay.report import (
    MeteredStep,
    Report,
    build_report,
    loss_step,
    meter_step,
    time_steps,
    warm_up,
)
from remat.runtime.core import (
    BufferSnapshots,
    GradSink,
    Recomputer,
    ReplayFunction,
    accelerator_devices,
    release_output_grad,
    shared_params,
    trainable_params,
)
from remat.schedules import (
    GraphProfile,
    Op,
    OpRecord,
    ProfileError,
    RematError,
    Schedule,
    ScheduleError,
    parse_ops,
    simulate,
)


def _plan_for(model: nn.Module, profile: GraphProfile) -> GraphPlan:
    """Rebuild the plan of ``model`` at the profile's input shapes and check it is the profile's graph."""
    meta = profile.metadata
    for key in ("structure_sha256", "input_shapes", "input_dtypes", "dtype"):
        if key not in meta:
            raise ProfileError(
                f"metadata.{key}: missing; the graph replay needs a profile made by remat.graph.profiler"
            )
    example = tuple(
        torch.empty(tuple(shape), dtype=getattr(torch, dtype), device="meta")
        for shape, dtype in zip(meta["input_shapes"], meta["input_dtypes"], strict=True)
    )
    # the structure only: overheads are the profile's (nothing runs here)
    plan = graph_plan(model, example_inputs=example, dtype=meta["dtype"], name=profile.name, overheads="shapes")
    mine = plan.profile
    if mine.size != profile.size:
        raise ScheduleError(
            f"model does not match the profile: the model's graph has {mine.size} nodes, "
            f"profile '{profile.name}' has {profile.size}"
        )
    if plan.profile.metadata["structure_sha256"] != meta["structure_sha256"]:
        for index, (a, b) in enumerate(zip(mine.nodes, profile.nodes, strict=True)):
            if (a.name, a.size, a.backward) != (b.name, b.size, b.backward):
                raise ScheduleError(
                    f"model does not match the profile: node {index} is '{a.name}' ({a.size} bytes) in the model's "
                    f"graph but '{b.name}' ({b.size} bytes) in profile '{profile.name}'"
                )
        raise ScheduleError(f"model does not match the profile '{profile.name}': its graph has different edges")
    return plan


def _piece_buffers(plan: GraphPlan) -> list[list[torch.Tensor]]:
    """The buffers each piece reads (its modules' and the ``get_attr`` tensors that are not
    parameters), each once: what a recomputation restores (BatchNorm statistics)."""
    gm = plan.graph_module
    nodes = {n.name: n for n in gm.graph.nodes}
    piece_buffers: list[list[torch.Tensor]] = []
    for piece in plan.pieces:
        buffers: dict[int, torch.Tensor] = {}
        for name in piece.nodes:
            node = nodes[name]
            if node.op == "call_module":
                for b in gm.get_submodule(node.target).buffers():
                    buffers.setdefault(id(b), b)
            for arg in node.all_input_nodes:  # F.batch_norm(x, self.running_mean, ...) reads get_attr
                if arg.op == "get_attr":
                    value = fetch_attr(gm, arg.target)
                    if isinstance(value, torch.Tensor) and not isinstance(value, nn.Parameter):
                        buffers.setdefault(id(value), value)
        piece_buffers.append(list(buffers.values()))
    return piece_buffers


class _Step:
    """State of one training step: held forward pieces, the seed, input gradients, the recomputation record."""

    def __init__(self, owner: GraphReplay, inputs: Sequence[torch.Tensor]) -> None:
        self.owner = owner
        plan = owner.plan
        self.inputs = dict(zip(plan.placeholders, inputs, strict=True))
        self.consts = ConstCache(plan.graph_module, plan.graph_module, self.inputs)
        self.fwd: dict[int, RecordedPiece] = {}
        self.bwd: dict[int, dict[str, torch.Tensor]] = {}
        self.seed: torch.Tensor | None = None
        self.kept_seed: torch.Tensor | None = None
        self.engine_grad: torch.Tensor | None = None
        self.params_done: set[int] = set()
        self.output_ref: weakref.ref | None = None
        self.params = owner.params
        self.shared = shared_params(owner.piece_params)
        self.sink: GradSink | None = None
        devices = accelerator_devices([*inputs, *self.params])
        self.recompute = Recomputer(devices, owner.recomputed, owner.piece_buffers.__getitem__, owner.snapshots)

    # -- helpers --------------------------------------------------------------------------
    def fetch(self, name: str) -> Any:
        if name in self.inputs:
            return self.inputs[name]
        p = self.owner.plan.producer[name]
        recorded = self.fwd.get(p)
        if recorded is None:
            node = self.owner.plan.forward_node[p]
            raise RematError(
                f"executor: node {node} ('{self.owner.profile.nodes[node].name}') is not in memory "
                "(schedule and executor disagree)"
            )
        return recorded.outputs[name]

    # -- ops ------------------------------------------------------------------------------
    def compute(self, v: int, grad_output: torch.Tensor | None) -> None:
        kind, p = self.owner.kinds[v]
        if kind == "forward":
            plan = self.owner.plan
            with self.recompute.running(p):
                recorded = forward_piece(
                    plan.graph_module, plan.graph_module, plan.pieces[p], self.fetch, self.consts, plan.grad_inputs[p]
                )
            self.fwd[p] = recorded
        elif kind == "grad_output":
            if self.kept_seed is not None:  # recomputing the seed: its bytes were kept (see free)
                self.seed, self.kept_seed = self.kept_seed, None
                return
            if grad_output is None:
                raise RematError("executor: the output gradient is no longer available")
            dense = grad_output.is_contiguous() and (
                grad_output.untyped_storage().nbytes() == grad_output.numel() * grad_output.element_size()
            )
            self.seed = grad_output if dense else grad_output.contiguous()
            self.engine_grad = grad_output if dense else None
        else:
            self._backward(p)

    def _backward(self, p: int) -> None:
        plan = self.owner.plan
        piece = plan.pieces[p]
        output_grads: dict[str, torch.Tensor] = {}
        for o in piece.outputs:
            contributions = []
            for c in self.owner.grad_consumers.get(o, ()):
                grads = self.bwd.get(c)
                if grads is None:
                    node = plan.backward_node[c]
                    raise RematError(f"executor: node {node} is not in memory (schedule and executor disagree)")
                contributions.append(grads[o])
            if o == plan.output_value:
                if self.seed is None:
                    raise RematError(
                        f"executor: '{GRAD_OUTPUT_NAME}' is not in memory (schedule and executor disagree)"
                    )
                contributions.append(self.seed)
            if contributions:
                # in autograd's order: the engine runs the latest consumer's backward first and
                # adds each next one to the sum (a + b + c in another order differs in the last bits)
                output_grads[o] = functools.reduce(torch.add, reversed(contributions))
        recorded = self.fwd.get(p)
        if recorded is None:
            node = plan.forward_node[p]
            raise RematError(f"executor: node {node} is not in memory (schedule and executor disagree)")
        params: list[torch.Tensor] = []
        if p not in self.params_done:  # a recomputed backward does not add parameter gradients twice
            params = [prm for prm in self.owner.piece_params[p] if prm.requires_grad]
            if self.sink is not None and not self.sink.everything:
                params = self.sink.targets(params)
        with self.sink.collecting(params) if self.sink is not None else contextlib.nullcontext():
            input_grads = backward_piece(piece, recorded, output_grads, params, plan.grad_inputs[p])
        del output_grads, contributions
        self.params_done.add(p)
        self.bwd[p] = input_grads

    def free(self, v: int, position: int) -> None:
        kind, p = self.owner.kinds[v]
        if kind == "forward":
            del self.fwd[p]
        elif kind == "backward":
            del self.bwd[p]
        elif position < self.owner.last_seed_compute:
            # Only for profiles made before the seed was marked ``recompute: false`` (the
            # simulator now refuses a second compute of it): the schedule computes the seed again
            # later, but it cannot be recomputed (it comes from the loss, outside the model), so
            # its bytes stay alive until then, which such a profile does not count.
            self.kept_seed, self.seed = self.seed, None
        else:
            self.seed = None
            release, self.engine_grad = self.engine_grad, None
            release_output_grad(release, self.output_ref)

    def run(self, ops: Sequence[Op], start: int, grad_output: torch.Tensor | None = None) -> None:
        observer = self.owner.observer
        for position, (op, v) in enumerate(ops, start=start):
            if observer is not None:
                observer(position, op, v, "before")
            if op == "compute":
                self.compute(v, grad_output)
                if self.owner.kinds[v][0] == "grad_output":
                    grad_output = None
            else:
                self.free(v, position)
            if observer is not None:
                observer(position, op, v, "after")

    def forward_phase(self) -> torch.Tensor:
        self.run(self.owner.forward_ops, 0)
        plan = self.owner.plan
        return self.fwd[plan.output_piece].outputs[plan.output_value].detach()

    def backward_phase(self, grad_output: torch.Tensor, sink: GradSink) -> tuple[None, ...]:
        self.sink = sink
        try:
            self.run(self.owner.backward_ops, len(self.owner.forward_ops), grad_output)
        finally:
            self.fwd.clear()
            self.bwd.clear()
            self.seed = None
            self.kept_seed = None
            self.engine_grad = None
            self.sink = None
        return (None,) * len(self.inputs)  # input gradients are not produced (refused in forward)


class GraphReplay(nn.Module):
    """A model that trains by replaying a graph schedule.

    Args:
        model: the model the profile was made from (shared, not copied).
        schedule: a graph :class:`Schedule` solved for ``profile`` (or a raw op list).
        profile: the graph profile from :func:`profile_graph` (its metadata identifies the model's
            graph and input shape).
    """

    def __init__(self, model: nn.Module, schedule: Schedule | Sequence[Op], profile: GraphProfile) -> None:
        super().__init__()
        if not isinstance(profile, GraphProfile):
            raise ProfileError("profile: the graph replay needs a graph profile")
        ops = parse_ops(list(solved_ops(schedule, profile)))
        if any(name not in ("compute", "free") for name, _ in ops):
            raise ScheduleError("schedule: the graph replay runs graph schedules (compute, free), not chain ones")
        top = max((v for _, v in ops), default=-1)
        if top >= profile.size:
            raise ScheduleError(f"schedule uses node {top}, but profile '{profile.name}' has {profile.size} nodes")
        simulate(profile, ops, timeline=False)  # raises ScheduleError naming the op
        self.model = model
        self.profile = profile
        self.plan = _plan_for(model, profile)
        self.kinds = [self.plan.node_kind(v) for v in range(profile.size)]
        seed_position = ops.index(("compute", self.plan.grad_output_node))
        self.ops = ops
        self.last_seed_compute = max(k for k, op in enumerate(ops) if op == ("compute", self.plan.grad_output_node))
        self.forward_ops = ops[:seed_position]
        self.backward_ops = ops[seed_position:]
        gm = self.plan.graph_module
        self.piece_params = [[gm.get_parameter(n) for n in piece.params] for piece in self.plan.pieces]
        self.piece_buffers = _piece_buffers(self.plan)
        self.grad_consumers: dict[str, list[int]] = {}
        for c, names in enumerate(self.plan.grad_inputs):
            for name in names:
                self.grad_consumers.setdefault(name, []).append(c)
        computes = Counter(v for name, v in ops if name == "compute")
        self.recomputed = frozenset(
            p for v, (kind, p) in enumerate(self.kinds) if kind == "forward" and computes[v] > 1
        )
        self.params = trainable_params([model])
        self.snapshots = BufferSnapshots()
        self._anchor = torch.empty(0, requires_grad=True)
        self._shapes = [tuple(s) for s in profile.metadata["input_shapes"]]
        # called as observer(position, op, node, "before" | "after") around every op (measurement)
        self.observer: Callable[[int, str, int, str], None] | None = None

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        if not torch.is_grad_enabled() or not self.training:
            return self.model(*inputs)
        if len(inputs) != len(self._shapes):
            raise RematError(f"executor: the model takes {len(self._shapes)} inputs, got {len(inputs)}")
        for index, (x, shape) in enumerate(zip(inputs, self._shapes, strict=True)):
            if tuple(x.shape) != shape:
                raise RematError(
                    f"executor: input {index} has shape {tuple(x.shape)}, the profile was made for {shape}"
                )
            if x.requires_grad:
                raise RematError("executor: the graph replay does not compute gradients w.r.t. the model input")
        step = _Step(self, inputs)
        out = ReplayFunction.apply(step, self._anchor, len(inputs), *inputs, *self.params)
        step.output_ref = weakref.ref(out)
        return out


@dataclass(frozen=True)
class GraphMeasurement:
    """Predicted (simulator) and measured activation memory of one graph replay step (bytes).

    "Measured" is what the allocator saw (:class:`remat.measure.allocator.AllocatorMeter`: the c10
    CPU allocator's running total, CUDA's ``max_memory_allocated``), kernel-internal buffers
    included, relative to what was allocated before the step: parameters, their pre-allocated
    gradients (:func:`remat.replay.report.prepare_grads`) and the model input are outside it,
    as they are outside the graph model (docs/model.md). The loss and its scalars are inside it.

    ``measured_peak``: the allocator's peak over the metered steps; ``timeline[k]``: its reading
    before op k, its peak during op k (the running maximum between the op's start and end marks)
    and after op k, of the step with the largest peak. ``tensor_peak`` / ``tensor_timeline``: the
    same from the live-tensor tracker (:class:`remat.measure.memory.StorageTracker`), a
    diagnostic that misses kernel buffers. ``bookkeeping_peak``: bytes of remat's own bookkeeping
    (RNG snapshots, buffer copies), which the allocator saw and both peaks leave out.
    ``step_ms``: median wall-clock milliseconds of ``timed_steps`` unmetered steps (NaN if none).
    """

    predicted_peak: int
    measured_peak: int
    predicted_after: tuple[int, ...]
    timeline: tuple[OpRecord, ...]
    step_ms: float
    predicted_ms: float
    device: str
    tensor_peak: int = 0
    tensor_timeline: tuple[OpRecord, ...] = ()
    bookkeeping_peak: int = 0

    @property
    def measured_after(self) -> tuple[int, ...]:
        """The allocator's bytes right after each op."""
        return tuple(m.memory_after for m in self.timeline)

    @property
    def peak_error(self) -> float:
        """(measured - predicted) / predicted peak."""
        return (self.measured_peak - self.predicted_peak) / self.predicted_peak if self.predicted_peak else 0.0


def measure_graph(
    wrapped: GraphReplay, inputs: Sequence[torch.Tensor], warmup: int = 1, timed_steps: int = 0, steps: int = 1
) -> GraphMeasurement:
    """Run training steps ``loss = (wrapped(*inputs) * r).sum(); loss.backward()`` (``r`` fixed,
    random, so autograd hands the replay a full-size output gradient): ``warmup`` unmetered ones,
    then ``steps`` metered by the allocator (see :class:`GraphMeasurement`), then ``timed_steps``
    timed ones."""
    device = inputs[0].device
    wrapped.train()
    step = loss_step(wrapped, inputs, [])
    warm_up(wrapped, step, max(1, warmup))
    best: MeteredStep | None = None
    for _ in range(max(1, steps)):
        metered = meter_step(wrapped, step, device)
        if best is None or metered.peak > best.peak:
            best = metered
    assert best is not None
    times = time_steps(wrapped, step, device, timed_steps)
    predicted = simulate(wrapped.profile, wrapped.ops, timeline=True)
    return GraphMeasurement(
        predicted_peak=predicted.peak_memory,
        measured_peak=best.peak,
        predicted_after=tuple(r.memory_after for r in predicted.timeline),
        timeline=best.timeline,
        step_ms=float(statistics.median(times)) if times else float("nan"),
        predicted_ms=predicted.compute_ms,
        device=str(device),
        tensor_peak=best.tensor_peak,
        tensor_timeline=best.tensor_timeline,
        bookkeeping_peak=best.bookkeeping_peak,
    )


def _warn_if_threads_differ(profile: GraphProfile, device: torch.device) -> None:
    """oneDNN sizes its CPU scratch buffers by the thread count, so overheads the allocator saw at
    one count do not predict another: say so (a warning, the run is still valid)."""
    threads = profile.metadata.get("threads")
    if device.type == "cpu" and threads is not None and threads != torch.get_num_threads():
        warnings.warn(
            f"profile '{profile.name}' measured its overheads with {threads} CPU threads, this run uses "
            f"{torch.get_num_threads()}: kernel buffers differ, so measured and predicted peaks may too",
            stacklevel=3,
        )


def compare_graph(
    profile: GraphProfile,
    schedule: Schedule,
    wrapped: GraphReplay,
    inputs: Sequence[torch.Tensor],
    steps: int = 3,
    warmup: int = 1,
) -> Report:
    """Predicted vs measured for a graph schedule, as the chain's :func:`remat.replay.report.compare`
    reports it (same :class:`Report`, so ``remat execute`` prints graph and chain runs alike)."""
    _warn_if_threads_differ(profile, inputs[0].device)
    measured = measure_graph(wrapped, inputs, warmup=warmup, timed_steps=steps)
    predicted = simulate(profile, schedule.ops, timeline=True)
    return build_report(
        schedule,
        predicted,
        measured_peak=measured.measured_peak,
        measured_ms=measured.step_ms,
        steps=steps,
        device=measured.device,
        measured_timeline=measured.timeline,
        metadata={
            "profile": profile.name,
            "torch": torch.__version__,
            "kind": "graph",
            "threads": torch.get_num_threads(),
            "profile_threads": profile.metadata.get("threads"),
            "overheads": profile.metadata.get("overheads", "shapes"),
        },
        measured_tensor_peak=measured.tensor_peak,
        bookkeeping_peak=measured.bookkeeping_peak,
    )


__all__ = ["GraphMeasurement", "GraphReplay", "compare_graph", "measure_graph"]
