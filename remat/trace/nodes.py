"""What a node of a traced graph does, read from the node alone: whether it changes a tensor in
place, draws random numbers, opens or closes a grad-mode/autocast region, may return a view of
its input, and which module's code made it. Used to split a traced step into side values and
stages and to choose where it may be cut (:mod:`remat.trace.positions`)."""

from __future__ import annotations

import inspect
import operator
import re
from typing import Any

import torch.fx as fx

INPLACE_OPERATORS = {
    operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.ifloordiv, operator.imod,
    operator.ipow, operator.iand, operator.ior, operator.ixor, operator.ilshift, operator.irshift,
    operator.imatmul, operator.setitem,
}  # fmt: skip
"""``operator`` functions that change their first argument in place (``x += y``, ``x[i] = v``)."""

CONTEXT_FUNCTIONS = {"_set_grad_enabled", "_enter_autocast", "_exit_autocast", "set_grad_enabled"}
"""Functions that open or close a grad-mode or autocast region in a dynamo graph."""

RANDOM_WORDS = ("dropout", "rand", "bernoulli", "normal", "multinomial", "poisson", "exponential", "cauchy",
                "geometric", "uniform", "rrelu")  # fmt: skip
"""Words in the name of a function or method that draws random numbers."""

# outputs of these may share their input's storage: a stage must not end on one (the profiler refuses it)
VIEW_NAMES = {
    "view", "reshape", "transpose", "permute", "expand", "expand_as", "squeeze", "unsqueeze", "flatten",
    "unflatten", "getitem", "t", "narrow", "select", "as_strided", "view_as", "split", "chunk", "contiguous",
    "detach", "to", "type", "float", "type_as", "movedim", "swapaxes", "unbind", "identity", "clone_",
}  # fmt: skip
"""Names of functions and methods whose output may share its input's storage."""


def node_name(node: fx.Node) -> str:
    """The name of what ``node`` calls (a method name, or the function's ``__name__``)."""
    target = node.target
    return target if isinstance(target, str) else getattr(target, "__name__", str(target))


def mutates(node: fx.Node) -> bool:
    """True if ``node`` changes its first argument in place (``add_``, ``x += y``, ``inplace=True``)."""
    if node.op not in ("call_function", "call_method"):
        return False
    name = node_name(node)
    if node.op == "call_function" and node.target in INPLACE_OPERATORS:
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


def is_random(node: fx.Node) -> bool:
    """True if what ``node`` calls draws random numbers (by its name: ``dropout``, ``rand``, ...)."""
    name = node_name(node).lower()
    return any(word in name for word in RANDOM_WORDS)


def is_context(node: fx.Node) -> bool:
    """True if ``node`` opens or closes a grad-mode or autocast region."""
    return node.op == "call_function" and node_name(node) in CONTEXT_FUNCTIONS


def is_view(node: fx.Node) -> bool:
    """True if ``node``'s output may share its input's storage (a view, or a no-op conversion)."""
    return node_name(node) in VIEW_NAMES


def example_value(node: fx.Node) -> Any:
    """The value dynamo saw for ``node`` while tracing (a fake tensor), or None."""
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


__all__ = [
    "CONTEXT_FUNCTIONS",
    "INPLACE_OPERATORS",
    "RANDOM_WORDS",
    "VIEW_NAMES",
    "example_value",
    "is_context",
    "is_random",
    "is_view",
    "module_path",
    "mutates",
    "node_name",
]
