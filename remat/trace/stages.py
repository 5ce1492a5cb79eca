"""The stages of a cut model: :class:`CutStage` (one graph module of stage nodes) and
:class:`CutChain` (the chain of them, with the side values computed once per call by
:meth:`CutChain.bind`), built from a :class:`~remat.trace.positions.Plan` (docs/models.md,
"How a model is cut")."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
from torch import nn
from torch.utils import _pytree as pytree

from remat.rewrite.grad_mode import within_entry_grad_mode
from remat.rewrite.nodes import is_context
from remat.schedules import RematError
from remat.trace.boundary import Boundary, tensors
from remat.trace.capture import DynamicDims
from remat.trace.chain import Chain
from remat.trace.loss import reduce_output
from remat.trace.positions import Plan
from remat.trace.repeatable import copy_mutated_sides


class _Context:
    """The side values of the current call (node name -> value) and its loss target, shared by the stages."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.target: Any = None


# NOTE [A loss outside the trace]
# A loss TorchDynamo cannot trace (``F.ctc_loss``: its output's shape depends on the targets'
# values; a Python branch on a tensor's values) would make the whole step one refusal, since the
# step is traced together with its loss. When the user passes that loss as ``loss=`` and the
# model returns one tensor, the trace stops at the model's output and the loss becomes the
# chain's last stage, ``LossTail``: the user's own function, run eagerly on the last traced
# stage's output (put back in the model's output structure, a ``ModelOutput`` or dict whose one
# tensor it is: ``OneTensor``) and the call's target. It is a stage like any other: profiled (its forward's
# transient and what autograd saves in it are measured, so the prediction counts it), replayed
# by the same schedules (recomputed if a schedule says so: it is a function of its input and the
# target), and proven with the rest: the proof runs the whole step, cut chain and eager tail,
# against the user's model followed by the loss. It is never compiled (``remat_keep_eager``).


@dataclass(frozen=True)
class OneTensor:
    """Where the one tensor of a model's output sits (a tensor, a tuple, a dict, a ``ModelOutput``):
    ``index`` among its flattened leaves (``spec``); the other leaves as the example had them."""

    spec: Any
    leaves: tuple
    index: int

    @staticmethod
    def of(output: Any) -> OneTensor | None:
        """``output``'s, or None when it holds no tensor, several, or other objects than plain
        values (a cache object holds tensors, which a kept copy of the example would keep alive)."""
        leaves, spec = pytree.tree_flatten(output)
        found = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
        plain = all(leaf is None or isinstance(leaf, (torch.Tensor, bool, int, float, str)) for leaf in leaves)
        if len(found) != 1 or not plain:
            return None
        return OneTensor(spec, tuple(None if i == found[0] else v for i, v in enumerate(leaves)), found[0])

    def pick(self, output: Any, *_: Any) -> torch.Tensor:
        """The tensor of ``output`` (the traced model's step ends here)."""
        return pytree.tree_leaves(output)[self.index]

    def rebuild(self, x: torch.Tensor) -> Any:
        """The model's output with ``x`` as its tensor (what the user's loss reads)."""
        leaves = list(self.leaves)
        leaves[self.index] = x
        return pytree.tree_unflatten(leaves, self.spec)


@dataclass(frozen=True)
class Tail:
    """The user's ``loss`` after the traced model, on its output rebuilt around the one tensor."""

    loss: Any
    output: OneTensor

    def __call__(self, x: torch.Tensor, target: Any) -> torch.Tensor:
        return reduce_output(self.output.rebuild(x), self.loss, target)


class LossTail(nn.Module):
    """The user's loss run eagerly on the last traced stage's output (NOTE [A loss outside the trace])."""

    remat_keep_eager = True  # compile=True leaves it eager: TorchDynamo could not trace it

    def __init__(self, tail: Tail, context: _Context) -> None:
        super().__init__()
        self.loss = tail.loss  # a loss module's parameters and buffers are the stage's
        self.tail = tail
        self.context = context

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.tail(x, self.context.target)


def _attr_module(tensors: list[tuple[str, Any]]) -> nn.Module:
    root = nn.Module()
    for name, value in tensors:
        if isinstance(value, nn.Parameter):
            root.register_parameter(name, value)
        elif isinstance(value, torch.Tensor):
            root.register_buffer(name, value, persistent=False)
        else:
            setattr(root, name, value)
    return root


