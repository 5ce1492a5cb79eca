"""Measure a model, cut into a chain of stages, into a :class:`ChainProfile` (docs/formats.md).

Per stage i, on its input a_i (the previous stage's output for the example input):

* ``forward_ms``: the fastest of ``repeats`` forwards (after ``warmup``), the mean of the recording
  and the non-recording forward; ``backward_ms``: the fastest of ``repeats`` backwards. CUDA events
  on GPU, ``time.perf_counter`` on CPU. Milliseconds. The minimum, because load from other
  processes only adds time. Stages are timed in sequence, inside whole-chain passes (a no-grad
  forward; then, stage by stage, each recording forward followed at once by its backward), not
  each in a loop of its own: a stage timed alone on the same data finds warm caches that a real
  step does not (on CPU that made the sum of stage times ~30% lower than a plain step). The
  thread count is recorded in the metadata (``threads``).
* ``output_size``: bytes of a_{i+1}'s storage (a tensor of it on a storage the step does not
  allocate: its own elements' bytes, its gradient's; NOTE [Every byte counted once]).
* ``saved_size``: bytes newly held after the recording forward: the distinct storages autograd
  saves for the stage's backward (``torch.autograd.graph.saved_tensors_hooks`` sees each one) plus
  the output's, or what the allocator still holds after the forward if that is more; storages that
  existed before the forward (the input a_i, parameters, buffers) or that the step does not
  allocate (a_0, the call's other inputs and side values, and views of all these:
  :func:`~remat.profile.stage.outside_storages`) are not counted.
* ``forward_overhead`` (recording forward, F_all), ``forward_nograd_overhead`` (non-recording
  forward, F_ck/F_n) and ``backward_overhead``: the allocator's peak during the op above what it
  leaves behind (for the backward: above the memory before it + the input gradient g_i). Measured
  with :class:`~remat.measure.allocator.AllocatorMeter` (the c10 CPU allocator, or the CUDA caching
  allocator), so buffers kernels allocate inside themselves (oneDNN, cuDNN workspaces) are part of
  the transients, in the same conditions as the replay: parameter gradients pre-allocated (so their
  transients are counted), the output and its gradient held through the backward.
* ``param_size``: bytes of the stage's parameters.

The model is left as it was: buffers (BatchNorm running statistics), parameter gradients and the
RNG state are restored.

**One stage's step at a time.** Warm-up, metering, timing and the recording options each hold at
most one stage's recording forward and its backward (with the stage's input, and the chain's
input), never every stage's graph: profiling a model whose plain step does not fit needs what the
least-memory schedule's ``B i`` needs, not the store-all step (NOTE [One stage's graph at a
time]; parameter gradients aside, pre-allocated as the replay has them).

**Meta device** (a model and input on ``device="meta"``): autograd runs on meta tensors (shapes,
no data, no compute), so every tensor size above is measured exactly, by
:class:`~remat.measure.memory.StorageTracker` counting meta storages (kernel-internal buffers do
not exist there), for a model of any size in
seconds. Nothing can be timed there: pass ``stage_times`` (a callable giving each stage's
estimated ``(forward_ms, backward_ms)``, e.g. :class:`remat.profile.flops.FlopTimeEstimate`);
without it the times are 0. ``stage_times`` also replaces the timing on real devices.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import torch
from torch import nn

from remat.measure.allocator import AllocatorMeter
from remat.measure.memory import allocated_bytes, storage_key, untracked
from remat.measure.state import RngState, StepState
from remat.measure.timing import StageTimer, time_ms
from remat.profile.options import with_measured_options
from remat.profile.stage import (
    existing_storages,
    outside_storages,
    record_and_backward_memory,
    recorded,
    run_backward,
)
from remat.runtime.core import accelerator_devices, grad_leaf, trainable_params, uncached_casts
from remat.schedules import ChainProfile, RematError, Stage
from remat.trace import boundary
from remat.trace.boundary import (
    Boundary,
    boundary_bytes,
    detached,
    is_boundary,
    ones_like,
    storage_keys,
    tensors,
)
from remat.trace.chain import Chain, as_chain

_MEMORY_SOURCE = {
    "cuda": "cuda allocator (max_memory_allocated)",
    "cpu": "c10 cpu allocator (torch.profiler memory events)",
    "meta": "remat StorageTracker (live storages of meta tensors: exact sizes, no data)",
}


def profile_stage(
    stage: nn.Module,
    x: Boundary,
    name: str,
    repeats: int = 5,
    warmup: int = 2,
    timed: bool = True,
    last: bool = False,
    input_grad: bool = True,
    outside: frozenset = frozenset(),
    input_bytes: int | None = None,
) -> tuple[Stage, Boundary, int]:
    """Profile one stage on input ``x``; return its :class:`Stage`, its output (no graph) and the
    transient bytes of its non-recording forward. ``last``: the chain's last stage (its backward
    holds its output and output gradient; :func:`~remat.profile.stage.record_and_backward_memory`).
    ``input_grad``: whether the backward computes the input's gradient (the replay computes g_0
    only for an input that requires grad). ``outside``: the storages no step allocates
    (:func:`~remat.profile.stage.outside_storages`), counted nowhere in the stage (NOTE [Every
    byte counted once]); ``input_bytes``: a_i's bytes in the chain model (the previous stage's
    ``output_size``, a_0's ``input_size``; None: ``x``'s, from ``outside``).

    The caller restores buffers/RNG (see :func:`profile_chain`); parameter gradients are expected
    to be pre-allocated.
    """
    device = tensors(x)[0].device
    x = detached(x)
    pre_existing, activation_bytes = existing_storages(stage, x, outside, input_bytes)

    # NOTE [Autocast's weight-cast cache]: measured with autocast's cache off, so each weight
    # cast is allocated in the measured forward even when the caller's autocast region has cached
    # it already (the replay's recomputation in the backward starts with an empty cache)
    def forward_nograd():
        with torch.no_grad(), uncached_casts():
            return _stage_output(name, stage(x))

    def forward_record():
        with torch.enable_grad(), uncached_casts():
            leaf = grad_leaf(x, input_grad)
            return leaf, _stage_output(name, stage(leaf))

    backward_setup = recorded(forward_record)
    for _ in range(max(0, warmup)):
        run_backward(backward_setup())
        forward_nograd()

    # memory: the recording forward and its backward first, then the non-recording forward, so
    # that its output (a_{i+1}, the next stage's input) is never held beside the stage's graph:
    # profiling holds one stage's step at a time, what the least-memory schedule's B i holds
    saved_size, forward_overhead, backward_overhead = record_and_backward_memory(
        forward_record, pre_existing, activation_bytes, device, last=last
    )
    # the non-recording forward, as the allocator sees it (kernel-internal buffers included)
    with AllocatorMeter(device) as meter:
        out = forward_nograd()
    if _aliased(stage, x, out):
        raise RematError(
            f"stage '{name}' ({type(stage).__name__}): its output is a view of its input or a parameter, which a"
            " chain cannot hand on; merge it with a neighbour: put the two in one nn.Sequential, one child of"
            " the model (or one item of the stage list), or give the model a remat_stages() method returning"
            " [(name, module), ...]; remat.checkpoint(model, ...) cuts the model from its trace, never after a view"
        )
    output_size = boundary_bytes(out, device, outside=outside)
    inputs = set(storage_keys(x))
    handed_on = boundary_bytes(out, device, only=lambda t: storage_key(t) in inputs, outside=outside)  # a_i's
    nograd_overhead = max(0, meter.peak_bytes - output_size)

    forward_ms = backward_ms = 0.0  # timed by time_chain, in sequence
    if timed:
        forward_ms = 0.5 * (time_ms(forward_nograd, device, repeats) + time_ms(forward_record, device, repeats))
        backward_ms = time_ms(run_backward, device, repeats, setup=backward_setup)
    params = {storage_key(p): p for p in stage.parameters()}
    param_size = sum(p.numel() * p.element_size() for p in params.values())
    record = Stage(
        name=name,
        forward_ms=forward_ms,
        backward_ms=backward_ms,
        output_size=output_size,
        saved_size=max(saved_size, output_size - handed_on),
        forward_overhead=int(forward_overhead),
        forward_nograd_overhead=int(nograd_overhead),
        backward_overhead=int(backward_overhead),
        param_size=int(param_size),
        handed_on=int(handed_on),
    )
    return record, detached(out), nograd_overhead


def _stage_output(name: str, out: object) -> Boundary:
    """``out``, a stage's output, refused in one line unless it is a boundary."""
    if not is_boundary(out):
        raise RematError(
            f"stage '{name}': returns a {type(out).__name__}; a chain stage must return a tensor or a tuple of tensors"
        )
    return out


