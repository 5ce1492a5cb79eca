"""The step that does not fit: ``remat.checkpoint`` trains it under a memory cap (issue 45).

    python -m benchmarks.does_not_fit [--quick] [--only llama,lstm] [--out PATH] [--slack MiB]

A device's memory limit is emulated on the CPU with an address-space cap in a child process
(``resource.setrlimit(RLIMIT_AS, cap)``: past it torch's allocator raises "can't allocate memory").
Rows: a Hugging Face Llama at a long sequence, a torchvision ResNet at a large batch, a deep
homogeneous residual MLP (Chen et al. 2016's case) and one ``nn.LSTMCell`` looped over a long
sequence. Every row runs in fresh child processes, one thread each:

1. **uncapped** (``reference``): the plain step's allocator peak and per-block
   ``torch.utils.checkpoint``'s (HF: ``gradient_checkpointing_enable()``; the others: each block
   under ``checkpoint(use_reentrant=False)``), each with the address space it grew by; then the
   gradients of 3 AdamW steps of the plain model, saved to a temporary file.
2. **capped** (``baselines``): cap = the child's address space after imports, the model, its
   optimizer state, the batches and its gradients (allocated), plus an ``allowance`` chosen from
   step 1 (:func:`choose_allowance`: per-block checkpointing's need plus 5% and a slack, so that it fits and
   the plain step needs 2-3x the allowance). Checks that per-block checkpointing trains there
   (timed) and that the plain step raises out of memory (its one line is reported).
3. **capped, once per budget** (``remat``): the same cap; ``remat.checkpoint(model, batch,
   budget=B)`` for B = per-block checkpointing's measured peak and B/2, and two timed steps
   through the wrapped model, all under the cap. Then, the cap lifted (the profiler behind the
   allocator meter keeps its own records in the address space, tens of MiB on a step of
   thousands of ops), 3 AdamW steps through the wrapped model, each step's allocator peak against
   the plan's prediction, and the gradients against step 1's with ``torch.equal``.

Peaks are the CPU allocator's (:class:`remat.measure.allocator.AllocatorMeter`) over forward, loss
and backward, parameter gradients pre-allocated outside the meter, plus the chain input a_0 (the
image or the token ids), as remat counts them. remat's first call is metered as a whole, under
the cap, by an allocator meter around it (meters nest: remat's own meters run inside it; NOTE
[Nested allocator meters] in remat/measure/allocator.py): **the first call's allocator peak**
(plus a_0), against the budget. Its host side is read from the kernel too: **peak RSS growth**
(VmHWM after the call, reset before it through /proc/self/clear_refs, minus VmRSS before) and
**address-space growth** (VmPeak minus VmSize before); the cap is the hard check. The address
spaces of per-block checkpointing and of the plain step are read around unmetered steps (the
profiler behind the meter keeps its records in the address space).
Malloc's arenas are limited to one and its mmap threshold fixed at 32 KiB in every child
(MALLOC_ARENA_MAX, MALLOC_MMAP_THRESHOLD_), so a freed tensor gives its address space back and
the cap tracks the allocator. Imports that remat makes lazily (TorchDynamo) are made before the
cap is read, by a first ``remat.checkpoint`` of a tiny unrelated model: the cap is for
activations, as the budget is.

A failure in any child (out of memory, a refusal, a crash) is a verdict of its row in one line,
never the end of the benchmark. ``--out`` writes the rows and the machine as JSON; the markdown
table goes to stdout (docs/benchmarks.md, "The step that does not fit").
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import common

MiB = 2**20
STEPS = 3  # AdamW steps compared with the uncapped plain model's
TOLERANCE = 0.02  # prediction vs measured step peak
ROOT = Path(__file__).resolve().parent.parent
ROWS = ("llama", "resnet", "resmlp", "lstm")
# NOTE [Address space as the allocator]: glibc serves a large block by mmap and gives it back on
# free only above its mmap threshold, which it raises (up to 32 MiB) each time such a block is
# freed; below it, freed blocks stay in the heap and keep their address space. Thread arenas
# reserve 64 MiB each. Fixing the threshold and using one arena makes RLIMIT_AS count what the
# allocator holds (plus Python's small objects), as a device's memory limit counts its allocator's.
CHILD_ENV = {"MALLOC_ARENA_MAX": "1", "MALLOC_MMAP_THRESHOLD_": str(32 * 1024), "OMP_NUM_THREADS": "1"}
# MiB of slack per row by default (docs/benchmarks.md, "The step that does not fit"): remat's host
# state (TorchDynamo's graph, the fx stages, the profile phase's transients) and the allocator
# meter's records share the address space with the device's emulated memory. llama passed at 128
# (2026-12-07 22:00 UTC). resmlp failed at 128 and at 160 (its profile phase ran out) with the meter
# around the first call; it passed at 160 before that meter existed. With the profile's second set
# of gradients gone (2026-12-08), resmlp at batch 1024 and 96 (plain 2.4x the cap) and lstm at 128
# still ran out in the profile phase: the meter's own records (docs/benchmarks.md); resnet not rerun.
SLACK_MIB = {"llama": 128, "resmlp": 96, "resnet": 160, "lstm": 128}
QUICK_SLACK_MIB = 256  # --quick: Python's objects outweigh the tiny steps


# ----------------------------------------------------------------------------- the rows' models


def _residual_mlp(width: int, hidden: int, blocks: int, classes: int) -> Any:
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(width, hidden), nn.Linear(hidden, width)

        def forward(self, x):
            return x + self.fc2(nn.functional.relu(self.fc1(x)))

    class ResidualMLP(nn.Module):
        """Chen et al. 2016's case: a deep chain of identical residual blocks."""

        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Linear(width, width)
            self.blocks = nn.Sequential(*[Block() for _ in range(blocks)])
            self.head = nn.Linear(width, classes)

        def forward(self, x):
            return self.head(self.blocks(self.stem(x)))

    return ResidualMLP()


