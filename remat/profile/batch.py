"""Profile one model at several batch sizes (or lengths of one input dimension), for ``remat plan``.

Two ways, both through :func:`remat.profile.chain.profile_chain`:

* ``meta``: the model and its input on the meta device (exact sizes from autograd's saved
  tensors, no data, no compute: any model size in seconds); stage times are FLOPs counted by
  :func:`remat.profile.flops.stage_flops` at a nominal rate of :data:`NOMINAL_FLOP_PER_MS`.
  Only the ratio of times matters to an overhead, so the nominal rate only sets the unit; stages
  without matmuls or convolutions (norms, activations, pooling) count 0 FLOPs and come out free.
* ``measured``: the model on a real device, times measured and sizes tracked as ``remat profile``
  does. Before profiling, the chain is checked against the model itself on the example input
  (outputs equal bit for bit); a cut that differs is refused.

Units: bytes, milliseconds, FLOPs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from remat.models.loading import build, load_model
from remat.profile.chain import profile_chain
from remat.profile.flops import stage_flops
from remat.profile.stage import ModelState
from remat.schedules import ChainProfile, RematError
from remat.trace.chain import Chain, as_chain

NOMINAL_FLOP_PER_MS = 1e9  # 1 TFLOP/s; sets the unit of meta-profile times only
MODES = ("meta", "measured")


def parse_vary(text: str, rank: int) -> int:
    """``batch`` -> 0, ``dim=N`` -> N: the input dimension that varies (checked against ``rank``)."""
    if text == "batch":
        return 0
    if text.startswith("dim="):
        try:
            dim = int(text[4:])
        except ValueError:
            dim = -1
        if 0 <= dim < rank:
            return dim
    raise RematError(f"--vary: expected 'batch' or 'dim=N' with 0 <= N < {rank} (the input's rank), got {text!r}")


def shape_at(shape: Sequence[int], dim: int, x: int) -> tuple[int, ...]:
    """``shape`` with dimension ``dim`` set to ``x``."""
    return tuple(int(x) if i == dim else int(d) for i, d in enumerate(shape))


def flop_times(index: int, name: str, stage: nn.Module, x: torch.Tensor) -> tuple[float, float]:
    """``stage_times`` for :func:`profile_chain`: (forward, backward) FLOPs / the nominal rate, ms."""
    forward, backward = stage_flops(stage, x)
    return forward / NOMINAL_FLOP_PER_MS, backward / NOMINAL_FLOP_PER_MS


def check_chain_matches(model: nn.Module, chain: Chain, x: torch.Tensor) -> None:
    """Refuse a chain whose output differs from the model's on ``x`` (same RNG; bit for bit)."""
    if chain is model:
        return
    state = ModelState(model, x.device)
    try:
        with torch.no_grad():
            torch.manual_seed(0)
            want = model(x)
            state.restore()
            torch.manual_seed(0)
            got = chain(x)
    finally:
        state.restore()
    if not isinstance(want, torch.Tensor) or want.shape != got.shape or not torch.equal(want, got):
        raise RematError("--model: the model cut into stages does not compute what the model computes; refused")


def _guarded(profile: Callable[[int], ChainProfile], what: str) -> Callable[[int], ChainProfile]:
    """``profile`` with the model's own failures at a size turned into one-line errors."""

    def run(x: int) -> ChainProfile:
        try:
            return profile(x)
        except RematError:
            raise
        except (RuntimeError, ValueError, IndexError) as error:
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise RematError(f"profiling the model at {what} = {x} failed: {first}") from None

    return run


def chain_profiler(
    spec: str, shape: Sequence[int], dim: int, mode: str, dtype: torch.dtype, device: torch.device
) -> Callable[[int], ChainProfile]:
    """A function ``x -> profile of the model at input shape[dim] = x`` (the model is built once)."""
    factory = spec.split(":")[-1]
    if mode == "meta":
        with torch.device("meta"):
            model = load_model(spec)
        model = model.to(dtype=dtype).train()
        chain = as_chain(model)

        def profile_meta(x: int) -> ChainProfile:
            example = torch.empty(shape_at(shape, dim, x), device="meta", dtype=dtype)
            note = f"FLOPs (torch FlopCounterMode on meta) / nominal {NOMINAL_FLOP_PER_MS:.0e} FLOP per ms"
            return profile_chain(chain, example, name=f"{factory}-meta", stage_times=flop_times, timing_note=note)

        return _guarded(profile_meta, f"input dimension {dim}")
    if mode != "measured":
        raise RematError(f"profile mode must be one of {', '.join(MODES)}, got {mode!r}")
    model, example = build(spec, shape, device, dtype)
    chain = as_chain(model)
    check_chain_matches(model, chain, example)

    def profile_measured(x: int) -> ChainProfile:
        torch.manual_seed(0)
        example = torch.randn(shape_at(shape, dim, x), device=device, dtype=dtype)
        return profile_chain(chain, example, name=f"{factory}-{device.type}", repeats=3)

    return _guarded(profile_measured, f"input dimension {dim}")


__all__ = ["MODES", "NOMINAL_FLOP_PER_MS", "chain_profiler", "check_chain_matches", "flop_times", "parse_vary"]
