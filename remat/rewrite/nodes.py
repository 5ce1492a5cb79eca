"""What a node of a traced graph does: whether it changes a tensor in place, draws random numbers,
opens or closes a grad-mode/autocast region, may return a view of its input, which module's code
made it, whether it is heavy (anchors a graph piece) or runs BatchNorm. The one node
classification of remat, for both tracers (:mod:`remat.trace.capture`): the TorchDynamo graph of
a training step, which :mod:`remat.trace.positions` splits into side values and stages, and the
torch.fx graph of a model, which :mod:`remat.graph.pieces` cuts into pieces (docs/model.md,
"Graphs"). Pure functions of the node (and, for a ``call_module`` node, of its graph module)."""

from __future__ import annotations

import inspect
import operator
import re
from collections.abc import Iterable
from typing import Any

import torch
import torch.fx as fx
import torch.nn.functional as F
from torch import nn

INPLACE_OPERATORS = {
    operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.ifloordiv, operator.imod,
    operator.ipow, operator.iand, operator.ior, operator.ixor, operator.ilshift, operator.irshift,
    operator.imatmul, operator.setitem,
}  # fmt: skip
"""``operator`` functions that change their first argument in place (``x += y``, ``x[i] = v``)."""

CONTEXT_FUNCTIONS = {
    "_set_grad_enabled", "_enter_autocast", "_exit_autocast", "set_grad_enabled", "_enter_inference_mode",
    "_exit_inference_mode",
}  # fmt: skip
"""Functions that open or close a grad-mode, inference-mode or autocast region in a dynamo graph (a
region stays inside one stage: an inference-mode region entered in the side-value prelude and left
in a stage made the cut compute other gradients)."""

RANDOM_WORDS = ("dropout", "rand", "bernoulli", "normal", "multinomial", "poisson", "exponential", "cauchy",
                "geometric", "uniform", "rrelu")  # fmt: skip
"""Words in the name of a function or method that draws random numbers."""

# outputs of these may share their input's storage: a stage must not end on one (the profiler refuses it)
VIEW_NAMES = {
    "view", "reshape", "transpose", "permute", "expand", "expand_as", "squeeze", "unsqueeze", "flatten",
    "unflatten", "getitem", "t", "narrow", "select", "as_strided", "view_as", "split", "chunk", "contiguous",
    "detach", "to", "type", "float", "type_as", "movedim", "swapaxes", "unbind", "identity", "clone_",
    # views the list above missed: an in-place op on one of them changes the tensor it views
    # (docs/models.md, "How a model is cut": a cut is never made before such an op)
    "diagonal", "unfold", "tensor_split", "split_with_sizes", "hsplit", "vsplit", "dsplit", "moveaxis",
    "swapdims", "ravel", "view_as_real", "view_as_complex", "real", "imag", "mT", "mH", "adjoint", "alias",
    "half", "double", "bfloat16", "cpu", "cuda",
}  # fmt: skip
"""Names of functions and methods whose output may share its input's storage."""


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


def is_random(node: fx.Node, gm: fx.GraphModule | None = None) -> bool:
    """True if ``node`` may draw random numbers, so that a recompute must replay the RNG: a module
    holding dropout, RReLU, or attention/RNN dropout (a ``call_module`` node of ``gm``), a function
    or method of the known random tables, or one whose name says so (``dropout``, ``rand``, ...: a
    dynamo graph calls functions remat has never listed). Conservative on purpose: a false
    "random" costs one RNG snapshot, a missed one a recompute that draws other numbers."""
    if node.op == "call_module":
        if gm is None:
            return False
        for module in gm.get_submodule(node.target).modules():
            if isinstance(module, (nn.modules.dropout._DropoutNd, nn.RReLU)):
                return True
            if isinstance(module, (nn.MultiheadAttention, nn.RNNBase)) and module.dropout > 0:
                return True
        return False
    if node.op == "call_function" and node.target in _RANDOM_FUNCTIONS:
        return True
    if node.op == "call_method" and node.target in _RANDOM_METHODS:
        return True
    if node.op not in ("call_function", "call_method"):
        return False
    name = node_name(node).lower()
    return any(word in name for word in RANDOM_WORDS)


def is_heavy(node: fx.Node, gm: fx.GraphModule) -> bool:
    """Whether ``node`` anchors a piece of its own: a convolution, linear layer, matmul,
    attention, or any leaf module holding parameters other than a normalization layer."""
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


def uses_batchnorm(node: fx.Node, gm: fx.GraphModule) -> bool:
    """Whether ``node`` runs BatchNorm (a BatchNorm module inside it, or ``F.batch_norm``), whose
    running statistics a training-mode forward updates."""
    if node.op != "call_module":
        return node.op == "call_function" and node.target is F.batch_norm
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in gm.get_submodule(node.target).modules())


def is_context(node: fx.Node) -> bool:
    """True if ``node`` opens or closes a grad-mode or autocast region."""
    return node.op == "call_function" and node_name(node) in CONTEXT_FUNCTIONS


FRESH_TUPLES = {"apply_saving", "autograd_function_apply"}
"""Functions returning a tuple of tensors of their own: an item of it (``getitem``) is no view (a
custom autograd.Function's outputs, NOTE [What a custom autograd.Function saves]; one that returns
a view of its input is found by the cut's aliasing check, :mod:`remat.trace.cut`)."""


def is_view(node: fx.Node) -> bool:
    """True if ``node``'s output may share its input's storage (a view, or a no-op conversion)."""
    if node_name(node) == "getitem" and node.args and isinstance(node.args[0], fx.Node):
        if node.args[0].op == "call_function" and node_name(node.args[0]) in FRESH_TUPLES:
            return False
    return node_name(node) in VIEW_NAMES


