"""remat on library models built from configs, next to plain PyTorch and HF / torch.utils.checkpoint.

    python -m benchmarks.real_models [--only gpt2,resnet50] [--quick] [--runs 3]

One row per model (docs/models.md, "Measured on real models"): the stages the traced cut found;
store-all's measured peak next to the plain model's step; predicted vs measured peak at half the
store-all budget; fp32 gradients ``torch.equal`` to the plain model's; the bf16-autocast gradient
difference to plain autocast, for remat and for per-block ``torch.utils.checkpoint``; and, at
the memory that HF's ``gradient_checkpointing_enable()`` (Hugging Face models) or per-block
``torch.utils.checkpoint`` (vision models) measured, remat's peak and step time next to it;
remat's least memory (the schedule at the least budget the DP meets, measured) next to that
baseline's; and the worst predicted-vs-allocator error over ``--runs`` fresh profiles on a quiet
machine and as many beside two busy processes (each run profiles again, so the timings, and with
them the schedules, differ from run to run; each run measures the schedules at half the store-all
budget, at the least budget, at the baseline's peak and at store-all).

Every peak is the CPU allocator's (:class:`remat.measure.allocator.AllocatorMeter`), in the
simulator's accounting (docs/model.md): bytes allocated during the step plus the chain input a_0;
parameters and their gradients (pre-allocated, :func:`remat.replay.report.prepare_grads`) are
outside it, for remat and for the baselines alike. Step times are medians of unmetered steps on
one thread (noisy on a shared machine). A full run writes benchmarks/results/real_models.json
(with the machine) and the table into docs/models.md between its marker comments; ``--only`` runs
print and write benchmarks/results/real_models_partial.json only, ``--quick`` runs a temporary file.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint as torch_checkpoint

import remat
from benchmarks import common, cut_models
from remat.models.hub import build_library_model
from remat.replay.report import prepare_grads, step_allocator_peak
from remat.schedules import RematError

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
DOC = ROOT / "docs" / "models.md"
BEGIN, END = "<!-- real_models:begin -->", "<!-- real_models:end -->"
IMAGE = 64  # image side of the vision models in the full run
TARGET = torch.tensor([1, 7])  # class targets of the vision models (batch 2)
Entry = tuple[str, dict, Any, bool]  # (spec, config, example inputs, image model with a cross-entropy loss)


def full_models() -> dict[str, Entry]:
    """The nine models of issue 10 and the eleven of issue 22 at the sizes of benchmarks/cut_models.py
    (batch 2, 128 tokens, 64² images)."""
    return cut_models.models(IMAGE)


def quick_models() -> dict[str, Entry]:
    """Three tiny models for a quick run (and the test): a test finishes in well under a minute."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 64, (2, 8), generator=g)
    tokens = {"input_ids": ids, "labels": torch.randint(0, 64, (2, 8), generator=g)}
    image = torch.randn(2, 3, 32, 32, generator=g)
    return {
        "gpt2": ("transformers:gpt2", {"n_layer": 2, "n_embd": 32, "n_head": 2, "vocab_size": 64}, tokens, False),
        "torchvision-mobilenet_v3_small": (
            "torchvision:mobilenet_v3_small", {"num_classes": 10, "width_mult": 0.25}, image, True),
        "torchvision-resnet18": ("torchvision:resnet18", {"num_classes": 10}, image, True),
    }  # fmt: skip


