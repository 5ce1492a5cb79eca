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

Graph (DESIGN.md's graph model: one size per node, edge ``[u, v]`` = v reads u's output):
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
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import hashlib
import json
import math
import operator
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from remat.measure.allocator import AllocatorMeter
from remat.measure.memory import StorageTracker, storage_key, untracked
from remat.measure.timing import sync
from remat.runtime.core import grad_input
from remat.schedules import GraphNode, GraphProfile, ProfileError

GRAD_OUTPUT_NAME = "grad:output"

# Leaf modules that anchor a piece even without looking at their parameters.
_HEAVY_MODULES: tuple[type, ...] = (
    nn.Conv1d,
    nn.Conv2d,
    nn.Conv3d,
    nn.ConvTranspose1d,
    nn.ConvTranspose2d,
    nn.ConvTranspose3d,
    nn.Linear,
    nn.Bilinear,
    nn.Embedding,
    nn.EmbeddingBag,
    nn.MultiheadAttention,
    nn.RNNBase,
)
# Normalization layers hold parameters but are cheap: they join their producer's piece.
_NORM_MODULES: tuple[type, ...] = (
    nn.modules.batchnorm._NormBase,
    nn.LayerNorm,
    nn.GroupNorm,
    nn.LocalResponseNorm,
)
_HEAVY_FUNCTIONS = {
    F.linear,
    F.bilinear,
    F.conv1d,
    F.conv2d,
    F.conv3d,
    F.conv_transpose1d,
    F.conv_transpose2d,
    F.conv_transpose3d,
    F.scaled_dot_product_attention,
    F.embedding,
    torch.matmul,
    torch.mm,
    torch.bmm,
    torch.baddbmm,
    torch.addmm,
    torch.einsum,
    operator.matmul,
}
_HEAVY_METHODS = {"matmul", "mm", "bmm", "baddbmm", "addmm"}
_RANDOM_FUNCTIONS = {
    F.dropout,
    F.dropout1d,
    F.dropout2d,
    F.dropout3d,
    F.alpha_dropout,
    F.feature_alpha_dropout,
    F.rrelu,
    F.gumbel_softmax,
    F.scaled_dot_product_attention,
    torch.dropout,
    torch.bernoulli,
    torch.rand,
    torch.rand_like,
    torch.randn,
    torch.randn_like,
    torch.randint,
    torch.randint_like,
    torch.randperm,
    torch.normal,
    torch.multinomial,
}
_RANDOM_METHODS = {"bernoulli", "bernoulli_", "uniform_", "normal_", "random_", "exponential_", "multinomial"}

DEFAULT_RATES = {
    # (FLOP/s, bytes/s) used by time_source="flops" when none are given: round numbers for a few
    # CPU cores and for a current datacenter GPU; pass flop_rate/bandwidth to override.
    "cpu": (5.0e10, 2.0e10),
    "cuda": (5.0e13, 2.0e12),
}