def _lstm_loop(features: int, hidden: int, classes: int) -> Any:
    import torch
    from torch import nn

    class LSTMLoop(nn.Module):
        """One shared ``nn.LSTMCell`` over the sequence in a Python loop, a head on the last state."""

        def __init__(self) -> None:
            super().__init__()
            self.cell = nn.LSTMCell(features, hidden)
            self.head = nn.Linear(hidden, classes)

        def forward(self, x):  # x: (time, batch, features)
            h = torch.zeros(x.shape[1], hidden, dtype=x.dtype)
            c = torch.zeros(x.shape[1], hidden, dtype=x.dtype)
            for t in range(x.shape[0]):
                h, c = self.cell(x[t], (h, c))
            return self.head(h)

    return LSTMLoop()


@dataclass
class Case:
    """One row's model (seed 0, train mode) and its ``STEPS`` batches (seeded): ``inputs[k]`` is a
    dict of keyword inputs (Hugging Face, loss via ``labels``) or one tensor (the others, with the
    class ``targets[k]`` and cross-entropy); ``blocks`` are the segments per-block checkpointing
    wraps (lists of modules run in order: a ResNet's stem is one, each residual block another)."""

    name: str
    config: dict
    model: Any
    inputs: list
    targets: list
    blocks: list
    hf: bool

    def plain_loss(self, k: int) -> Any:
        import torch

        if self.hf:
            return self.model(**self.inputs[k]).loss
        return torch.nn.functional.cross_entropy(self.model(self.inputs[k]), self.targets[k])

    def example(self) -> Any:
        return self.inputs[0] if self.hf else (self.inputs[0],)

    def input_bytes(self) -> int:
        """The chain input a_0 (token ids or images), counted in every peak as remat counts it."""
        first = self.inputs[0]["input_ids"] if self.hf else self.inputs[0]
        return first.untyped_storage().nbytes()


def sizes(name: str, quick: bool) -> dict:
    """Each row's sizes: the full run's (a step of about 0.5-1.3 GB of activations on this machine)
    or ``--quick``'s (tiny, seconds)."""
    full = {
        "llama": {"layers": 6, "hidden": 256, "heads": 4, "intermediate": 688, "vocab": 2048, "seq": 1024},
        "resnet": {"arch": "resnet50", "batch": 16, "image": 128, "classes": 10},
        "resmlp": {"blocks": 200, "width": 128, "hidden": 512, "batch": 1024, "classes": 10},
        "lstm": {"features": 128, "hidden": 128, "batch": 256, "seq": 256, "classes": 10},
    }
    tiny = {
        "llama": {"layers": 2, "hidden": 32, "heads": 2, "intermediate": 64, "vocab": 128, "seq": 64},
        "resnet": {"arch": "resnet18", "batch": 2, "image": 32, "classes": 10},
        "resmlp": {"blocks": 8, "width": 32, "hidden": 64, "batch": 64, "classes": 10},
        "lstm": {"features": 8, "hidden": 16, "batch": 4, "seq": 8, "classes": 10},
    }
    return (tiny if quick else full)[name]


