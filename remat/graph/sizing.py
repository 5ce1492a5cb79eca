"""Sizing every node of a model's graph from shapes only: the traced model is copied to the
``meta`` device, cut into pieces, and each piece is recorded and run backward there under the
replay's saved-tensor hooks, so no real compute happens (docs/model.md, "Graphs"). Sizes are
bytes; the transients (overheads) are the meta run's tensors (:class:`StorageTracker`); FLOPs
come from ``torch.utils.flop_counter``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from remat.graph.arguments import input_tensors, parse_dtype
from remat.graph.execution import ConstCache, cast_copy, exec_node
from remat.graph.pieces import GraphPlan, Piece, cut_graph, make_pieces, merge_unsaved_outputs
from remat.graph.recording import (
    RecordedPiece,
    backward_piece,
    dense_nbytes,
    forward_piece,
    storage_nbytes,
    summed_output_grads,
)
from remat.measure.memory import StorageTracker, storage_key
from remat.schedules import GraphNode, GraphProfile, ProfileError
from remat.trace.capture import trace_fx

GRAD_OUTPUT_NAME = "grad:output"

Cost = tuple[float, int]  # (FLOPs, bytes moved) of one node


def build_plan(
    model: nn.Module,
    input_shape: Sequence[int] | None = None,
    *,
    example_inputs: Any = None,
    dtype: str | torch.dtype = "float32",
    name: str | None = None,
    graph_module: fx.GraphModule | None = None,
) -> tuple[GraphPlan, list[Cost], list[Cost]]:
    """Trace ``model``, cut it into pieces, and size every graph node on the meta device.

    Returns the plan (its profile has zero times and no metadata; :func:`remat.graph.profiler.graph_plan`
    fills them) and, per piece, ``(flops, bytes moved)`` of its forward and of its backward.
    """
    torch_dtype = parse_dtype(dtype)
    gm = graph_module if graph_module is not None else trace_fx(model)
    inputs = input_tensors(input_shape, example_inputs, torch_dtype)
    placeholders = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(inputs):
        raise ProfileError(f"example_inputs: the model takes {len(placeholders)} inputs, got {len(inputs)}")
    meta_inputs = {
        name_: _to_meta(value).to(torch_dtype) if value.is_floating_point() else _to_meta(value)
        for name_, value in zip(placeholders, inputs, strict=True)
    }
    meta_root = cast_copy(gm, "meta", torch_dtype, model.training)
    values = _propagate_shapes(gm, meta_root, meta_inputs)
    out_name = _output_value(gm, values)
    pieces, piece_of = _pieces(gm, values, meta_root, meta_inputs, out_name)
    forwards = _record_forwards(gm, meta_root, meta_inputs, pieces, piece_of)
    has_backward, grad_inputs = _backward_pieces(pieces, forwards, out_name)
    forward_node, grad_output_node, backward_node = _node_indices(has_backward)
    backwards = _record_backwards(meta_root, pieces, forwards, has_backward, grad_inputs, out_name)
    saved_inputs = [
        tuple(n for n in pieces[p].inputs if n in forwards.recorded[p].saved_slots) for p in range(len(pieces))
    ]
    forwards.recorded.clear()
    graph_nodes = _graph_nodes(pieces, forwards, backwards, has_backward, dense_nbytes(forwards.values[out_name]))
    edges = _edges(pieces, piece_of, forward_node, backward_node, grad_output_node, grad_inputs, saved_inputs, out_name)
    profile = GraphProfile(name=name or type(model).__name__.lower(), nodes=graph_nodes, edges=edges, metadata={})
    plan = GraphPlan(
        graph_module=gm,
        pieces=tuple(pieces),
        placeholders=tuple(placeholders),
        output_value=out_name,
        output_piece=piece_of[out_name],
        producer=dict(piece_of),
        forward_node=forward_node,
        backward_node=backward_node,
        grad_output_node=grad_output_node,
        grad_inputs=tuple(grad_inputs),
        saved_inputs=tuple(saved_inputs),
        profile=profile,
    )
    return plan, forwards.cost, backwards.cost


def _to_meta(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")
    return value


def _propagate_shapes(gm: fx.GraphModule, meta_root: nn.Module, meta_inputs: dict[str, Any]) -> dict[str, Any]:
    """Every fx node's value from a run of the whole graph on meta tensors (no real compute)."""
    values: dict[str, Any] = dict(meta_inputs)
    with torch.no_grad():
        for node in gm.graph.nodes:
            if node.op in ("placeholder", "output"):
                continue
            args = fx.node.map_arg(node.args, lambda n: values[n.name])
            kwargs = fx.node.map_arg(node.kwargs, lambda n: values[n.name])
            values[node.name] = exec_node(meta_root, node, args, kwargs)
    return values