def _aliased(stage: nn.Module, x: Boundary, out: Boundary) -> bool:
    """Whether ``out`` shares storage with a parameter or buffer of ``stage``, or with its input;
    of a tuple boundary, a tensor handed on unchanged from the input is no alias (it is what
    the next stage reads: :attr:`~remat.schedules.Stage.handed_on`)."""
    weights = {storage_key(t) for t in (*stage.parameters(), *stage.buffers())}
    inputs = set(storage_keys(x))
    passed = inputs if isinstance(out, tuple) else set()
    return any(key in weights or (key in inputs and key not in passed) for key in storage_keys(out))


def time_chain(chain: Chain, x: torch.Tensor, repeats: int) -> tuple[list[float], list[float]]:
    """Per-stage (forward_ms, backward_ms): minimum over ``repeats`` whole-chain passes (see :func:`time_ms`).

    Each pass runs a no-grad forward through all stages, then, stage by stage, a recording forward
    from a leaf of the stage's input and at once its backward with an output gradient of ones
    (NOTE [One stage's graph at a time]), timing every stage where it runs. forward_ms is
    the mean of the no-grad and recording minima.
    """
    device = x.device
    n = len(chain)
    nograd: list[list[float]] = [[] for _ in range(n)]
    record: list[list[float]] = [[] for _ in range(n)]
    backward: list[list[float]] = [[] for _ in range(n)]
    forward_timer, backward_timer = StageTimer(device), StageTimer(device)
    for _ in range(max(1, repeats)):
        inp = detached(x)
        with torch.no_grad():
            for i, stage in enumerate(chain.stages):
                begin = forward_timer.start()
                inp = stage(inp)
                forward_timer.stop(i, begin)
        forward_timer.collect(nograd)
        inp = detached(x)
        for i, stage in enumerate(chain.stages):
            inp = _timed_stage_step(stage, inp, i, forward_timer, backward_timer)
        forward_timer.collect(record)
        backward_timer.collect(backward)
    forward_ms = [0.5 * (min(a) + min(b)) for a, b in zip(nograd, record, strict=True)]
    return forward_ms, [float(min(b)) for b in backward]


