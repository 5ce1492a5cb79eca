"""A step's state besides its results, in one owner: the random generators of the CPU and of
every accelerator device (what :func:`torch.random.fork_rng` covers), a module's buffers and its
parameters' gradients, saved and put back.

Every place that runs a step it must leave without a trace (the proof's trial steps, a stage run
twice, the profilers, a compiled call run again, the report's diagnostic step) saves it here:
:class:`StepState` (put back as often as asked, or once as a ``with`` block), :func:`kept_rng`
(the generators alone, for a block: ``fork_rng``) and :func:`kept_buffers` (the buffers alone,
for a block). The replay keeps its own per-piece generator states in :class:`RngState`
(preallocated copies; docs/executor.md, "What a recomputation preserves").
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from remat.measure.memory import untracked
from remat.measure.offload import OffDevice


def rng_devices() -> tuple[torch.device, ...]:
    """Every device of the current accelerator (``torch.accelerator``), whose generators a step may
    draw from, as :func:`torch.random.fork_rng` covers them; none on a CPU-only machine."""
    accelerator = torch.accelerator.current_accelerator()
    if accelerator is None:
        return ()
    return tuple(torch.device(accelerator.type, i) for i in range(torch.accelerator.device_count()))


@contextlib.contextmanager
def kept_rng() -> Iterator[None]:
    """The generators of the CPU and of every accelerator device put back as they were once the
    block ends (:func:`torch.random.fork_rng` over :func:`rng_devices`)."""
    devices = rng_devices()
    kind = devices[0].type if devices else None
    with torch.random.fork_rng(devices=[d.index for d in devices], device_type=kind):
        yield


def _device_module(device: torch.device):
    return getattr(torch, device.type)


@dataclass(frozen=True)
class RngState:
    """The CPU generator's state and that of each accelerator device in ``devices``."""

    cpu: torch.Tensor
    devices: tuple[tuple[torch.device, torch.Tensor], ...]

    @staticmethod
    def current(devices: Sequence[torch.device] | None = None) -> RngState:
        """The states now, of the CPU and ``devices`` (None: every accelerator device)."""
        # not untracked() here: BufferSnapshots.rng decides whether a step's read is counted
        cpu = torch.get_rng_state()
        chosen = rng_devices() if devices is None else devices
        states = tuple((d, _device_module(d).get_rng_state(d.index)) for d in chosen)
        return RngState(cpu, states)

    def copy_into(self, other: RngState | None) -> RngState:
        """These states in ``other``'s tensors (no allocation) when they fit, else in new copies
        made as remat's own state (``untracked()``, like the buffer snapshots)."""
        fits = (
            other is not None
            and other.cpu.shape == self.cpu.shape
            and len(other.devices) == len(self.devices)
            and all(a == c and b.shape == d.shape for (a, b), (c, d) in zip(self.devices, other.devices, strict=True))
        )
        if not fits:
            with untracked():
                return RngState(self.cpu.clone(), tuple((d, t.clone()) for d, t in self.devices))
        other.cpu.copy_(self.cpu)
        for (_, mine), (_, theirs) in zip(self.devices, other.devices, strict=True):
            theirs.copy_(mine)
        return other

    def same_as(self, other: RngState | None) -> bool:
        """Whether ``other`` holds the same generator states (then one copy serves both)."""
        return (
            other is not None
            and torch.equal(self.cpu, other.cpu)
            and len(self.devices) == len(other.devices)
            and all(a == c and torch.equal(b, d) for (a, b), (c, d) in zip(self.devices, other.devices, strict=True))
        )

    def restore(self) -> None:
        torch.set_rng_state(self.cpu)
        for device, state in self.devices:
            _device_module(device).set_rng_state(state, device.index)


@contextlib.contextmanager
def kept_buffers(module: nn.Module) -> Iterator[None]:
    """``module``'s buffers put back as they were once the block ends (copies on their device,
    made where the caller runs: inside a metered step they count as the step's)."""
    with torch.no_grad():
        saved = [(b, b.detach().clone()) for b in module.buffers()]
    try:
        yield
    finally:
        with torch.no_grad():
            for buffer, value in saved:
                buffer.copy_(value)


Grads = Literal["same", "copy", "zeroed"] | None