def _output_value(gm: fx.GraphModule, values: dict[str, Any]) -> str:
    """The fx value the model returns; refused unless it is one tensor."""
    output_node = next(n for n in gm.graph.nodes if n.op == "output")
    out_arg = output_node.args[0]
    if not isinstance(out_arg, fx.Node) or not isinstance(values.get(out_arg.name), torch.Tensor):
        raise ProfileError("model: the graph replay needs a model that returns one tensor")
    return out_arg.name


def _pieces(
    gm: fx.GraphModule, values: dict[str, Any], meta_root: nn.Module, meta_inputs: dict[str, Any], out_name: str
) -> tuple[list[Piece], dict[str, int]]:
    """The graph cut into pieces, those whose outputs nobody saves merged with their readers;
    and the piece of every node that belongs to one."""
    groups, piece_of = cut_graph(gm, values)
    if out_name not in piece_of:
        raise ProfileError("model: its output does not depend on any computation")
    first = make_pieces(gm, groups, piece_of, out_name)
    saved = _saved_outputs(gm, first, meta_root, meta_inputs)
    groups, piece_of = merge_unsaved_outputs(groups, first, saved, out_name)
    return make_pieces(gm, groups, piece_of, out_name), piece_of


def _saved_outputs(
    gm: fx.GraphModule, pieces: Sequence[Piece], meta_root: nn.Module, meta_inputs: dict[str, Any]
) -> set[str]:
    """The piece outputs some piece's autograd saves (its own or a consumer's), from recording
    every piece on meta tensors."""
    consts = ConstCache(gm, meta_root, meta_inputs)
    values: dict[str, Any] = dict(meta_inputs)
    saved: set[str] = set()
    for piece in pieces:
        grad_inputs = tuple(
            n
            for n in piece.inputs
            if isinstance(values.get(n), torch.Tensor) and values[n].requires_grad and values[n].is_floating_point()
        )
        rec = forward_piece(meta_root, gm, piece, values.__getitem__, consts, grad_inputs, track_saved=True)
        saved.update(rec.saved_slots)
        held = {storage_key(t) for t in rec.saved_held}
        saved.update(o for o, v in rec.outputs.items() if isinstance(v, torch.Tensor) and storage_key(v) in held)
        values.update(rec.outputs)
        rec.saved_held.clear()
    return saved


@dataclass(frozen=True)
class _Forwards:
    """The meta recording of every piece: its record, gradient inputs, (FLOPs, bytes moved),
    size and transient (bytes), and every value the pieces produced."""

    recorded: list[RecordedPiece]
    grad_inputs: list[tuple[str, ...]]
    cost: list[Cost]
    size: list[int]
    overhead: list[int]
    values: dict[str, Any]


