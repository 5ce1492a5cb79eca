"""Measure the recording options the executor can run (``remat profile --options``).

For every stage of a profiled chain and every policy of :mod:`remat.runtime.policies`,
one recording forward with that policy and its backward are metered exactly as the profiler
meters option 0 (:func:`remat.profile.stage.record_and_backward_memory`: the allocator's
reading after the forward is ``saved_size``, its peaks above what each op leaves are the
transients), and its recording forward and its backward are timed against the plain ones in the
same loop, so that

    option backward_ms = the stage's backward_ms + (option's backward - plain backward)
                         + (option's recording forward - plain recording forward)

(the samples of the plain and of every option interleaved, the fastest of each taken) carries
the recompute inside the backward in the same timing conditions as the stage's own
(``time_chain``'s in-sequence passes), clamped at the stage's ``backward_ms`` (a difference below
0 is noise: the option does strictly more work). The second difference is the selective-
checkpoint machinery's own cost in the forward (a dispatch mode that asks the policy about every
op, and the cache of what it keeps): the chain model gives an option no forward time of its own
(docs/model.md), and every ``F_all i k`` is consumed by exactly one ``B i`` with option ``k``, so
charging it to that backward keeps every schedule's total right. Without it, replayed steps that
used options measured a few ms per option above prediction (docs/benchmarks.md, "GPT-2 side by
side"). An option is kept only if it holds less than the
stage's ``saved_size`` and less than every option already kept at a smaller or equal backward
time (a dominated option can never help the DP). Sizes in bytes, times in milliseconds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
from torch import nn

from remat.measure.state import StepState
from remat.measure.timing import time_ms
from remat.profile.stage import (
    existing_storages,
    outside_storages,
    record_and_backward_memory,
    recorded,
    run_backward,
)
from remat.runtime.core import grad_leaf, uncached_casts
from remat.runtime.policies import applicable_policies, selective_forward
from remat.schedules import ChainProfile, Stage, StageOption
from remat.trace.boundary import tensors
from remat.trace.chain import Chain


def _measure(
    stage: nn.Module,
    x: torch.Tensor,
    policy: str | None,
    last: bool = False,
    input_grad: bool = True,
    outside: frozenset = frozenset(),
    input_bytes: int | None = None,
) -> tuple[int, int, int, Callable[[], tuple[float, float]]]:
    """(saved_size, forward_overhead, backward_overhead, sample) of one recording forward of
    ``stage`` on ``x`` with ``policy`` (None: the plain recording forward); ``sample()`` times
    one recording forward and its backward (ms, ms), so that the caller can interleave the
    options' samples. ``last``: the chain's last stage (as in
    :func:`~remat.profile.stage.record_and_backward_memory`); ``input_grad``: the input's gradient
    is computed, ``outside`` and ``input_bytes`` as in :func:`~remat.profile.chain.profile_stage`."""
    device = tensors(x)[0].device
    pre_existing, activation_bytes = existing_storages(stage, x, outside, input_bytes)

    def forward_record():
        leaf = grad_leaf(x, input_grad)
        with torch.enable_grad(), uncached_casts():  # as profile_stage (NOTE [Autocast's weight-cast cache])
            return leaf, stage(leaf) if policy is None else selective_forward(stage, leaf, policy)

    setup = recorded(forward_record)
    run_backward(setup())  # warm-up: the first checkpointed backward builds its caches
    saved, forward_overhead, backward_overhead = record_and_backward_memory(
        forward_record, pre_existing, activation_bytes, device, last=last
    )

    def sample() -> tuple[float, float]:
        state: list = []
        forward = time_ms(lambda: state.append(setup()), device, 1)
        return forward, time_ms(run_backward, device, 1, setup=state.pop)

    return saved, forward_overhead, backward_overhead, sample


def stage_options(
    stage: nn.Module,
    x: torch.Tensor,
    record: Stage,
    repeats: int,
    last: bool = False,
    input_grad: bool = True,
    outside: frozenset = frozenset(),
    input_bytes: int | None = None,
) -> tuple[StageOption, ...]:
    """The options worth keeping for one stage (see the module doc), measured on its input ``x``;
    ``last``: the chain's last stage; ``outside``, ``input_bytes``: as in
    :func:`~remat.profile.chain.profile_stage`."""
    names = applicable_policies(stage, x)
    if not names:
        return ()
    measured = {name: _measure(stage, x, name, last, input_grad, outside, input_bytes) for name in [None, *names]}
    # interleaved samples (plain, option 1, option 2, ..., plain, ...): load hits all alike
    samples: dict[str | None, list[tuple[float, float]]] = {name: [] for name in measured}
    for _ in range(max(1, repeats)):
        for name, (*_, sample) in measured.items():
            samples[name].append(sample())

    def extra(name: str) -> float:  # ms the option adds to the plain forward + backward
        return sum(min(s[k] for s in samples[name]) - min(s[k] for s in samples[None]) for k in (0, 1))

    found = []
    for name in names:
        saved, fo, bo, _ = measured[name]
        saved = max(saved, record.own_output_size)  # what it hands on is a_i's
        backward_ms = record.backward_ms + max(0.0, extra(name))
        found.append(StageOption(name, int(saved), float(backward_ms), int(fo), int(bo)))
    kept: list[StageOption] = []
    for option in sorted(found, key=lambda o: (o.backward_ms, o.saved_size)):
        if option.saved_size < record.saved_size and all(option.saved_size < k.saved_size for k in kept):
            kept.append(option)
    return tuple(kept)


def with_measured_options(
    chain: Chain, example_input: torch.Tensor, profile: ChainProfile, repeats: int = 5
) -> ChainProfile:
    """``profile`` (measured on ``chain`` and ``example_input`` by ``profile_chain``) with every
    stage's options measured and attached; the model is left as it was (buffers, RNG, gradients)."""
    device = example_input.device
    if device.type == "meta":
        return profile  # nothing runs on meta: recomputation has no time to measure
    state = StepState(chain, grads="zeroed")  # NOTE [The profile's gradients]
    stages = []
    try:
        x = example_input.detach()
        outside = outside_storages(chain, x)
        sizes = [profile.input_size, *(s.output_size for s in profile.stages)]  # a_i's bytes
        for i, (stage, record) in enumerate(zip(chain.stages, profile.stages, strict=True)):
            last, input_grad = i == len(chain) - 1, i > 0 or profile.metadata.get("input_grad", True)
            options = stage_options(stage, x, record, repeats, last, input_grad, outside, sizes[i])
            stages.append(dataclasses.replace(record, options=options))
            with torch.no_grad():
                x = stage(x)
    finally:
        state.restore()
    metadata = {**profile.metadata, "options": "measured: remat.runtime.policies policies"}
    return ChainProfile(profile.name, profile.input_size, tuple(stages), metadata)


__all__ = ["applicable_policies", "stage_options", "with_measured_options"]