def build(name: str, quick: bool) -> Case:
    """The row ``name``'s case (seed 0 for the weights, seed 1 for the batches)."""
    import torch

    from remat.models.compat import import_torchvision

    import_torchvision()  # first: transformers imports torchvision, whose ops may need defining here
    s = sizes(name, quick)
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    if name == "llama":
        from transformers import LlamaConfig, LlamaForCausalLM

        config = LlamaConfig(
            vocab_size=s["vocab"], hidden_size=s["hidden"], intermediate_size=s["intermediate"],
            num_hidden_layers=s["layers"], num_attention_heads=s["heads"], num_key_value_heads=s["heads"],
            max_position_embeddings=s["seq"], attn_implementation="eager",
        )  # fmt: skip
        model = LlamaForCausalLM(config).train()
        ids = [torch.randint(0, s["vocab"], (1, s["seq"]), generator=g) for _ in range(STEPS)]
        return Case(name, s, model, [{"input_ids": i, "labels": i} for i in ids], [None] * STEPS, [], True)
    if name == "resnet":
        import torchvision

        model = getattr(torchvision.models, s["arch"])(num_classes=s["classes"]).train()
        shape = (s["batch"], 3, s["image"], s["image"])
        stem = [model.conv1, model.bn1, model.relu, model.maxpool]  # one segment: its own activations are large
        layers = (model.layer1, model.layer2, model.layer3, model.layer4)
        blocks = [stem, *([block] for layer in layers for block in layer)]
    elif name == "resmlp":
        model = _residual_mlp(s["width"], s["hidden"], s["blocks"], s["classes"]).train()
        shape, blocks = (s["batch"], s["width"]), [[block] for block in model.blocks]
    elif name == "lstm":
        model = _lstm_loop(s["features"], s["hidden"], s["classes"]).train()
        shape, blocks = (s["seq"], s["batch"], s["features"]), [[model.cell]]
    else:
        raise KeyError(name)
    inputs = [torch.randn(*shape, generator=g) for _ in range(STEPS)]
    targets = [torch.randint(0, s["classes"], (shape[1] if name == "lstm" else shape[0],), generator=g)] * STEPS
    return Case(name, s, model, inputs, targets, blocks, False)


@contextlib.contextmanager
def per_block(case: Case) -> Iterator[None]:
    """Per-block ``torch.utils.checkpoint`` (``use_reentrant=False``): HF's own switch, or each
    block's forward wrapped (the LSTM's one cell: every time step)."""
    from torch.utils.checkpoint import checkpoint

    if case.hf:
        model, kwargs = case.model, {"use_reentrant": False}
        if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.x: the new name
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        try:
            yield
        finally:
            getattr(model, "activation_checkpointing_disable", model.gradient_checkpointing_disable)()
        return
    for segment in case.blocks:  # the first module runs the whole segment, the others pass through
        forwards = [m.forward for m in segment]

        def run(*args: Any, _forwards: list = forwards, **kwargs: Any) -> Any:
            x = _forwards[0](*args, **kwargs)
            for forward in _forwards[1:]:
                x = forward(x)
            return x

        segment[0].forward = lambda *a, _run=run, **k: checkpoint(_run, *a, use_reentrant=False, **k)
        for m in segment[1:]:
            m.forward = lambda x: x
    try:
        yield
    finally:
        for segment in case.blocks:
            for m in segment:
                del m.forward  # the class's forward again


# ----------------------------------------------------------------------------- inside a child