def _timed_stage_step(
    stage: nn.Module, inp: Boundary, index: int, forward_timer: StageTimer, backward_timer: StageTimer
) -> Boundary:
    """Stage ``index``'s recording forward from a leaf of ``inp`` and its backward with an output
    gradient of ones, each timed; return its output with no graph (the next stage's input).

    NOTE [One stage's graph at a time]: a whole-chain store-all pass (every recording
    forward, then the backwards n-1 .. 0) holds every stage's graph at once: the store-all step's
    memory, which a model that needs remat does not have. Here one stage's graph lives from its
    recording forward to its backward, right after it, as in a checkpointing schedule's ``F_all i;
    B i``; the pass still runs the stages in sequence (caches as a step leaves them, not one stage
    in a loop of its own). The output gradient is ones, as in :func:`profile_stage`'s timing, not
    the next stage's gradient (which would need the later stages' graphs first): dense kernels
    take the same time on any values of the same shape and dtype."""
    leaf = grad_leaf(inp)
    begin = forward_timer.start()
    with torch.enable_grad():
        out = stage(leaf)
    forward_timer.stop(index, begin)
    grad = ones_like(out)
    begin = backward_timer.start()
    boundary.backward(out, grad)
    backward_timer.stop(index, begin)
    return detached(out)


