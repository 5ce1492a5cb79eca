"""Models on the meta device, for planning without the device (``remat plan``/``remat profile --meta``).

A model built under ``torch.device("meta")`` has no weights and its tensors no data: tracing,
cutting and profiling it costs the shapes only, for a 7B model as for a tiny one. Two things the
eager model would read from data are given here:

* **Hugging Face's mask decisions** (:func:`transformers_decisions_on_meta`): the cut pins them to
  what eager decides on the example (:mod:`remat.rewrite.branches`), but eager cannot decide on meta
  (``Tensor.item()``). NOTE [Mask decisions on meta].
* **Which attention kernel runs** (:class:`AttentionKernelAsOnCpu`): ``scaled_dot_product_attention``
  on meta tensors always takes the math path, which saves the ``L x S`` probabilities; the CPU (and
  CUDA) take a fused kernel that saves ``O(L)``. NOTE [Attention kernels on meta].

Nothing computes on meta, so nothing is proven there: a cut made on meta is proven by the real run
(``remat.checkpoint``'s first call, or ``remat execute``), which cuts the same graph from the same
trace. Units: bytes.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from remat.rewrite.branches import MODULE as MASKS_MODULE
from remat.rewrite.branches import PINNED

# NOTE [Mask decisions on meta]
# transformers decides from the values of the attention mask and the position ids whether to skip
# the causal mask (``_ignore_causal_mask_sdpa``) and whether sequences are packed
# (``find_packed_sequence_indices``). A plan's example is what remat.checkpoint's is for a causal LM,
# ``{"input_ids": ids, "labels": ids}``: no attention mask (no padding) and the model's own position
# ids (0, 1, ..., T-1). On meta these decisions are taken on stand-ins with exactly those values: a
# meta mask becomes ``torch.ones`` (no padded token), meta position ids become ``arange(T)``, both
# tiny CPU tensors of the same shape-kind. So the trace pins the same branch as the real example's
# (tests/cli/test_plan_meta.py checks the verdicts and the stages against a CPU cut). A call whose
# data differs (padding) is refused by the graph's guard on the device, as for any cut.


def _stand_in(value: Any) -> Any:
    """A meta tensor as the CPU tensor of the plan's example values (NOTE [Mask decisions on meta])."""
    if not isinstance(value, torch.Tensor) or value.device.type != "meta" or value.is_floating_point():
        return value  # (a float tensor is no mask or position id: left to fail loudly, as eager on meta)
    if value.dtype == torch.bool:  # a padding mask: no token padded
        return torch.ones(value.shape, dtype=value.dtype)
    return torch.arange(value.shape[-1], dtype=value.dtype).expand(value.shape)  # position ids


def _on_meta_stand_ins(original: Callable) -> Callable:
    @functools.wraps(original)  # inspect.unwrap finds the original (remat.rewrite.branches.same_branch)
    def decide(*args: Any, **kwargs: Any) -> Any:
        if not any(isinstance(v, torch.Tensor) and v.device.type == "meta" for v in (*args, *kwargs.values())):
            return original(*args, **kwargs)
        result = original(*[_stand_in(v) for v in args], **{k: _stand_in(v) for k, v in kwargs.items()})
        return result.to("meta") if isinstance(result, torch.Tensor) else result

    return decide


@contextlib.contextmanager
def transformers_decisions_on_meta() -> Iterator[None]:
    """Inside: transformers' data-dependent mask decisions (:data:`remat.rewrite.branches.PINNED`)
    taken on meta tensors as on the plan's example (NOTE [Mask decisions on meta]); a no-op when
    transformers is not imported. Real tensors are decided as always."""
    module = sys.modules.get(MASKS_MODULE)
    if module is None:
        yield
        return
    originals = {name: getattr(module, name) for name in PINNED if hasattr(module, name)}
    try:
        for name, original in originals.items():
            setattr(module, name, _on_meta_stand_ins(original))
        yield
    finally:
        for name, original in originals.items():
            setattr(module, name, original)