def status(field: str) -> int:
    """A ``/proc/self/status`` field (VmSize, VmPeak, VmRSS, VmHWM) in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def growth(base: int, peak_before: int) -> int | None:
    """The address space a block grew by above ``base`` (bytes): VmPeak now minus ``base``, or None
    when VmPeak did not pass ``peak_before`` (its value when the block began; the kernel keeps no
    way to reset it, so a peak from before, e.g. building the model, would hide the block's)."""
    peak = status("VmPeak")
    return peak - base if peak > peak_before else None


def reset_peak_rss() -> None:
    """Start VmHWM again from the current RSS (Linux's clear_refs 5)."""
    Path("/proc/self/clear_refs").write_text("5")


def one_line(error: BaseException) -> str:
    """An exception as one line (its first), with its type unless it is remat's own."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    kind = type(error).__name__
    line = text if kind in ("RematError", "InfeasibleBudgetError") else f"{kind}: {text}"
    return line[:400]


def is_out_of_memory(line: str) -> bool:
    """Whether a failure's one line is an allocation failure (the allocator, malloc or C++'s)."""
    low = line.lower()
    return any(
        s in low for s in ("can't allocate memory", "memoryerror", "bad_alloc", "out of memory", "not enough memory")
    )


def is_refusal(line: str) -> bool:
    """Whether a failure's one line is remat refusing a budget below its least (naming that least)."""
    return not is_out_of_memory(line) and ("cannot fit a budget" in line or "at least" in line)


def zero_grads(model: Any) -> None:
    """Every parameter's gradient allocated and zeroed (outside any meter, inside the cap's base)."""
    import torch

    for p in model.parameters():
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        else:
            p.grad.zero_()


def make_optimizer(model: Any) -> Any:
    """AdamW with its state allocated (one step at lr 0 on zero gradients, then its step count
    back to 0), so the state is in the cap's base; the parameters are unchanged."""
    import torch

    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    zero_grads(model)
    opt.param_groups[0]["lr"] = 0.0
    opt.step()
    opt.param_groups[0]["lr"] = 1e-3
    for state in opt.state.values():
        state["step"].zero_()
    return opt


def metered_step(loss_fn: Callable[[], Any]) -> tuple[int, float]:
    """One forward + loss + backward under the allocator meter: (peak bytes above the start, seconds)."""
    from remat.measure.allocator import AllocatorMeter

    begin = time.perf_counter()
    with AllocatorMeter("cpu") as meter:
        loss_fn().backward()
    return meter.peak_bytes, time.perf_counter() - begin


def timed_steps(model: Any, loss_fn: Callable[[], Any], count: int = 2) -> float:
    """Median milliseconds of ``count`` unmetered forward + backward steps (gradients zeroed first)."""
    times = []
    for _ in range(count):
        zero_grads(model)
        begin = time.perf_counter()
        loss_fn().backward()
        times.append((time.perf_counter() - begin) * 1000.0)
    return statistics.median(times)


def warm_up_meter() -> None:
    """Start the CPU profiler (the allocator meter) once on a tiny step: its first start maps
    buffers that would otherwise count as the first metered step's address space."""
    import torch

    from remat.measure.allocator import AllocatorMeter

    x = torch.randn(8, 8, requires_grad=True)
    with AllocatorMeter("cpu"):
        (x @ x).sum().backward()
    gc.collect()


def warm_up_imports() -> None:
    """Import what remat imports lazily (TorchDynamo and its kin) and start the profiler once, on a
    tiny model: a cap read after this is for the step's memory, not for modules (NOTE in the docstring)."""
    import torch

    import remat
    from remat.measure.allocator import AllocatorMeter

    tiny = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1)).train()
    wrapped = remat.checkpoint(tiny, (torch.randn(2, 4),), budget=1.0)
    with AllocatorMeter("cpu"):
        wrapped(torch.randn(2, 4)).sum().backward()
    del wrapped, tiny
    gc.collect()


def set_cap(allowance: int) -> dict:
    """RLIMIT_AS at the address space now plus ``allowance`` (bytes); returns both, and VmPeak then."""
    gc.collect()
    base = status("VmSize")
    resource.setrlimit(resource.RLIMIT_AS, (base + allowance, resource.RLIM_INFINITY))
    return {"base_address_space": base, "cap": base + allowance, "allowance": allowance,
            "peak_at_cap": status("VmPeak")}  # fmt: skip