def _record_forwards(
    gm: fx.GraphModule,
    meta_root: nn.Module,
    meta_inputs: dict[str, Any],
    pieces: Sequence[Piece],
    producer: dict[str, int],
) -> _Forwards:
    """Record every piece on meta tensors, exactly as the replay does, to learn what it holds."""
    param_keys = {storage_key(t) for t in list(meta_root.parameters()) + list(meta_root.buffers())}
    consts = ConstCache(gm, meta_root, meta_inputs)
    run = _Forwards(recorded=[], grad_inputs=[], cost=[], size=[], overhead=[], values=dict(meta_inputs))
    values = run.values
    for piece in pieces:
        gi = tuple(
            n
            for n in piece.inputs
            if n in producer
            and isinstance(values.get(n), torch.Tensor)
            and values[n].requires_grad
            and values[n].is_floating_point()
        )
        run.grad_inputs.append(gi)
        # The tracker counts meta storages as the replay's tracker counts real ones: what the
        # piece allocates and drops again before it returns is its transient (overhead).
        with StorageTracker("meta") as tracker, FlopCounterMode(display=False) as counter:
            rec = forward_piece(meta_root, gm, piece, values.__getitem__, consts, gi, track_saved=True)
        run.overhead.append(max(0, tracker.peak_bytes - tracker.current_bytes))
        run.recorded.append(rec)
        run.size.append(_held_bytes(rec, param_keys))
        in_bytes = sum(dense_nbytes(values[n]) for n in piece.inputs if isinstance(values.get(n), torch.Tensor))
        run.cost.append((float(counter.get_total_flops()), in_bytes + run.size[-1]))
        values.update(rec.outputs)
        rec.saved_held.clear()
    return run


def _held_bytes(rec: RecordedPiece, param_keys: set[object]) -> int:
    """Bytes a recorded piece holds: its outputs and saved tensors, each storage once, parameters
    and buffers not counted (inputs are packed by name, so never among them)."""
    held: dict[object, int] = {}
    for t in rec.saved_held + [v for v in rec.outputs.values() if isinstance(v, torch.Tensor)]:
        key = storage_key(t)
        if key is None or key in param_keys:
            continue
        held[key] = storage_nbytes(t)
    return sum(held.values())


def _backward_pieces(
    pieces: Sequence[Piece], forwards: _Forwards, out_name: str
) -> tuple[list[bool], list[tuple[str, ...]]]:
    """Which pieces get a backward node (those whose outputs receive a gradient, found in reverse
    order), and each piece's gradient inputs (none without a backward node)."""
    values = forwards.values
    receives: dict[str, bool] = {out_name: bool(values[out_name].requires_grad)}
    has_backward = [False] * len(pieces)
    for p in reversed(range(len(pieces))):
        gets = any(receives.get(o, False) for o in pieces[p].outputs)
        has_backward[p] = gets
        if gets:
            for n in forwards.grad_inputs[p]:
                receives[n] = True
    return has_backward, [gi if has_backward[p] else () for p, gi in enumerate(forwards.grad_inputs)]


def _node_indices(has_backward: Sequence[bool]) -> tuple[tuple[int, ...], int, tuple[int | None, ...]]:
    """Node indices: forward 0..count-1, the seed, then backward nodes in reverse piece order."""
    count = len(has_backward)
    backward_node: list[int | None] = [None] * count
    next_index = count + 1
    for p in reversed(range(count)):
        if has_backward[p]:
            backward_node[p] = next_index
            next_index += 1
    if not any(has_backward):
        raise ProfileError("model: no parameter receives a gradient; nothing to train")
    return tuple(range(count)), count, tuple(backward_node)


@dataclass(frozen=True)
class _Backwards:
    """The meta backward of every piece: input-gradient bytes, (FLOPs, bytes moved), transient bytes."""

    size: list[int]
    cost: list[Cost]
    overhead: list[int]