def _subgraph(
    plan_: Plan, nodes: Sequence[fx.Node], firsts: Sequence[fx.Node], out: Any, side_kinds: tuple[str, ...]
) -> tuple[fx.GraphModule, list[str]]:
    """A GraphModule computing ``nodes``: placeholders ``firsts`` (the stage input: ``x``, or
    ``x0, x1, ...`` for a tuple boundary), then the side values it reads (names returned);
    parameters, buffers and constants become its own attributes."""
    inside = set(nodes)
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    attrs: list[tuple[str, Any]] = []
    sides: list[str] = []
    for k, first in enumerate(firsts):
        env[first] = graph.placeholder("x" if len(firsts) == 1 else f"x{k}")
    needed = list(dict.fromkeys(d for n in nodes for d in n.all_input_nodes if d not in inside and d not in env))
    for dep in needed:
        source = plan_.sources.get(dep)
        if source is not None and source.kind in side_kinds:
            sides.append(dep.name)
            env[dep] = graph.placeholder(f"side_{dep.name}")
    for dep in needed:
        if dep in env:
            continue
        source = plan_.sources.get(dep)
        if dep.op == "get_attr":
            value = operator.attrgetter(dep.target)(plan_.gm)
        elif source is not None and source.kind in ("param", "buffer", "const"):
            value = source.value
        else:  # a side value computed before the chain (or the chain input read again)
            sides.append(dep.name)
            env[dep] = graph.placeholder(f"side_{dep.name}")
            continue
        name = f"t{len(attrs)}"
        attrs.append((name, value))
        env[dep] = graph.get_attr(name)
    for node in nodes:
        env[node] = graph.node_copy(node, lambda n: env[n])
    graph.output(pytree.tree_map(lambda n: env[n] if isinstance(n, fx.Node) else n, out))
    return fx.GraphModule(_attr_module(attrs), graph), sides


class CutStage(nn.Module):
    """One stage: ``body(x, *side values of the current call)``; ``x`` is the stage's input, one
    tensor or a tuple of them (remat.trace.boundary), and so is what it returns."""

    def __init__(self, body: fx.GraphModule, sides: list[str], context: _Context) -> None:
        super().__init__()
        self.body = body
        self.sides = list(sides)
        self.context = context

    def forward(self, x: Boundary) -> Boundary:
        values = self.context.values
        return self.body(*tensors(x), *[values[name] for name in self.sides])


@dataclass(frozen=True)
class LeafCheck:
    """What a call's flattened inputs must look like to run the traced cut (dynamo specialised on it)."""

    spec: Any
    tensors: tuple[tuple[int, tuple[int, ...], torch.dtype, str], ...]
    constants: tuple[tuple[int, Any], ...]
    aliases: tuple[tuple[int, int], ...]
    grads: tuple[int, ...] = ()  # the tensor leaves that require grad (the profile's input_grad)
    dynamic: DynamicDims | None = None  # the dimensions the trace is general in (None: none)


def leaf_check(leaves: list[Any], spec: Any) -> LeafCheck:
    """The :class:`LeafCheck` of the example call's flattened inputs ``leaves`` (pytree ``spec``)."""
    tensors, constants, aliases, grads, first = [], [], [], [], {}
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, torch.Tensor):
            tensors.append((i, tuple(leaf.shape), leaf.dtype, leaf.device.type))
            aliases.append((i, first.setdefault(id(leaf), i)))
            if leaf.requires_grad:
                grads.append(i)
        else:
            constants.append((i, leaf))
    return LeafCheck(spec, tuple(tensors), tuple(constants), tuple(aliases), tuple(grads))