@dataclass(frozen=True)
class Piece:
    """One executable piece of the traced model (a forward node of the graph).

    Attributes:
        name: label (the anchor module's qualified name or the first fx node's name).
        nodes: fx node names executed, in order.
        inputs: fx value names read from other pieces or model inputs (placeholders).
        outputs: fx value names of this piece read outside it (or returned by the model).
        params: qualified names of the trainable parameters the piece uses.
        random: whether it draws random numbers (dropout): the replay saves and restores the RNG.
        has_batchnorm: whether it updates BatchNorm running statistics in training mode.
    """

    name: str
    nodes: tuple[str, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    params: tuple[str, ...]
    random: bool
    has_batchnorm: bool


@dataclass(frozen=True)
class GraphPlan:
    """The traced model cut into pieces, and how each graph node maps onto them.

    ``forward_node[p]`` / ``backward_node[p]`` are graph node indices (``backward_node[p]`` is None
    when no gradient reaches piece p); ``grad_inputs[p]`` are the inputs of p whose gradient
    ``B_p`` produces; ``saved_inputs[p]`` the inputs p's autograd saves (read back by ``B_p``).
    """

    graph_module: fx.GraphModule
    pieces: tuple[Piece, ...]
    placeholders: tuple[str, ...]
    output_value: str
    output_piece: int
    producer: dict[str, int]
    forward_node: tuple[int, ...]
    backward_node: tuple[int | None, ...]
    grad_output_node: int
    grad_inputs: tuple[tuple[str, ...], ...]
    saved_inputs: tuple[tuple[str, ...], ...]
    profile: GraphProfile

    def node_kind(self, index: int) -> tuple[str, int]:
        """``("forward", p)``, ``("backward", p)`` or ``("grad_output", -1)`` for graph node ``index``."""
        return self._kinds[index]

    @property
    def _kinds(self) -> list[tuple[str, int]]:
        kinds: list[tuple[str, int]] = [("", -1)] * self.profile.size
        for p, v in enumerate(self.forward_node):
            kinds[v] = ("forward", p)
        for p, v in enumerate(self.backward_node):
            if v is not None:
                kinds[v] = ("backward", p)
        kinds[self.grad_output_node] = ("grad_output", -1)
        return kinds


# ----------------------------------------------------------------------------- running pieces


def _fetch_attr(root: nn.Module, target: str) -> Any:
    value: Any = root
    for part in target.split("."):
        value = getattr(value, part)
    return value


def _exec_node(root: nn.Module, node: fx.Node, args: Any, kwargs: Any) -> Any:
    if node.op == "call_module":
        return root.get_submodule(node.target)(*args, **kwargs)
    if node.op == "call_function":
        return node.target(*args, **kwargs)
    if node.op == "call_method":
        self_obj, *rest = args
        return getattr(self_obj, node.target)(*rest, **kwargs)
    if node.op == "get_attr":
        return _fetch_attr(root, node.target)
    raise ProfileError(f"fx node '{node.name}': cannot execute op '{node.op}'")


class ConstCache:
    """Values that belong to no piece: ``get_attr`` (parameters, buffers) and non-tensor values
    computed from the model inputs only (``x.size(0)``). Evaluated on demand, kept for one step."""

    def __init__(self, graph_module: fx.GraphModule, root: nn.Module, inputs: dict[str, Any]):
        self._nodes = {n.name: n for n in graph_module.graph.nodes}
        self._root = root
        self._values = dict(inputs)

    def get(self, name: str) -> Any:
        if name not in self._values:
            node = self._nodes[name]
            args = fx.node.map_arg(node.args, lambda n: self.get(n.name))
            kwargs = fx.node.map_arg(node.kwargs, lambda n: self.get(n.name))
            self._values[name] = _exec_node(self._root, node, args, kwargs)
        return self._values[name]


def _dense_nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _storage_nbytes(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().nbytes()
    except (RuntimeError, NotImplementedError):
        return _dense_nbytes(t)


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
    alias an input storage are cloned (the piece must own what it holds).
    """
    nodes = {n.name: n for n in graph_module.graph.nodes}
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
    saved_slots: set[str] = set()
    saved_held: list[torch.Tensor] = []

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

    def resolve(n: fx.Node) -> Any:
        return local[n.name] if n.name in local else consts.get(n.name)

    # An intermediate is dropped after its last use in the piece, as the plain model drops it
    # (what autograd saved stays alive through the graph).
    last_use: dict[str, str] = {}
    for name in piece.nodes:
        for dep in nodes[name].all_input_nodes:
            last_use[dep.name] = name
    kept = set(piece.outputs) | set(piece.inputs)
    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        for name in piece.nodes:
            node = nodes[name]
            args = fx.node.map_arg(node.args, resolve)
            kwargs = fx.node.map_arg(node.kwargs, resolve)
            local[name] = _exec_node(root, node, args, kwargs)
            del args, kwargs
            for dep in node.all_input_nodes:
                if last_use.get(dep.name) == name and dep.name not in kept:
                    local.pop(dep.name, None)
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
        if key in seen or _storage_nbytes(grad) != _dense_nbytes(grad) or not grad.is_contiguous():
            grad = grad.clone(memory_format=torch.contiguous_format)
            key = storage_key(grad)
        seen.add(key)
        input_grads[name] = grad.detach()
    return input_grads


# ----------------------------------------------------------------------------- tracing and cutting


def _has_tensor(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, (list, tuple)):
        return any(_has_tensor(v) for v in value)
    if isinstance(value, dict):
        return any(_has_tensor(v) for v in value.values())
    return False


def _is_heavy(gm: fx.GraphModule, node: fx.Node) -> bool:
    if node.op == "call_module":
        module = gm.get_submodule(node.target)
        if isinstance(module, _NORM_MODULES):
            return False
        if isinstance(module, _HEAVY_MODULES):
            return True
        return any(True for _ in module.parameters())
    if node.op == "call_function":
        return node.target in _HEAVY_FUNCTIONS
    if node.op == "call_method":
        return node.target in _HEAVY_METHODS
    return False


def _is_random(gm: fx.GraphModule, node: fx.Node) -> bool:
    if node.op == "call_module":
        for module in gm.get_submodule(node.target).modules():
            if isinstance(module, (nn.modules.dropout._DropoutNd, nn.RReLU)):
                return True
            if isinstance(module, (nn.MultiheadAttention, nn.RNNBase)) and module.dropout > 0:
                return True
        return False
    if node.op == "call_function":
        return node.target in _RANDOM_FUNCTIONS
    if node.op == "call_method":
        return node.target in _RANDOM_METHODS
    return False


def _uses_batchnorm(gm: fx.GraphModule, node: fx.Node) -> bool:
    if node.op != "call_module":
        return node.op == "call_function" and node.target is F.batch_norm
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in gm.get_submodule(node.target).modules())


def trace(model: nn.Module) -> fx.GraphModule:
    """``torch.fx.symbolic_trace`` with a one-line error when the model cannot be traced."""
    try:
        return fx.symbolic_trace(model)
    except Exception as exc:  # fx raises many kinds (TraceError, TypeError, ...)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ProfileError(
            f"model: torch.fx cannot trace {type(model).__name__} ({first}), so it has no graph profile; profile it as"
            " a chain instead (remat profile without --graph, or remat.checkpoint: cut from its TorchDynamo trace)"
        ) from exc


def _cut(gm: fx.GraphModule, values: dict[str, Any]) -> tuple[list[list[str]], dict[str, int]]:
    """Assign each compute node to a piece (see the module docstring); returns the pieces' node
    names and the piece of every node that belongs to one."""
    piece_of: dict[str, int] = {}
    pieces: list[list[str]] = []
    tensor_users: dict[str, int] = {}
    for node in gm.graph.nodes:
        tensor_users[node.name] = sum(
            1 for u in node.users if u.op == "output" or _has_tensor(values.get(u.name)) or u.target is operator.getitem
        )
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output", "get_attr"):
            continue
        deps = list(dict.fromkeys(node.all_input_nodes))
        dep_pieces = [piece_of[d.name] for d in deps if d.name in piece_of]
        value = values[node.name]
        target: int | None = None
        if not dep_pieces:
            if not _has_tensor(value):
                continue  # a constant computed from the model inputs: ConstCache evaluates it
        elif node.op == "call_function" and node.target is operator.getitem:
            target = max(dep_pieces)
        elif not _has_tensor(value):
            target = max(dep_pieces)
        else:
            tensor_deps = [d for d in deps if _has_tensor(values.get(d.name)) and d.op != "get_attr"]
            if (
                len(tensor_deps) == 1
                and tensor_deps[0].name in piece_of
                and piece_of[tensor_deps[0].name] == max(dep_pieces)
                and tensor_users[tensor_deps[0].name] == 1
                and not _is_heavy(gm, node)
            ):
                target = piece_of[tensor_deps[0].name]
        if target is None:
            pieces.append([])
            target = len(pieces) - 1
        pieces[target].append(node.name)
        piece_of[node.name] = target
    return pieces, piece_of


def _make_pieces(gm: fx.GraphModule, cut: list[list[str]], piece_of: dict[str, int], out_name: str) -> list[Piece]:
    """The :class:`Piece` of every group of node names in ``cut`` (inputs, outputs, parameters)."""
    nodes = {n.name: n for n in gm.graph.nodes}
    pieces: list[Piece] = []
    for node_names in cut:
        members = set(node_names)
        ins: list[str] = []
        params: list[str] = []
        for name_ in node_names:
            node = nodes[name_]
            for dep in node.all_input_nodes:
                if dep.name in members:
                    continue
                if dep.op == "placeholder" or dep.name in piece_of:
                    if dep.name not in ins:
                        ins.append(dep.name)
                elif dep.op == "get_attr":
                    attr = _fetch_attr(gm, dep.target)
                    if isinstance(attr, nn.Parameter) and attr.requires_grad and dep.target not in params:
                        params.append(dep.target)
            params.extend(p for p in _module_params(gm, node) if p not in params)
        outs = [n for n in node_names if n == out_name or any(u.name not in members for u in nodes[n].users)]
        pieces.append(
            Piece(
                name=_piece_name(gm, node_names, nodes),
                nodes=tuple(node_names),
                inputs=tuple(ins),
                outputs=tuple(outs),
                params=tuple(params),
                random=any(_is_random(gm, nodes[n]) for n in node_names),
                has_batchnorm=any(_uses_batchnorm(gm, nodes[n]) for n in node_names),
            )
        )
    return pieces


def _merge_unsaved_outputs(
    gm: fx.GraphModule,
    cut: list[list[str]],
    piece_of: dict[str, int],
    meta_root: nn.Module,
    meta_inputs: dict[str, Any],
    out_name: str,
) -> tuple[list[list[str]], dict[str, int]]:
    """Merge a piece with the pieces that read its outputs when nobody saves those outputs
    (neither the piece's own autograd graph nor a reader's), repeatedly.

    Why: a forward node holds its outputs until its backward, but the plain model frees an output
    that no backward needs as soon as its consumer has run (a ResNet block's last BatchNorm output
    before the residual add, the downsample branch's output): such a boundary made store-all hold
    31% more than the plain step on torchvision's ResNet-50. Inside one piece the value is an
    intermediate, freed as in the plain model (the meta run counts it as the node's transient).
    """
    pieces = _make_pieces(gm, cut, piece_of, out_name)
    consts = ConstCache(gm, meta_root, meta_inputs)
    values: dict[str, Any] = dict(meta_inputs)
    saved: set[str] = set()  # outputs some piece's autograd saves (its own or a consumer's)
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
    producer = {o: p for p, piece in enumerate(pieces) for o in piece.outputs}
    consumers = [set() for _ in pieces]
    for c, piece in enumerate(pieces):
        for n in piece.inputs:
            if n in producer:
                consumers[producer[n]].add(c)
    group = list(range(len(pieces)))  # piece -> the last piece of its group (where the group runs)
    while True:
        merge = _next_merge(pieces, consumers, group, saved, out_name)
        if merge is None:
            break
        last = max(merge)
        for p, g in enumerate(group):
            if g in merge:
                group[p] = last
    groups: dict[int, list[str]] = {}
    for p, names in enumerate(cut):
        groups.setdefault(group[p], []).extend(names)
    merged = [groups[g] for g in sorted(groups)]
    return merged, {name: k for k, names in enumerate(merged) for name in names}


def _next_merge(
    pieces: Sequence[Piece], consumers: Sequence[set[int]], group: Sequence[int], saved: set[str], out_name: str
) -> set[int] | None:
    """A group whose every output leaving it is saved by nobody, together with the groups that
    read them (a set of group ids), if running them as one group keeps the order valid: every
    piece of it that is read outside it is read only after the group's last piece."""
    members: dict[int, list[int]] = {}
    for p, g in enumerate(group):
        members.setdefault(g, []).append(p)
    for g, ps in sorted(members.items()):
        readers = {group[c] for p in ps for c in consumers[p]} - {g}
        leaving = {o for p in ps for o in pieces[p].outputs if any(group[c] != g for c in consumers[p])}
        if not readers or out_name in leaving or any(out_name in pieces[p].outputs for p in ps) or saved & leaving:
            continue
        merge = readers | {g}
        last = max(merge)
        inside = [p for h in merge for p in members[h]]
        if all(group[c] in merge or c > last for p in inside for c in consumers[p]):
            return merge
    return None


def _module_params(gm: fx.GraphModule, node: fx.Node) -> list[str]:
    if node.op == "call_module":
        return [f"{node.target}.{n}" for n, p in gm.get_submodule(node.target).named_parameters() if p.requires_grad]
    return []


def _piece_name(gm: fx.GraphModule, node_names: list[str], nodes: dict[str, fx.Node]) -> str:
    for name in node_names:
        node = nodes[name]
        if _is_heavy(gm, node) and node.op == "call_module":
            return str(node.target)
    first = nodes[node_names[0]]
    return str(first.target) if first.op == "call_module" else first.name


def _to_meta(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")
    return value


def _parse_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    aliases = {"float32": torch.float32, "fp32": torch.float32, "float": torch.float32, "float16": torch.float16}
    aliases.update({"fp16": torch.float16, "half": torch.float16, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16})
    aliases.update({"float64": torch.float64, "double": torch.float64})
    if dtype not in aliases:
        raise ProfileError(f"dtype: unknown dtype {dtype!r} (use one of {', '.join(sorted(aliases))})")
    return aliases[dtype]


def _example_inputs(
    input_shape: Sequence[int] | None, example_inputs: Any, dtype: torch.dtype
) -> tuple[torch.Tensor, ...]:
    if example_inputs is not None:
        inputs = example_inputs if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
        for index, value in enumerate(inputs):
            if not isinstance(value, torch.Tensor):
                raise ProfileError(f"example_inputs[{index}]: must be a tensor, got {type(value).__name__}")
        return tuple(inputs)
    if input_shape is None:
        raise ProfileError("input_shape: give an input shape (batch first) or example inputs")
    shape = tuple(input_shape)
    if not shape or any(isinstance(d, bool) or not isinstance(d, int) or d <= 0 for d in shape):
        raise ProfileError(f"input_shape: must be positive integers, batch first, got {input_shape!r}")
    return (torch.empty(shape, dtype=dtype, device="meta"),)


def _structure_digest(pieces: Sequence[Piece], nodes: Sequence[GraphNode], edges: Sequence[tuple[int, int]]) -> str:
    data = {
        "pieces": [[list(p.nodes), list(p.inputs), list(p.outputs)] for p in pieces],
        "nodes": [[n.name, n.size, n.backward] for n in nodes],
        "edges": [list(e) for e in edges],
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def build_plan(
    model: nn.Module,
    input_shape: Sequence[int] | None = None,
    *,
    example_inputs: Any = None,
    dtype: str | torch.dtype = "float32",
    name: str | None = None,
    graph_module: fx.GraphModule | None = None,
) -> tuple[GraphPlan, list[tuple[float, int]], list[tuple[float, int]]]:
    """Trace ``model``, cut it into pieces, and size every graph node on the meta device.

    Returns the plan (its profile has zero times and no metadata; :func:`graph_plan` fills them)
    and, per piece, ``(flops, bytes moved)`` of its forward and of its backward.
    """
    torch_dtype = _parse_dtype(dtype)
    gm = graph_module if graph_module is not None else trace(model)
    inputs = _example_inputs(input_shape, example_inputs, torch_dtype)
    placeholders = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(inputs):
        raise ProfileError(f"example_inputs: the model takes {len(placeholders)} inputs, got {len(inputs)}")
    meta_inputs = {
        name_: _to_meta(value).to(torch_dtype) if value.is_floating_point() else _to_meta(value)
        for name_, value in zip(placeholders, inputs, strict=True)
    }
    meta_root = copy.deepcopy(gm).to("meta")
    for p in meta_root.parameters():
        if p.is_floating_point():
            p.data = p.data.to(torch_dtype)
    for b in meta_root.buffers():
        if b.is_floating_point():
            b.data = b.data.to(torch_dtype)
    meta_root.train(model.training)

    # Shape propagation over the whole graph on meta tensors (no real compute).
    values: dict[str, Any] = dict(meta_inputs)
    with torch.no_grad():
        for node in gm.graph.nodes:
            if node.op in ("placeholder", "output"):
                continue
            args = fx.node.map_arg(node.args, lambda n: values[n.name])
            kwargs = fx.node.map_arg(node.kwargs, lambda n: values[n.name])
            values[node.name] = _exec_node(meta_root, node, args, kwargs)
    output_node = next(n for n in gm.graph.nodes if n.op == "output")
    out_arg = output_node.args[0]
    if not isinstance(out_arg, fx.Node) or not isinstance(values.get(out_arg.name), torch.Tensor):
        raise ProfileError("model: the graph replay needs a model that returns one tensor")

    cut, piece_of = _cut(gm, values)
    if out_arg.name not in piece_of:
        raise ProfileError("model: its output does not depend on any computation")
    cut, piece_of = _merge_unsaved_outputs(gm, cut, piece_of, meta_root, meta_inputs, out_arg.name)
    pieces = _make_pieces(gm, cut, piece_of, out_arg.name)
    count = len(pieces)
    producer = {name_: piece_of[name_] for name_ in piece_of}
    output_piece = piece_of[out_arg.name]

    # Record every piece on meta tensors, exactly as the replay does, to learn what it holds.
    param_keys = {storage_key(t) for t in list(meta_root.parameters()) + list(meta_root.buffers())}
    consts = ConstCache(gm, meta_root, meta_inputs)
    meta_values: dict[str, Any] = dict(meta_inputs)
    recorded: list[RecordedPiece] = []
    grad_inputs: list[tuple[str, ...]] = []
    forward_cost: list[tuple[float, int]] = []
    forward_size: list[int] = []
    forward_overhead: list[int] = []
    name_to_param = dict(meta_root.named_parameters())
    for piece in pieces:
        gi = tuple(
            n
            for n in piece.inputs
            if n in producer
            and isinstance(meta_values.get(n), torch.Tensor)
            and meta_values[n].requires_grad
            and meta_values[n].is_floating_point()
        )
        grad_inputs.append(gi)
        # The tracker counts meta storages as the replay's tracker counts real ones: what the
        # piece allocates and drops again before it returns is its transient (overhead).
        with StorageTracker("meta") as tracker, FlopCounterMode(display=False) as counter:
            rec = forward_piece(meta_root, gm, piece, meta_values.__getitem__, consts, gi, track_saved=True)
        forward_overhead.append(max(0, tracker.peak_bytes - tracker.current_bytes))
        recorded.append(rec)
        held: dict[object, int] = {}
        for t in rec.saved_held + [v for v in rec.outputs.values() if isinstance(v, torch.Tensor)]:
            key = storage_key(t)
            if key is None or key in param_keys:
                continue
            held[key] = _storage_nbytes(t)
        forward_size.append(sum(held.values()))
        in_bytes = sum(
            _dense_nbytes(meta_values[n]) for n in piece.inputs if isinstance(meta_values.get(n), torch.Tensor)
        )
        forward_cost.append((float(counter.get_total_flops()), in_bytes + forward_size[-1]))
        meta_values.update(rec.outputs)
        rec.saved_held.clear()

    # Which pieces get a backward node: those whose outputs receive a gradient (reverse order).
    receives: dict[str, bool] = {out_arg.name: bool(meta_values[out_arg.name].requires_grad)}
    has_backward = [False] * count
    for p in reversed(range(count)):
        piece = pieces[p]
        gets = any(receives.get(o, False) for o in piece.outputs)
        has_backward[p] = gets
        if gets:
            for n in grad_inputs[p]:
                receives[n] = True
    grad_inputs = [gi if has_backward[p] else () for p, gi in enumerate(grad_inputs)]

    # Node indices: forward 0..count-1, the seed, then backward nodes in reverse piece order.
    forward_node = tuple(range(count))
    grad_output_node = count
    backward_node: list[int | None] = [None] * count
    next_index = count + 1
    for p in reversed(range(count)):
        if has_backward[p]:
            backward_node[p] = next_index
            next_index += 1
    if not any(has_backward):
        raise ProfileError("model: no parameter receives a gradient; nothing to train")

    # Backward on meta: sizes of input gradients and FLOPs.
    grads_of: dict[int, dict[str, torch.Tensor]] = {}
    backward_size = [0] * count
    backward_cost: list[tuple[float, int]] = [(0.0, 0)] * count
    backward_overhead = [0] * count
    seed = torch.ones_like(meta_values[out_arg.name])
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
            # summed exactly as the replay sums them (GraphReplay._backward), so the same transients
            output_grads: dict[str, torch.Tensor] = {}
            for o in piece.outputs:
                contributions = [grads_of[c][o] for c in sorted(grads_of) if o in grads_of[c]]
                if o == out_arg.name:
                    contributions.append(seed)
                if contributions:
                    output_grads[o] = functools.reduce(torch.add, contributions)
            with FlopCounterMode(display=False) as counter:
                in_grads = backward_piece(piece, recorded[p], output_grads, params, grad_inputs[p])
            grad_bytes = sum(_dense_nbytes(g) for g in output_grads.values())
            del output_grads, contributions
        backward_overhead[p] = max(0, tracker.peak_bytes - tracker.current_bytes)
        grads_of[p] = in_grads
        backward_size[p] = sum(_storage_nbytes(g) for g in in_grads.values())
        moved = backward_size[p] + forward_size[p] + grad_bytes
        backward_cost[p] = (float(counter.get_total_flops()), moved)
    for param in name_to_param.values():
        param.grad = None
    saved_inputs = [tuple(n for n in pieces[p].inputs if n in recorded[p].saved_slots) for p in range(count)]
    del recorded, grads_of

    # The graph.
    graph_nodes = [
        GraphNode(f"fwd:{pieces[p].name}", 0.0, forward_size[p], False, overhead=forward_overhead[p])
        for p in range(count)
    ]
    # The seed comes from the loss, outside the model: the replay cannot compute it a second time.
    seed_size = _dense_nbytes(meta_values[out_arg.name])
    graph_nodes.append(GraphNode(GRAD_OUTPUT_NAME, 0.0, seed_size, True, recompute=False))
    for p in reversed(range(count)):
        if has_backward[p]:
            graph_nodes.append(
                GraphNode(f"bwd:{pieces[p].name}", 0.0, backward_size[p], True, overhead=backward_overhead[p])
            )
    edges: set[tuple[int, int]] = set()
    for p, piece in enumerate(pieces):
        for n in piece.inputs:
            if n in producer:
                edges.add((forward_node[producer[n]], forward_node[p]))
    edges.add((forward_node[output_piece], grad_output_node))
    for p, piece in enumerate(pieces):
        b = backward_node[p]
        if b is None:
            continue
        edges.add((forward_node[p], b))
        for n in saved_inputs[p]:
            if n in producer:
                edges.add((forward_node[producer[n]], b))
        if out_arg.name in piece.outputs:
            edges.add((grad_output_node, b))
        for c in range(p + 1, count):
            bc = backward_node[c]
            if bc is not None and any(o in grad_inputs[c] for o in piece.outputs):
                edges.add((bc, b))
    edge_list = tuple(sorted(edges))
    profile = GraphProfile(
        name=name or type(model).__name__.lower(), nodes=tuple(graph_nodes), edges=edge_list, metadata={}
    )
    plan = GraphPlan(
        graph_module=gm,
        pieces=tuple(pieces),
        placeholders=tuple(placeholders),
        output_value=out_arg.name,
        output_piece=output_piece,
        producer=producer,
        forward_node=forward_node,
        backward_node=tuple(backward_node),
        grad_output_node=grad_output_node,
        grad_inputs=tuple(grad_inputs),
        saved_inputs=tuple(saved_inputs),
        profile=profile,
    )
    return plan, forward_cost, backward_cost


def _unique_names(pieces: list[Piece]) -> list[Piece]:
    seen: dict[str, int] = {}
    result = []
    for piece in pieces:
        count = seen.get(piece.name, 0)
        seen[piece.name] = count + 1
        if count:
            piece = Piece(f"{piece.name}#{count}", *[getattr(piece, f) for f in Piece.__dataclass_fields__][1:])
        result.append(piece)
    return result


def _measure_times(
    plan: GraphPlan,
    model: nn.Module,
    inputs: tuple[torch.Tensor, ...],
    device: torch.device,
    dtype: torch.dtype,
    repeats: int,
) -> tuple[list[float], list[float], list[int], list[int]]:
    """Median milliseconds of each piece's recording forward and of its backward over ``repeats``
    rounds (empty lists when ``repeats`` is 0), measured on a deep copy of the model on ``device``
    (the model itself and the global RNG are untouched), and the transient bytes of each: what the
    allocator saw (:class:`remat.measure.allocator.AllocatorMeter`: kernel buffers included) at
    its peak during the piece minus what it held after it, from the first (warm-up) round."""
    gm = copy.deepcopy(plan.graph_module).to(device)
    for p in gm.parameters():
        if p.is_floating_point():
            p.data = p.data.to(dtype)
    for b in gm.buffers():
        if b.is_floating_point():
            b.data = b.data.to(dtype)
    gm.train(model.training)
    for p in gm.parameters():  # as in the replay's measurement: gradients are accumulated in place
        if p.requires_grad:
            p.grad = torch.zeros_like(p)
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        return _measure_forked(plan, gm, inputs, device, dtype, repeats)


def _measure_forked(
    plan: GraphPlan,
    gm: fx.GraphModule,
    inputs: tuple[torch.Tensor, ...],
    device: torch.device,
    dtype: torch.dtype,
    repeats: int,
) -> tuple[list[float], list[float], list[int], list[int]]:
    real_inputs = {}
    for name, value in zip(plan.placeholders, inputs, strict=True):
        if value.device.type == "meta":
            value = torch.randn(value.shape, dtype=dtype) if value.is_floating_point() else torch.zeros(value.shape)
            value = value.to(value.dtype if not value.is_floating_point() else dtype)
        real_inputs[name] = value.to(device)
    params = dict(gm.named_parameters())
    count = len(plan.pieces)
    fwd: list[list[float]] = [[] for _ in range(count)]
    bwd: list[list[float]] = [[] for _ in range(count)]
    transient_f, transient_b = [0] * count, [0] * count

    for round_ in range(repeats + 1):  # the first round warms up and is discarded
        values: dict[str, Any] = dict(real_inputs)
        consts = ConstCache(plan.graph_module, gm, real_inputs)
        recorded = []
        times_f, times_b = [0.0] * count, [0.0] * count
        for p, piece in enumerate(plan.pieces):
            sync(device)
            start = time.perf_counter()
            meter = AllocatorMeter(device) if round_ == 0 else None
            with meter if meter is not None else contextlib.nullcontext():
                rec = forward_piece(gm, plan.graph_module, piece, values.__getitem__, consts, plan.grad_inputs[p])
                sync(device)
                times_f[p] = (time.perf_counter() - start) * 1e3
            if meter is not None:
                transient_f[p] = max(0, meter.peak_bytes - meter.final_bytes)
            recorded.append(rec)
            values.update(rec.outputs)
        grads_of: dict[int, dict[str, torch.Tensor]] = {}
        out = values[plan.output_value]
        seed = torch.ones_like(out)
        for p in reversed(range(count)):
            if plan.backward_node[p] is None:
                continue
            piece = plan.pieces[p]
            sync(device)
            start = time.perf_counter()
            meter = AllocatorMeter(device) if round_ == 0 else None
            with meter if meter is not None else contextlib.nullcontext():
                output_grads: dict[str, torch.Tensor] = {}
                for o in piece.outputs:
                    contributions = [grads_of[c][o] for c in sorted(grads_of) if o in grads_of[c]]
                    if o == plan.output_value:
                        contributions.append(seed)
                    if contributions:
                        output_grads[o] = functools.reduce(torch.add, contributions)
                grads_of[p] = backward_piece(
                    piece,
                    recorded[p],
                    output_grads,
                    [params[n] for n in piece.params if params[n].requires_grad],
                    plan.grad_inputs[p],
                )
                del output_grads
                sync(device)
                times_b[p] = (time.perf_counter() - start) * 1e3
            if meter is not None:
                transient_b[p] = max(0, meter.peak_bytes - meter.final_bytes)
        if round_ > 0:
            for p in range(count):
                fwd[p].append(times_f[p])
                bwd[p].append(times_b[p])
        del recorded, grads_of, values
    fwd_ms = [statistics.median(t) for t in fwd] if repeats else []
    bwd_ms = [statistics.median(t) for t in bwd] if repeats else []
    return fwd_ms, bwd_ms, transient_f, transient_b


OVERHEAD_SOURCES = ("allocator", "shapes")


def _default_device(model: nn.Module, inputs: Sequence[torch.Tensor]) -> torch.device:
    """Where the pieces run when no device is given: the example input's device, else the model's
    (its first parameter or buffer), else the CPU; never meta."""
    for t in (*inputs, *model.parameters(), *model.buffers()):
        if t.device.type != "meta":
            return t.device
    return torch.device("cpu")


def _overhead_source(model: nn.Module, time_source: str, overheads: str | None) -> str:
    """``overheads`` checked, or its default: ``"allocator"`` for a model with real parameters,
    ``"shapes"`` for one on the meta device (nothing can run)."""
    on_meta = any(t.is_meta for t in list(model.parameters()) + list(model.buffers()))
    if overheads is None:
        overheads = "shapes" if on_meta and time_source == "flops" else "allocator"
    if overheads not in OVERHEAD_SOURCES:
        raise ProfileError(f"overheads: must be 'allocator' or 'shapes', got {overheads!r}")
    if on_meta and (overheads == "allocator" or time_source == "measured"):
        what = "time_source: 'measured'" if time_source == "measured" else "overheads: 'allocator'"
        raise ProfileError(f"{what} needs a model with real parameters, not one on the meta device")
    return overheads


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
    overheads = _overhead_source(model, time_source, overheads)
    torch_dtype = _parse_dtype(dtype)
    gm = trace(model)
    inputs = _example_inputs(input_shape, example_inputs, torch_dtype)
    torch_device = _default_device(model, inputs) if device is None else torch.device(device)
    plan, forward_cost, backward_cost = build_plan(
        model, example_inputs=inputs, dtype=torch_dtype, name=name, graph_module=gm
    )
    pieces = _unique_names(list(plan.pieces))
    count = len(pieces)
    metadata: dict[str, Any] = {
        "builder": "remat.graph.profile (torch.fx, fused pieces)",
        "device": str(torch_device),
        "dtype": str(torch_dtype).replace("torch.", ""),
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
    if time_source == "flops":
        rate_default, bw_default = DEFAULT_RATES.get(torch_device.type, DEFAULT_RATES["cpu"])
        rate = float(flop_rate) if flop_rate is not None else rate_default
        bw = float(bandwidth) if bandwidth is not None else bw_default
        if not (rate > 0 and bw > 0 and math.isfinite(rate) and math.isfinite(bw)):
            raise ProfileError("flop_rate, bandwidth: must be positive numbers")
        fwd_ms = [1e3 * (f / rate + b / bw) for f, b in forward_cost]
        bwd_ms = [1e3 * (f / rate + b / bw) for f, b in backward_cost]
        metadata["flop_rate"] = rate
        metadata["bandwidth"] = bw
        metadata["time_model"] = (
            "time_ms = 1000 * (flops / flop_rate + bytes_moved / bandwidth); flops from "
            "torch.utils.flop_counter on the meta device"
        )
    else:
        if repeats < 1:
            raise ProfileError(f"repeats: must be at least 1, got {repeats}")
        metadata["repeats"] = repeats
        metadata["time_model"] = "median of measured recording-forward and backward times per piece"
    if overheads == "allocator":
        fwd_measured, bwd_measured, transient_f, transient_b = _measure_times(
            plan, model, inputs, torch_device, torch_dtype, repeats if time_source == "measured" else 0
        )
        if time_source == "measured":
            fwd_ms, bwd_ms = fwd_measured, bwd_measured
        metadata["threads"] = torch.get_num_threads()
    metadata["overheads"] = overheads
    metadata["flops_forward"] = sum(f for f, _ in forward_cost)
    metadata["flops_backward"] = sum(f for f, _ in backward_cost)
    old = plan.profile
    nodes = list(old.nodes)
    for p in range(count):
        v = plan.forward_node[p]
        nodes[v] = dataclasses.replace(nodes[v], name=f"fwd:{pieces[p].name}", time_ms=fwd_ms[p])
        b = plan.backward_node[p]
        if b is not None:
            nodes[b] = dataclasses.replace(nodes[b], name=f"bwd:{pieces[p].name}", time_ms=bwd_ms[p])
        if overheads == "allocator":
            # what the allocator saw, kernel buffers included, which the meta run cannot see
            nodes[v] = dataclasses.replace(nodes[v], overhead=transient_f[p])
            if b is not None:
                nodes[b] = dataclasses.replace(nodes[b], overhead=transient_b[p])
    metadata["structure_sha256"] = _structure_digest(pieces, nodes, old.edges)
    profile = GraphProfile(name=old.name, nodes=tuple(nodes), edges=old.edges, metadata=metadata)
    return dataclasses.replace(plan, pieces=tuple(pieces), profile=profile)


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
