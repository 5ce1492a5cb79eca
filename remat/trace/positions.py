"""Where a traced training step may be cut: its nodes split into side values and stage nodes, the
cut positions among the stage nodes, and the :class:`Plan` of named stages that results
(the rules: :mod:`remat.trace.cut`'s docstring; docs/models.md, "How a model is cut")."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
from torch.utils import _pytree as pytree

from remat.rewrite.nodes import (
    aliases,
    block_calls,
    example_value,
    is_context,
    is_random,
    is_view,
    mutates,
    node_name,
    repeated_blocks,
)
from remat.schedules import RematError
from remat.trace.boundary import MAX_TENSORS
from remat.trace.capture import TrainingStep, input_fakes
from remat.trace.naming import merge_by_name


@dataclass(frozen=True)
class Source:
    """Where a placeholder's value comes from at run time: ``kind`` is ``param``, ``buffer``,
    ``input`` (``index`` into the flattened call inputs), ``size`` (dimension ``value`` of input
    ``index``: a symbolic size, NOTE [Dimensions a trace is general in]) or ``const`` (``value``
    held as traced)."""

    kind: str
    index: int = -1
    value: Any = None
    trainable: bool = False


def _sources(step: TrainingStep, gm: fx.GraphModule, examples: list[Any], leaves: list[Any]) -> dict[fx.Node, Source]:
    params = {id(p): p for p in step.parameters()}
    buffers = {id(b): b for b in step.buffers()}
    first_leaf: dict[int, int] = {}
    for index, leaf in enumerate(leaves):
        if isinstance(leaf, torch.Tensor):
            first_leaf.setdefault(id(leaf), index)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    sources: dict[fx.Node, Source] = {}
    fakes = input_fakes(gm, examples, leaves)
    for node, value in zip(placeholders, examples, strict=True):
        if isinstance(value, torch.SymInt):
            sources[node] = _size_source(node, value, fakes)
        elif id(value) in params:
            sources[node] = Source("param", value=value, trainable=value.requires_grad)
        elif id(value) in buffers:
            sources[node] = Source("buffer", value=value)
        elif id(value) in first_leaf:
            sources[node] = Source("input", index=first_leaf[id(value)], trainable=value.requires_grad)
        elif isinstance(value, torch.Tensor) and value.requires_grad:
            raise RematError(f"model: it reads a tensor that requires grad but is neither a parameter nor an input "
                             f"({node.name}); make it a parameter of the model")  # fmt: skip
        else:
            sources[node] = Source("const", value=value)
    return sources


def _size_source(node: fx.Node, size: torch.SymInt, fakes: dict[int, Any]) -> Source:
    """The input dimension a SymInt placeholder reads: the first input whose traced shape holds
    that symbol (dynamo lifts each symbol of the inputs' sizes as a graph input)."""
    for index, fake in sorted(fakes.items()):
        for dim, other in enumerate(fake.shape):
            if isinstance(other, torch.SymInt) and other.node.expr == size.node.expr:
                return Source("size", index=index, value=dim)
    raise RematError(f"model: its trace reads a size ({node.name} = {size.node.expr}) of no input dimension")


@dataclass(frozen=True)
class Plan:
    """A traced step split into side values and stages (lists of stage nodes) with their names."""

    gm: fx.GraphModule
    sources: dict[fx.Node, Source]
    chain_input: fx.Node
    prelude: tuple[fx.Node, ...]
    stages: tuple[tuple[fx.Node, ...], ...]
    names: tuple[str, ...]
    # the values each stage hands to the next (one, or several: remat.trace.boundary); the last
    # stage's is the step's output
    handoffs: tuple[tuple[fx.Node, ...], ...]

    @property
    def output(self) -> fx.Node:
        return self.handoffs[-1][0]

    def merged(self, k: int) -> Plan:
        """This plan with stages ``k`` and ``k + 1`` made one (named as the later one)."""
        stages = (*self.stages[:k], self.stages[k] + self.stages[k + 1], *self.stages[k + 2 :])
        names = (*self.names[:k], self.names[k + 1], *self.names[k + 2 :])
        handoffs = (*self.handoffs[:k], *self.handoffs[k + 1 :])
        return dataclasses.replace(self, stages=stages, names=names, handoffs=handoffs)


def _output_node(gm: fx.GraphModule) -> fx.Node:
    out = next(n for n in gm.graph.nodes if n.op == "output")
    values = [a for a in pytree.tree_leaves(out.args[0]) if isinstance(a, fx.Node)]
    if len(values) != 1:
        raise RematError(f"model: the traced step returns {len(values)} tensors; it must return one (the loss)")
    return values[0]


def _root(node: fx.Node) -> fx.Node:
    """The node whose storage ``node`` views (``node`` itself when it is no view)."""
    while is_view(node) and node.args and isinstance(node.args[0], fx.Node):
        node = node.args[0]
    return node


def _prelude_mutation(node: fx.Node, stage: dict[fx.Node, bool], position: dict[fx.Node, int]) -> bool:
    """Whether in-place ``node`` only finishes building a side value: it reads side values only,
    changes a tensor the step itself made from them (not an input, parameter or buffer), and no
    stage node read that tensor before (BART's ``shift_tokens_right``: ``new_zeros``, then
    ``shifted[:, 1:] = ...`` and ``masked_fill_``). The side values are computed, in graph order,
    before any stage runs, so the stages see the finished tensor, as the model's later code does."""
    if any(stage.get(d, False) for d in node.all_input_nodes) or not node.args:
        return False
    target = node.args[0]
    if not isinstance(target, fx.Node):
        return False
    root = _root(target)
    if root.op not in ("call_function", "call_method") or stage.get(root, True):
        return False
    return not any(stage.get(u, False) and position[u] < position[node] for a in aliases(root) for u in a.users)


def _classify(gm: fx.GraphModule, sources: dict[fx.Node, Source], chain_input: fx.Node) -> dict[fx.Node, bool]:
    """node -> True for stage nodes, False for side values (see :mod:`remat.trace.cut`'s docstring)."""
    first = example_value(chain_input)
    float_input = isinstance(first, torch.Tensor) and first.is_floating_point()
    position = {n: k for k, n in enumerate(gm.graph.nodes)}
    stage: dict[fx.Node, bool] = {}
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            source = sources[node]
            stage[node] = source.trainable or (node is chain_input and float_input)
        elif node.op == "get_attr":
            stage[node] = False
        elif node.op != "output":
            stage[node] = (
                any(stage.get(d, False) for d in node.all_input_nodes)
                or (mutates(node) and not _prelude_mutation(node, stage, position))
                or is_random(node)
                or is_context(node)
            )
    return stage


def _cuttable(node: fx.Node, k: int, position: dict[fx.Node, int]) -> bool:
    """A stage may end on ``node`` after position ``k``: a float tensor, not a view, and neither it
    nor a view of it changed in place later (the next stage would change its own input, a leaf that
    requires grad: EfficientNet's ``Dropout(inplace=True)`` on the flattened pooled features)."""
    value = example_value(node)
    if not isinstance(value, torch.Tensor) or not value.is_floating_point() or is_view(node):
        return False
    return not any(
        mutates(user) and user.args and user.args[0] is alias and position.get(user, -1) > k
        for alias in aliases(node)
        for user in alias.users
    )


def _context_depths(nodes: Sequence[fx.Node]) -> list[int]:
    """After each node: how many grad-mode/autocast regions are open (0 = a cut is allowed)."""
    depths, autocast, grad_off = [], 0, False
    for node in nodes:
        name = node_name(node) if node.op == "call_function" else ""
        if name == "_enter_autocast":
            autocast += 1
        elif name == "_exit_autocast":
            autocast -= 1
        elif name in ("_set_grad_enabled", "set_grad_enabled") and node.args:
            grad_off = node.args[0] is False
        depths.append(autocast + int(grad_off))
    return depths


def _crossable(node: fx.Node, k: int, position: dict[fx.Node, int]) -> bool:
    """A value may be one of several that a cut hands on (remat.trace.boundary): a tensor (a view
    too: T5's position bias is a permuted embedding; an int tensor carries no gradient), and
    neither it nor a view of it changed in place after position ``k``."""
    if not isinstance(example_value(node), torch.Tensor):
        return False
    return not any(
        mutates(user) and user.args and user.args[0] is alias and position.get(user, -1) > k
        for alias in aliases(node)
        for user in alias.users
    )


def _block_boundary(before: fx.Node, after: fx.Node, blocks: frozenset[str]) -> bool:
    """Whether ``before`` and ``after`` lie in different calls of the model's repeated blocks
    (:func:`remat.rewrite.nodes.repeated_blocks`), at least one of them in one."""
    inner = [calls[-1] if calls else None for calls in (block_calls(before, blocks), block_calls(after, blocks))]
    return inner[0] != inner[1]


def _allowed(values: tuple[fx.Node, ...], k: int, order: list[fx.Node], position: dict, blocks: frozenset) -> bool:
    """Whether a cut after ``order[k]`` may hand on ``values`` (NOTE [Cuts that hand on several tensors])."""
    if len(values) == 1:
        return _cuttable(values[0], k, position)
    if len(values) > MAX_TENSORS or not _block_boundary(order[k], order[k + 1], blocks):
        return False
    return all(_crossable(v, k, position) for v in values)


# NOTE [Cuts that hand on several tensors]: a position where one stage value is still needed is a
# cut, as always. A position where several are (at most MAX_TENSORS) is one only between two calls
# of the model's repeated blocks (T5's and BART's layers, Mixtral's with router logits): there
# per-block checkpointing holds the same tensors, and a cut inside a block, or between two modules
# of no block, would only make stages that no user checkpoints, so the cuts of models whose blocks
# hand on one tensor stay what they were. The values are handed on in graph order, as a tuple.
def _cut_positions(
    order: list[fx.Node], output: fx.Node, chain_input: fx.Node, input_held: bool
) -> list[tuple[int, tuple[fx.Node, ...]]]:
    """Cuts ``(k, values)``: after ``order[k]``, ``values`` are the stage values still needed
    (computed by ``order[k]`` or earlier; one, or several: NOTE [Cuts that hand on several tensors])."""
    position = {n: k for k, n in enumerate(order)}
    end = len(order)
    closing: dict[int, list[fx.Node]] = {}
    last_use: dict[fx.Node, int] = {}
    for node in order:
        uses = [position[u] for u in node.users if u in position]
        last_use[node] = end if node is output else max(uses, default=position[node])
        closing.setdefault(last_use[node], []).append(node)
    held_until = -1
    if not input_held:  # the chain input is an activation like any other: it must not cross a cut
        held_until = max((position[u] for u in chain_input.users if u in position), default=-1)
    depths = _context_depths(order)
    blocks = repeated_blocks(order)
    open_values: set[fx.Node] = set()
    cuts: list[tuple[int, tuple[fx.Node, ...]]] = []
    for k in range(end - 1):
        if last_use[order[k]] > k:
            open_values.add(order[k])
        open_values.difference_update(closing.get(k, ()))
        if not open_values or depths[k] != 0 or k < held_until or output in open_values:
            continue
        values = tuple(sorted(open_values, key=position.__getitem__))
        # a piece must compute something it hands on: nodes that read nothing of the previous
        # piece (a buffer's in-place counter update) join the piece after them
        fresh = not cuts or cuts[-1][1] != values
        if fresh and _allowed(values, k, order, position, blocks):
            cuts.append((k, values))
    return cuts


def plan(step: TrainingStep, gm: fx.GraphModule, examples: list[Any], leaves: list[Any], input_index: int) -> Plan:
    """Split the traced step into side values and named stages (see :mod:`remat.trace.cut`'s docstring)."""
    sources = _sources(step, gm, examples, leaves)
    chain_input = next((n for n, s in sources.items() if s.kind == "input" and s.index == input_index), None)
    if chain_input is None:
        raise RematError("model: its forward does not read the first tensor input; nothing to cut")
    output = _output_node(gm)
    stage = _classify(gm, sources, chain_input)
    if not stage.get(output, False):
        raise RematError("model: its output depends on no parameter; there is nothing to train")
    order = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output", "get_attr") and stage[n]]
    prelude = tuple(n for n in gm.graph.nodes if n.op in ("call_function", "call_method") and not stage[n])
    input_held = not sources[chain_input].trainable
    cuts = _cut_positions(order, output, chain_input, input_held)
    bounds = [-1, *(k for k, _ in cuts), len(order) - 1]
    pieces = [order[a + 1 : b + 1] for a, b in zip(bounds, bounds[1:], strict=False)]
    handoffs = [v for _, v in cuts] + [(output,)]
    weights = {n for n, s in sources.items() if s.kind in ("param", "buffer")}
    stages, names, kept = merge_by_name(pieces, lambda n: any(d in weights for d in n.all_input_nodes))
    return Plan(
        gm, sources, chain_input, prelude, tuple(map(tuple, stages)), tuple(names), tuple(handoffs[k] for k in kept)
    )


__all__ = ["Plan", "Source", "plan"]
