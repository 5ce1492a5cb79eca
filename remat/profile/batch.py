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

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils import _pytree as pytree

from remat.measure.state import StepState
from remat.models.arguments import parse_vary  # torch-free; re-exported
from remat.models.loading import chain_for, example_call, load_model
from remat.models.meta import AttentionKernelAsOnCpu, count_cpu_flash_attention_flops, transformers_decisions_on_meta
from remat.profile.chain import profile_chain
from remat.profile.flops import stage_flops
from remat.schedules import ChainProfile, RematError
from remat.trace.capture import TrainingStep
from remat.trace.chain import Chain, as_chain
from remat.trace.cut import CutChain, cut_step
from remat.trace.fuse import fuse_unsaved_handoffs
from remat.trace.proof import cut_model

NOMINAL_FLOP_PER_MS = 1e9  # 1 TFLOP/s; sets the unit of meta-profile times only
MODES = ("meta", "measured")


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
    state = StepState(model, grads="same")
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
        except RematError as error:  # a cut at this size (a trace the model's code refuses), one line already
            raise RematError(f"profiling the model at {what} = {x} failed: {error}") from None
        except (RuntimeError, ValueError, IndexError) as error:
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise RematError(f"profiling the model at {what} = {x} failed: {first}") from None

    return run


def _stated(model: nn.Module) -> bool:
    """Stages the user stated (a chain, ``nn.Sequential``, a module list, ``remat_stages()``): used
    as they are, as :func:`remat.models.loading.chain_for` does (and proves on a real device)."""
    return isinstance(model, (Chain, nn.Sequential, nn.ModuleList)) or hasattr(model, "remat_stages")


@dataclass(frozen=True)
class SizedChain:
    """The chain that runs one size's call: its stages, the chain input a_0, whether stage 0's
    backward computes a_0's gradient (the profile's ``input_grad``) and how it was cut (a note)."""

    chain: Chain
    a0: torch.Tensor
    input_grad: bool
    cut: str


TRACED_ON_META = (
    "traced (TorchDynamo) and cut as remat.checkpoint cuts it, on meta: not proven there (nothing "
    "computes on meta); the real run proves the same cut"
)


class _Cuts:
    """The model's chain at each size of the varied dimension (docs/plan.md, "How").

    Stages the user stated (:func:`_stated`, one float input) are used as they are, as ``remat
    execute`` uses them (proven by ``chain_for`` with ``measured``). Any other model (a library
    model, one a name hint would cut) is cut from its traced training step as ``remat.checkpoint``
    cuts it: on meta by :func:`remat.trace.cut.cut_step` then
    :func:`remat.trace.fuse.fuse_unsaved_handoffs`, traced once general in the varied dimension
    where the model lets it (NOTE [Dimensions a trace is general in]) and again at a size its
    guard refuses, not proven (nothing computes on meta); ``measured``: by ``cut_model`` (the same,
    proven) at each size."""

    def __init__(self, model: nn.Module, call_at: Callable[[int], tuple[tuple, dict]], dim: int, mode: str) -> None:
        self.model, self.call_at, self.dim, self.mode = model, call_at, dim, mode
        self.traced: list[CutChain] = []
        self.fixed: Chain | None = None  # a chain for every size (stated, or proven hinted)

    def at(self, x: int) -> SizedChain:
        args, kwargs = self.call_at(x)
        single = not kwargs and len(args) == 1 and args[0].is_floating_point()
        if self.mode == "meta":
            if single and _stated(self.model):
                return SizedChain(as_chain(self.model), args[0], True, "stated stages, used as they are")
            return self._traced_on_meta(args, kwargs)
        if single and _stated(self.model):
            if self.fixed is None:
                self.fixed = chain_for(self.model, args[0])  # proven equal to the model on this size
            return SizedChain(self.fixed, args[0], True, "stated stages, proven equal to the model")
        chain = cut_model(self.model, args, kwargs)
        a0 = chain.bind(*args, **kwargs)
        return SizedChain(chain, a0, a0.requires_grad, "traced (TorchDynamo), proven equal to the model")

    def _traced_on_meta(self, args: tuple, kwargs: dict) -> SizedChain:
        for chain in self.traced:
            try:
                a0 = chain.bind(*args, **kwargs)
            except RematError:  # another size than this cut is for (its guard, or specialised)
                continue
            return SizedChain(chain, a0, a0.requires_grad, TRACED_ON_META)
        leaves = pytree.tree_leaves((args, kwargs, None))
        grows = [i for i, t in enumerate(leaves) if isinstance(t, torch.Tensor) and t.dim() > self.dim]
        dynamic = frozenset((i, self.dim) for i in grows)
        with transformers_decisions_on_meta():
            chain = cut_step(TrainingStep(self.model), args, kwargs, None, dynamic)
            chain = fuse_unsaved_handoffs(chain, args, kwargs)
        self.traced.append(chain)
        a0 = chain.bind(*args, **kwargs)
        return SizedChain(chain, a0, a0.requires_grad, TRACED_ON_META)


