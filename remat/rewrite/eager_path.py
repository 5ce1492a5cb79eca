"""The trace takes the path eager runs where a model asks whether it is being compiled (docs/models.md).

NOTE [The eager path, traced]
Model code may branch on ``torch.compiler.is_compiling()`` (transformers'
``is_torchdynamo_compiling()`` calls it; ``torch._dynamo.is_compiling()`` and
``torch._utils.is_compiling()`` are the older names): Hugging Face's Mamba runs an
``associative_scan`` there instead of its sequential loop. TorchDynamo answers ``True`` as a
constant while it traces (its handler of these "tracing state functions"), so the traced graph
would hold the compiled path: another program than the eager model, and one whose higher-order
ops fail when a stage runs them eagerly ("your tensor may have escaped from inside a function
being vmapped"). remat runs its stages eagerly, so the trace must see what eager sees: while
:func:`eager_answers` is open, these calls answer ``False`` (eager's answer) where the model's own
code asks: in the files that define the classes of the model's modules (and its loss), the
frame judged being the one that called the query (a wrapper whose name says "compiling", like
transformers' ``is_torchdynamo_compiling``, is looked through). Library utility code keeps
dynamo's answer, as torch's own code does: there the compiled path is how the library makes
itself traceable with the same result (transformers' ``compile_compatible_method_lru_cache``
skips its ``lru_cache``, which dynamo cannot trace: answering ``False`` there broke T5's trace),
and the proof checks the result against the eager model either way. ``is_exporting()`` is left
alone (dynamo reads its flag, False outside ``torch.export``, as eager does).
"""

from __future__ import annotations

import contextlib
import inspect
import os
from collections.abc import Callable, Iterator
from typing import Any

import torch

_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep


def _compiling_functions() -> list[Callable[[], bool]]:
    """Every name a model may call to ask "am I being compiled?" (the ones present in this torch)."""
    candidates = [
        getattr(torch.compiler, "is_compiling", None),
        getattr(torch.compiler, "is_dynamo_compiling", None),
        getattr(torch._utils, "is_compiling", None),
        getattr(getattr(torch._dynamo, "external_utils", None), "is_compiling", None),
    ]
    return [f for f in dict.fromkeys(candidates) if f is not None]


def _handlers() -> dict[Callable[..., Any], Callable[..., Any]] | None:
    """Dynamo's table of special handlers for in-graph torch functions (None: not in this torch)."""
    try:
        from torch._dynamo.variables.torch import TorchInGraphFunctionVariable
    except ImportError:
        return None
    get = getattr(TorchInGraphFunctionVariable, "_get_handlers", None)
    return get() if callable(get) else None


def in_torch(filename: str) -> bool:
    """Whether a frame's code file is part of torch itself."""
    return os.path.abspath(filename).startswith(_TORCH_DIR)


def model_files(*owners: Any) -> frozenset[str]:
    """The source files (absolute) of the classes of every module of ``owners`` and of the
    functions among them (a loss), torch's own left out: where "the model's own code" lives."""
    files = set()
    for owner in owners:
        if owner is None:
            continue
        things = [type(m) for m in owner.modules()] if isinstance(owner, torch.nn.Module) else [owner]
        for thing in things:
            try:
                path = inspect.getsourcefile(thing)
            except TypeError:  # a builtin
                continue
            if path is not None and not in_torch(path):
                files.add(os.path.abspath(path))
    return frozenset(files)


def _asker(tx: Any) -> str | None:
    """The file of the frame that asked, looking through query wrappers (``...compiling...``)."""
    while tx is not None and "compiling" in getattr(getattr(tx, "f_code", None), "co_name", ""):
        tx = getattr(tx, "parent", None)
    code = getattr(tx, "f_code", None)
    return None if code is None else os.path.abspath(code.co_filename)


@contextlib.contextmanager
def eager_answers(files: frozenset[str]) -> Iterator[bool]:
    """For its duration, dynamo traces ``is_compiling()`` (and the like) asked by code of
    ``files`` (:func:`model_files`) as ``False`` (NOTE [The eager path, traced]). Yields whether
    it could (False: this torch has no such handler table; the trace then answers as dynamo does)."""
    handlers = _handlers()
    functions = [f for f in _compiling_functions() if handlers is not None and f in handlers]
    if handlers is None or not functions:
        yield False
        return
    from torch._dynamo.variables import ConstantVariable

    originals = {f: handlers[f] for f in functions}

    def answer(self: Any, tx: Any, *args: Any, **kwargs: Any) -> Any:
        if args or kwargs or _asker(tx) not in files:
            return originals[self.value](self, tx, *args, **kwargs)
        return ConstantVariable.create(False)

    for f in functions:
        handlers[f] = answer
    try:
        yield True
    finally:
        handlers.update(originals)


__all__ = ["eager_answers", "in_torch", "model_files"]
