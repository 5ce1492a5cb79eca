"""A save set turned into the forward and backward graphs, and the schedule those graphs run.

A partition of the joint graph is decided by one thing, the set of values the forward saves for
the backward (``saved``); the backward recomputes, once and just before their first use, the
forward values it needs and was not given (``recomputed``), as torch's own partitioner ends:
:func:`torch._functorch.partitioners._extract_fwd_bwd_modules` with those saved values, then
``reordering_to_mimic_autograd_engine``. :func:`realize` does exactly that and reads the op
order of the two graphs back into a remat graph schedule on the joint profile:

* forward: every value of the forward graph in its order, each freed after its last use there
  unless it is saved or a forward output;
* backward: the tangents, then every value of the backward graph in its order (a forward value
  here is a recomputation), each freed after its last use, except the gradients (the backward's
  outputs, held until it returns) and the value ``step:end`` reads; then ``step:end``.

The one simulator's peak of that schedule is the prediction; a save set is never judged by the
solver's own (more general) schedule, which may recompute a value several times or free a saved
value in the middle of the backward, what one forward/backward pair cannot do.

Torch's safety rule holds by construction: a pinned value (:mod:`remat.joint.joint_profile`) the
backward would recompute is added to the saved set, until none is recomputed.

Units: bytes (int), milliseconds (float).
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

import torch
from torch import fx

from remat.joint import torch_private as tp
from remat.joint.joint_profile import JointProfile
from remat.schedules import Op, RematError, simulate_graph


@dataclass(frozen=True)
class Realized:
    """One partition: its save set, its recomputed values, its schedule's ops and their cost.

    Attributes:
        saved: profile nodes the forward saves (after torch drops the ones the backward never reads).
        recomputed: forward profile nodes the backward computes (again, or for the first time).
        ops: the graph schedule of the two graphs on the joint profile.
        peak: the simulator's peak of ``ops`` (bytes).
        ms: the simulator's time of ``ops`` (milliseconds).
        forward, backward: the two graph modules handed to inductor (None for a save set only
            costed: :mod:`remat.joint.order`).
    """

    saved: frozenset[int]
    recomputed: frozenset[int]
    ops: tuple[Op, ...]
    peak: int
    ms: float
    forward: fx.GraphModule | None = field(default=None, compare=False, repr=False)
    backward: fx.GraphModule | None = field(default=None, compare=False, repr=False)
    saved_bytes: int = 0
    held: int = 0


def held_at_backward(jp: JointProfile, ops: Iterable[Op]) -> frozenset[int]:
    """The forward nodes a solver's schedule holds when it computes its first backward node: what
    a single forward/backward pair saves for that schedule."""
    nodes = jp.profile.nodes
    held: set[int] = set()
    for op, v in ops:
        if op == "compute" and nodes[v].backward and nodes[v].recompute:
            break
        if op == "compute":
            held.add(v)
        else:
            held.discard(v)
    return frozenset(v for v in held if not nodes[v].backward)


def _saved_fx(jp: JointProfile, by_name: dict[str, fx.Node], saved: Iterable[int]) -> list[fx.Node]:
    out = []
    for g in sorted(saved):
        names = jp.members[g]
        if g in jp.tuple_roots:
            out += [
                by_name[m]
                for m in names
                if by_name[m].target is operator.getitem and isinstance(by_name[m].meta.get("val"), torch.Tensor)
            ]
        elif isinstance(by_name[names[0]].meta.get("val"), torch.Tensor):
            out.append(by_name[names[0]])
    return out


def _backward_reach(gm: fx.GraphModule, boundary: set[str], num_fwd_outputs: int) -> list[fx.Node]:
    """The fx nodes the backward evaluates or reads, walking up from its outputs and stopping at
    ``boundary`` (saved values) and placeholders."""
    _, bwd_outputs, _, _ = tp.extract_fwd_bwd_outputs(gm, num_fwd_outputs=num_fwd_outputs)
    stack = [o for o in bwd_outputs if isinstance(o, fx.Node)]
    seen: dict[str, fx.Node] = {}
    while stack:
        node = stack.pop()
        if node.name in seen:
            continue
        seen[node.name] = node
        if node.name not in boundary and node.op != "placeholder":
            stack += node.all_input_nodes
    return list(seen.values())


def close_saved(
    jp: JointProfile, gm: fx.GraphModule, saved: frozenset[int]
) -> tuple[frozenset[int], list[fx.Node], list[fx.Node]]:
    """``saved`` plus every pinned value the backward would otherwise recompute; with the fx
    values to save (tensors, the primals the backward reads) and the symbolic ones."""
    by_name = {n.name: n for n in gm.graph.nodes}
    forward = jp.forward
    while True:
        values = _saved_fx(jp, by_name, saved)
        reach = _backward_reach(gm, {n.name for n in values}, jp.num_fwd_outputs)
        recomputed = {jp.group[n.name] for n in reach if n.op == "call_function" and jp.group.get(n.name) in forward}
        again = (recomputed - saved) & jp.pinned
        if not again:
            break
        saved = saved | again
    primals = [n for n in reach if n.op == "placeholder" and tp.is_primal(n)]
    syms = [n for n in reach if n.op == "call_function" and tp.is_sym_node(n) and jp.group.get(n.name) in forward]
    return saved, values + primals, syms


def extract(
    jp: JointProfile, gm: fx.GraphModule, saved: frozenset[int], static_inputs: Sequence[fx.Node] = ()
) -> tuple[fx.GraphModule, fx.GraphModule, list[fx.Node]]:
    """Torch's forward and backward graphs for this save set (pinned values added), and the fx
    values actually saved."""
    _, values, syms = close_saved(jp, gm, saved)
    values, syms = list(values), list(syms)
    # lazy graph modules: a save set built but never run (one NOTE [Costing a save set without
    # building its graphs] does not cover) skips generating most of their Python code
    fw, bw = tp.extract_fwd_bwd_modules(gm, values, syms, jp.num_fwd_outputs, list(static_inputs))
    return fw, bw, values


def _phase(jp: JointProfile, nodes: Sequence[fx.Node], present: set[int], keep: set[int], ops: list[Op]) -> set[int]:
    """Ops for one graph's nodes in order: a value is computed where its first member appears
    (unless present) and freed after its last use, unless kept. Returns the groups computed."""
    group = jp.group

    def touched(node: fx.Node) -> list[int]:
        found = {group.get(node.name)} | {group.get(m.name) for m in node.all_input_nodes}
        found.discard(None)
        return sorted(found)

    last: dict[int, int] = {}
    for i, node in enumerate(nodes):
        for g in touched(node):
            last[g] = i
    computed: set[int] = set()
    for g in sorted(present):
        if g not in last and g not in keep:
            ops.append(("free", g))
            present.discard(g)
    for i, node in enumerate(nodes):
        g = group.get(node.name)
        if g is not None and g not in present:
            ops.append(("compute", g))
            present.add(g)
            computed.add(g)
        for h in touched(node):
            if last.get(h) == i and h not in keep and h in present:
                ops.append(("free", h))
                present.discard(h)
    return computed


def _groups(jp: JointProfile, outputs: Iterable[object]) -> set[int]:
    return {jp.group[a.name] for a in outputs if isinstance(a, fx.Node) and a.name in jp.group}


def _graph_outputs(gm: fx.GraphModule) -> list[fx.Node]:
    (out,) = gm.graph.find_nodes(op="output")
    return out.all_input_nodes


def realize(
    jp: JointProfile, gm: fx.GraphModule, saved: frozenset[int], static_inputs: Sequence[fx.Node] = ()
) -> Realized:
    """The partition of save set ``saved`` (pinned values added): its graphs, schedule and cost."""
    fw, bw, values = extract(jp, gm, saved, static_inputs)
    fw_nodes = [n for n in fw.graph.nodes if n.op == "call_function"]
    tangents = [n for n in bw.graph.nodes if n.op == "placeholder" and tp.is_tangent(n)]
    bw_nodes = tangents + [n for n in bw.graph.nodes if n.op == "call_function"]
    found = cost_of_orders(jp, fw_nodes, _graph_outputs(fw), bw_nodes, _graph_outputs(bw), values)
    return replace(found, forward=fw, backward=bw)


def cost_of_orders(
    jp: JointProfile,
    fw_nodes: Sequence[fx.Node],
    fw_outputs: Iterable[object],
    bw_nodes: Sequence[fx.Node],
    bw_outputs: Iterable[object],
    values: Iterable[fx.Node],
) -> Realized:
    """The partition whose forward runs ``fw_nodes`` and returns ``fw_outputs``, and whose
    backward runs ``bw_nodes`` (its tangents first) and returns ``bw_outputs``, saving ``values``;
    without its graphs. Only names and inputs of the nodes are read: they may be the joint
    graph's own (:mod:`remat.joint.order`) or the built graphs' copies."""
    saved_groups = frozenset(jp.group[n.name] for n in values if n.name in jp.group)
    ops: list[Op] = []
    present: set[int] = set()
    fw_keep = saved_groups | _groups(jp, fw_outputs)
    _phase(jp, fw_nodes, present, set(fw_keep), ops)
    end = jp.profile.size - 1
    last_backward = jp.profile.predecessors[end]
    bw_keep = _groups(jp, bw_outputs) | set(last_backward) | (fw_keep - saved_groups)
    computed = _phase(jp, bw_nodes, present, bw_keep, ops)
    ops.append(("compute", end))
    try:
        result = simulate_graph(jp.profile, ops, timeline=False)
    except RematError as error:  # the two graphs do not match the profile: a bug of this room
        raise RematError(
            f"remat.compile: the partition's schedule is not valid on the joint profile: {error}"
        ) from error
    forward = jp.forward
    sizes = jp.profile.nodes
    return Realized(
        saved=saved_groups,
        recomputed=frozenset(g for g in computed if g in forward),
        ops=tuple(ops),
        peak=result.peak_memory,
        ms=result.compute_ms,
        saved_bytes=sum(sizes[g].size for g in saved_groups),
        held=sum(sizes[g].size for g in fw_keep),
    )