class CutChain(Chain):
    """A model cut from its traced training step: :meth:`bind` a call's inputs (computes the side
    values, returns the chain input a_0), then run the stages on a_0 (``forward``) or replay them."""

    def __init__(self, plan_: Plan, check: LeafCheck, input_index: int, tail: Tail | None = None) -> None:
        self.context = _Context()
        stages = []
        for k, nodes in enumerate(plan_.stages):
            firsts = (plan_.chain_input,) if k == 0 else plan_.handoffs[k - 1]
            handoff = plan_.handoffs[k]
            out = handoff[0] if len(handoff) == 1 else handoff
            body, sides = _subgraph(plan_, nodes, firsts, out, side_kinds=("input",))
            # a stage runs in the mode the replay sets (NOTE [Grad mode inside a stage]) and never
            # changes a side value it reads (remat.trace.repeatable)
            body = within_entry_grad_mode(copy_mutated_sides(body))
            stages.append((plan_.names[k], CutStage(body, sides, self.context)))
        if tail is not None:  # the user's loss, eagerly after the traced stages
            stages.append(("eager_loss", LossTail(tail, self.context)))
        self.tail = tail
        super().__init__(stages)
        side_names = {s for _, st in stages for s in getattr(st, "sides", ())}
        wanted = [n for n in plan_.prelude if n.name in side_names]
        context_nodes = [n for n in plan_.gm.graph.nodes if is_context(n)]
        prelude_nodes = [n for n in plan_.gm.graph.nodes if n in set(plan_.prelude) or n in set(context_nodes)]
        prelude, self._prelude_inputs = _subgraph(plan_, prelude_nodes, (), tuple(wanted), side_kinds=("input",))
        self._prelude = within_entry_grad_mode(prelude)  # the caller's grad mode after bind, too
        self._prelude_outputs = [n.name for n in wanted]
        self._input_of = {n.name: s.index for n, s in plan_.sources.items() if s.kind == "input"}
        self._size_of = {n.name: (s.index, s.value) for n, s in plan_.sources.items() if s.kind == "size"}
        self._check = check
        self._input_index = input_index
        self.plan = plan_

    def bind(self, *args: Any, target: Any = None, **kwargs: Any) -> torch.Tensor:
        """Take a call's inputs: check they match the traced example (shapes, dtypes, constants),
        compute the side values, and return the chain input a_0."""
        leaves, spec = pytree.tree_flatten((args, kwargs, target))
        self._validate(leaves, spec)
        values = {name: leaves[index] for name, index in self._input_of.items()}
        values.update((name, leaves[index].shape[dim]) for name, (index, dim) in self._size_of.items())
        computed = self._prelude(*[values[name] for name in self._prelude_inputs])
        values.update(zip(self._prelude_outputs, computed, strict=True))
        self.context.values = values
        self.context.target = target
        return leaves[self._input_index]

    def finish(self, output: torch.Tensor) -> torch.Tensor:
        """The step's result from the traced graph's ``output``: the eager loss applied to it when
        the chain ends in one (NOTE [A loss outside the trace]), else ``output`` itself."""
        return output if self.tail is None else self.tail(output, self.context.target)

    def run(self, *args: Any, target: Any = None, **kwargs: Any) -> torch.Tensor:
        """``bind`` then the plain (no remat) chain: the cut model's training-step output."""
        return self(self.bind(*args, target=target, **kwargs))

    def remat_outside_tensors(self) -> list[torch.Tensor]:
        """The tensors of the bound call the stages read besides their inputs: the call's own
        inputs and the side values. No stage allocates them (the caller did, or :meth:`bind`
        before the chain: the call's ``side_bytes``), so a stage that saves or hands on one, or a
        view of one, holds no new bytes (docs/model.md, "Every byte counted once"; the profilers
        read this, :func:`remat.profile.stage.outside_storages`)."""
        leaves = pytree.tree_leaves(list(self.context.values.values()))
        return [v for v in leaves if isinstance(v, torch.Tensor)]

    @property
    def dynamic(self) -> DynamicDims | None:
        """The input dimensions this cut is general in (None: it is for the traced example's sizes)."""
        return self._check.dynamic

    def _validate(self, leaves: list[Any], spec: Any) -> None:
        check = self._check
        if spec != check.spec:
            raise RematError("inputs: not the same arguments as the example the model was cut on")
        general = check.dynamic.dims if check.dynamic is not None else frozenset()
        for i, shape, dtype, device in check.tensors:
            leaf = leaves[i]
            if not isinstance(leaf, torch.Tensor) or (_fixed(leaf.shape, i, general), leaf.dtype, leaf.device.type) != (
                _fixed(shape, i, general),
                dtype,
                device,
            ):
                got = f"{tuple(leaf.shape)} {leaf.dtype}" if isinstance(leaf, torch.Tensor) else type(leaf).__name__
                raise RematError(
                    f"inputs: argument {i} is {got}, but the model was cut and profiled for {shape} {dtype};"
                    " call remat.checkpoint again with an example of this shape"
                )
        for i, value in check.constants:
            if leaves[i] != value:
                raise RematError(f"inputs: argument {i} is {leaves[i]!r}, but the model was cut for {value!r}")
        first: dict[int, int] = {}
        for i, expected in check.aliases:
            if first.setdefault(id(leaves[i]), i) != expected:
                raise RematError("inputs: which arguments are the same tensor differs from the example")
        if check.dynamic is not None and not check.dynamic.accepts(leaves):
            shapes = ", ".join(str(tuple(leaves[i].shape)) for i in check.dynamic.leaves)
            raise RematError(
                f"inputs: sizes {shapes} break what the trace assumed of its general dimensions ({check.dynamic.guard})"
            )


def _fixed(shape: Any, leaf: int, general: frozenset[tuple[int, int]]) -> tuple:
    """``shape`` with the dimensions the cut is general in blanked (they may take any size)."""
    return tuple(None if (leaf, d) in general else int(n) for d, n in enumerate(shape))


__all__ = ["CutChain", "CutStage", "LeafCheck", "LossTail", "OneTensor", "Tail", "leaf_check"]
