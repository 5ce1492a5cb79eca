"""Forward+backward graphs of real PyTorch models (torch.fx), for the graph solvers and the graph replay.

Granularity: *pieces*, between op level and module level.
    The model is traced with ``torch.fx.symbolic_trace`` (standard ``torch.nn`` modules are leaves).
    Every "anchor" op (a convolution, linear layer, matmul, attention, any leaf module holding
    parameters other than a normalization layer) or op with several tensor inputs (add, cat)
    starts a new piece; a cheap single-input op (BatchNorm, activation, pooling, dropout, view)
    whose input has no other consumer joins its producer's piece. Ops whose result is not a
    tensor (``x.size(0)``) join the piece of their latest input; ``getitem`` on a tuple joins its
    producer. Last, a piece whose outputs nobody saves (neither its own autograd graph nor a
    reader's, e.g. a BatchNorm output before a residual add) is merged with the pieces that read
    them: a forward node holds its outputs until its backward, where the plain model frees such a
    value once read, so that boundary would make store-all hold more than the plain step. So
    conv+bn+relu is one piece, a residual ``add`` + the following ``relu`` joins the block's last
    conv+bn, and ResNet-50 (zoo) has 50 pieces (101 graph nodes), VGG16 16, MobileNetV2 53. Op
    level would give ResNet-50 ~500 forward ops and an ILP four times larger, and the
    intermediates fused away (bn output before relu) are transient in the executor anyway; module
    level (one node per residual block) would hide the skip structure the graph solver exists to
    exploit.

Graph (docs/model.md, "Graphs": one size per node, edge ``[u, v]`` = v reads u's output):
    * forward node ``F_p`` per piece p, in the trace's topological order. Computing it runs the
      piece *recording its autograd graph*; its ``size`` is every byte the executor holds for it:
      the piece's outputs plus everything autograd saved for the piece's backward, counting each
      storage once and not counting parameters, buffers, or the piece's inputs (those belong to
      their producers, see below). Edges ``F_q -> F_p`` for every piece q whose output p reads.
    * one seed node ``grad:output`` (backward): the gradient of the model output given by the loss;
      size = output bytes; it reads the output's forward node.
    * backward node ``B_p`` per piece whose outputs receive a gradient, in reverse piece order;
      computing it runs the piece's backward (``torch.autograd.grad`` over the recorded graph),
      accumulates parameter gradients (outside the budget, like parameters) and produces the
      gradients w.r.t. the piece's inputs that need one; ``size`` = their bytes. It reads
      ``F_p`` (the recorded graph), ``F_q`` for every producer q *whose output p's autograd saved*
      (the replay does not let p's graph hold q's tensor: a saved-tensors hook stores a reference
      to the input slot and fetches q's current output when the backward unpacks it, which is
      why q must be present then), the seed if p holds the model output, and ``B_c`` for every
      consumer c that produces a gradient for one of p's outputs (the contributions are summed).

So the simulator's memory after each op equals the bytes of tensors the replay holds at that
point (outputs, saved tensors, gradients). Each node's ``overhead`` is its transient: the bytes
it allocates and drops before it returns (the intermediate of a fused op that autograd does not
save, e.g. BatchNorm's output before an in-place-free ReLU; the sum of several gradient
contributions; gradient temporaries; one parameter gradient before it is added in place), so
the simulator's peak of a compute is the replay's peak too. The seed ``grad:output`` has
``recompute`` false: it comes from the loss, outside the model, so no schedule may compute it
twice. Not modelled: the model input (owned by the caller), parameters and their gradients.

Sizes come from shapes only: the traced model is copied to the ``meta`` device and each piece is
run there under the same saved-tensor hooks the replay uses, so no real compute happens. The
overheads are the allocator's (``overheads="allocator"``, the default for a model with real
parameters): each piece's recording forward and its backward run once on the device, and the
allocator's peak during it minus what it holds after it (:class:`remat.measure.allocator.AllocatorMeter`)
is the node's overhead, kernel buffers included (oneDNN's convolution scratch), exactly what the
replay's measurement sees; they depend on the thread count on CPU, which the metadata records.
``overheads="shapes"`` (the default for a model on the meta device) counts the meta run's tensor
transients with :class:`remat.measure.memory.StorageTracker` instead, a lower bound. Times
are estimated from FLOPs (``torch.utils.flop_counter``) plus bytes moved, at a stated rate, or
measured on the device at the profiled shape (``time_source="measured"``); the metadata says which.

The model is never changed: the meta copy and the device copy used for timing are deep copies.

Where it lives: :mod:`remat.graph.capture` traces the model, :mod:`remat.graph.nodes` classifies
fx nodes, :mod:`remat.graph.pieces` cuts the graph into pieces, :mod:`remat.graph.execution` runs
fx nodes one at a time and :mod:`remat.graph.recording` a piece's forward and backward,
:mod:`remat.graph.sizing` sizes every node on the meta device, :mod:`remat.graph.timing` times
them, :mod:`remat.graph.arguments` checks the arguments; this module is the front door
(:func:`profile_graph`, :func:`graph_plan`) and keeps every name it had before the split.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import platform
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from remat.graph.arguments import OVERHEAD_SOURCES, default_device, input_tensors, overhead_source, parse_dtype
from remat.graph.execution import ConstCache
from remat.graph.pieces import GraphPlan, Piece, unique_names
from remat.graph.recording import RecordedPiece, backward_piece, forward_piece
from remat.graph.sizing import GRAD_OUTPUT_NAME, build_plan
from remat.graph.timing import DEFAULT_RATES, flop_times, measure_times
from remat.schedules import GraphNode, GraphProfile, ProfileError
from remat.trace.capture import trace_fx as trace


def graph_plan(
    model: nn.Module,
    input_shape: Sequence[int] | None = None,
    *,
    example_inputs: Any = None,
    device: str | torch.device | None = None,
    dtype: str | torch.dtype = "float32",
    time_source: str = "flops",
    name: str | None = None,
    flop_rate: float | None = None,
    bandwidth: float | None = None,
    repeats: int = 3,
    overheads: str | None = None,
) -> GraphPlan:
    """Like :func:`profile_graph` but returns the whole :class:`GraphPlan` (pieces and node mapping,
    which the graph replay needs) with the profile in ``plan.profile``."""
    if time_source not in ("flops", "measured"):
        raise ProfileError(f"time_source: must be 'flops' or 'measured', got {time_source!r}")
    overheads = overhead_source(model, time_source, overheads)
    torch_dtype = parse_dtype(dtype)
    gm = trace(model)
    inputs = input_tensors(input_shape, example_inputs, torch_dtype)
    torch_device = default_device(model, inputs) if device is None else torch.device(device)
    plan, forward_cost, backward_cost = build_plan(
        model, example_inputs=inputs, dtype=torch_dtype, name=name, graph_module=gm
    )
    pieces = unique_names(list(plan.pieces))
    metadata = _metadata(pieces, inputs, torch_device, torch_dtype, time_source)
    if time_source == "flops":
        fwd_ms, bwd_ms, rates = flop_times(forward_cost, backward_cost, torch_device, flop_rate, bandwidth)
        metadata.update(rates)
    else:
        if repeats < 1:
            raise ProfileError(f"repeats: must be at least 1, got {repeats}")
        metadata["repeats"] = repeats
        metadata["time_model"] = "median of measured recording-forward and backward times per piece"
    transients = None
    if overheads == "allocator" or time_source == "measured":  # one run measures both
        fwd_measured, bwd_measured, transient_f, transient_b = measure_times(
            plan, model, inputs, torch_device, torch_dtype, repeats if time_source == "measured" else 0
        )
        if overheads == "allocator":  # else the meta run's tensors (overheads="shapes")
            transients = (transient_f, transient_b)
        if time_source == "measured":
            fwd_ms, bwd_ms = fwd_measured, bwd_measured
        metadata["threads"] = torch.get_num_threads()
    metadata["overheads"] = overheads
    metadata["flops_forward"] = sum(f for f, _ in forward_cost)
    metadata["flops_backward"] = sum(f for f, _ in backward_cost)
    nodes = _timed_nodes(plan, pieces, fwd_ms, bwd_ms, transients)
    metadata["structure_sha256"] = _structure_digest(pieces, nodes, plan.profile.edges)
    profile = GraphProfile(name=plan.profile.name, nodes=nodes, edges=plan.profile.edges, metadata=metadata)
    return dataclasses.replace(plan, pieces=tuple(pieces), profile=profile)


def _metadata(
    pieces: Sequence[Piece],
    inputs: Sequence[torch.Tensor],
    device: torch.device,
    dtype: torch.dtype,
    time_source: str,
) -> dict[str, Any]:
    """What every graph profile states about how it was made (the time model is added by the caller)."""
    return {
        "builder": "remat.graph.profile (torch.fx, fused pieces)",
        "device": str(device),
        "dtype": str(dtype).replace("torch.", ""),
        "batch_size": int(inputs[0].shape[0]) if inputs[0].dim() else 1,
        "input_shape": list(inputs[0].shape),
        "input_shapes": [list(t.shape) for t in inputs],
        "input_dtypes": [str(t.dtype).replace("torch.", "") for t in inputs],
        "torch": torch.__version__,
        "platform": platform.platform(),
        "time_source": time_source,
        "sizes": "bytes from shapes on the meta device: forward node = piece outputs + tensors autograd saves "
        "(excluding inputs, parameters, buffers); backward node = gradients w.r.t. the piece's inputs; "
        "overhead = bytes a node allocates and drops before it returns (metadata.overheads: 'allocator' = "
        "the device allocator's peak during one run of it minus what it holds after, kernel buffers "
        "included; 'shapes' = the meta run's tensors only)",
        "pieces": {f"fwd:{piece.name}": list(piece.nodes) for piece in pieces},
    }


def _timed_nodes(
    plan: GraphPlan,
    pieces: Sequence[Piece],
    fwd_ms: Sequence[float],
    bwd_ms: Sequence[float],
    transients: tuple[list[int], list[int]] | None,
) -> tuple[GraphNode, ...]:
    """The plan's nodes named after ``pieces``, with their times (ms) and, when the allocator was
    read (``transients``: forward and backward bytes per piece), its overheads."""
    nodes = list(plan.profile.nodes)
    for p in range(len(pieces)):
        v = plan.forward_node[p]
        nodes[v] = dataclasses.replace(nodes[v], name=f"fwd:{pieces[p].name}", time_ms=fwd_ms[p])
        b = plan.backward_node[p]
        if b is not None:
            nodes[b] = dataclasses.replace(nodes[b], name=f"bwd:{pieces[p].name}", time_ms=bwd_ms[p])
        if transients is not None:
            # what the allocator saw, kernel buffers included, which the meta run cannot see
            transient_f, transient_b = transients
            nodes[v] = dataclasses.replace(nodes[v], overhead=transient_f[p])
            if b is not None:
                nodes[b] = dataclasses.replace(nodes[b], overhead=transient_b[p])
    return tuple(nodes)


def _structure_digest(pieces: Sequence[Piece], nodes: Sequence[GraphNode], edges: Sequence[tuple[int, int]]) -> str:
    data = {
        "pieces": [[list(p.nodes), list(p.inputs), list(p.outputs)] for p in pieces],
        "nodes": [[n.name, n.size, n.backward] for n in nodes],
        "edges": [list(e) for e in edges],
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def profile_graph(
    model: nn.Module,
    input_shape: Sequence[int] | None = None,
    *,
    example_inputs: Any = None,
    device: str | torch.device | None = None,
    dtype: str | torch.dtype = "float32",
    time_source: str = "flops",
    name: str | None = None,
    flop_rate: float | None = None,
    bandwidth: float | None = None,
    repeats: int = 3,
    overheads: str | None = None,
) -> GraphProfile:
    """The forward+backward graph of ``model`` (see the module docstring for the mapping).

    Args:
        model: an ``nn.Module`` torch.fx can trace, returning one tensor; not modified.
        input_shape: shape of the single input, batch first, e.g. ``(32, 3, 224, 224)``; or give
            ``example_inputs`` (a tensor or tuple of tensors, any device incl. ``meta``).
        device: where the pieces run for ``time_source="measured"`` and ``overheads="allocator"``
            (sizes never need a device); default: the example input's device, else the model's.
        dtype: ``"float32"``, ``"float16"``, ``"bfloat16"``, ...: parameters and float inputs.
        time_source: ``"flops"`` (estimate: FLOPs / ``flop_rate`` + bytes / ``bandwidth``) or
            ``"measured"`` (median of ``repeats`` runs on ``device``).
        overheads: where each node's transient bytes come from: ``"allocator"`` (default for a
            model with real parameters: each piece's forward and backward run once on ``device``
            and the allocator's peak during it minus what it holds after it is the overhead, so
            kernel buffers such as oneDNN's convolution scratch are counted, as the replay's
            allocator measurement sees them) or ``"shapes"`` (the meta run's tensor transients
            only; the default for a model on the meta device).
        name: profile name (default: the model class, lower case).

    Returns:
        a validated :class:`GraphProfile`: sizes in bytes, times in milliseconds; metadata holds
        device, dtype, batch size, input shape, the time source and rate, and each forward
        node's fx nodes.
    """
    return graph_plan(
        model,
        input_shape,
        example_inputs=example_inputs,
        device=device,
        dtype=dtype,
        time_source=time_source,
        name=name,
        flop_rate=flop_rate,
        bandwidth=bandwidth,
        repeats=repeats,
        overheads=overheads,
    ).profile


__all__ = [
    "DEFAULT_RATES",
    "GRAD_OUTPUT_NAME",
    "OVERHEAD_SOURCES",
    "ConstCache",
    "GraphPlan",
    "Piece",
    "RecordedPiece",
    "backward_piece",
    "build_plan",
    "forward_piece",
    "graph_plan",
    "profile_graph",
    "trace",
]
