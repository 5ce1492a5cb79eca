"""Cut a model into a chain of stages from its own traced forward (docs/models.md).

The model's training step (forward, then its output reduced to what is differentiated: the
user's loss, the model's own ``.loss``, or its one output tensor) is traced by TorchDynamo
(``torch.compile(fullgraph=True, dynamic=False)`` with a backend that only keeps the graph).
Dynamo is the tracer because it is the one that traces Hugging Face models (keyword inputs,
``ModelOutput``, ``**kwargs`` decorators, mask and rotary code) as well as torchvision and timm;
``torch.fx.symbolic_trace`` fails on every Hugging Face model here ("co_varnames is too small")
and ``torch.export`` fails on their cache outputs and rewrites in-place ops. Dynamo's graph calls
the same torch functions as the eager model, in the same order, so a stage computes bit for bit
what the model computes.

Nodes of the graph are split in two kinds:

* **side values**: nodes that depend on no trainable tensor (parameters, inputs that require
  grad) and not on a floating-point chain input, and are neither random nor in-place: position
  ids, attention masks, rotary tables, shifted labels, views of token ids. They are computed once
  per call (:meth:`CutChain.bind`), before the chain, and handed to the stages that read them, so
  they are not activations of any stage and are never recomputed.
* **stage nodes**: the rest, in graph order. The chain is cut after stage node ``v`` when ``v`` is
  the only stage value still needed later (an articulation point of the forward), ``v`` is a
  floating-point tensor that is not a view, no later node modifies ``v`` in place (a cut there
  would hand an in-place op a leaf that requires grad), and no grad-mode/autocast region is open.

Consecutive pieces whose nodes share a module path are merged into one stage named by that path
(``transformer.h.3``, ``layer2.1``, ``features.denseblock2``). Every cut is then proven equal to
the model by :func:`remat.trace.proof.prove_cut` before it is returned.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
from torch import nn
from torch.utils import _pytree as pytree

from remat.schedules import RematError
from remat.trace import branches
from remat.trace.chain import Chain

_INPLACE_OPERATORS = {
    operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.ifloordiv, operator.imod,
    operator.ipow, operator.iand, operator.ior, operator.ixor, operator.ilshift, operator.irshift,
    operator.imatmul, operator.setitem,
}  # fmt: skip
_CONTEXT_FUNCTIONS = {"_set_grad_enabled", "_enter_autocast", "_exit_autocast", "set_grad_enabled"}
_RANDOM_WORDS = ("dropout", "rand", "bernoulli", "normal", "multinomial", "poisson", "exponential", "cauchy",
                 "geometric", "uniform", "rrelu")  # fmt: skip
# outputs of these may share their input's storage: a stage must not end on one (the profiler refuses it)
_VIEW_NAMES = {
    "view", "reshape", "transpose", "permute", "expand", "expand_as", "squeeze", "unsqueeze", "flatten",
    "unflatten", "getitem", "t", "narrow", "select", "as_strided", "view_as", "split", "chunk", "contiguous",
    "detach", "to", "type", "float", "type_as", "movedim", "swapaxes", "unbind", "identity", "clone_",
}  # fmt: skip


def _name(node: fx.Node) -> str:
    target = node.target
    return target if isinstance(target, str) else getattr(target, "__name__", str(target))


def mutates(node: fx.Node) -> bool:
    """True if ``node`` changes its first argument in place (``add_``, ``x += y``, ``inplace=True``)."""
    if node.op not in ("call_function", "call_method"):
        return False
    name = _name(node)
    if node.op == "call_function" and node.target in _INPLACE_OPERATORS:
        return True
    if node.op == "call_function" and getattr(node.target, "__module__", None) == "_operator":
        return False  # operator.and_, operator.not_: trailing underscore, not in place
    if name.endswith("_") and not name.startswith("_"):
        return True
    if node.kwargs.get("inplace") is True:
        return True
    if node.op == "call_function" and callable(node.target):
        try:
            bound = inspect.signature(node.target).bind(*node.args, **node.kwargs)
        except (TypeError, ValueError):
            return False
        return bound.arguments.get("inplace") is True
    return False


def _is_random(node: fx.Node) -> bool:
    name = _name(node).lower()
    return any(word in name for word in _RANDOM_WORDS)


def _is_context(node: fx.Node) -> bool:
    return node.op == "call_function" and _name(node) in _CONTEXT_FUNCTIONS


def _example(node: fx.Node) -> Any:
    return node.meta.get("example_value")


_ROOT = re.compile(r"^L\[['\"][^'\"]+['\"]\]\.?")
_INDEX = re.compile(r"\[['\"]?([^\]'\"]+)['\"]?\]")


def module_path(node: fx.Node) -> str:
    """The dotted path (below the traced step's ``model``) of the module whose code made ``node``."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    raw = list(stack.values())[-1][0]
    path = _INDEX.sub(r".\1", _ROOT.sub("", str(raw))).replace("._modules.", ".").strip(".")
    parts = [p for p in path.split(".") if p]
    if parts and parts[0] == "model":
        parts = parts[1:]
    return ".".join(parts)


def reduce_output(output: Any, loss: Callable[..., torch.Tensor] | None, target: Any) -> torch.Tensor:
    """What a training step differentiates: ``loss(output[, target])``, else the model's own
    ``loss`` (``ModelOutput``/dict), else its one tensor (first of a tuple, dict or ``ModelOutput``)."""
    if loss is not None:
        return loss(output) if target is None else loss(output, target)
    if isinstance(output, torch.Tensor):
        return output
    own = getattr(output, "loss", None)
    if own is None and isinstance(output, Mapping):
        own = output.get("loss")
    if own is not None:
        return own
    if isinstance(output, Mapping):
        for value in output.values():
            if isinstance(value, torch.Tensor):
                return value
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        return output[0]
    raise RematError(
        f"model: its output is a {type(output).__name__} with no loss and no tensor; pass loss=... to reduce it"
    )


class TrainingStep(nn.Module):
    """``model`` followed by :func:`reduce_output`: the function that a cut must reproduce."""

    def __init__(self, model: nn.Module, loss: Callable[..., torch.Tensor] | None = None) -> None:
        super().__init__()
        self.model = model
        self.loss = loss

    def forward(self, args: tuple, kwargs: dict, target: Any = None) -> torch.Tensor:
        return reduce_output(self.model(*args, **kwargs), self.loss, target)


def _quiet_logging() -> set:
    # Logger calls inside a model (transformers' warning_once) stop dynamo; they only print
    logger = logging.Logger
    names = ("debug", "info", "warning", "warn", "error", "warning_once", "info_once")
    return {getattr(logger, n) for n in names if hasattr(logger, n)}


def trace(step: TrainingStep, args: tuple, kwargs: dict, target: Any) -> tuple[fx.GraphModule, list[Any]]:
    """Dynamo's graph of ``step(args, kwargs, target)`` and the values of its placeholders.

    The traced call runs the model once (twice for a Hugging Face model: :mod:`remat.trace.branches`
    records its mask decisions eagerly first): the caller saves and restores its state around it.
    Resets dynamo's caches (before and after) so that this trace neither hits nor leaves one.
    """
    captured: list[tuple[fx.GraphModule, list[Any]]] = []

    def keep(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        captured.append((gm, list(example_inputs)))
        return gm.forward

    torch._dynamo.reset()
    try:
        # transformers' mask code branches on mask values: the trace takes eager's branch, guarded
        with branches.pinned(step.model, lambda: step(args, kwargs, target)):
            with torch._dynamo.config.patch(ignore_logging_functions=_quiet_logging()):
                torch.compile(step, backend=keep, fullgraph=True, dynamic=False)(args, kwargs, target)
    except RematError:
        raise
    except Exception as error:  # noqa: BLE001 - dynamo's many error types; one line for the user
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise RematError(
            f"model: TorchDynamo cannot trace {type(step.model).__name__} as one graph ({first}); "
            "give the model a remat_stages() method to cut it by hand"
        ) from None
    finally:
        torch._dynamo.reset()
    if len(captured) != 1:
        raise RematError(f"model: tracing {type(step.model).__name__} gave {len(captured)} graphs, expected one")
    return captured[0]


@dataclass(frozen=True)
class Source:
    """Where a placeholder's value comes from at run time: ``kind`` is ``param``, ``buffer``,
    ``input`` (``index`` into the flattened call inputs) or ``const`` (``value`` held as traced)."""

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
    for node, value in zip(placeholders, examples, strict=True):
        if id(value) in params:
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


@dataclass(frozen=True)
class Plan:
    """A traced step split into side values and stages (lists of stage nodes) with their names."""

    gm: fx.GraphModule
    sources: dict[fx.Node, Source]
    chain_input: fx.Node
    prelude: tuple[fx.Node, ...]
    stages: tuple[tuple[fx.Node, ...], ...]
    names: tuple[str, ...]
    handoffs: tuple[fx.Node, ...]  # the value each stage hands to the next; the last one's is the output

    @property
    def output(self) -> fx.Node:
        return self.handoffs[-1]

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


def _classify(gm: fx.GraphModule, sources: dict[fx.Node, Source], chain_input: fx.Node) -> dict[fx.Node, bool]:
    """node -> True for stage nodes, False for side values (see the module docstring)."""
    float_input = isinstance(_example(chain_input), torch.Tensor) and _example(chain_input).is_floating_point()
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
                or mutates(node)
                or _is_random(node)
                or _is_context(node)
            )
    return stage


def _cuttable(node: fx.Node, k: int, position: dict[fx.Node, int]) -> bool:
    """A stage may end on ``node`` after position ``k``: a float tensor, not a view, and not
    changed in place later (the next stage would change its own input, a leaf that requires grad)."""
    value = _example(node)
    if not isinstance(value, torch.Tensor) or not value.is_floating_point() or _name(node) in _VIEW_NAMES:
        return False
    return not any(
        mutates(user) and user.args and user.args[0] is node and position.get(user, -1) > k for user in node.users
    )


def _context_depths(nodes: Sequence[fx.Node]) -> list[int]:
    """After each node: how many grad-mode/autocast regions are open (0 = a cut is allowed)."""
    depths, autocast, grad_off = [], 0, False
    for node in nodes:
        name = _name(node) if node.op == "call_function" else ""
        if name == "_enter_autocast":
            autocast += 1
        elif name == "_exit_autocast":
            autocast -= 1
        elif name in ("_set_grad_enabled", "set_grad_enabled") and node.args:
            grad_off = node.args[0] is False
        depths.append(autocast + int(grad_off))
    return depths


def _cut_positions(
    order: list[fx.Node], output: fx.Node, chain_input: fx.Node, input_held: bool
) -> list[tuple[int, fx.Node]]:
    """Cuts ``(k, v)``: after ``order[k]``, ``v`` is the only stage value still needed (``v`` is
    ``order[k]`` or a value that ``order[k]`` or an earlier node changed in place)."""
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
    open_values: set[fx.Node] = set()
    cuts = []
    for k in range(end - 1):
        if last_use[order[k]] > k:
            open_values.add(order[k])
        open_values.difference_update(closing.get(k, ()))
        if len(open_values) == 1 and depths[k] == 0 and k >= held_until:
            (value,) = open_values
            # a piece must compute the value it hands on: nodes that read nothing of the previous
            # piece (a buffer's in-place counter update) join the piece after them
            fresh = not cuts or cuts[-1][1] is not value
            if fresh and value is not output and _cuttable(value, k, position):
                cuts.append((k, value))
    return cuts


def _common_prefix(paths: list[str]) -> str:
    split = [p.split(".") for p in paths if p]
    if not split:
        return ""
    prefix = split[0]
    for parts in split[1:]:
        n = 0
        while n < min(len(prefix), len(parts)) and prefix[n] == parts[n]:
            n += 1
        prefix = prefix[:n]
    return ".".join(prefix)


def _piece_name(nodes: Sequence[fx.Node], last: bool, owned: Callable[[fx.Node], bool]) -> str:
    """The module path that owns a piece: a block (``layer2.1``, ``transformer.h.3``: the path up to
    its first index) when the piece lies in one, else the common path of its nodes (a range of
    children such as ``features.0-1`` when all of them lie below it)."""
    computed = [n for n in nodes if n.op in ("call_function", "call_method", "call_module")]
    paths = [module_path(n) for n in computed]
    prefix = _common_prefix(paths)
    if not prefix:  # spans top-level modules: name it by those whose weights it uses, if any
        paths = [module_path(n) for n in computed if owned(n)] or paths
        prefix = _common_prefix(paths)
    parts = prefix.split(".") if prefix else []
    # a block is an index below a named container (layer2.1, h.3); a leading index is only the
    # position in a top-level Sequential
    index = next((k for k in range(1, len(parts)) if parts[k].isdigit() and not parts[k - 1].isdigit()), None)
    if index is not None:
        return ".".join(parts[: index + 1])
    if prefix and all(p != prefix for p in paths if p):
        depth = len(parts)
        children = list(dict.fromkeys(p.split(".")[depth] for p in paths if p))
        return f"{prefix}.{children[0]}" + (f"-{children[-1]}" if len(children) > 1 else "")
    if prefix:
        return prefix
    tops = list(dict.fromkeys(p.split(".")[0] for p in paths if p))
    if tops:
        return "+".join(tops)
    return "loss" if last else "root"


def _merge_by_name(
    pieces: list[list[fx.Node]], owned: Callable[[fx.Node], bool]
) -> tuple[list[list[fx.Node]], list[str], list[int]]:
    """Neighbouring pieces with one name become one stage; also returns each stage's last piece."""
    names = [_piece_name(p, k == len(pieces) - 1, owned) for k, p in enumerate(pieces)]
    stages: list[list[fx.Node]] = []
    merged_names: list[str] = []
    last_piece: list[int] = []
    for k, (piece, name) in enumerate(zip(pieces, names, strict=True)):
        if merged_names and merged_names[-1] == name:
            stages[-1].extend(piece)
            last_piece[-1] = k
        else:
            stages.append(list(piece))
            merged_names.append(name)
            last_piece.append(k)
    seen: dict[str, int] = {}
    unique = []
    for name in merged_names:
        seen[name] = seen.get(name, 0) + 1
        unique.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
    return stages, unique, last_piece


def plan(step: TrainingStep, gm: fx.GraphModule, examples: list[Any], leaves: list[Any], input_index: int) -> Plan:
    """Split the traced step into side values and named stages (see the module docstring)."""
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
    handoffs = [v for _, v in cuts] + [output]
    weights = {n for n, s in sources.items() if s.kind in ("param", "buffer")}
    stages, names, kept = _merge_by_name(pieces, lambda n: any(d in weights for d in n.all_input_nodes))
    return Plan(
        gm, sources, chain_input, prelude, tuple(map(tuple, stages)), tuple(names), tuple(handoffs[k] for k in kept)
    )


class _Context:
    """The side values of the current call (node name -> value), shared by the stages."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}


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
    plan_: Plan, nodes: Sequence[fx.Node], first: fx.Node | None, out: Any, side_kinds: tuple[str, ...]
) -> tuple[fx.GraphModule, list[str]]:
    """A GraphModule computing ``nodes``: placeholder ``first`` (if any), then the side values it
    reads (names returned); parameters, buffers and constants become its own attributes."""
    inside = set(nodes)
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    attrs: list[tuple[str, Any]] = []
    sides: list[str] = []
    if first is not None:
        env[first] = graph.placeholder("x")
    needed = list(dict.fromkeys(d for n in nodes for d in n.all_input_nodes if d not in inside and d is not first))
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
    """One stage: ``body(x, *side values of the current call)``."""

    def __init__(self, body: fx.GraphModule, sides: list[str], context: _Context) -> None:
        super().__init__()
        self.body = body
        self.sides = list(sides)
        self.context = context

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        values = self.context.values
        return self.body(x, *[values[name] for name in self.sides])


@dataclass(frozen=True)
class _LeafCheck:
    """What a call's flattened inputs must look like to run the traced cut (dynamo specialised on it)."""

    spec: Any
    tensors: tuple[tuple[int, tuple[int, ...], torch.dtype, str], ...]
    constants: tuple[tuple[int, Any], ...]
    aliases: tuple[tuple[int, int], ...]


def _leaf_check(leaves: list[Any], spec: Any) -> _LeafCheck:
    tensors, constants, aliases, first = [], [], [], {}
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, torch.Tensor):
            tensors.append((i, tuple(leaf.shape), leaf.dtype, leaf.device.type))
            aliases.append((i, first.setdefault(id(leaf), i)))
        else:
            constants.append((i, leaf))
    return _LeafCheck(spec, tuple(tensors), tuple(constants), tuple(aliases))