def _record_backwards(
    meta_root: nn.Module,
    pieces: Sequence[Piece],
    forwards: _Forwards,
    has_backward: Sequence[bool],
    grad_inputs: Sequence[tuple[str, ...]],
    out_name: str,
) -> _Backwards:
    """Backward of every piece on meta, in reverse order: sizes of its input gradients and FLOPs."""
    count = len(pieces)
    run = _Backwards(size=[0] * count, cost=[(0.0, 0)] * count, overhead=[0] * count)
    grads_of: dict[int, dict[str, torch.Tensor]] = {}
    seed = torch.ones_like(forwards.values[out_name])
    name_to_param = dict(meta_root.named_parameters())
    for param in name_to_param.values():
        # Gradients exist before the step (as in a training loop after the first step, and as the
        # replay's measurement prepares them): a backward allocates each parameter's gradient and
        # adds it in place, a transient the overhead must count.
        if param.requires_grad:
            param.grad = torch.zeros_like(param)
    for p in reversed(range(count)):
        if not has_backward[p]:
            continue
        piece = pieces[p]
        params = [name_to_param[n] for n in piece.params if name_to_param[n].requires_grad]
        with StorageTracker("meta") as tracker:
            # summed as the replay sums them (GraphReplay._backward), so the same transients
            output_grads = summed_output_grads(piece, grads_of, out_name, seed)
            with FlopCounterMode(display=False) as counter:
                in_grads = backward_piece(piece, forwards.recorded[p], output_grads, params, grad_inputs[p])
            grad_bytes = sum(dense_nbytes(g) for g in output_grads.values())
            del output_grads
        run.overhead[p] = max(0, tracker.peak_bytes - tracker.current_bytes)
        grads_of[p] = in_grads
        run.size[p] = sum(storage_nbytes(g) for g in in_grads.values())
        moved = run.size[p] + forwards.size[p] + grad_bytes
        run.cost[p] = (float(counter.get_total_flops()), moved)
    for param in name_to_param.values():
        param.grad = None
    return run


def _graph_nodes(
    pieces: Sequence[Piece], forwards: _Forwards, backwards: _Backwards, has_backward: Sequence[bool], seed_size: int
) -> tuple[GraphNode, ...]:
    """The nodes, in index order (times zero, filled in by the caller)."""
    count = len(pieces)
    nodes = [
        GraphNode(f"fwd:{pieces[p].name}", 0.0, forwards.size[p], False, overhead=forwards.overhead[p])
        for p in range(count)
    ]
    # The seed comes from the loss, outside the model: the replay cannot compute it a second time.
    nodes.append(GraphNode(GRAD_OUTPUT_NAME, 0.0, seed_size, True, recompute=False))
    for p in reversed(range(count)):
        if has_backward[p]:
            nodes.append(
                GraphNode(f"bwd:{pieces[p].name}", 0.0, backwards.size[p], True, overhead=backwards.overhead[p])
            )
    return tuple(nodes)


def _edges(
    pieces: Sequence[Piece],
    producer: dict[str, int],
    forward_node: Sequence[int],
    backward_node: Sequence[int | None],
    grad_output_node: int,
    grad_inputs: Sequence[tuple[str, ...]],
    saved_inputs: Sequence[tuple[str, ...]],
    out_name: str,
) -> tuple[tuple[int, int], ...]:
    """The edges ``(u, v)``, v reads u (see :mod:`remat.graph.profiler`), sorted."""
    edges: set[tuple[int, int]] = set()
    for p, piece in enumerate(pieces):
        for n in piece.inputs:
            if n in producer:
                edges.add((forward_node[producer[n]], forward_node[p]))
    edges.add((forward_node[producer[out_name]], grad_output_node))
    for p, piece in enumerate(pieces):
        b = backward_node[p]
        if b is None:
            continue
        edges.add((forward_node[p], b))
        for n in saved_inputs[p]:
            if n in producer:
                edges.add((forward_node[producer[n]], b))
        if out_name in piece.outputs:
            edges.add((grad_output_node, b))
        for c in range(p + 1, len(pieces)):
            bc = backward_node[c]
            if bc is not None and any(o in grad_inputs[c] for o in piece.outputs):
                edges.add((bc, b))
    return tuple(sorted(edges))


__all__ = ["GRAD_OUTPUT_NAME", "build_plan"]