def chain_profiler(
    spec: str,
    shape: Sequence[int],
    dim: int,
    mode: str,
    dtype: torch.dtype,
    device: torch.device | None,
    config: dict[str, Any] | None = None,
    input_dtype: torch.dtype | None = None,
    input_range: tuple[int, int] | None = None,
) -> Callable[[int], ChainProfile]:
    """A function ``x -> profile of the model at input shape[dim] = x`` (the model is built once,
    each size profiled once). ``config``, ``input_dtype`` and ``input_range``: a library model's
    config and integer (token id) inputs, as ``remat profile`` takes them."""
    if mode not in MODES:
        raise RematError(f"profile mode must be one of {', '.join(MODES)}, got {mode!r}")
    factory = spec.split(":")[-1]
    where = torch.device("meta") if mode == "meta" else device
    torch.manual_seed(0)
    if mode == "meta":
        with torch.device("meta"):
            model = load_model(spec, config)
    else:
        model = load_model(spec, config)
    model = model.to(device=where, dtype=dtype).train()

    def call_at(x: int) -> tuple[tuple, dict]:
        torch.manual_seed(0)
        return example_call(model, shape_at(shape, dim, x), where, dtype, input_dtype, input_range)

    cuts = _Cuts(model, call_at, dim, mode)
    done: dict[int, ChainProfile] = {}

    def profile_at(x: int) -> ChainProfile:
        if x not in done:
            sized = cuts.at(x)
            done[x] = _profiled(sized, f"{factory}-{where.type}", mode)
        return done[x]

    return _guarded(profile_at, f"input dimension {dim}")


def example_profiler(model: Any, example: Any, dim: int) -> tuple[Callable[[int], ChainProfile], int]:
    """For ``model`` on meta (or a function of no arguments building it, called under
    ``torch.device("meta")``) and an ``example`` call on meta (a tensor, a tuple of inputs or a
    dict of keyword inputs): a function ``x -> profile at size x of dimension dim`` of every example
    tensor that has it (aliases kept), and the example's size there."""
    if not isinstance(model, nn.Module):
        if not callable(model):
            raise RematError(f"model: expected a module on meta or a function building one, got {type(model).__name__}")
        with torch.device("meta"):
            model = model()
        if not isinstance(model, nn.Module):
            raise RematError(f"model: the factory returned a {type(model).__name__}, not a torch.nn.Module")
    if any(t.device.type != "meta" for t in (*model.parameters(), *model.buffers())):
        raise RematError("model: plan(...) runs on meta: build the model under torch.device('meta') (no weights)")
    leaves, spec = pytree.tree_flatten(example)
    grown = [t for t in leaves if isinstance(t, torch.Tensor) and t.dim() > dim]
    if not grown or any(t.device.type != "meta" for t in leaves if isinstance(t, torch.Tensor)):
        raise RematError(f"example: needs tensors on meta with a dimension {dim} (torch.empty(..., device='meta'))")
    model.train()

    def call_at(x: int) -> tuple[tuple, dict]:
        made: dict[int, torch.Tensor] = {}
        for t in grown:
            made.setdefault(id(t), torch.empty(shape_at(t.shape, dim, x), dtype=t.dtype, device="meta"))
        call = pytree.tree_unflatten([made.get(id(t), t) for t in leaves], spec)
        if isinstance(call, dict):
            return (), dict(call)
        return (tuple(call) if isinstance(call, (tuple, list)) else (call,)), {}

    cuts = _Cuts(model, call_at, dim, "meta")
    done: dict[int, ChainProfile] = {}
    name = f"{type(model).__name__.lower()}-meta"

    def profile_at(x: int) -> ChainProfile:
        if x not in done:
            done[x] = _profiled(cuts.at(x), name, "meta")
        return done[x]

    return _guarded(profile_at, f"input dimension {dim}"), int(grown[0].shape[dim])


def _profiled(sized: SizedChain, name: str, mode: str) -> ChainProfile:
    """``sized``'s chain profiled on its a_0 (on meta: FLOP times, attention as on the CPU)."""
    if mode == "meta":
        count_cpu_flash_attention_flops()
        note = f"FLOPs (torch FlopCounterMode on meta) / nominal {NOMINAL_FLOP_PER_MS:.0e} FLOP per ms"
        with AttentionKernelAsOnCpu():
            profile = profile_chain(
                sized.chain, sized.a0, name=name, stage_times=flop_times, timing_note=note, input_grad=sized.input_grad
            )
        extra = {"attention": "scaled_dot_product_attention as the CPU chooses its kernel (remat.models.meta)"}
    else:
        profile = profile_chain(sized.chain, sized.a0, name=name, repeats=3, input_grad=sized.input_grad)
        extra = {}
    return dataclasses.replace(profile, metadata={**profile.metadata, "cut": sized.cut, **extra})


__all__ = [
    "MODES",
    "NOMINAL_FLOP_PER_MS",
    "SizedChain",
    "chain_profiler",
    "check_chain_matches",
    "example_profiler",
    "flop_times",
    "parse_vary",
]