def _warm_up(chain: Chain, x: torch.Tensor, rounds: int) -> None:
    """Training steps stage by stage before anything is measured (thread pools, allocator, kernel
    caches): each stage's recording forward and at once its backward (output gradient of ones),
    its output, graph dropped, the next stage's input. One stage's graph at a time (NOTE [One
    stage's graph at a time]), never the store-all step's; as much compute as a plain step."""
    for _ in range(rounds):
        inp = detached(x)
        for stage, name in zip(chain.stages, chain.names, strict=True):
            with torch.enable_grad():
                out = _stage_output(name, stage(grad_leaf(inp)))
            boundary.backward(out, ones_like(out))
            inp = detached(out)
            del out


def _measure_stages(
    chain: Chain,
    x: torch.Tensor,
    warmup: int,
    progress: bool,
    stage_times: Callable[[int, str, nn.Module, torch.Tensor], tuple[float, float]] | None,
    input_grad: bool = True,
) -> tuple[list[Stage], list[tuple[float, float]] | None]:
    """Every stage's sizes (bytes; its times left 0), each measured on the previous stage's output
    for ``x``, and, with ``stage_times``, each stage's estimated ``(forward_ms, backward_ms)``."""
    stages = []
    estimated: list[tuple[float, float]] | None = None if stage_times is None else []
    iterator = range(len(chain))
    if progress:
        from tqdm import tqdm  # deferred: a progress bar only when asked for

        iterator = tqdm(iterator, desc="profiling stages", unit="stage", disable=None)
    outside = outside_storages(chain, x)
    input_bytes = allocated_bytes(x)  # a_0: the profile's input_size
    for i in iterator:
        if estimated is not None:
            fwd, bwd = stage_times(i, chain.names[i], chain.stages[i], x)
            estimated.append((float(fwd), float(bwd)))
        record, x, _ = profile_stage(
            chain.stages[i],
            x,
            chain.names[i],
            warmup=warmup,
            timed=False,
            last=i == len(chain) - 1,
            input_grad=input_grad or i > 0,
            outside=outside,
            input_bytes=input_bytes,
        )
        stages.append(record)
        input_bytes = record.output_size
    return stages, estimated


def _stage_times(
    chain: Chain, example_input: torch.Tensor, repeats: int, estimated: list[tuple[float, float]] | None
) -> tuple[list[float], list[float]]:
    """Per-stage (forward_ms, backward_ms): the estimates if any, zeros on meta (nothing runs
    there), else :func:`time_chain`'s in-sequence minima."""
    if estimated is not None:
        return [f for f, _ in estimated], [b for _, b in estimated]
    if example_input.device.type == "meta":
        return [0.0] * len(chain), [0.0] * len(chain)
    return time_chain(chain, example_input, repeats)


def _timing(device: torch.device, estimated: bool, timing_note: str | None) -> str:
    """The metadata's ``timing``: how the stage times were found."""
    if estimated:
        return timing_note or "estimated by a stage_times callable"
    if device.type == "meta":
        return "none (meta device: nothing is computed; all times 0)"
    return (
        "cuda events" if device.type == "cuda" else "perf_counter"
    ) + ", minimum, stages timed in sequence, one stage's step at a time"


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "meta":
        return "meta (shapes only, no compute)"
    return f"cpu ({torch.get_num_threads()} threads)"


