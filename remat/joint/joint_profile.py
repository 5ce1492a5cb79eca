"""The joint graph of AOTAutograd as a remat :class:`~remat.schedules.GraphProfile` (docs/compile.md).

A profile node is a *value*: one op's output tensor together with the getitems that unpack it and
the views that alias it (they share its storage, so they cost no bytes of their own and are never
saved apart from it). Parameters and inputs (``primals``) are not nodes: they exist before the
step and after it, outside the count, as in every remat profile. A ``tangents`` placeholder (the
gradient of the output, handed in by autograd) is a backward node that cannot be recomputed.
A value is *backward* when it depends on a tangent (torch's ``tangents_closure``) or must run in
the backward; every other value is forward. The last node is ``step:end`` (size 0, time 0), read
after the joint graph's last backward value, so that "the last node last" of docs/model.md is the
end of the compiled backward.

Sizes are exact: ``numel * itemsize`` of each fake tensor's metadata (torch's ``_size_of`` for a
dense tensor), summed over a multi-output op's tensors. Times come from :mod:`remat.joint.timing`.

**Values torch never recomputes** (``pinned``): random ops (the ``nondeterministic_seeded`` tag,
but not an attention kernel at ``dropout_p`` 0, which torch recomputes; torch's random list,
inductor's seeded random prims), values marked ``MUST_SAVE`` (collectives,
effectful ops and the source of a backward mutation: torch's own ``force_save_*`` passes run
first), custom (non-builtin) ops, and anything tagged to stay in the forward. The profile keeps
them recomputable so the graph solvers accept it; the plan (:mod:`remat.joint.plan`) saves every
pinned value its backward needs instead of recomputing it, as torch's partitioner does.

Units: bytes (int), milliseconds (float).
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
from torch import fx

from remat.joint import torch_private as tp
from remat.schedules import GraphNode, GraphProfile, RematError

END = "step:end"
# inductor replaces aten's random ops by these seeded prims before the partitioner sees the graph
_SEEDED_PRIMS = ("inductor_random", "inductor_randint", "inductor_seeds", "inductor_lookup_seed")


@dataclass(frozen=True)
class JointProfile:
    """A joint graph's :class:`GraphProfile` and the map between its nodes and the fx nodes.

    Attributes:
        profile: the graph profile (values in a topological order; ``step:end`` last).
        members: per profile node, the names of the fx nodes it stands for (its op first).
        group: fx node name -> profile node index (primals and their views are absent).
        pinned: forward profile nodes that are never recomputed (saved when the backward needs them).
        tuple_roots: profile nodes whose op returns several tensors (torch saves their getitems).
        num_fwd_outputs: the joint graph's count of forward outputs.
    """

    profile: GraphProfile
    members: tuple[tuple[str, ...], ...]
    group: Mapping[str, int]
    pinned: frozenset[int]
    tuple_roots: frozenset[int] = field(default_factory=frozenset)
    num_fwd_outputs: int = 0

    @property
    def forward(self) -> frozenset[int]:
        """Indices of the forward nodes."""
        return frozenset(i for i, n in enumerate(self.profile.nodes) if not n.backward)


def tensor_bytes(value: object) -> int:
    """Bytes of a (fake) tensor's elements, summed over a tuple or list; 0 for anything else."""
    if isinstance(value, torch.Tensor):
        return int(value.numel()) * value.dtype.itemsize
    if isinstance(value, (tuple, list)):
        return sum(tensor_bytes(v) for v in value)
    return 0


def _is_view(node: fx.Node) -> bool:
    target = node.target
    if target is operator.getitem:
        return True
    if not isinstance(target, tp.OpOverload):
        return False
    if target.is_view or target in (torch.ops.aten._unsafe_view.default, torch.ops.aten.alias.default):
        return bool(node.args) and isinstance(node.args[0], fx.Node)
    return False


def _without_dropout(node: fx.Node) -> bool:
    """True for a seeded op whose only randomness is a ``dropout_p`` of 0 (the attention kernels,
    ``_scaled_dot_product_*_attention``: seeded for their dropout). Torch's partitioner recomputes
    them (its random ops are dropout, ``rand_like`` and ``randn_like``); pinned, remat's graphs of
    torch's own save set saved each attention's outputs where torch's recompute them, and measured
    other peaks than torch.compile's (a 4-layer decoder at 0.1: 8273544 bytes against 9245320)."""
    try:
        return tp.op_argument(node, "dropout_p") == 0
    except KeyError:  # no dropout_p: random for another reason
        return False


def seeded_without_dropout(node: fx.Node) -> bool:
    """True for an op tagged ``nondeterministic_seeded`` that draws nothing here (``dropout_p`` 0)."""
    target = node.target
    return (
        isinstance(target, tp.OpOverload)
        and torch.Tag.nondeterministic_seeded in target.tags
        and _without_dropout(node)
    )