def child_reference(case: Case, work: Path) -> dict:
    """Uncapped: plain and per-block peaks (allocator; address-space growth of unmetered steps, as
    the profiler behind the meter keeps its own records in the address space), the plain gradients."""
    import torch

    a0 = case.input_bytes()
    state = {k: v.clone() for k, v in case.model.state_dict().items()}
    opt = make_optimizer(case.model)
    warm_up_meter()
    base, before = status("VmSize"), status("VmPeak")
    out: dict[str, Any] = {"a0": a0}
    plain = lambda: case.plain_loss(0)  # noqa: E731
    with per_block(case):  # the first run is in it: first-run allocations (oneDNN, autograd) are a step's too
        timed_steps(case.model, plain)
    out["per_block_address_space"] = growth(base, before) or 0  # hidden by an earlier peak: the allocator's
    out["plain_ms"] = timed_steps(case.model, plain)
    out["plain_address_space"] = growth(base, before) or 0  # the most so far: the plain step needs more
    with per_block(case):
        zero_grads(case.model)
        out["per_block_peak"] = metered_step(plain)[0] + a0
    zero_grads(case.model)
    out["plain_peak"] = metered_step(plain)[0] + a0
    case.model.load_state_dict(state)  # BatchNorm statistics back: the steps below start from seed 0
    torch.manual_seed(2)
    for k in range(STEPS):
        opt.zero_grad(set_to_none=False)
        case.plain_loss(k).backward()
        torch.save([p.grad for p in case.model.parameters()], work / f"plain_grads_{k}.pt")
        opt.step()
    return out


def child_baselines(case: Case, allowance: int) -> dict:
    """Capped: per-block checkpointing must train (timed), the plain step must run out of memory."""
    make_optimizer(case.model)
    out: dict[str, Any] = set_cap(allowance)
    try:
        with per_block(case):
            out["per_block_ms"] = timed_steps(case.model, lambda: case.plain_loss(0))
        out["per_block_fits"] = True
    except Exception as error:  # noqa: BLE001 - the row says why
        out["per_block_fits"], out["per_block_error"] = False, one_line(error)
    out["per_block_address_space"] = growth(out["base_address_space"], out["peak_at_cap"])
    gc.collect()
    zero_grads(case.model)
    try:
        case.plain_loss(0).backward()
        out["plain_fails"], out["plain_error"] = False, None
    except (RuntimeError, MemoryError) as error:
        out["plain_error"] = one_line(error)
        out["plain_fails"] = is_out_of_memory(out["plain_error"])
    return out


def child_remat(case: Case, allowance: int, budget: int, work: Path) -> dict:
    """Capped: ``remat.checkpoint`` at ``budget`` (its first call's peaks and time) and two timed,
    unmetered steps through the wrapped model. Then, the cap lifted (the profiler behind the meter
    keeps its records in the address space), ``STEPS`` AdamW steps, each step's allocator peak
    against the plan's prediction, the gradients saved for the parent to compare."""
    import torch

    import remat
    from remat.measure.allocator import AllocatorMeter

    warm_up_imports()
    # the meter starts before the gradients are made: the CPU allocator reports no free of a block
    # from before a profiler session, and the proof sets the model's gradients aside (freed)
    with AllocatorMeter("cpu") as meter:  # meters nest: remat's own run inside this one
        opt = make_optimizer(case.model)
        out: dict[str, Any] = {"budget": budget, **set_cap(allowance)}
        loss = None if case.hf else torch.nn.functional.cross_entropy
        target = None if case.hf else case.targets[0]
        rss = status("VmRSS")
        reset_peak_rss()
        begin = time.perf_counter()
        meter.mark("first call")
        try:
            wrapped = remat.checkpoint(case.model, case.example(), budget=budget, loss=loss, target=target)
        except Exception as error:  # noqa: BLE001 - a refusal or an out of memory is the cell's verdict
            wrapped, failed = None, one_line(error)
    if wrapped is None:
        out["first_call"] = {"failed": failed, "seconds": time.perf_counter() - begin}
        return out
    call = meter.phases[1]  # the first call: its rise above the device's total when it began
    out["first_call"] = {
        "seconds": time.perf_counter() - begin,
        "allocator_peak": call.peak - call.start + case.input_bytes(),  # a_0 counted, as in every peak
        "rss_growth": status("VmHWM") - rss,
        "address_space_growth": growth(out["base_address_space"], out["peak_at_cap"]),
    }

    def call(k: int) -> Any:
        if case.hf:
            return wrapped(**case.inputs[k]).loss
        return wrapped(case.inputs[k], target=case.targets[k])

    try:
        out["step_ms"] = timed_steps(case.model, lambda: call(0))
    except Exception as error:  # noqa: BLE001
        out["step_failed"] = f"under the cap: {one_line(error)}"
        return out
    out["steps_address_space_growth"] = growth(out["base_address_space"], out["peak_at_cap"])
    resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    a0 = wrapped.profile.input_size
    steps = out["steps"] = []
    torch.manual_seed(2)
    try:
        for k in range(STEPS):
            plan = wrapped.plan_for(**case.inputs[k]) if case.hf else wrapped.plan_for(case.inputs[k], target=target)
            opt.zero_grad(set_to_none=False)
            peak, seconds = metered_step(lambda k=k: call(k))
            steps.append({"predicted": plan.predicted_peak, "measured": peak + a0, "seconds": seconds})
            torch.save([p.grad for p in case.model.parameters()], work / f"remat_grads_{k}.pt")
            opt.step()
    except Exception as error:  # noqa: BLE001
        out["step_failed"] = one_line(error)
    return out


