"""The per-stage measurement that the chain profiler, the options profiler and the batch profiles
share: the zeroed gradients a measurement starts from, the storages that existed before a
forward, the backward of a measured step, and one metered recording forward with its backward.
Sizes in bytes."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from remat.measure.allocator import AllocatorMeter
from remat.measure.memory import allocated_bytes, storage_key
from remat.runtime.core import outside_autocast
from remat.runtime.release import released_backward
from remat.schedules.chain_profile import lowest_backward_overhead
from remat.trace import boundary
from remat.trace.boundary import Boundary, boundary_bytes, ones_like, tensors


def outside_storages(chain: nn.Module, x: Boundary) -> frozenset:
    """Storage keys (:func:`~remat.measure.memory.storage_key`) of every tensor a step of
    ``chain`` on chain input ``x`` does not allocate: ``x`` (a_0, the caller's), the chain's
    parameters and buffers, and the tensors of the bound call a chain names through
    ``remat_outside_tensors()`` (a traced chain: the call's other inputs and its side values).

    NOTE [Every byte counted once]: the chain model counts a_0 as ``input_size``, the side values
    as the call's ``side_bytes``, parameters and buffers not at all; a stage that saves one of
    these storages, or a view of one (``x[t]`` of a sequence a loop steps through, a second
    input multiplied in, ``self.pe[:, :T]``), or hands one on, holds no new bytes for it. Only
    the gradient the next stage's leaf of a handed-on one gets is new (its elements' bytes:
    :func:`~remat.trace.boundary.boundary_bytes`; docs/model.md, "Every byte counted once")."""
    named = getattr(chain, "remat_outside_tensors", None)
    extra = () if named is None else named()
    return frozenset(
        key for t in (*tensors(x), *chain.parameters(), *chain.buffers(), *extra) if (key := storage_key(t)) is not None
    )


def existing_storages(
    stage: nn.Module, x: Boundary, outside: frozenset = frozenset(), input_bytes: int | None = None
) -> tuple[set, int]:
    """(the storages a forward of ``stage`` does not allocate: its parameters' and buffers', its
    input ``x``'s and ``outside`` (:func:`outside_storages`); the bytes of ``x`` the chain model
    counts, a_i, which ``B i`` counts for its gradient g_i: ``input_bytes`` when given (the
    previous stage's ``output_size``, or a_0's ``input_size``), else ``x``'s storages, each once,
    those in ``outside`` as :func:`~remat.trace.boundary.boundary_bytes` counts them)."""
    existing = {storage_key(t) for t in (*stage.parameters(), *stage.buffers(), *tensors(x))} | outside
    return existing, boundary_bytes(x, outside=outside) if input_bytes is None else input_bytes


Recorded = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
"""A recording forward's (input leaf, output, output gradient): what :func:`run_backward` takes."""


def run_backward(state: Recorded) -> None:
    """The backward of one measured step (a no-op when the output needs no gradient)."""
    _, out, grad = state
    with outside_autocast():  # as the replay's backward runs (NOTE [Autocast's weight-cast cache])
        boundary.backward(out, grad)


def recorded(forward_record: Callable[[], tuple[torch.Tensor, torch.Tensor]]) -> Callable[[], Recorded]:
    """A setup for timing :func:`run_backward`: ``forward_record()``'s (leaf, output) and an
    output gradient of ones."""

    def setup() -> Recorded:
        leaf, out = forward_record()
        return leaf, out, ones_like(out)

    return setup


def record_and_backward_memory(
    forward_record: Callable[[], tuple[torch.Tensor, torch.Tensor]],
    pre_existing: set,
    activation_bytes: int,
    device: torch.device,
    last: bool = False,
) -> tuple[int, int, int]:
    """(saved_size, forward_overhead, backward_overhead) in bytes, from one metered recording
    forward (saved tensors seen by hooks) and its backward, run as the replay runs ``B i``.
    ``pre_existing``: storage keys (:func:`~remat.measure.memory.storage_key`) not to count, from
    :func:`existing_storages`, as is ``activation_bytes`` (a_i). ``last``: the chain's last stage,
    whose output and output gradient the replay cannot release early (the caller holds the one,
    autograd the other)."""
    saved: dict = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        key = storage_key(t)
        if key is not None and key not in pre_existing and t.device.type == device.type:
            saved[key] = allocated_bytes(t, device)
        return t

    with AllocatorMeter(device) as meter:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            leaf, rec_out = forward_record()
        # the output, but for what is a_i's, handed on unchanged (Stage.handed_on); no loop
        # variable may hold the output past here (it would keep it through the backward)
        saved.update(
            (storage_key(t), allocated_bytes(t, device)) for t in tensors(rec_out) if storage_key(t) not in pre_existing
        )
        meter.mark("output gradient")
        grad_out = ones_like(rec_out)
        grad_bytes = boundary_bytes(rec_out, device, only=lambda t: t.requires_grad)  # g[i+1]
        meter.mark("backward")
        # NOTE [Early release at a stage's backward]: the replay's B i, references and all
        pending = [(rec_out, grad_out)]
        del rec_out, grad_out
        with outside_autocast():  # as the replay's backward runs (NOTE [Autocast's weight-cast cache])
            released_backward(pending, release=not last)
        del leaf
    record, _, back = meter.phases
    # what stays allocated after the recording forward is what F_all holds (abar); the allocator
    # may see more than the saved tensors (buffers a kernel keeps for its backward), never less.
    saved_size = max(sum(saved.values()), record.end)
    # B i's peak in the chain model is before + a_i + backward_overhead (g_i counted at a_i's
    # size), so the overhead is the backward's rise above what it started with, less a_i. It is
    # below 0 when the backward frees part of abar[i+1] and g[i+1] before its peak (early
    # release), or when g_i is smaller than a_i or absent (token ids, an input that needs no
    # gradient); never below freeing all of abar[i+1] and g[i+1] (docs/model.md, "Chains").
    rise = back.peak - back.start - activation_bytes
    return saved_size, max(0, record.peak - record.end), max(rise, lowest_backward_overhead(saved_size, grad_bytes))


__all__ = [
    "Recorded",
    "existing_storages",
    "outside_storages",
    "record_and_backward_memory",
    "recorded",
    "run_backward",
]
