"""A stage boundary: one tensor, or a tuple of the tensors that cross it (docs/model.md, "Chains";
docs/models.md, "How a model is cut").

Most boundaries are one tensor. Where a model hands several tensors from block to block (T5's
position bias, BART's encoder output read by every decoder layer, Mixtral's router logits), a cut
at every block carries them together: stage i's output a_{i+1} is then a tuple, and the next stage
takes it as its input. The chain model counts a boundary by its bytes (``output_size``), so a
tuple is the sum of its tensors' storages, each storage once. Every float tensor of a tuple that
requires grad gets its own gradient; one that cannot carry a gradient (an int mask) carries none.

The helpers below let the profilers and the replay treat both kinds alike. A single tensor stays a
tensor (never a 1-tuple), so a chain of single-tensor boundaries runs exactly as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

import torch

from remat.measure.memory import allocated_bytes, allocation_size, storage_key

MAX_TENSORS = 8
"""The most tensors a cut may hand on (a bound that keeps a boundary one unit of the chain model:
Mixtral with router logits hands on its hidden state and one router-logit tensor per layer so far)."""

Boundary = torch.Tensor | tuple[torch.Tensor, ...]


def tensors(a: Any) -> tuple[Any, ...]:
    """The tensors of boundary ``a`` (or the gradients of one: None where a tensor has none)."""
    return a if isinstance(a, tuple) else (a,)


def like(a: Boundary, items: Sequence[Any]) -> Any:
    """``items`` shaped as ``a``: a tuple for a tuple boundary, the one item otherwise."""
    return tuple(items) if isinstance(a, tuple) else items[0]


def each(fn: Callable[[torch.Tensor], Any], a: Boundary) -> Any:
    """``fn`` applied to every tensor of ``a``, shaped as ``a``."""
    return like(a, [fn(t) for t in tensors(a)])


def is_boundary(value: Any) -> bool:
    """Whether ``value`` is what a chain stage may hand on: a tensor or a non-empty tuple of tensors."""
    if isinstance(value, tuple):
        return 0 < len(value) and all(isinstance(t, torch.Tensor) for t in value)
    return isinstance(value, torch.Tensor)


def detached(a: Boundary) -> Boundary:
    return each(torch.Tensor.detach, a)


def can_have_grad(t: torch.Tensor) -> bool:
    """Whether ``t``'s dtype can carry a gradient (floating or complex; token ids and masks cannot)."""
    return t.is_floating_point() or t.is_complex()


def storage_keys(a: Boundary) -> list:
    """The storage identity of every tensor of ``a`` (:func:`~remat.measure.memory.storage_key`)."""
    return [storage_key(t) for t in tensors(a)]


def boundary_bytes(
    a: Boundary,
    device: str | torch.device | None = None,
    only: Callable | None = None,
    outside: AbstractSet = frozenset(),
) -> int:
    """Bytes the storages of ``a`` occupy, each storage once (views and repeats share one);
    ``only``: count only the tensors it accepts (a gradient exists only for some of them).

    ``outside``: storage keys (:func:`~remat.measure.memory.storage_key`) the step does not
    allocate (the call's inputs, its side values, parameters, buffers). A tensor of ``a`` on one
    of them (``x[t]`` of an input sequence) holds no new bytes; it counts as the gradient the next
    stage's leaf of it gets: its own elements' bytes when it can carry one, else nothing
    (docs/model.md, "Every byte counted once")."""
    seen: dict[Any, int] = {}
    for t in tensors(a):
        if only is not None and not only(t):
            continue
        key = storage_key(t)
        if key is not None and key in outside:
            own = t.numel() * t.element_size() if can_have_grad(t) else 0
            seen.setdefault(("own", id(t)), allocation_size(own, t.device if device is None else device))
        else:
            seen.setdefault(key or id(t), allocated_bytes(t, device))
    return sum(seen.values())


def ones_like(a: Boundary) -> Any:
    """An output gradient of ones for every tensor of ``a`` that requires grad, None for the others."""
    return each(lambda t: torch.ones_like(t) if t.requires_grad else None, a)


def requires_grad(a: Boundary) -> bool:
    """Whether any tensor of ``a`` requires grad (a stage's backward has something to run)."""
    return any(t.requires_grad for t in tensors(a))


def backward(out: Boundary, grad: Any, inputs: Sequence[torch.Tensor] | None = None) -> None:
    """``torch.autograd.backward`` of the tensors of ``out`` that require grad and have a gradient in
    ``grad`` (shaped as ``out``); nothing when none has."""
    pairs = [(o, g) for o, g in zip(tensors(out), tensors(grad), strict=True) if o.requires_grad and g is not None]
    if not pairs:
        return
    outs, grads = zip(*pairs, strict=True)
    if inputs is None:
        torch.autograd.backward(list(outs), list(grads))
    else:
        torch.autograd.backward(list(outs), list(grads), inputs=list(inputs))


__all__ = [
    "MAX_TENSORS",
    "Boundary",
    "backward",
    "boundary_bytes",
    "can_have_grad",
    "detached",
    "each",
    "is_boundary",
    "like",
    "ones_like",
    "requires_grad",
    "storage_keys",
    "tensors",
]
