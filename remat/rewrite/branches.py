"""Data-dependent branches of library code, pinned in the trace to the branch eager took (docs/models.md).

Hugging Face's mask code reads the attention mask's *values* to choose a code path: with no
padded token, eager skips the mask and calls SDPA with ``is_causal=True`` (and, for grouped-query
attention, ``enable_gqa=True``); with padding it builds the mask and repeats the k/v heads. Under
TorchDynamo the values are unknown, so transformers always takes the masked path: the traced
program is then another function than the eager model (for GQA, gradients differ in the last bits).

So, while a model that uses ``transformers`` is traced, the functions that make these decisions
(:data:`PINNED`) return what they returned in one eager forward on the example, and the graph
gets a guard (:func:`same_branch`) that re-decides on each call's real tensors: a call that would
take the other branch in eager is refused in one line instead of running the example's branch.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from remat.schedules import RematError

MODULE = "transformers.masking_utils"
# name -> what its result says: "bool" (skip the mask or not), "none" (None = no packed sequences)
PINNED = {"_ignore_causal_mask_sdpa": "bool", "_ignore_bidirectional_mask_sdpa": "bool",
          "find_packed_sequence_indices": "none"}  # fmt: skip


class OtherBranchError(RematError):
    """A call takes another branch of the model's code than the example its cut was traced on
    (:func:`same_branch`); ``remat.checkpoint``'s model then cuts that call's branch too."""


def _verdict(name: str, result: Any) -> bool:
    return result is None if PINNED[name] == "none" else bool(result)


def _static(rest: tuple) -> bool:
    return all(v is None or isinstance(v, (int, torch.SymInt)) for v in rest)


@torch.library.custom_op("remat::same_branch", mutates_args=())
def same_branch(
    tensor: torch.Tensor, function: str, static: list[int], none_at: list[int], verdict: bool
) -> torch.Tensor:
    """Guard: ``function(tensor, *static)`` (``None`` at ``none_at``) decides ``verdict`` as it did on the
    example; raises a one-line :class:`RematError` otherwise. Returns a true scalar (kept by an assert)."""
    if function not in PINNED:
        raise RematError(f"remat::same_branch: {function} is not a pinned branch")
    original = inspect.unwrap(getattr(sys.modules[MODULE], function))
    args = [None if i in none_at else v for i, v in enumerate(static)]
    got = _verdict(function, original(tensor, *args))
    if got != verdict:
        raise OtherBranchError(
            f"inputs: this call takes another branch of the model's code than the example it was cut and "
            f"proven on (transformers' {function} decides {got} here, {verdict} for the example: padded tokens "
            "where the example had none, or none where it had some); cut it on an example like this call"
        )
    return torch.ones((), dtype=torch.bool, device=tensor.device)


@same_branch.register_fake
def _same_branch_fake(tensor: torch.Tensor, function: str, static: list[int], none_at: list[int], verdict: bool):
    return torch.empty((), dtype=torch.bool, device=tensor.device)


def _uses_transformers(model: nn.Module) -> bool:
    return MODULE in sys.modules and any(type(m).__module__.startswith("transformers.") for m in model.modules())


def _record(module: Any, originals: dict[str, Callable], run: Callable[[], Any]) -> dict[tuple, bool | None]:
    """(function, *static args) -> the verdict of each call in one eager ``run()`` (None if two calls
    with the same static arguments decided differently: that branch is left to the trace)."""
    table: dict[tuple, bool | None] = {}

    def recorder(name: str, original: Callable) -> Callable:
        def record(*args: Any) -> Any:
            result = original(*args)
            if args and _static(args[1:]):
                key, verdict = (name, *args[1:]), _verdict(name, result)
                table[key] = verdict if table.get(key, verdict) == verdict else None
            return result

        return record

    try:
        for name, original in originals.items():
            setattr(module, name, recorder(name, original))
        with torch.no_grad():
            run()
    finally:
        for name, original in originals.items():
            setattr(module, name, original)
    for name in originals:
        verdicts = {v for key, v in table.items() if key[0] == name}
        if len(verdicts) == 1 and None not in verdicts:
            table[(name,)] = verdicts.pop()
    return table


def _replayer(name: str, original: Callable, table: dict[tuple, bool | None]) -> Callable:
    def replay(tensor: Any = None, *rest: Any) -> Any:
        # one verdict for every call of ``name``: no look at the sizes, which a trace with dynamic
        # dimensions would specialise by the lookup; else the verdict of these static arguments
        if (name,) in table:
            verdict = table[(name,)]
        else:
            verdict = table.get((name, *rest)) if _static(rest) else None
        if verdict is None:
            return original(tensor, *rest)
        if isinstance(tensor, torch.Tensor):
            # a symbolic size stays symbolic: the guard re-decides with each call's own sizes
            static = [0 if v is None else v for v in rest]
            none_at = [i for i, v in enumerate(rest) if v is None]
            torch._assert_async(torch.ops.remat.same_branch(tensor, name, static, none_at, verdict))
        if PINNED[name] == "none":
            return None if verdict else original(tensor, *rest)
        return verdict

    replay.__wrapped__ = original  # what same_branch calls on real tensors
    return replay


@contextlib.contextmanager
def pinned(model: nn.Module, run: Callable[[], Any]) -> Iterator[None]:
    """Inside: transformers' mask decisions return what they did in one eager ``run()`` (no grad; the
    caller restores the model's state), each with a :func:`same_branch` guard in the traced graph."""
    if not _uses_transformers(model):
        yield
        return
    module = sys.modules[MODULE]
    originals = {name: getattr(module, name) for name in PINNED if hasattr(module, name)}
    table = _record(module, originals, run)
    try:
        for name, original in originals.items():
            setattr(module, name, _replayer(name, original, table))
        yield
    finally:
        for name, original in originals.items():
            setattr(module, name, original)


def pinned_verdicts(gm: torch.fx.GraphModule) -> tuple[tuple[str, bool], ...]:
    """The branch a traced graph is pinned to: each :func:`same_branch` guard's (function, verdict),
    in graph order (empty for a model without pinned branches). The static arguments (sizes) are
    left out, so that calls of other lengths taking the same branch compare equal."""
    found = []
    for node in gm.graph.nodes:
        if node.op == "call_function" and "same_branch" in str(node.target):
            found.append((str(node.args[1]), bool(node.args[4])))
    return tuple(found)


__all__ = ["PINNED", "OtherBranchError", "pinned", "pinned_verdicts", "same_branch"]
