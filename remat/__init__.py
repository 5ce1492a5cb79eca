"""remat: optimal activation checkpointing (rematerialization) under a memory budget.

The names below (``remat.__all__``, what ``dir(remat)`` lists) are remat's API; every submodule
path is internal and may change between versions (docs/architecture.md). Two doors take a model
and a budget: :func:`checkpoint` (returns a :class:`RematModel`) and :func:`compile` (returns a
:class:`RematCompiled`). A hand-built loop uses :func:`profile_chain`, :func:`solve` and
:class:`RematChain`; :func:`simulate` and the file functions work on profiles and schedules.

NOTE [import remat takes no signal]: each name is imported on first use, so ``import remat``
loads no torch and changes nothing in the process: no signal handler (only the ``remat`` command
takes Ctrl-C, remat/cli/__init__.py), no thread, no global setting.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"

# Each public name -> the internal module that defines it. The names stay; the paths may move.
_HOMES = {
    "AllocatorMeter": "remat.measure.allocator",
    "ChainProfile": "remat.schedules",
    "RematChain": "remat.replay.chain",
    "RematCompiled": "remat.joint.compile",
    "RematError": "remat.schedules",
    "RematModel": "remat.api",
    "Schedule": "remat.schedules",
    "clear_caches": "remat.cache",
    "import_torchvision": "remat.models.compat",
    "load_profile": "remat.schedules",
    "load_schedule": "remat.schedules",
    "profile_chain": "remat.profile.chain",
    "save_profile": "remat.schedules",
    "save_schedule": "remat.schedules",
    "simulate": "remat.schedules",
    "solve": "remat.solver",
}

__all__ = [
    "AllocatorMeter",
    "ChainProfile",
    "RematChain",
    "RematCompiled",
    "RematError",
    "RematModel",
    "Schedule",
    "__version__",
    "checkpoint",
    "clear_caches",
    "compile",
    "import_torchvision",
    "load_profile",
    "load_schedule",
    "profile_chain",
    "save_profile",
    "save_schedule",
    "simulate",
    "solve",
]

if TYPE_CHECKING:  # what type checkers and editors see; at run time __getattr__ imports each name
    from remat.api import RematModel
    from remat.cache import clear_caches
    from remat.joint.compile import RematCompiled
    from remat.measure.allocator import AllocatorMeter
    from remat.models.compat import import_torchvision
    from remat.profile.chain import profile_chain
    from remat.replay.chain import RematChain
    from remat.schedules import (
        ChainProfile,
        RematError,
        Schedule,
        load_profile,
        load_schedule,
        save_profile,
        save_schedule,
        simulate,
    )
    from remat.solver import solve


def checkpoint(*args: Any, **kwargs: Any) -> RematModel:
    """``remat.checkpoint(model, example_inputs, budget=...)``: the model trained under ``budget``
    by replaying an optimal schedule (a :class:`RematModel`); see :func:`remat.api.checkpoint`.

    A function here, not the lazily imported one, so that reading ``remat.checkpoint`` imports no
    torch; the call imports it."""
    from remat.api import checkpoint as _checkpoint

    return _checkpoint(*args, **kwargs)


def compile(*args: Any, **kwargs: Any) -> RematCompiled:  # noqa: A001 - the public name is remat.compile
    """``remat.compile(model, budget=...)``: ``torch.compile`` with remat's partitioner under
    ``budget`` (a :class:`RematCompiled`); see :func:`remat.joint.compile.compile`.

    A function here, as :func:`checkpoint` is, so that reading ``remat.compile`` imports no torch."""
    from remat.joint.compile import compile as _compile

    return _compile(*args, **kwargs)


def __getattr__(name: str) -> Any:
    """A public name, imported from its home on first use (PEP 562)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'remat' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)


def __dir__() -> list[str]:
    return list(__all__)