def _metadata(
    chain: Chain, example_input: torch.Tensor, batch: int, repeats: int, estimated: bool, timing_note: str | None
) -> dict:
    """A chain profile's metadata: the device, the input, how times and memory were measured."""
    device = example_input.device
    metadata = {
        "device": _device_name(device),
        "device_type": device.type,
        "dtype": str(example_input.dtype).replace("torch.", ""),
        "batch_size": batch,
        "input_shape": list(example_input.shape),
        "torch": torch.__version__,
        "timing": _timing(device, estimated, timing_note),
        "repeats": repeats,
        "threads": torch.get_num_threads(),
        "memory": _MEMORY_SOURCE.get(device.type, _MEMORY_SOURCE["cpu"]),
    }
    if chain.compiled_label is not None:  # replayed compiled too (RematChain checks)
        metadata["compiled"] = chain.compiled_label
    return metadata


def profile_chain(
    model: nn.Module | Sequence[nn.Module] | Chain,
    example_input: torch.Tensor,
    name: str | None = None,
    repeats: int = 5,
    warmup: int = 2,
    progress: bool = False,
    stage_times: Callable[[int, str, nn.Module, torch.Tensor], tuple[float, float]] | None = None,
    timing_note: str | None = None,
    options: bool = False,
    input_grad: bool | None = None,
) -> ChainProfile:
    """Profile every stage of ``model`` (cut by :func:`as_chain`) on ``example_input``.

    Times in milliseconds, sizes in bytes. The model must already be on the input's device; it is
    left unchanged (buffers, gradients, RNG restored). ``stage_times(index, name, stage, stage_input)``,
    if given, supplies each stage's ``(forward_ms, backward_ms)`` instead of timing it (required
    for real times on the meta device, see the module docstring); ``timing_note`` then says how
    in the metadata's ``timing``. ``options``: also measure each stage's recording options
    (:mod:`remat.profile.options`). ``input_grad``: whether stage 0's backward computes the
    input's gradient g_0 (metadata ``input_grad``); None, yes (the chain model counts g_0, and
    the replay then computes it for every call); False, only for a replay whose every call has
    an input that needs no gradient, which then costs what plain autograd's does (a replay
    refuses an input that requires grad under such a profile).
    """
    chain = as_chain(model)
    device = example_input.device
    meta = device.type == "meta"
    state = StepState(chain, grads="zeroed")  # NOTE [The profile's gradients]
    input_grad = True if input_grad is None else bool(input_grad)
    try:
        x = example_input.detach()
        _warm_up(chain, x, 0 if meta else max(0, warmup))
        stages, estimated = _measure_stages(chain, x, 0 if meta else warmup, progress, stage_times, input_grad)
        forward_ms, backward_ms = _stage_times(chain, example_input, repeats, estimated)
        stages = [
            dataclasses.replace(s, forward_ms=f, backward_ms=b)
            for s, f, b in zip(stages, forward_ms, backward_ms, strict=True)
        ]
    finally:
        state.restore()
    batch = int(example_input.shape[0]) if example_input.dim() > 0 else 1
    profile = ChainProfile(
        name=name or f"{type(model).__name__.lower()}-b{batch}-{device.type}",
        input_size=allocated_bytes(example_input, device),
        stages=tuple(stages),
        metadata={
            **_metadata(chain, example_input, batch, repeats, stage_times is not None, timing_note),
            "input_grad": input_grad,
        },
    )
    if options:
        profile = with_measured_options(chain, example_input, profile, repeats)
    return with_recompute_bookkeeping(profile, recompute_bookkeeping_bytes(chain, example_input))


def recompute_bookkeeping_bytes(chain: Chain, x: torch.Tensor) -> int:
    """Bytes the allocator hands out when the replay reads the generators' states before a
    forward of a recomputed stage (remat.runtime.core.BufferSnapshots.rng: CPU, a 5,056-byte
    tensor; CUDA, the states are CPU tensors, 0 device bytes), measured once."""
    if x.device.type == "meta":
        return 0
    devices = accelerator_devices([x, *trainable_params(chain.stages)])
    with AllocatorMeter(x.device) as meter:
        RngState.current(devices)
    return int(meter.peak_bytes)