def is_random(node: fx.Node) -> bool:
    """True for an op whose output depends on the RNG (never recomputed)."""
    target = node.target
    if isinstance(target, tp.OpOverload):
        if torch.Tag.nondeterministic_seeded in target.tags:
            return not _without_dropout(node)
        if target.namespace == "prims" and tp.op_schema_name(target) in _SEEDED_PRIMS:
            return True
        return target.overloadpacket in (
            torch.ops.aten.native_dropout,
            torch.ops.aten.rand_like,
            torch.ops.aten.randn_like,
        )
    return False


def must_save(node: fx.Node) -> bool:
    """True for a forward fx node torch's partitioner never recomputes (see the module docstring)."""
    if node.op != "call_function" or node.target is operator.getitem:
        return False
    if node.meta.get("recompute") == torch.utils.checkpoint.CheckpointPolicy.MUST_SAVE:
        return True
    if is_random(node) or tp.has_tag_must_be_in_forward(node):
        return True
    return isinstance(node.target, tp.OpOverload) and not tp.is_builtin(node.target)


def apply_torch_safety(gm: fx.GraphModule) -> None:
    """Run torch's own passes on ``gm`` as its min-cut partitioner begins: common subexpressions
    merged (``torch._functorch.config.cse``, on by default), then the must-save passes
    (collectives, effectful ops, backward mutations).

    Without the merge, the joint graph remat partitioned was not the one torch's partitioner
    partitions: a save set of torch's, realized on it, measured 17176852 bytes on the 8-layer
    GPT-2 where torch.compile's own graphs of it measured 16747656 (its 0.7 ratio)."""
    if tp.cse_enabled():
        gm.graph = tp.fx_graph_cse(gm.graph)
        gm.recompile()
    if not tp.collectives_optimizable():
        tp.force_save_collectives(gm)
    tp.force_save_effectful_ops(gm)
    tp.force_save_bw_mutation_src(gm)


def _backward_names(gm: fx.GraphModule) -> set[str]:
    """Names of the fx nodes that depend on a tangent or must run in the backward."""
    names: set[str] = set()
    for node in gm.graph.nodes:
        if (node.op == "placeholder" and tp.is_tangent(node)) or tp.must_be_in_backward(node):
            names.add(node.name)
        elif any(m.name in names for m in node.all_input_nodes):
            names.add(node.name)
    return names


def joint_profile(
    gm: fx.GraphModule, times: Mapping[str, float], num_fwd_outputs: int, name: str = "joint"
) -> JointProfile:
    """The :class:`JointProfile` of the joint graph ``gm``; ``times[name]`` is each fx node's
    milliseconds (a value's time is its members' sum; missing names count 0)."""
    backward = _backward_names(gm)
    root: dict[str, str | None] = {}  # fx name -> its value's op (None: a primal or a view of one)
    order: list[str] = []
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            root[node.name] = node.name if tp.is_tangent(node) else None
        elif node.op == "call_function":
            root[node.name] = root[node.args[0].name] if _is_view(node) else node.name
        else:
            continue
        if root[node.name] == node.name:
            order.append(node.name)
    nodes_by_name = {n.name: n for n in gm.graph.nodes}
    forward = [r for r in order if r not in backward]
    backs = [r for r in order if r in backward]
    ranked = forward + backs
    index = {r: i for i, r in enumerate(ranked)}
    members: list[list[str]] = [[] for _ in ranked]
    group: dict[str, int] = {}
    for fx_name, r in root.items():
        if r is not None:
            group[fx_name] = index[r]
            members[index[r]].append(fx_name)
    edges: set[tuple[int, int]] = set()
    for node in gm.graph.nodes:
        v = group.get(node.name)
        if v is None:
            continue
        for m in node.all_input_nodes:
            u = group.get(m.name)
            if u is not None and u != v:
                edges.add((u, v))
    bad = sorted((u, v) for u, v in edges if u > v)
    if bad:
        u, v = bad[0]
        raise RematError(f"joint graph: value '{ranked[v]}' is computed before '{ranked[u]}', which it reads")
    graph_nodes = []
    tuples = set()
    for i, r in enumerate(ranked):
        op = nodes_by_name[r]
        value = op.meta.get("val")
        if isinstance(value, (tuple, list)):
            tuples.add(i)
        graph_nodes.append(
            GraphNode(
                name=r,
                time_ms=float(sum(times.get(m, 0.0) for m in members[i])),
                size=tensor_bytes(value),
                backward=r in backward,
                recompute=op.op != "placeholder",
            )
        )
    if not backs:
        raise RematError("joint graph: it has no backward (nothing requires a gradient)")
    graph_nodes.append(GraphNode(name=END, time_ms=0.0, size=0, backward=True))
    edges.add((len(ranked) - 1, len(ranked)))
    pinned = frozenset(
        i for i, names in enumerate(members) if i < len(forward) and any(must_save(nodes_by_name[m]) for m in names)
    )
    profile = GraphProfile(
        name=name, nodes=tuple(graph_nodes), edges=tuple(sorted(edges)), metadata={"source": "joint graph"}
    )
    return JointProfile(
        profile=profile,
        members=tuple(tuple(m) for m in members) + ((),),
        group=group,
        pinned=pinned,
        tuple_roots=frozenset(tuples),
        num_fwd_outputs=num_fwd_outputs,
    )