def child_main(spec: dict) -> None:
    """Run one child (``--child SPEC``): build the row, run its role, write its JSON."""
    import torch

    torch.set_num_threads(1)
    work = Path(spec["work"])
    result: dict[str, Any]
    try:
        case = build(spec["row"], spec["quick"])
        if spec["role"] == "reference":
            result = child_reference(case, work)
        elif spec["role"] == "baselines":
            result = child_baselines(case, spec["allowance"])
        else:
            result = child_remat(case, spec["allowance"], spec["budget"], work)
    except Exception as error:  # noqa: BLE001 - reported as the child's failure
        result = {"failed": one_line(error)}
    Path(spec["out"]).write_text(json.dumps(result))


# ----------------------------------------------------------------------------- the parent


def run_child(role: str, row: str, quick: bool, work: Path, timeout: float, **extra: Any) -> dict:
    """One fresh child process; its JSON, or ``{"failed": ...}`` naming how it ended."""
    out = work / f"{role}_{extra.get('budget', '')}.json"
    out.unlink(missing_ok=True)
    spec = {"role": role, "row": row, "quick": quick, "work": str(work), "out": str(out), **extra}
    env = {**os.environ, **CHILD_ENV, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "benchmarks.does_not_fit", "--child", json.dumps(spec)]
    begin = time.perf_counter()
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"failed": f"{role} child: no result within {timeout:.0f} s"}
    seconds = round(time.perf_counter() - begin, 1)
    if out.exists():
        return {**json.loads(out.read_text()), "child_seconds": seconds}
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    return {"failed": f"{role} child exited {done.returncode}: {lines[-1][:300] if lines else 'no output'}"}


def needs(reference: dict) -> tuple[int, int]:
    """What per-block checkpointing's step and the plain step need above the cap's base (bytes):
    the larger of the allocator's peak (less a_0, which is in the base) and the address space the
    step grew by."""
    a0 = reference["a0"]
    return (max(reference["per_block_peak"] - a0, reference["per_block_address_space"]),
            max(reference["plain_peak"] - a0, reference["plain_address_space"]))  # fmt: skip


