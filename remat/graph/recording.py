"""Running one piece of a traced model with autograd recording (its forward node) and running its
backward over the recorded graph (its backward node), exactly as the graph replay and the graph
profiler's meta run do (docs/model.md, "Graphs")."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
from torch import nn

from remat.graph.execution import ConstCache, exec_node
from remat.graph.pieces import Piece
from remat.measure.memory import storage_key, untracked
from remat.runtime.core import grad_input


def dense_nbytes(t: torch.Tensor) -> int:
    """Bytes of ``t``'s elements (numel * element size), whatever its storage."""
    return t.numel() * t.element_size()


def storage_nbytes(t: torch.Tensor) -> int:
    """Bytes of ``t``'s storage (its dense bytes for a tensor without one)."""
    try:
        return t.untyped_storage().nbytes()
    except (RuntimeError, NotImplementedError):
        return dense_nbytes(t)


@dataclass
class RecordedPiece:
    """A piece's recorded forward: its outputs (fx value name -> value) and the leaves its
    gradient inputs were attached to."""

    outputs: dict[str, Any]
    leaves: dict[str, torch.Tensor]
    saved_slots: set[str]
    saved_held: list[torch.Tensor]


def forward_piece(
    root: nn.Module,
    graph_module: fx.GraphModule,
    piece: Piece,
    fetch: Callable[[str], Any],
    consts: ConstCache,
    grad_inputs: Sequence[str],
    release_leaves: bool = True,
    track_saved: bool = False,
) -> RecordedPiece:
    """Run ``piece`` with autograd recording; inputs come from ``fetch(name)``.

    The piece's graph never holds its inputs' storages: a saved tensor that lives in an input's
    storage is packed as (input name, view geometry) and unpacked from ``fetch(name)`` when the
    backward runs (the producer must be present then; the graph has that edge). Gradient inputs
    get fresh leaves; with ``release_leaves`` their data is swapped for a 1-element dummy after
    the forward so the AccumulateGrad nodes do not keep the storage alive either. Outputs that
    alias an input storage are cloned (the piece must own what it holds). With ``track_saved``
    the tensors autograd saves (other than inputs) are listed in ``saved_held`` (the caller
    clears it).
    """
    nodes = {n.name: n for n in graph_module.graph.nodes}
    local, input_slots, leaves = _bind_inputs(piece, fetch, grad_inputs)
    saved_slots: set[str] = set()
    saved_held: list[torch.Tensor] = []
    pack, unpack = _saved_tensor_hooks(input_slots, leaves, fetch, saved_slots, saved_held, release_leaves, track_saved)
    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        _run_nodes(root, nodes, piece, local, consts)
        outputs: dict[str, Any] = {}
        for name in piece.outputs:
            value = local[name]
            if isinstance(value, torch.Tensor):
                key = storage_key(value)
                if key is not None and key in input_slots:
                    value = value.clone()
            outputs[name] = value
    local.clear()
    if release_leaves:
        for leaf in leaves.values():
            # Keep shape and dtype (autograd checks them) but drop the input's storage. The
            # one-element stand-in is bookkeeping (untracked), not memory the graph model counts.
            with untracked():
                leaf.data = leaf.data.new_zeros((1,)).expand(leaf.shape)
    return RecordedPiece(outputs, leaves, saved_slots, saved_held)


def _bind_inputs(
    piece: Piece, fetch: Callable[[str], Any], grad_inputs: Sequence[str]
) -> tuple[dict[str, Any], dict[object, str], dict[str, torch.Tensor]]:
    """The piece's inputs, detached (a fresh leaf for each gradient input), by name; the input
    slot of each input storage (storage key -> input name); and the leaves."""
    local: dict[str, Any] = {}
    input_slots: dict[object, str] = {}
    leaves: dict[str, torch.Tensor] = {}
    for name in piece.inputs:
        value = fetch(name)
        if isinstance(value, torch.Tensor):
            key = storage_key(value)
            if key is not None:
                input_slots.setdefault(key, name)
            if name in grad_inputs:
                leaves[name] = value.detach().requires_grad_(True)
                value = grad_input(leaves[name])  # not the leaf: autocast would cache its casts
            else:
                value = value.detach()
        local[name] = value
    return local, input_slots, leaves