# NOTE [Attention kernels on meta]
# ``scaled_dot_product_attention`` chooses its kernel inside ATen, by device: on meta tensors it is
# always the math path (softmax(QK^T)V in plain ops, which saves the L x S probabilities), while the
# CPU takes its flash kernel and CUDA its flash or memory-efficient one (they save the output and a
# logsumexp of L floats per head). A plan that counted the math path would see an attention
# quadratic in the sequence where the real run's is linear. So, on meta, the CPU is asked
# (``torch._fused_sdp_choice``) on stand-in tensors with the same dtype, batch, heads, head size,
# mask presence, causality, dropout and scale (sequence lengths 1: its checks do not read them),
# and where it would take its flash kernel, the meta call runs that kernel,
# ``aten._scaled_dot_product_flash_attention_for_cpu``, whose meta version saves what the CPU's
# does (output and logsumexp: CUDA flash's too, give or take its 16-byte RNG state). The choice is
# made at the Python call (a torch function mode), the one place a meta call can be redirected.
# Its FLOPs count as flash attention's (torch's flop counter has no formula for the CPU kernel).


def _choice_stand_in(value: torch.Tensor, mask: bool = False) -> torch.Tensor:
    """A meta q/k/v (or mask) as a CPU tensor of its dtype with sequence lengths 1."""
    shape = list(value.shape)
    for axis in (-2, -1) if mask else (-2,):
        if value.dim() >= -axis:
            shape[axis] = 1
    return torch.zeros(shape, dtype=value.dtype)


def _flash_on_cpu(
    query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False
) -> bool:
    """Whether the CPU runs this attention call with its flash kernel (NOTE [Attention kernels on meta])."""
    from torch.nn.attention import SDPBackend

    if enable_gqa and key.shape[-3:-2] != query.shape[-3:-2]:
        return False  # grouped heads: left to ATen's own path
    mask = None if attn_mask is None else _choice_stand_in(attn_mask, mask=True)
    q, k, v = (_choice_stand_in(t) for t in (query, key, value))
    choice = torch._fused_sdp_choice(q, k, v, mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)
    return choice == SDPBackend.FLASH_ATTENTION.value


class AttentionKernelAsOnCpu(TorchFunctionMode):
    """Inside: ``scaled_dot_product_attention`` on meta tensors runs the kernel the CPU would
    (NOTE [Attention kernels on meta]); every other call runs unchanged."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch._C._nn.scaled_dot_product_attention and args and args[0].device.type == "meta":
            call = inspect.signature(_flash_on_cpu).bind(*args, **kwargs)
            call.apply_defaults()
            a = call.arguments
            if _flash_on_cpu(**a):
                out, _ = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                    a["query"], a["key"], a["value"], a["dropout_p"], a["is_causal"],
                    attn_mask=a["attn_mask"], scale=a["scale"],
                )  # fmt: skip
                return out
        return func(*args, **kwargs)


@functools.cache
def count_cpu_flash_attention_flops() -> None:
    """Register, once, the FLOP formulas of the CPU's flash attention (forward and backward) as
    those of CUDA's flash attention, which torch's ``FlopCounterMode`` already has."""
    from torch.utils import flop_counter

    aten = torch.ops.aten
    pairs = (
        (aten._scaled_dot_product_flash_attention_for_cpu, flop_counter.sdpa_flop),
        (aten._scaled_dot_product_flash_attention_for_cpu_backward, flop_counter.sdpa_backward_flop),
    )
    for target, formula in pairs:
        if target not in flop_counter.flop_registry:
            flop_counter.register_flop_formula(target, get_raw=True)(formula)  # already shape-wrapped


__all__ = ["AttentionKernelAsOnCpu", "count_cpu_flash_attention_flops", "transformers_decisions_on_meta"]