class CutChain(Chain):
    """A model cut from its traced training step: :meth:`bind` a call's inputs (computes the side
    values, returns the chain input a_0), then run the stages on a_0 (``forward``) or replay them."""

    def __init__(self, plan_: Plan, check: _LeafCheck, input_index: int) -> None:
        self.context = _Context()
        stages = []
        for k, nodes in enumerate(plan_.stages):
            first = plan_.chain_input if k == 0 else plan_.handoffs[k - 1]
            out = plan_.handoffs[k]
            body, sides = _subgraph(plan_, nodes, first, out, side_kinds=("input",))
            stages.append((plan_.names[k], CutStage(body, sides, self.context)))
        super().__init__(stages)
        side_names = {s for _, st in stages for s in st.sides}
        wanted = [n for n in plan_.prelude if n.name in side_names]
        context_nodes = [n for n in plan_.gm.graph.nodes if _is_context(n)]
        prelude_nodes = [n for n in plan_.gm.graph.nodes if n in set(plan_.prelude) or n in set(context_nodes)]
        self._prelude, self._prelude_inputs = _subgraph(
            plan_, prelude_nodes, None, tuple(wanted), side_kinds=("input",)
        )
        self._prelude_outputs = [n.name for n in wanted]
        self._input_of = {n.name: s.index for n, s in plan_.sources.items() if s.kind == "input"}
        self._check = check
        self._input_index = input_index
        self.plan = plan_

    def bind(self, *args: Any, target: Any = None, **kwargs: Any) -> torch.Tensor:
        """Take a call's inputs: check they match the traced example (shapes, dtypes, constants),
        compute the side values, and return the chain input a_0."""
        leaves, spec = pytree.tree_flatten((args, kwargs, target))
        self._validate(leaves, spec)
        values = {name: leaves[index] for name, index in self._input_of.items()}
        computed = self._prelude(*[values[name] for name in self._prelude_inputs])
        values.update(zip(self._prelude_outputs, computed, strict=True))
        self.context.values = values
        return leaves[self._input_index]

    def run(self, *args: Any, target: Any = None, **kwargs: Any) -> torch.Tensor:
        """``bind`` then the plain (no remat) chain: the cut model's training-step output."""
        return self(self.bind(*args, target=target, **kwargs))

    def _validate(self, leaves: list[Any], spec: Any) -> None:
        check = self._check
        if spec != check.spec:
            raise RematError("inputs: not the same arguments as the example the model was cut on")
        for i, shape, dtype, device in check.tensors:
            leaf = leaves[i]
            if not isinstance(leaf, torch.Tensor) or (tuple(leaf.shape), leaf.dtype, leaf.device.type) != (
                shape,
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


def first_tensor_index(leaves: list[Any]) -> int:
    """Index of the first tensor among the flattened inputs (the chain input a_0)."""
    index = next((i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)), None)
    if index is None:
        raise RematError("inputs: the example has no tensor")
    return index


