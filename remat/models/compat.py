"""Import torchvision (and what imports it: timm, transformers) next to a CPU-only torch build.

The torchvision wheels that install next to ``torch==2.13.0+cpu`` are linked against a CUDA torch,
so their compiled ops (``torchvision._C``) do not load. ``import torchvision`` then fails while it
registers fake (meta) kernels for ``torchvision::nms``/``qnms``: "operator torchvision::nms does not
exist". The model definitions are pure Python and do not need those ops. When (and only when) the
plain import fails on exactly that error, :func:`import_torchvision` defines the two operators'
schemas (no kernels: calling them still fails, loudly) and imports again.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

import torch

# kept alive for the process: dropping the Library object would undefine the schemas again
_SCHEMAS: list[torch.library.Library] = []
_MISSING = ("nms", "qnms")


def _define_missing_ops() -> None:
    if _SCHEMAS:
        return
    library = torch.library.Library("torchvision", "FRAGMENT")
    for name in _MISSING:
        library.define(f"{name}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _SCHEMAS.append(library)


def import_torchvision() -> ModuleType:
    """``import torchvision``, defining the missing operator schemas first if the ops failed to load."""
    try:
        return importlib.import_module("torchvision")
    except RuntimeError as error:
        if "torchvision::" not in str(error) or "does not exist" not in str(error):
            raise
    for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[name]  # the failed import left half-initialised modules behind
    _define_missing_ops()
    return importlib.import_module("torchvision")


__all__ = ["import_torchvision"]