class StepState:
    """What a step of ``module`` changes besides its results, saved when made: the generators of
    the CPU and of every accelerator device (:func:`rng_devices`), the module's buffers and, with
    ``grads``, its parameters' gradients, either the tensors themselves (``"same"``: for steps
    that give the parameters new gradient tensors) or copies (``"copy"``: for steps that add into
    them in place) or zeroed for a measurement (``"zeroed"``: NOTE [The profile's gradients]).
    ``off_device``: the copies wait off the device (NOTE [The proof's memory] in
    remat/trace/proof.py), and the parameters' gradients are dropped meanwhile: the device holds
    one set of gradients, not two. Copies are remat's own bookkeeping (``untracked()``).

    :meth:`reset` puts the generators and buffers back and clears the gradients (a fresh step),
    as often as asked; :meth:`restore` puts everything back (copied gradients are handed back
    once, unless kept off the device). As a ``with`` block: restored when it ends."""

    def __init__(self, module: nn.Module, grads: Grads = None, off_device: bool = False) -> None:
        place = OffDevice() if off_device else None
        with untracked(), torch.no_grad():
            self.buffers = [(b, _kept(b, place)) for b in module.buffers()]
            if grads == "zeroed":
                away = functools.cache(OffDevice)  # one place for every gradient sent away, made when first needed
                self.grads = [(p, _zeroed_grad(p, away)) for p in module.parameters() if p.requires_grad]
            else:
                self.grads = [(p, _kept_grad(p, grads, place)) for p in module.parameters()] if grads else []
        self.rng = RngState.current()

    def reset(self) -> None:
        """Generators and buffers back, parameters' gradients cleared (``None``) for a fresh step."""
        self._put_back()
        for p, _ in self.grads:
            p.grad = None

    def restore(self) -> None:
        """Generators, buffers and (when kept) the parameters' gradients back as they were."""
        self._put_back()
        with torch.no_grad():
            for p, grad in self.grads:
                p.grad = grad()

    def _put_back(self) -> None:
        with torch.no_grad():
            for b, saved in self.buffers:
                b.copy_(saved())  # one buffer back on the device at a time
        self.rng.restore()

    def __enter__(self) -> StepState:
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()


def _kept(t: torch.Tensor, place: OffDevice | None) -> Callable[[], torch.Tensor]:
    """How to get ``t``'s values back: a copy on its device, or off it (``place``)."""
    if place is None:
        copy = t.detach().clone()
        return lambda: copy
    kept = place.put(t)
    return kept.get


def _kept_grad(p: torch.Tensor, grads: Grads, place: OffDevice | None) -> Callable[[], torch.Tensor | None]:
    """How to give ``p`` its gradient back (see :class:`StepState`)."""
    grad = p.grad
    if grad is None:
        return lambda: None
    if place is not None:
        return _grad_off_device(p, place)
    kept = grad if grads == "same" else grad.detach().clone()
    return lambda: kept


# NOTE [The profile's gradients]: the profile measures with pre-allocated zeroed gradients (the
# condition of a replay after ``zero_grad()``). Parameters, gradients and optimizer state are
# outside the budget, but only one set of gradients: allocating zeroed copies beside the model's
# own held two (on the residual MLP of 200 blocks of benchmarks/does_not_fit.py, 101 MiB of the
# profile phase's +145 MiB of host RSS, allocated inside ``untracked()``, so no meter saw them,
# and under the benchmark's address-space cap the phase ran out of memory). So a gradient that is
# None gets zeros (training makes that set anyway, and the restore drops them), one already zeroed
# is measured in place and zeroed again after (the same tensor: a caller's reference stays good),
# and one holding values (a step of gradient accumulation) waits off the device while zeros take
# its place, and comes back at the same strides (a new tensor, as with ``off_device``).
def _zeroed_grad(p: torch.Tensor, away: Callable[[], OffDevice]) -> Callable[[], torch.Tensor | None]:
    """Give ``p`` a zeroed gradient for a measurement (NOTE [The profile's gradients]), and how to
    give it its own back."""
    grad = p.grad
    if grad is not None and not grad.any():  # zeroed already (zero_grad(set_to_none=False))
        return _zeroed_again(grad)
    back = (lambda: None) if grad is None else _grad_off_device(p, away())
    del grad
    p.grad = torch.zeros_like(p)
    return back


def _zeroed_again(grad: torch.Tensor) -> Callable[[], torch.Tensor]:
    """``grad`` itself, zeroed again (measured in place: NOTE [The profile's gradients])."""
    return grad.zero_


def _grad_off_device(p: torch.Tensor, place: OffDevice) -> Callable[[], torch.Tensor]:
    """``p``'s gradient copied off the device and dropped from ``p`` (its memory is freed unless
    something else holds it), and how to bring it back: the same values at the same strides, in
    a new tensor each time."""
    grad = p.grad
    kept, size, stride = place.put(grad), grad.size(), grad.stride()
    dtype, device = grad.dtype, grad.device
    p.grad = None
    del grad

    def back() -> torch.Tensor:
        out = torch.empty_strided(size, stride, dtype=dtype, device=device)
        return out.copy_(kept.get())

    return back


__all__ = ["RngState", "StepState", "kept_buffers", "kept_rng", "rng_devices"]
