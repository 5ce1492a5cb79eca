"""The op order of torch's forward and backward graphs for a save set, read off the joint graph.

NOTE [Costing a save set without building its graphs]
:func:`remat.joint.plan.realize` asks torch for the two graphs of a save set
(``_extract_fwd_bwd_modules``, ``reordering_to_mimic_autograd_engine``, ``raise_getitems``) and
reads their op order. Building them copies every fx node three times and takes most of the solve
(0.8 s of each candidate on an 8-layer Llama). The cost needs only the order, so
:class:`JointOrder` computes it from the joint graph's nodes, as those passes place them:

1. *extract* (``_extract_graph_with_inputs_outputs``): the inputs become placeholders, in their
   order; then every call_function or get_attr node of the joint graph, in its order, whose inputs
   are all valid (an input, or a node kept before), skipping a node that must stay in the other
   graph (``_must_be_in_forward``/``_must_be_in_backward``); then dead code goes: a node is kept
   when an output or an impure node (``Node.is_impure``, with the same ``impure_random`` as
   ``Graph.eliminate_dead_code``) reads it, directly or through kept nodes;
2. the backward is extracted once to learn which saved values it reads (torch drops the others,
   and a saved ``BackwardState``), the symbols those values need are added to the saved symbolic
   values, and the two graphs are extracted with the final lists;
3. *reorder* the backward (``reordering_to_mimic_autograd_engine``): from the first node that
   reads a tangent (and every ``copy_`` before it), each node in turn is inserted after the nodes
   it needs that are not in yet, those in graph order;
4. *raise getitems* in both: from the last getitem to the first, each moves just after the node
   it unpacks.

Anything outside what these rules cover (an invalid output torch would replace, an opaque saved
object, a collective's wait in the backward) raises :class:`Uncovered`, and the caller builds the
graphs. The partition a plan runs is always built by torch (:func:`~remat.joint.plan.realize`),
and its order is checked against the costed one (``RematPartitioner._partition``): on a
difference the candidate takes its built cost and the choice is made again. Tests:
``tests/joint/test_order.py`` (this order equals the built graphs', op for op).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import torch
from torch import fx
from torch.fx.experimental.symbolic_shapes import find_symbol_binding_fx_nodes, free_symbols, is_symbol_binding_fx_node

from remat.joint import torch_private as tp
from remat.joint.joint_profile import JointProfile
from remat.joint.plan import Realized, close_saved, cost_of_orders


class Uncovered(Exception):
    """A save set whose graphs this module does not predict (build them instead)."""


class JointOrder:
    """What the order of every save set's graphs depends on, read once from a joint graph."""

    def __init__(self, jp: JointProfile, gm: fx.GraphModule) -> None:
        self.jp, self.gm = jp, gm
        self.nodes = [n for n in gm.graph.nodes if n.op != "output"]
        self.inputs = {n: n.all_input_nodes for n in self.nodes}
        impure_random = tp.impure_random()  # as Graph.eliminate_dead_code decides it
        self.impure = {n for n in self.nodes if n.op != "placeholder" and n.is_impure(impure_random)}
        self.backward_only = {n for n in self.nodes if tp.must_be_in_backward(n)}
        self.forward_only = {n for n in self.nodes if tp.must_be_in_forward(n)}
        self.fwd_outputs, self.bwd_outputs, _, _ = tp.extract_fwd_bwd_outputs(gm, num_fwd_outputs=jp.num_fwd_outputs)
        placeholders = [n for n in self.nodes if n.op == "placeholder"]
        self.primals = [n for n in placeholders if tp.is_primal(n)]
        self.tangents = [n for n in placeholders if tp.is_tangent(n)]
        self.fwd_seeds = [n for n in placeholders if tp.is_fwd_seed_offset(n)]
        self.bwd_seeds = [n for n in placeholders if tp.is_bwd_seed_offset(n)]
        self.backward_states = [n for n in placeholders if tp.is_backward_state(n)]
        self.symbol_bindings = find_symbol_binding_fx_nodes(gm.graph)

    def cost(self, saved: frozenset[int]) -> Realized:
        """The partition of save set ``saved`` as :func:`~remat.joint.plan.realize` returns it,
        without its graphs (``forward`` and ``backward`` are None)."""
        _, values, syms = close_saved(self.jp, self.gm, saved)
        values, syms = self._used(values, syms)
        fw_outputs = [*self.fwd_outputs, *values, *syms]
        fw_inputs = self.primals + self.fwd_seeds
        forward = _raise_getitems(fw_inputs, self._extract(fw_inputs, fw_outputs, "forward"))
        bw_inputs = syms + values + self.tangents + self.bwd_seeds + self.backward_states
        backward = self._reorder(bw_inputs, self._extract(bw_inputs, self.bwd_outputs, "backward"))
        backward = _raise_getitems(bw_inputs, backward)
        fw_nodes = [n for n in forward if n.op == "call_function"]
        bw_nodes = self.tangents + [n for n in backward if n.op == "call_function"]
        return cost_of_orders(self.jp, fw_nodes, fw_outputs, bw_nodes, self.bwd_outputs, values)

    def _used(self, values: list[fx.Node], syms: list[fx.Node]) -> tuple[list[fx.Node], list[fx.Node]]:
        """The saved values and symbolic values after torch drops those its backward never reads,
        and adds the symbol bindings the rest need (step 2)."""
        if any(isinstance(v.meta.get("val"), tp.FakeScriptObject) for v in values):
            raise Uncovered("an opaque saved object")
        placeholders = syms + values + self.tangents + self.bwd_seeds
        kept = self._extract(placeholders, self.bwd_outputs, "backward")
        readers: dict[fx.Node, list[fx.Node]] = {}
        for node in kept:
            for m in self.inputs[node]:
                readers.setdefault(m, []).append(node)
        outputs = {o for o in self.bwd_outputs if isinstance(o, fx.Node)}
        if any(tp.is_wait_tensor(r) for rs in readers.values() for r in rs):
            raise Uncovered("a collective's wait in the backward")
        dropped = {p for p in placeholders if p not in readers and p not in outputs}
        dropped |= {p for p in placeholders if tp.is_backward_state(p)}
        values = [v for v in values if v not in dropped]
        syms = [s for s in syms if s not in dropped]
        bound = set()
        binding, derived = [], []
        for node in syms:
            symbol = is_symbol_binding_fx_node(node)
            if symbol:
                bound.add(symbol)
                binding.append(node)
            else:
                derived.append(node)
        for node in [*derived, *values, *self.tangents]:
            if "val" not in node.meta:
                continue
            new = free_symbols(node.meta["val"]) - bound
            binding += [self.symbol_bindings[s] for s in sorted(new, key=lambda s: s.name) if s in self.symbol_bindings]
            bound |= new
        return values, binding + derived

    def _extract(self, inputs: Sequence[fx.Node], outputs: Sequence[object], subgraph: str) -> list[fx.Node]:
        """The nodes of torch's extracted graph after its placeholders (``inputs``), in its order
        (step 1)."""
        given = set(inputs)
        valid = set(inputs)
        copied: list[fx.Node] = []
        for node in self.nodes:
            if node in given or node.op == "placeholder":
                continue
            if subgraph != "backward" and node in self.backward_only:
                continue
            if subgraph != "forward" and node in self.forward_only:
                continue
            if node.op == "get_attr" or valid.issuperset(self.inputs[node]):
                valid.add(node)
                copied.append(node)
        wanted = [o for o in outputs if isinstance(o, fx.Node)]
        if any(o not in valid for o in wanted):
            raise Uncovered("an output torch's extraction would replace")
        live = set(given)
        stack = wanted + [n for n in copied if n in self.impure]
        while stack:
            node = stack.pop()
            if node not in live:
                live.add(node)
                stack += self.inputs[node]
        return [n for n in copied if n in live]

    def _reorder(self, inputs: Sequence[fx.Node], nodes: list[fx.Node]) -> list[fx.Node]:
        """``reordering_to_mimic_autograd_engine`` on the backward's nodes after its
        placeholders ``inputs`` (step 3)."""
        order = {n: i for i, n in enumerate(nodes)}
        tangents = set(self.tangents)
        first = min((order[n] for n in nodes if any(m in tangents for m in self.inputs[n])), default=None)
        if first is None:
            return nodes
        placed = set(inputs)
        out: list[fx.Node] = []

        def insert(node: fx.Node) -> None:
            stack, found = [node], set()
            while stack:
                n = stack.pop()
                if n in found or n in placed:
                    continue
                found.add(n)
                stack += self.inputs[n]
            for n in sorted(found, key=order.__getitem__):
                placed.add(n)
                out.append(n)

        for node in nodes[:first]:
            if node.op == "call_function" and node.target is torch.ops.aten.copy_.default:
                insert(node)
        for node in nodes[first:]:
            insert(node)
        return out


def _raise_getitems(inputs: Sequence[fx.Node], body: list[fx.Node]) -> list[fx.Node]:
    """``raise_getitems`` (step 4) on a graph of placeholders ``inputs`` and nodes ``body``: from
    the last getitem to the first, each moves to just after the node it unpacks (on a linked list,
    as fx moves them). Returns the body's new order."""
    nodes = [*inputs, *body]
    if not nodes:
        return body
    prev = dict(zip(nodes, [None, *nodes[:-1]], strict=True))
    follow = dict(zip(nodes, [*nodes[1:], None], strict=True))
    for node in reversed([n for n in body if n.op == "call_function" and n.target is operator.getitem]):
        (parent,) = node.all_input_nodes
        if follow[parent] is node:
            continue
        before, after = prev[node], follow[node]  # before is not None: the parent comes first
        follow[before] = after
        if after is not None:
            prev[after] = before
        after = follow[parent]
        follow[parent], prev[node], follow[node] = node, parent, after
        if after is not None:
            prev[after] = node
    given, out, node = set(inputs), [], nodes[0]  # the first node never moves (its parent comes first)
    while node is not None:
        if node not in given:
            out.append(node)
        node = follow[node]
    return out
