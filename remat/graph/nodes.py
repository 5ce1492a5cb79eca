"""Which fx nodes of a traced model are heavy (anchor a piece), draw random numbers, or update
BatchNorm statistics: the node classification of graph profiling (torch.fx, docs/model.md, "Graphs").

Pure functions of the traced module and one node; :mod:`remat.graph.pieces` cuts the graph with
them. (:mod:`remat.trace.cut` classifies TorchDynamo nodes for chains with its own rules.)
"""

from __future__ import annotations

import operator

import torch
import torch.fx as fx
import torch.nn.functional as F
from torch import nn

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


def is_heavy(gm: fx.GraphModule, node: fx.Node) -> bool:
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


def is_random(gm: fx.GraphModule, node: fx.Node) -> bool:
    """Whether ``node`` draws random numbers (dropout, RReLU, attention or RNN dropout, rand*):
    the replay then saves and restores the RNG around its piece."""
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


def uses_batchnorm(gm: fx.GraphModule, node: fx.Node) -> bool:
    """Whether ``node`` runs BatchNorm (a BatchNorm module inside it, or ``F.batch_norm``), whose
    running statistics a training-mode forward updates."""
    if node.op != "call_module":
        return node.op == "call_function" and node.target is F.batch_norm
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in gm.get_submodule(node.target).modules())


__all__ = ["is_heavy", "is_random", "uses_batchnorm"]