def with_recompute_bookkeeping(profile: ChainProfile, nbytes: int) -> ChainProfile:
    """``profile`` with every forward's transient covering the replay's read of the generators.

    The replay reads them (``nbytes``, freed at once) before a forward of a recomputed stage runs,
    when the memory is what the op starts with; the op's peak is then ``before + max(nbytes,
    added + transient)`` (added: ``output_size`` for F_ck/F_n, ``saved_size`` for F_all), so a
    transient of ``max(transient, nbytes - added)`` covers it in the chain model unchanged (docs/
    model.md, "What remat allocates itself"). Only stages whose output is smaller than
    ``nbytes`` change."""
    if nbytes <= 0:
        return profile

    def cover(transient: int, added: int) -> int:
        return max(transient, nbytes - added)

    stages = []
    for stage in profile.stages:
        options = tuple(
            dataclasses.replace(o, forward_overhead=cover(o.forward_overhead, o.saved_size)) for o in stage.options
        )
        stages.append(
            dataclasses.replace(
                stage,
                forward_overhead=cover(stage.forward_overhead, stage.saved_size),
                forward_nograd_overhead=cover(stage.nograd_overhead, stage.output_size),
                options=options,
            )
        )
    metadata = {**profile.metadata, "recompute_bookkeeping_bytes": int(nbytes)}
    return dataclasses.replace(profile, stages=tuple(stages), metadata=metadata)


def check_profile_matches(profile: ChainProfile, model: nn.Module | Chain, x: torch.Tensor) -> None:
    """Refuse, with a one-line :class:`RematError`, a profile measured on another model or input.

    Checked: the stage count, the input's shape, dtype and device type (from the metadata
    :func:`profile_chain` records; absent keys are not checked), the input's bytes, and every
    stage's output bytes on ``x`` (one no-grad forward; buffers and RNG are restored).
    """
    chain = as_chain(model)
    meta = profile.metadata
    where = f"profile '{profile.name}'"
    if profile.length != len(chain):
        raise RematError(f"{where} has {profile.length} stages, but the model has {len(chain)}")
    shape, dtype = meta.get("input_shape"), meta.get("dtype")
    if shape is not None and [int(d) for d in shape] != list(x.shape):
        raise RematError(
            f"{where} was measured on an input of shape {_shape(shape)}, not {_shape(x.shape)}: "
            "profile the model on this input"
        )
    if dtype is not None and str(dtype) != str(x.dtype).replace("torch.", ""):
        raise RematError(f"{where} was measured on {dtype} inputs, not {str(x.dtype).replace('torch.', '')}")
    if meta.get("device_type", x.device.type) != x.device.type:
        raise RematError(f"{where} was measured on {meta['device_type']}, not {x.device.type}: profile it there")
    if profile.input_size != allocated_bytes(x):
        raise RematError(f"{where}: input_size {profile.input_size} bytes does not match this input")
    state = StepState(chain, grads="same")
    outside = outside_storages(chain, x)
    try:
        with torch.no_grad(), untracked():
            a = x.detach()
            for i, (stage, record) in enumerate(zip(chain.stages, profile.stages, strict=True)):
                a = stage(a)
                size = boundary_bytes(a, x.device, outside=outside)
                if size != record.output_size:
                    raise RematError(
                        f"{where}: stage {i} ('{record.name}') outputs {size} bytes here, "
                        f"{record.output_size} in the profile: it was measured on another model"
                    )
    finally:
        state.restore()


def _shape(shape: Sequence[int]) -> str:
    return "x".join(str(int(d)) for d in shape)


__all__ = ["check_profile_matches", "profile_chain", "profile_stage", "time_chain", "time_ms"]
