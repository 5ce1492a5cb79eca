"""Running the nodes of a traced model one at a time, as the pieces of a graph profile run them
(no ``fx.Interpreter``: a piece executes a slice of the graph and fetches its inputs itself)."""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.fx as fx
from torch import nn

from remat.schedules import ProfileError


def fetch_attr(root: nn.Module, target: str) -> Any:
    """The attribute a ``get_attr`` node names (``"layer1.0.weight"``): a parameter, buffer or constant."""
    value: Any = root
    for part in target.split("."):
        value = getattr(value, part)
    return value


def exec_node(root: nn.Module, node: fx.Node, args: Any, kwargs: Any) -> Any:
    """Run one fx node of ``root``'s graph on already resolved ``args`` / ``kwargs``."""
    if node.op == "call_module":
        return root.get_submodule(node.target)(*args, **kwargs)
    if node.op == "call_function":
        return node.target(*args, **kwargs)
    if node.op == "call_method":
        self_obj, *rest = args
        return getattr(self_obj, node.target)(*rest, **kwargs)
    if node.op == "get_attr":
        return fetch_attr(root, node.target)
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
            self._values[name] = exec_node(self._root, node, args, kwargs)
        return self._values[name]


def cast_copy(gm: fx.GraphModule, device: str | torch.device, dtype: torch.dtype, training: bool) -> fx.GraphModule:
    """A deep copy of ``gm`` on ``device`` with its float parameters and buffers in ``dtype``, in
    training mode ``training``: what the pieces run on while profiling (the model is untouched)."""
    result = copy.deepcopy(gm).to(device)
    for p in result.parameters():
        if p.is_floating_point():
            p.data = p.data.to(dtype)
    for b in result.buffers():
        if b.is_floating_point():
            b.data = b.data.to(dtype)
    result.train(training)
    return result


__all__ = ["ConstCache", "cast_copy", "exec_node", "fetch_attr"]