def choose_allowance(reference: dict, slack: int) -> int:
    """The cap above the base (bytes): per-block checkpointing's need (:func:`needs`) plus 5% and
    ``slack`` (bytes: Python's own objects), raised to a third of the plain step's need where that
    is more, so that the plain step needs 2-3x it (the row's ``plain_over_allowance`` says how much)."""
    per_block, plain = needs(reference)
    return max(int(per_block * 1.05) + slack, plain // 3)


def compare_grads(work: Path) -> dict:
    """remat's gradients of each AdamW step against the uncapped plain model's: ``torch.equal`` (fp32)."""
    import torch

    result: dict[str, Any] = {"equal": True, "steps": 0, "max_abs_diff": 0.0}
    for k in range(STEPS):
        mine, theirs = work / f"remat_grads_{k}.pt", work / f"plain_grads_{k}.pt"
        if not (mine.exists() and theirs.exists()):
            return {**result, "equal": False, "missing": f"step {k}"}
        a, b = torch.load(mine), torch.load(theirs)
        diff = max(float((x.double() - y.double()).abs().max()) for x, y in zip(a, b, strict=True))
        result["max_abs_diff"] = max(result["max_abs_diff"], diff)
        result["equal"] &= all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
        result["steps"] = k + 1
        mine.unlink()
    return result


def budget_verdict(cell: dict, room: int) -> dict:
    """Whether remat trained at this budget: its first call within it (its allocator peak at most
    the budget; its peak RSS growth at most the budget plus ``room``, the bytes the cap grants
    per-block checkpointing beyond its peak) and
    every step within it, predictions within ``TOLERANCE``, gradients equal; a refusal naming its
    least is ``refused`` (not a pass)."""
    first = cell.get("first_call", {})
    if "failed" in cell:
        return {"ok": False, "why": cell["failed"]}
    if "failed" in first:
        return {"ok": False, "refused": is_refusal(first["failed"]), "why": first["failed"]}
    budget, steps = cell["budget"], cell.get("steps", [])
    checks = {
        "trains": len(steps) == STEPS and "step_failed" not in cell,
        "first_call_within": first["rss_growth"] <= budget + room,
        "first_call_allocator_within": first.get("allocator_peak", budget + 1) <= budget,
        "steps_within": bool(steps) and all(s["measured"] <= budget for s in steps),
        "prediction": bool(steps) and all(abs(error(s)) <= TOLERANCE for s in steps),
        "grads_equal": cell.get("grads", {}).get("equal", False),
    }
    failed = [name for name, ok in checks.items() if not ok]
    why = cell.get("step_failed") or ("" if not failed else "fails: " + ", ".join(failed))
    return {"ok": not failed, **checks, "why": why}


def error(step: dict) -> float:
    """(measured - predicted) / predicted of one step's peak."""
    return (step["measured"] - step["predicted"]) / step["predicted"] if step["predicted"] else float("inf")


def row_verdict(row: dict) -> str:
    """PASS when remat trains at per-block checkpointing's peak and at half of it (or refuses half
    in one line naming its least); the cap's own checks (plain fails, per-block fits) are named."""
    if "failed" in row:
        return f"FAIL: {row['failed']}"
    notes = []
    base = row.get("baselines", {})
    if not base.get("plain_fails"):
        notes.append(f"plain step did not fail under the cap ({base.get('plain_error') or base.get('failed')})")
    if not base.get("per_block_fits"):
        notes.append(f"per-block checkpointing did not fit ({base.get('per_block_error') or base.get('failed')})")
    bad = []
    for label, cell in row["budgets"].items():
        v = cell["verdict"]
        if not v["ok"] and not (label == "half" and v.get("refused")):
            bad.append(f"{label}: {v['why']}")
    head = "PASS" if not bad else "FAIL: " + "; ".join(bad)
    return head + ("" if not notes else " (cap: " + "; ".join(notes) + ")")


def measure_row(name: str, quick: bool, timeout: float, slack: int) -> dict:
    """One row (bytes, ms, seconds): four fresh children (see the module docstring)."""
    row: dict[str, Any] = {"row": name, "sizes": sizes(name, quick)}
    with tempfile.TemporaryDirectory(prefix=f"does_not_fit_{name}_") as tmp:
        work = Path(tmp)
        reference = row["reference"] = run_child("reference", name, quick, work, timeout)
        if "failed" in reference:
            row["failed"] = f"uncapped: {reference['failed']}"
            row["verdict"] = row_verdict(row)
            return row
        allowance = row["allowance"] = choose_allowance(reference, slack)
        row["plain_over_allowance"] = needs(reference)[1] / allowance
        row["baselines"] = run_child("baselines", name, quick, work, timeout, allowance=allowance)
        room = allowance - reference["per_block_peak"]  # what the cap grants beyond per-block's peak
        budget = reference["per_block_peak"]
        row["budgets"] = {}
        for label, b in (("per-block", budget), ("half", budget // 2)):
            cell = run_child("remat", name, quick, work, timeout, allowance=allowance, budget=b)
            cell.setdefault("budget", b)
            if cell.get("steps"):
                cell["grads"] = compare_grads(work)
            cell["verdict"] = budget_verdict(cell, room)
            row["budgets"][label] = cell
    row["verdict"] = row_verdict(row)
    return row


# ----------------------------------------------------------------------------- the table


def _mib(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value / MiB:.0f}" if abs(value) >= 100 * MiB else f"{value / MiB:.1f}"


def _budget_cells(cell: dict, per_block_ms: float | None) -> list[str]:
    first = cell.get("first_call", {})
    if "failed" in cell or "failed" in first:
        why = (cell.get("failed") or first.get("failed", "")).replace("|", "/")
        return ["—", f"**failed**: {why}", "—", "—", "—"]
    allocator = _mib(first.get("allocator_peak"))
    space = first.get("address_space_growth")
    first_text = (f"{_mib(first['rss_growth'])} RSS / {_mib(space)} AS, "
                  f"{first['seconds']:.0f} s")  # fmt: skip
    steps = cell.get("steps", [])
    step_text = ", ".join(f"{_mib(s['measured'])} vs {_mib(s['predicted'])}" for s in steps) or "—"
    if steps:
        step_text += f" (worst {max((error(s) for s in steps), key=abs):+.2%})"
    if "step_failed" in cell:
        step_text += f"; **failed**: {cell['step_failed']}".replace("|", "/")
    ms = cell.get("step_ms")
    time_text = "—" if ms is None else f"{ms:.0f} vs {per_block_ms:.0f}" if per_block_ms else f"{ms:.0f} vs —"
    grads = cell.get("grads")
    grads_text = "—" if grads is None else "yes" if grads["equal"] else f"**no** ({grads['max_abs_diff']:.1e})"
    return [allocator, first_text, step_text, time_text, grads_text]


def markdown(rows: list[dict]) -> str:
    """The table (MiB = 2^20 bytes; AS = address space)."""
    lines = [
        "| row | plain peak | per-block peak | cap above base (plain / cap) | budget "
        "| first call's allocator peak | first call: peak RSS / AS growth, time "
        "| steps: measured vs predicted (MiB) | step ms: remat vs per-block | grads equal (3 AdamW) | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        verdict = r["verdict"].replace("|", "/")
        ref = r.get("reference", {})
        if "budgets" not in r:
            lines.append(f"| {r['row']} | " + " | ".join(["—"] * 9) + f" | {verdict} |")
            continue
        base = r.get("baselines", {})
        cap = f"{_mib(r['allowance'])} ({r['plain_over_allowance']:.1f}x)"
        for i, (label, cell) in enumerate(r["budgets"].items()):
            head = [r["row"], _mib(ref["plain_peak"]), _mib(ref["per_block_peak"]), cap] if i == 0 else [""] * 4
            cells = _budget_cells(cell, base.get("per_block_ms"))
            tail = verdict if i == 0 else ""
            lines.append("| " + " | ".join([*head, f"{_mib(cell['budget'])} ({label})", *cells, tail]) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    common.add_quick(parser, "tiny sizes (under a minute a row)")
    common.add_out(parser, "does_not_fit")
    parser.add_argument("--only", help=f"comma-separated rows of {', '.join(ROWS)}")
    parser.add_argument(
        "--slack",
        type=float,
        help="MiB of the cap beyond per-block checkpointing's need plus 5%% for every row (default: "
        "each row's SLACK_MIB, the least it ran with here; 256 with --quick)",
    )
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per child (default 1800)")
    args = parser.parse_args()
    if args.child:
        child_main(json.loads(args.child))
        return
    names = ROWS if not args.only else tuple(args.only.split(","))
    unknown = [n for n in names if n not in ROWS]
    if unknown:
        parser.error(f"--only: unknown row {unknown[0]!r}; known: {', '.join(ROWS)}")
    slacks = {name: QUICK_SLACK_MIB if args.quick else SLACK_MIB[name] for name in names}
    if args.slack is not None:
        slacks = dict.fromkeys(names, args.slack)
    rows = []
    for name in names:
        begin = time.perf_counter()
        rows.append(
            {
                **measure_row(name, args.quick, args.timeout, int(slacks[name] * MiB)),
                "slack_mib": slacks[name],
                "seconds": round(time.perf_counter() - begin, 1),
            }  # fmt: skip
        )
        print(f"{name}: {rows[-1]['verdict']} ({rows[-1]['seconds']} s)", flush=True)
    print(markdown(rows))
    machine = common.machine(note="shared 2-core machine; children run on 1 thread")
    common.write_result({"machine": machine, "quick": args.quick, "rows": rows}, common.out_path(args, "does_not_fit"))


if __name__ == "__main__":
    main()