def _aliasing_stage(chain: CutChain, x: torch.Tensor) -> int | None:
    """The first stage whose output shares storage with its input or a parameter/buffer (dropout
    with p=0 returns its input): such a stage cannot stand alone (the chain model needs a new a_i+1)."""
    with torch.no_grad():
        for k, stage in enumerate(chain.stages):
            held = {t.untyped_storage().data_ptr() for t in (*stage.parameters(), *stage.buffers())}
            held.add(x.untyped_storage().data_ptr())
            out = stage(x)
            if out.untyped_storage().data_ptr() in held:
                return k
            x = out
    return None


def cut_step(step: TrainingStep, args: tuple, kwargs: dict, target: Any = None) -> CutChain:
    """Trace ``step`` on the example and cut it (not yet proven: see :func:`remat.trace.proof.cut_model`).

    The caller saves and restores the model's state (the trace and the aliasing check run it)."""
    leaves, spec = pytree.tree_flatten((args, kwargs, target))
    input_index = first_tensor_index(leaves)
    gm, examples = trace(step, args, kwargs, target)
    plan_ = plan(step, gm, examples, leaves, input_index)
    check = _leaf_check(leaves, spec)
    chain = CutChain(plan_, check, input_index)
    while len(plan_.stages) > 1:
        k = _aliasing_stage(chain, chain.bind(*args, target=target, **kwargs))
        if k is None:
            break
        plan_ = plan_.merged(min(k, len(plan_.stages) - 2))
        chain = CutChain(plan_, check, input_index)
    return chain


__all__ = ["CutChain", "CutStage", "Plan", "TrainingStep", "cut_step", "module_path", "mutates", "reduce_output"]
