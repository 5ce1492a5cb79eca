"""The recording options the executor can run: named selective-checkpoint policies.

A stage's option (docs/model.md, "Several recording options per stage") is run as the stage's
recording forward under ``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)`` with a
selective-checkpoint policy (``create_selective_checkpoint_contexts``, torch >= 2.4): the outputs
of the ops the policy names are kept (``MUST_SAVE``), everything else the backward needs is
recomputed inside the backward (``PREFER_RECOMPUTE``). The option's ``name`` in the profile is
the key into :data:`POLICIES`, so a profile written by ``remat profile --options`` replays as
measured.

The op names are ATen overload packets as the dispatcher sees them inside a recording forward
(``nn.Linear`` reaches it as ``addmm``/``mm``, attention's products as ``bmm``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from remat.cache import memo
from remat.runtime.core import grad_leaf
from remat.schedules import RematError

_MATMULS = ("mm", "addmm", "bmm", "baddbmm")
_ATTENTION = (  # fused attention kernels (F.scaled_dot_product_attention; Hugging Face's "sdpa")
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
)

POLICIES: dict[str, tuple[str, ...]] = {
    # Korthikanti et al. 2022's selective recomputation: keep the outputs of the linear layers
    # (which reach the dispatcher as mm/addmm), recompute the attention core (q k^T, masking,
    # softmax, dropout, weights v: batched bmm) and the activations and norms
    "save linear outputs": ("mm", "addmm"),
    # the same plus attention's batched products: only softmax, masking and the elementwise
    # ops and norms are recomputed
    "save matmul outputs": _MATMULS,
    # a middle point: the softmax output (N x heads x T x T) kept too, so only the cheap
    # elementwise ops and norms are recomputed
    "save matmul and softmax outputs": (*_MATMULS, "_softmax"),
    # a block whose attention is one fused kernel (sdpa): keep the linear layers' and the
    # kernel's outputs, recompute only the norms, the activation and the residual adds
    "save linear and attention outputs": ("mm", "addmm", *_ATTENTION),
    # conv blocks: keep the convolutions, recompute BatchNorm/ReLU
    "save convolution outputs": ("convolution", "_convolution", "mkldnn_convolution"),
}
"""Option name -> the ATen ops whose outputs the recording forward keeps."""


def _resolve(names: tuple[str, ...]) -> frozenset:
    packets = (getattr(torch.ops.aten, name, None) for name in names)
    return frozenset(packet for packet in packets if packet is not None)


@memo()
def _policy(name: str) -> Callable:
    keep = _resolve(POLICIES[name])

    def policy(ctx, op, *args, **kwargs):  # noqa: ARG001 - the signature torch calls
        packet = getattr(op, "overloadpacket", op)
        return CheckpointPolicy.MUST_SAVE if packet in keep else CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def require_policy(name: str, where: str) -> None:
    """Raise a one-line :class:`RematError` if no policy is called ``name``."""
    if name not in POLICIES:
        known = ", ".join(f"'{k}'" for k in POLICIES)
        raise RematError(f"{where}: the executor has no recording policy named '{name}' (known: {known})")


# NOTE [Stage kinds]: a chain stage is any module (the user's own, or a traced CutStage) and runs
# its options eagerly, as below. A stage kind that runs them its own way (the compiled stage of
# remat.runtime.compiled) answers for itself through two members, so that nothing here switches
# on its type:
#   remat_option_forward(leaf, name) -> its recording forward under option ``name``;
#   remat_eager                      -> the eager module whose ops the policies are chosen from.


def selective_forward(stage: torch.nn.Module, leaf: torch.Tensor, name: str) -> torch.Tensor:
    """Run ``stage(leaf)`` recording with option ``name``: its policy's op outputs are saved, the
    rest is recomputed inside the backward. ``leaf`` must already require grad when it can. A
    stage kind with its own ``remat_option_forward`` runs it (NOTE [Stage kinds])."""
    require_policy(name, "option")
    own = getattr(stage, "remat_option_forward", None)
    if own is not None:
        return own(leaf, name)
    context = functools.partial(create_selective_checkpoint_contexts, _policy(name))
    with torch.enable_grad():
        return checkpoint(stage, leaf, use_reentrant=False, context_fn=context)


class _OpsSeen(TorchDispatchMode):
    """The ATen overload packets a block dispatches."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.add(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def applicable_policies(stage: nn.Module, x: torch.Tensor) -> list[str]:
    """The policies that keep some op of ``stage``'s recording forward on ``x`` (a policy keeping
    none of them would only recompute the whole stage, what a checkpoint already does), the first
    of those that keep the same ops of this stage only (the same recording twice would let timing
    noise choose between names). The ops are the eager module's (NOTE [Stage kinds]): a dispatch
    mode sees no compiled ones."""
    stage = getattr(stage, "remat_eager", stage)
    mode = _OpsSeen()
    with mode, torch.enable_grad():
        stage(grad_leaf(x))
    kept: dict[frozenset, str] = {}
    for name, ops in POLICIES.items():
        kept.setdefault(frozenset(mode.seen.intersection(ops)), name)
    return [name for ops, name in kept.items() if ops]


__all__ = ["POLICIES", "applicable_policies", "require_policy", "selective_forward"]