def one_line(error: BaseException) -> str:
    """The reason a row or a cell failed, in one line."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return text if isinstance(error, RematError) else f"{type(error).__name__}: {text}"


def attempt(fn: Callable[[], dict]) -> dict:
    """``fn()``, or ``{"failed": reason}`` if it raised: a failing cell shows why, never hides the row."""
    try:
        return fn()
    except Exception as error:  # noqa: BLE001 - any failure is reported in its cell
        return {"failed": one_line(error)}


class Case:
    """One model with its example, its plain training step and remat's step (same inputs, same loss)."""

    def __init__(self, spec: str, config: dict, inputs: Any, image_model: bool) -> None:
        torch.manual_seed(0)
        self.model = build_library_model(spec, config).train()
        self.inputs, self.image_model = inputs, image_model
        self.args, self.kwargs = ((inputs,), {}) if isinstance(inputs, torch.Tensor) else ((), dict(inputs))
        self.loss = nn.functional.cross_entropy if image_model else None
        self.target = TARGET if image_model else None
        self.buffers = [b.detach().clone() for b in self.model.buffers()]

    def plain(self) -> torch.Tensor:
        """The plain model's step output: its own loss (Hugging Face, ``labels=``) or cross-entropy."""
        if self.image_model:
            return nn.functional.cross_entropy(self.model(*self.args), self.target)
        return self.model(**self.kwargs).loss

    def remat_step(self, wrapped: remat.RematModel) -> Callable[[], torch.Tensor]:
        if self.image_model:
            return lambda: wrapped(*self.args, target=self.target)
        return lambda: wrapped(**self.kwargs).loss

    def checkpoint(self) -> remat.RematModel:
        example = self.inputs if isinstance(self.inputs, dict) else (self.inputs,)
        # over_budget="least": the bf16 cell's calls under autocast are a signature of their own
        # (traced, proven and profiled under it), solved under this fp32 budget, which they may
        # need more than; they then run at their least (the cell measures exactness, not memory)
        return remat.checkpoint(
            self.model, example, budget=1.0, loss=self.loss, target=self.target, over_budget="least"
        )

    def reset(self) -> None:
        """Buffers back to the model's initial ones (BatchNorm statistics), so every step starts alike."""
        with torch.no_grad():
            for b, saved in zip(self.model.buffers(), self.buffers, strict=True):
                b.copy_(saved)


def step_peak(case: Case, step: Callable[[], torch.Tensor], a0_bytes: int, steps: int = 2) -> int:
    """The allocator's peak over ``steps`` steps after one warmup (bytes): allocations during
    ``step().backward()`` plus the chain input a_0; parameter gradients pre-allocated outside
    (:func:`remat.replay.report.step_allocator_peak`, the accounting of ``remat execute``)."""
    case.reset()
    return step_allocator_peak(case.model, step, torch.device("cpu"), steps=steps) + a0_bytes


def step_ms(case: Case, step: Callable[[], torch.Tensor], steps: int = 5) -> float:
    """Median wall-clock milliseconds of ``steps`` unmetered steps after one warmup."""
    times = []
    for i in range(steps + 1):
        case.reset()
        prepare_grads(case.model)
        begin = time.perf_counter()
        step().backward()
        if i:
            times.append((time.perf_counter() - begin) * 1000.0)
    return statistics.median(times)


def grads(case: Case, step: Callable[[], torch.Tensor], bf16: bool = False) -> list[torch.Tensor]:
    """Parameter gradients of one step from the same buffers and RNG state (under bf16 autocast if asked)."""
    case.reset()
    for p in case.model.parameters():
        p.grad = None
    torch.manual_seed(3)
    with torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext():
        loss = step()
    loss.backward()
    return [p.grad.detach().clone() for p in case.model.parameters()]