def aliases(node: fx.Node) -> list[fx.Node]:
    """``node`` and every view of it, views of views included (they share its storage)."""
    found, todo = [node], [node]
    while todo:
        for user in todo.pop().users:
            if is_view(user) and user not in found:
                found.append(user)
                todo.append(user)
    return found


def example_value(node: fx.Node) -> Any:
    """The value dynamo saw for ``node`` while tracing (a fake tensor), or None."""
    return node.meta.get("example_value")


_ROOT = re.compile(r"^L\[['\"][^'\"]+['\"]\]\.?")
_INDEX = re.compile(r"\[['\"]?([^\]'\"]+)['\"]?\]")


def _clean_path(raw: object) -> str:
    path = _INDEX.sub(r".\1", _ROOT.sub("", str(raw))).replace("._modules.", ".").strip(".")
    parts = [p for p in path.split(".") if p]
    if parts and parts[0] == "model":
        parts = parts[1:]
    return ".".join(parts)


def module_path(node: fx.Node) -> str:
    """The dotted path (below the traced step's ``model``) of the module whose code made ``node``."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    return _clean_path(list(stack.values())[-1][0])


def _block_class(path: str, cls: object) -> bool:
    """An indexed child (``layer2.1``, ``stages.0.blocks.3``, ``features.1.0``) of a model's own
    class: not one of torch.nn's modules, nor a container (a ``Sequential`` subclass such as
    torchvision's ``Conv2dNormActivation`` is a layer group)."""
    if not path or not path.rsplit(".", 1)[-1].isdigit() or not isinstance(cls, type):
        return False
    if issubclass(cls, (torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ModuleDict)):
        return False
    return not cls.__module__.startswith("torch.nn.")


def _module_calls(node: fx.Node) -> list[tuple[str, str, object]]:
    """``(call key, path, class)`` of each module call that made ``node``, outermost first."""
    stack = node.meta.get("nn_module_stack") or {}
    return [(str(key), _clean_path(value[0]), value[1] if len(value) > 1 else None) for key, value in stack.items()]


def _weighted_calls(nodes: list[fx.Node]) -> set[str]:
    """The paths of the module calls that made a node reading a parameter: a TorchDynamo placeholder
    named ``..._parameters_...`` (``L_self_modules_model_modules_cell_parameters_weight_ih_``) or a
    ``get_attr`` node (a module attribute)."""
    weighted: set[str] = set()
    for node in nodes:
        if any(
            d.op == "get_attr" or (d.op == "placeholder" and "_parameters_" in str(d.target))
            for d in node.all_input_nodes
        ):
            weighted.update(path for _, path, _ in _module_calls(node))
    return weighted


def repeated_blocks(nodes: Iterable[fx.Node]) -> frozenset[str]:
    """The paths of the model's repeated blocks among the modules that made ``nodes``: an indexed
    child of the model's own class that has a sibling of its class (``layer2.0``, ``layer2.1``) or is
    called more than once (ALBERT's one shared layer, TorchDynamo's ``id@k`` key for the k-th call).
    A lone indexed module inside a block (torchvision's squeeze-excitation at ``block.2``) is part
    of that block, not one of its own.

    NOTE [A module called in a loop]: a module of any class (``nn.LSTMCell``, a shared ``Linear``
    or MLP) that the step calls more than once is a block too, one per call (``cell``, ``cell#2``:
    :func:`remat.trace.naming.merge_by_name`), so that a recurrent loop is cut between its time
    steps; but only a call that reads parameters (dropout and activations that a layer calls
    several times stay where they are) and lies in no call of another block (a module called
    again inside a block is part of that block's call), taking the outermost such call."""
    nodes = list(nodes)
    classes: dict[str, object] = {}
    called_again: set[str] = set()
    for node in nodes:
        for key, path, cls in _module_calls(node):
            if _block_class(path, cls):
                classes[path] = cls
                if "@" in key:
                    called_again.add(path)
    siblings: dict[tuple[str, object], int] = {}
    for path, cls in classes.items():
        key = (path.rpartition(".")[0], cls)
        siblings[key] = siblings.get(key, 0) + 1
    blocks = {
        path for path, cls in classes.items() if path in called_again or siblings[path.rpartition(".")[0], cls] > 1
    }
    weighted = _weighted_calls(nodes)
    again: set[str] = set()  # called again, reads parameters, in no block's call
    for node in nodes:
        for key, path, _ in _module_calls(node):
            if path in blocks:
                break
            if path and "@" in key and path in weighted:
                again.add(path)
    looped: set[str] = set()  # the outermost of those
    for node in nodes:
        looped.update(next(([path] for _, path, _ in _module_calls(node) if path in again), []))
    return frozenset(blocks | looped)


def block_calls(node: fx.Node, blocks: frozenset[str]) -> tuple[tuple[str, str], ...]:
    """The calls of ``blocks`` (:func:`repeated_blocks`) that made ``node``, outermost first, each
    as ``(call key, path)``: the key tells two calls of one block apart."""
    return tuple((key, path) for key, path, _ in _module_calls(node) if path in blocks)


__all__ = [
    "aliases",
    "block_calls",
    "repeated_blocks",
    "CONTEXT_FUNCTIONS",
    "INPLACE_OPERATORS",
    "RANDOM_WORDS",
    "VIEW_NAMES",
    "example_value",
    "is_context",
    "is_heavy",
    "is_random",
    "is_view",
    "module_path",
    "mutates",
    "node_name",
    "uses_batchnorm",
]