def _saved_tensor_hooks(
    input_slots: dict[object, str],
    leaves: dict[str, torch.Tensor],
    fetch: Callable[[str], Any],
    saved_slots: set[str],
    saved_held: list[torch.Tensor],
    release_leaves: bool,
    track_saved: bool,
) -> tuple[Callable[[torch.Tensor], Any], Callable[[Any], torch.Tensor]]:
    """The (pack, unpack) saved-tensor hooks of one recorded piece: a tensor in an input's
    storage is packed as (input name, view geometry), noted in ``saved_slots``, and fetched again
    when the backward unpacks it; any other is packed detached (and listed in ``saved_held`` if
    ``track_saved``)."""

    def pack(t: torch.Tensor) -> Any:
        key = storage_key(t)
        slot = input_slots.get(key) if key is not None else None
        if slot is not None:
            saved_slots.add(slot)
            return (slot, tuple(t.shape), tuple(t.stride()), t.storage_offset(), t.requires_grad)
        if track_saved:
            saved_held.append(t)
        # detach: a saved output packed as itself would hold its own grad_fn (a reference cycle
        # through C++ that Python's GC cannot see), and freeing the piece would free nothing.
        return t.detach()

    def unpack(packed: Any) -> torch.Tensor:
        if isinstance(packed, torch.Tensor):
            return packed
        slot, shape, stride, offset, _ = packed
        base = leaves.get(slot)
        source = fetch(slot) if base is None or release_leaves else base
        return source.detach().as_strided(shape, stride, offset)

    return pack, unpack


def _run_nodes(
    root: nn.Module, nodes: dict[str, fx.Node], piece: Piece, local: dict[str, Any], consts: ConstCache
) -> None:
    """Execute the piece's fx nodes in order into ``local`` (which holds its inputs). An
    intermediate is dropped after its last use in the piece, as the plain model drops it (what
    autograd saved stays alive through the graph)."""

    def resolve(n: fx.Node) -> Any:
        return local[n.name] if n.name in local else consts.get(n.name)

    last_use: dict[str, str] = {}
    for name in piece.nodes:
        for dep in nodes[name].all_input_nodes:
            last_use[dep.name] = name
    kept = set(piece.outputs) | set(piece.inputs)
    for name in piece.nodes:
        node = nodes[name]
        args = fx.node.map_arg(node.args, resolve)
        kwargs = fx.node.map_arg(node.kwargs, resolve)
        local[name] = exec_node(root, node, args, kwargs)
        del args, kwargs
        for dep in node.all_input_nodes:
            if last_use.get(dep.name) == name and dep.name not in kept:
                local.pop(dep.name, None)


def backward_piece(
    piece: Piece,
    recorded: RecordedPiece,
    output_grads: dict[str, torch.Tensor],
    params: Sequence[torch.Tensor],
    grad_inputs: Sequence[str],
) -> dict[str, torch.Tensor]:
    """Backward of a recorded piece: returns the gradients w.r.t. ``grad_inputs`` and accumulates
    those of ``params`` into their ``.grad`` (as ``loss.backward()`` does, one at a time, so a
    piece's parameter gradients are never all alive at once).

    ``output_grads`` maps output names to their (already summed) gradients; pass ``params=[]``
    when the parameters' gradients were already accumulated (a recomputed backward). The
    recorded graph is kept (a backward node may be recomputed while its forward is still held).
    Input gradients that alias an incoming gradient or each other, or are not dense, are copied
    so each one owns exactly its dense bytes (what the graph's sizes assume).
    """
    outs, grads = [], []
    for name, grad in output_grads.items():
        value = recorded.outputs[name]
        if isinstance(value, torch.Tensor) and value.requires_grad and grad is not None:
            outs.append(value)
            grads.append(grad)
    wanted = [recorded.leaves[name] for name in grad_inputs]
    for leaf in wanted:
        leaf.grad = None
    targets = wanted + [p for p in params if p.requires_grad]
    if outs and targets:
        torch.autograd.backward(outs, grads, retain_graph=True, inputs=targets)
    seen = {storage_key(g) for g in grads}
    input_grads: dict[str, torch.Tensor] = {}
    for name, leaf in zip(grad_inputs, wanted, strict=True):
        grad = leaf.grad
        leaf.grad = None
        if grad is None:
            grad = torch.zeros(leaf.shape, dtype=leaf.dtype, device=leaf.device)
        key = storage_key(grad)
        if key in seen or storage_nbytes(grad) != dense_nbytes(grad) or not grad.is_contiguous():
            grad = grad.clone(memory_format=torch.contiguous_format)
            key = storage_key(grad)
        seen.add(key)
        input_grads[name] = grad.detach()
    return input_grads


def summed_output_grads(
    piece: Piece, grads_of: dict[int, dict[str, torch.Tensor]], output_value: str, seed: torch.Tensor
) -> dict[str, torch.Tensor]:
    """The gradient of each output of ``piece`` that receives one: the contributions of the
    backward nodes that produced one (``grads_of``: piece -> its input gradients, summed in piece
    order), plus ``seed`` for the model output ``output_value``. How the profiler's runs sum
    them (the replay sums them in autograd's order and checks each is present)."""
    output_grads: dict[str, torch.Tensor] = {}
    for o in piece.outputs:
        contributions = [grads_of[c][o] for c in sorted(grads_of) if o in grads_of[c]]
        if o == output_value:
            contributions.append(seed)
        if contributions:
            output_grads[o] = functools.reduce(torch.add, contributions)
    return output_grads


__all__ = [
    "RecordedPiece",
    "backward_piece",
    "dense_nbytes",
    "forward_piece",
    "storage_nbytes",
    "summed_output_grads",
]