def max_abs_difference(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max(float((x.double() - y.double()).abs().max()) for x, y in zip(a, b, strict=True))


def _checkpointed(forward: Callable) -> Callable:
    return lambda *args, **kwargs: torch_checkpoint(forward, *args, use_reentrant=False, **kwargs)


def block_segments(model: nn.Module, stage_names: list[str]) -> list[list[nn.Module]]:
    """The blocks of the cut as module runs: a stage named by a module path is that module; one named
    ``parent.i-j`` is children i..j of ``parent`` (a conv and its in-place ReLU); stages that are no
    module (``root``, ``loss``) or contain other stages (vit's ``encoder``) are not checkpointed.
    A fused stage (``first+second``, remat/trace/fuse.py) is its parts, each checkpointed as a
    user would checkpoint its blocks."""
    # a later call of a shared block (``albert_layers.0#2``) is that block, checkpointed once
    parts = [re.sub(r"#\d+$", "", part) for name in stage_names for part in name.split("+")]
    stage_names = list(dict.fromkeys(parts))
    segments, taken = [], set()
    for name in stage_names:
        match = re.fullmatch(r"(.*)\.(\d+)-(\d+)", name)
        covered = [f"{match[1]}.{i}" for i in range(int(match[2]), int(match[3]) + 1)] if match else [name]
        if any(other.startswith(c + ".") for c in covered for other in stage_names):
            continue  # it holds other stages (a stage's blocks are cut apart): those are checkpointed
        try:
            if match:
                parent = model.get_submodule(match[1])
                segment = [parent[i] for i in range(int(match[2]), int(match[3]) + 1)]
            else:
                segment = [model.get_submodule(name)]
        except (AttributeError, IndexError, TypeError):
            continue
        if segment and segment[0] is not model and not taken & {id(m) for m in segment}:
            segments.append(segment)
            taken.update(id(m) for m in segment)
    return segments


@contextlib.contextmanager
def per_block_checkpoint(model: nn.Module, segments: list[list[nn.Module]]) -> Iterator[None]:
    """Run each segment under ``torch.utils.checkpoint(use_reentrant=False)``: its first module runs
    the whole segment, the others pass their input through; the forwards are put back after."""
    for segment in segments:
        forwards = [m.forward for m in segment]

        def run(x: Any, *rest: Any, _forwards: list = forwards, **kwargs: Any) -> Any:
            x = _forwards[0](x, *rest, **kwargs)
            for forward in _forwards[1:]:
                x = forward(x)
            return x

        segment[0].forward = _checkpointed(run)
        for m in segment[1:]:
            m.forward = lambda x: x
    try:
        yield
    finally:
        for segment in segments:
            for m in segment:
                del m.forward  # the class's forward again


@contextlib.contextmanager
def hf_checkpointing(model: nn.Module) -> Iterator[None]:
    """Hugging Face's own per-layer checkpointing (``torch.utils.checkpoint``, ``use_reentrant=False``)."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.x: the new name
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    try:
        yield
    finally:
        getattr(model, "activation_checkpointing_disable", model.gradient_checkpointing_disable)()


def baseline(case: Case, stage_names: list[str]) -> tuple[str, Callable[[], contextlib.AbstractContextManager]]:
    """HF's ``gradient_checkpointing_enable()`` for Hugging Face models, else per-block checkpoint."""
    if getattr(case.model, "supports_gradient_checkpointing", False):
        return "HF gradient_checkpointing_enable()", lambda: hf_checkpointing(case.model)
    segments = block_segments(case.model, stage_names)
    return f"torch.utils.checkpoint, {len(segments)} blocks", lambda: per_block_checkpoint(case.model, segments)


def store_all_cell(case: Case, store: remat.RematModel, a0: int) -> dict:
    plain = step_peak(case, case.plain, a0)
    measured = step_peak(case, case.remat_step(store), a0)
    return {"plain_peak": plain, "measured_peak": measured, "error": (measured - plain) / plain}


def below_store_all(store: remat.RematModel) -> remat.RematModel:
    """remat at half the store-all peak, or, when no schedule fits that, halfway between the
    smallest budget the DP can meet and store-all (a budget that makes it recompute)."""
    high, low = store.store_all_peak, store.least_peak  # the whole call's (side values in)
    return store.with_budget(high // 2 if low <= high // 2 else (low + high) // 2)


def half_cell(half: remat.RematModel, store: remat.RematModel) -> dict:
    report = half.report(steps=2, warmup=1)
    return {"budget": half.budget, "fraction": half.budget / store.store_all_peak,
            "predicted_peak": report.predicted_peak, "measured_peak": report.measured_peak,
            "error": report.peak_error}  # fmt: skip


def bf16_cell(case: Case, half: remat.RematModel, checkpointed: Callable) -> dict:
    plain = grads(case, case.plain, bf16=True)
    ours = max_abs_difference(grads(case, case.remat_step(half), bf16=True), plain)
    with checkpointed():
        theirs = max_abs_difference(grads(case, case.plain, bf16=True), plain)
    return {"remat": ours, "checkpoint": theirs, "within": ours <= theirs}


def equal_memory_cell(case: Case, store: remat.RematModel, a0: int, name: str, checkpointed: Callable) -> dict:
    with checkpointed():
        peak = step_peak(case, case.plain, a0)
        ms = step_ms(case, case.plain)
    cell = {"baseline": name, "baseline_peak": peak, "baseline_ms": ms}
    try:
        ours = store.with_budget(peak)
    except RematError as error:  # below remat's least budget: say so, and show remat at its least
        ours = store.with_budget(store.least_peak)
        cell["infeasible"] = one_line(error)
    step = case.remat_step(ours)
    least = store.with_budget(store.least_peak)
    least_peak = step_peak(case, case.remat_step(least), a0)
    return {
        **cell,
        "budget": ours.budget,
        "remat_peak": step_peak(case, step, a0),
        "remat_ms": step_ms(case, step),
        "least_budget": least.budget,
        "least_peak": least_peak,
        "least_at_most_baseline": least_peak <= peak,
    }


@contextlib.contextmanager
def busy_processes(count: int = 2) -> Iterator[None]:
    """``count`` busy pure-Python loops beside the block, as ``../shared/tools/loaded`` runs them."""
    loop = "import time\nt = time.time()\nwhile time.time() - t < 7200: sum(range(10000))"
    children = [subprocess.Popen([sys.executable, "-c", loop]) for _ in range(count)]
    try:
        yield
    finally:
        for child in children:
            child.kill()
            child.wait()


def run_errors(case: Case, baseline_peak: int | None) -> list[float]:
    """One fresh profile (``remat.checkpoint`` again: new timings, maybe other schedules) and the
    signed peak error (measured - predicted) / predicted of its schedules at half the store-all
    budget, at the least budget, at the baseline's measured peak (when remat can meet it) and at
    store-all (:meth:`remat.RematModel.report`, the allocator)."""
    store = case.checkpoint()
    high, low = store.store_all_peak, store.least_peak
    budgets = {high, low, max(high // 2, low)}
    if baseline_peak is not None and low <= baseline_peak:
        budgets.add(min(baseline_peak, high))
    errors = []
    for budget in sorted(budgets):
        case.reset()
        errors.append(store.with_budget(budget).report(steps=2, warmup=1).peak_error)
    return errors


def errors_cell(case: Case, baseline_peak: int | None, runs: int) -> dict:
    """The worst signed peak errors over ``runs`` quiet runs and ``runs`` beside two busy processes."""
    quiet = [e for _ in range(runs) for e in run_errors(case, baseline_peak)]
    with busy_processes():
        loaded = [e for _ in range(runs) for e in run_errors(case, baseline_peak)]
    return {"runs": runs, "quiet": quiet, "loaded": loaded, "worst_quiet": max(quiet, key=abs),
            "worst_loaded": max(loaded, key=abs)}  # fmt: skip


def measure_model(name: str, entry: Entry, runs: int = 3) -> dict:
    """One row of the table (bytes, ms); a cell that fails holds ``{"failed": reason}``."""
    spec, config, inputs, image_model = entry
    row: dict[str, Any] = {"model": name, "spec": spec, "config": config}
    try:
        case = Case(spec, config, inputs, image_model)
        store = case.checkpoint()
    except Exception as error:  # noqa: BLE001 - a refused model is a row with its reason
        return {**row, "failed": one_line(error)}
    names = [s.name for s in store.profile.stages]
    a0 = store.profile.input_size
    row.update(stages=len(names), stage_names=names, store_all=attempt(lambda: store_all_cell(case, store, a0)))
    label, checkpointed = baseline(case, names)
    try:
        half = below_store_all(store)
    except RematError as error:
        return {**row, "half": {"failed": one_line(error)}, "equal_memory": attempt(
            lambda: equal_memory_cell(case, store, a0, label, checkpointed))}  # fmt: skip
    row["half"] = attempt(lambda: half_cell(half, store))
    row["fp32_grads_equal"] = attempt(
        lambda: {"equal": all(map(torch.equal, grads(case, case.plain), grads(case, case.remat_step(half))))}
    )
    row["bf16"] = attempt(lambda: bf16_cell(case, half, checkpointed))
    row["equal_memory"] = attempt(lambda: equal_memory_cell(case, store, a0, label, checkpointed))
    baseline_peak = row["equal_memory"].get("baseline_peak")
    row["errors"] = attempt(lambda: errors_cell(case, baseline_peak, runs)) if runs else None
    return row


def _mib(value: int) -> str:
    return f"{value / 2**20:.2f}"


def _pct(value: float) -> str:
    return f"{100 * value:+.2f}%" if math.isfinite(value) else str(value)


def _cell(cell: dict | None, render: Callable[[dict], str]) -> str:
    if cell is None:
        return "—"
    if "failed" in cell and len(cell) == 1:
        return f"failed: {cell['failed']}".replace("|", "/")
    return render(cell)


def _equal_memory(c: dict) -> str:
    head = f"{c['baseline']}: {_mib(c['baseline_peak'])} MiB, {c['baseline_ms']:.0f} ms"
    ours = f"{_mib(c['remat_peak'])} MiB, {c['remat_ms']:.0f} ms"
    if "infeasible" in c:  # no remat schedule fits the baseline's peak
        return f"{head}; remat: **cannot fit**, at its least budget ({_mib(c['budget'])} MiB): {ours}"
    return f"{head}; remat: {ours}"


def markdown(rows: list[dict]) -> str:
    """The table (MiB = 2^20 bytes; errors are (measured - reference) / reference)."""
    lines = [
        "| model | stages | store-all vs plain step (MiB) | predicted vs measured below store-all (MiB, budget) "
        "| fp32 grads equal | bf16 max-abs grad diff: remat / checkpoint "
        "| at the baseline's measured peak: baseline; remat "
        "| least memory: remat vs baseline (MiB) | worst peak error, quiet / loaded |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "failed" in r:
            reason = r["failed"].replace("|", "/")
            lines.append(f"| {r['model']} | failed: {reason} |" + " |" * 7)
            continue
        store = _cell(r.get("store_all"), lambda c: f"{_mib(c['measured_peak'])} vs {_mib(c['plain_peak'])} "
                      f"({_pct(c['error'])})")  # fmt: skip
        half = _cell(r.get("half"), lambda c: f"{_mib(c['predicted_peak'])} vs {_mib(c['measured_peak'])} "
                     f"({_pct(c['error'])}) at {100 * c['fraction']:.0f}%")  # fmt: skip
        exact = _cell(r.get("fp32_grads_equal"), lambda c: "yes" if c["equal"] else "**no**")
        bf16 = _cell(r.get("bf16"), lambda c: f"{c['remat']:.2g} / {c['checkpoint']:.2g} "
                     f"({'within' if c['within'] else '**above**'})")  # fmt: skip
        memory = _cell(r.get("equal_memory"), _equal_memory)
        least = _cell(r.get("equal_memory"), lambda c: f"{_mib(c['least_peak'])} vs {_mib(c['baseline_peak'])}"
                      + ("" if c["least_at_most_baseline"] else " (**above**)"))  # fmt: skip
        errors = _cell(r.get("errors"), lambda c: f"{_pct(c['worst_quiet'])} / {_pct(c['worst_loaded'])} "
                       f"({c['runs']}+{c['runs']} runs)")  # fmt: skip
        lines.append(f"| {r['model']} | {r['stages']} | {store} | {half} | {exact} | {bf16} | {memory} "
                     f"| {least} | {errors} |")  # fmt: skip
    return "\n".join(lines)


def header(models: dict[str, Entry], sizes: str) -> str:
    """What the table measured: the configs and what every peak counts."""
    configs = "; ".join(f"{name} `{spec}` {config or '(default)'}" for name, (spec, config, _, _) in models.items())
    return (
        f"Configs (random weights, {sizes}): {configs}. "
        "Peaks: the CPU allocator's, bytes allocated during forward + loss + backward plus the chain "
        "input a_0; parameters and their pre-allocated gradients are outside, for remat and the "
        "baselines alike. Step times: median of 5 steps after a warmup, 1 thread, noisy."
    )


def write_doc(table: str, note: str, doc: Path = DOC) -> None:
    """Put ``note`` and ``table`` between the marker comments of ``doc`` (the rest is kept)."""
    text = doc.read_text()
    if BEGIN not in text or END not in text:
        raise RematError(f"{doc}: no {BEGIN} ... {END} markers to write the table between")
    before, rest = text.split(BEGIN, 1)
    after = rest.split(END, 1)[1]
    doc.write_text(f"{before}{BEGIN}\n{note}\n\n{table}\n{END}{after}")


def run(models: dict[str, Entry], progress: bool = False, runs: int = 3) -> list[dict]:
    """The rows for ``models`` (see :func:`measure_model`)."""
    rows = []
    for name, entry in models.items():
        begin = time.perf_counter()
        rows.append({**measure_model(name, entry, runs), "seconds": round(time.perf_counter() - begin, 1)})
        if progress:
            print(f"{name}: {rows[-1]['seconds']} s", flush=True)
    return rows


def select(models: dict[str, Entry], wanted: list[str]) -> dict[str, Entry]:
    """The models named in ``wanted``: a full name, or the name after its library (``resnet50`` is
    torchvision's and timm's); KeyError for a name that matches none."""
    chosen = {}
    for want in wanted:
        matches = [name for name in models if name == want or name.split("-", 1)[-1] == want]
        if not matches:
            raise KeyError(want)
        chosen.update((name, models[name]) for name in matches)
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated model names, e.g. gpt2,resnet50 (torchvision's and timm's)")
    common.add_quick(parser, "three tiny models (about a minute)")
    common.add_out(parser, "real_models")
    parser.add_argument(
        "--runs",
        type=int,
        default=3,
        help="fresh profiles per model for the error column, "
        "quiet and as many beside two busy processes (default 3; 0 leaves the column out)",
    )
    args = parser.parse_args()
    if args.runs < 0:
        parser.error("--runs: must be 0 or more")
    torch.set_num_threads(1)
    models = quick_models() if args.quick else full_models()
    if args.only:
        try:
            models = select(models, args.only.split(","))
        except KeyError as error:
            parser.error(f"--only: unknown model {error}; known: {', '.join(models)}")
    rows = run(models, progress=True, runs=args.runs)
    sizes = f"batch 2, {cut_models.SEQ} tokens, {IMAGE}x{IMAGE} images"
    sizes = "batch 2, 8 tokens, 32x32 images" if args.quick else sizes
    table, note = markdown(rows), header(models, sizes)
    print(note + "\n\n" + table)
    partial = args.quick or args.only
    # a run of some models is not the result: real_models_partial.json (git ignores it)
    out = common.out_path(args, "real_models_partial" if args.only and not args.quick else "real_models")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": common.machine(note="shared 2-core machine"), "header": note,
                               "rows": rows}, indent=2) + "\n")  # fmt: skip
    print(f"wrote {out}")
    if not partial:
        write_doc(table, note)
        print(f"wrote the table into {DOC}")


if __name__ == "__main__":
    main()
