"""Turn a model into a chain of stages (stage i maps a_i to a_{i+1}; a stage is any module).

Accepted shapes, tried in this order by :func:`as_chain`:

* a :class:`Chain` (returned as is);
* an object with a ``remat_stages()`` method returning ``[(name, module), ...]`` (the hook for
  user models of any other shape);
* ``nn.Sequential`` (each child is a stage), ``nn.ModuleList`` or a list/tuple of modules; a child
  working in place (``ReLU(inplace=True)``) or only reshaping (``Flatten``, ``Unflatten``,
  ``Identity``) joins the stage before it (the first such children, the stage after them);
* a ResNet-style net (torchvision layout: ``conv1 bn1 relu maxpool layer1..layer4 avgpool fc``,
  or timm's ``act1`` for ``relu``),
  cut at its residual blocks: ``stem``, every block of every ``layerK``, ``head``;
* a transformer-style net with a ``blocks`` (or ``layers``) ``nn.ModuleList`` and optional
  ``embed`` before it and ``norm``/``head`` after it, cut at its blocks; only when these are all
  its children (a ``stem`` or any other layer would be left out of the stages).

The name-based shapes are hints only: the CLI and :func:`remat.checkpoint` run a chain only
after :func:`remat.trace.proof.prove_chain` showed it equal to the model (docs/models.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from remat.schedules import RematError
from remat.trace.boundary import is_boundary


class Chain(nn.Module):
    """Stages run one after the other; ``forward`` is the plain (no remat) model."""

    def __init__(self, stages: Sequence[tuple[str, nn.Module]]) -> None:
        super().__init__()
        if len(stages) == 0:
            raise RematError("model: a chain needs at least one stage")
        self.names = [str(name) for name, _ in stages]
        self.stages = nn.ModuleList([module for _, module in stages])

    def __len__(self) -> int:
        return len(self.stages)

    @property
    def compiled_label(self) -> str | None:
        """How the stages are compiled (a profile's ``compiled`` metadata); None: eager."""
        return None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for name, stage in zip(self.names, self.stages, strict=True):
            x = stage(x)
            if not is_boundary(x):  # the next stage would fail on it, far from the cause
                raise RematError(
                    f"stage '{name}': returns a {type(x).__name__}; a chain stage must return a tensor"
                    " (or a tuple of tensors, remat.trace.boundary)"
                )
        return x


_RESNET_STEM = ("conv1", "bn1", "relu", "act1", "maxpool")  # act1: timm's name for the stem ReLU


_VIEW_MODULES: tuple[type[nn.Module], ...] = (nn.Flatten, nn.Unflatten, nn.Identity)
"""Modules whose output is their input or a view of it (``nn.Flatten`` of a contiguous tensor)."""


def _joins_a_neighbour(child: nn.Module) -> bool:
    """Whether ``child`` cannot be a stage of its own in a list of stages: it works in place
    (``ReLU(inplace=True)``: it would modify its input, a leaf that requires grad in a recording
    forward, which autograd refuses) or only reshapes (:data:`_VIEW_MODULES`: its output would be a
    view of its input, which the profiler refuses, as the cut of a trace never ends a stage on a
    view, remat.rewrite.nodes.VIEW_NAMES)."""
    return getattr(child, "inplace", False) is True or isinstance(child, _VIEW_MODULES)


def _grouped_stages(children: Sequence[tuple[str, nn.Module]]) -> list[tuple[str, nn.Module]]:
    """One stage per child, except that a child that cannot be a stage of its own
    (:func:`_joins_a_neighbour`) joins the stage before it, or, at the start, the stage after it.
    Merged stages are named ``first-last`` (``8-9`` for an ``AdaptiveAvgPool2d`` and the
    ``Flatten`` after it) and run their children in order (an ``nn.Sequential`` of them)."""
    groups: list[list[tuple[str, nn.Module]]] = []
    leading: list[tuple[str, nn.Module]] = []  # view/in-place children before the first real stage
    for name, child in children:
        if _joins_a_neighbour(child):
            (groups[-1] if groups else leading).append((name, child))
        else:
            groups.append([*leading, (name, child)])
            leading = []
    if leading:  # only such children: one stage (the profiler refuses it if it is a view)
        groups.append(leading)
    stages = []
    for group in groups:
        if len(group) == 1:
            stages.append(group[0])
        else:
            stages.append((f"{group[0][0]}-{group[-1][0]}", nn.Sequential(*[m for _, m in group])))
    return stages


def _resnet_stages(model: nn.Module) -> list[tuple[str, nn.Module]] | None:
    if not all(hasattr(model, name) for name in ("conv1", "bn1", "layer1", "fc")):
        return None
    stem = nn.Sequential(*[getattr(model, name) for name in _RESNET_STEM if getattr(model, name, None) is not None])
    stages: list[tuple[str, nn.Module]] = [("stem", stem)]
    for layer_name in ("layer1", "layer2", "layer3", "layer4"):
        layer = getattr(model, layer_name, None)
        if layer is None:
            continue
        for index, block in enumerate(layer):
            stages.append((f"{layer_name}.{index}", block))
    pool = getattr(model, "avgpool", None) or nn.AdaptiveAvgPool2d(1)
    stages.append(("head", nn.Sequential(pool, nn.Flatten(1), model.fc)))
    return stages


def _transformer_stages(model: nn.Module) -> list[tuple[str, nn.Module]] | None:
    blocks_name = next((n for n in ("blocks", "layers") if isinstance(getattr(model, n, None), nn.ModuleList)), None)
    if blocks_name is None:
        return None
    if any(name not in ("embed", blocks_name, "norm", "head") for name, _ in model.named_children()):
        return None  # a layer the hint does not know (a ``stem``): the stages would leave it out
    stages: list[tuple[str, nn.Module]] = []
    embed = getattr(model, "embed", None)
    if isinstance(embed, nn.Module):
        stages.append(("embed", embed))
    for index, block in enumerate(getattr(model, blocks_name)):
        stages.append((f"{blocks_name}.{index}", block))
    tail = [getattr(model, n) for n in ("norm", "head") if isinstance(getattr(model, n, None), nn.Module)]
    if tail:
        stages.append(("head", tail[0] if len(tail) == 1 else nn.Sequential(*tail)))
    return stages


def as_chain(model: nn.Module | Sequence[nn.Module] | Chain) -> Chain:
    """The chain of stages of ``model`` (see the module docstring for the shapes understood).

    The stages are the model's own modules (shared, not copied): training the chain trains the model.
    """
    if isinstance(model, Chain):
        return model
    if hasattr(model, "remat_stages"):
        return Chain(list(model.remat_stages()))
    if isinstance(model, nn.Sequential):
        return Chain(_grouped_stages(list(model.named_children())))
    if isinstance(model, (nn.ModuleList, list, tuple)):
        modules = list(model)
        for index, module in enumerate(modules):
            if not isinstance(module, nn.Module):
                raise RematError(f"model: item {index} of the stage list is a {type(module).__name__}, not a module")
        return Chain(_grouped_stages([(str(i), m) for i, m in enumerate(modules)]))
    if isinstance(model, nn.Module):
        stages = _resnet_stages(model) or _transformer_stages(model)
        if stages:
            return Chain(stages)
        raise RematError(
            f"model: cannot cut a {type(model).__name__} into a chain of stages; pass an nn.Sequential, "
            "a list of modules, or give the model a remat_stages() method returning [(name, module), ...]"
        )
    raise RematError(f"model: expected a torch module or a list of modules, got {type(model).__name__}")


__all__ = ["Chain", "as_chain"]
