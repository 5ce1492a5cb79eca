"""remat under bf16 autocast on models of docs/models.md: predicted vs the allocator, and exactness.

    python -m benchmarks.autocast_models [--only gpt2,bert] [--fp16 gpt2]

Each model is cut under ``torch.autocast("cpu", dtype=torch.bfloat16)`` (``remat.checkpoint``
called inside the region), then measured by ``.report()``, whose step is the loop torch's AMP
recipe gives: the forward inside an autocast region of the cut's state, the backward outside
(NOTE [Autocast's weight-cast cache], remat.runtime.core). Three schedules per model: store-all,
half the store-all peak (or halfway between the least budget and store-all when half is below the
least), and the least budget. Exactness: the loss and every parameter gradient of remat's step
at half and at least, under bf16 autocast, against plain autocast training (``torch.equal``), next
to per-block ``torch.utils.checkpoint`` (HF's own checkpointing for transformers) against it,
and that baseline's allocator peak under autocast (forward in the region) next to remat's least.
``--fp16 NAME`` also runs NAME under fp16 autocast with ``torch.amp.GradScaler("cpu")``.
Writes benchmarks/results/autocast_models.json (with the machine) and prints the markdown table
that docs/models.md ("bf16 autocast") shows. Peaks are bytes (MiB in the table); same accounting
as benchmarks/real_models.py (parameters and their pre-allocated gradients outside).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

import torch

import remat
from benchmarks import common, cut_models, real_models

ROOT = Path(__file__).resolve().parent.parent
MODELS = ("gpt2", "llama", "bert", "torchvision-mobilenet_v3_large", "torchvision-vit_b_16", "timm-resnet50")


def bf16() -> contextlib.AbstractContextManager:
    return torch.autocast("cpu", dtype=torch.bfloat16)


def step_result(case: real_models.Case, step, dtype: torch.dtype, scaler=None) -> list[torch.Tensor]:
    """The loss and every parameter gradient of one step under autocast to ``dtype`` (the backward
    outside the region; scaled by ``scaler`` if given), from the same buffers and RNG state."""
    case.reset()
    for p in case.model.parameters():
        p.grad = None
    torch.manual_seed(3)
    with torch.autocast("cpu", dtype=dtype):
        loss = step()
    (scaler.scale(loss) if scaler is not None else loss).backward()
    return [loss.detach().clone(), *(p.grad.detach().clone() for p in case.model.parameters())]


def equal(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def peaks(wrapped: remat.RematModel) -> dict:
    report = wrapped.report(steps=2, warmup=1)
    return {"budget": wrapped.budget, "predicted_peak": report.predicted_peak,
            "measured_peak": report.measured_peak, "error": report.peak_error}  # fmt: skip


def measure_model(name: str, entry: tuple, dtype: torch.dtype = torch.bfloat16, scaler=None) -> dict:
    """One row: cut under autocast, three schedules predicted vs measured, exactness."""
    spec, config, inputs, image_model = entry
    row: dict[str, Any] = {"model": name, "spec": spec, "config": config, "dtype": str(dtype)}
    case = real_models.Case(spec, config, inputs, image_model)
    with torch.autocast("cpu", dtype=dtype):
        store = case.checkpoint()
    names = [s.name for s in store.profile.stages]
    row["stages"] = len(names)
    half = real_models.below_store_all(store)
    least = store.with_budget(store.least_peak)
    row["fraction"] = half.budget / store.store_all_peak
    for label, wrapped in (("store_all", store), ("half", half), ("least", least)):
        row[label] = real_models.attempt(lambda w=wrapped: peaks(w))
    plain = step_result(case, case.plain, dtype, scaler)
    for label, wrapped in (("half", half), ("least", least)):
        row[f"equal_{label}"] = equal(step_result(case, case.remat_step(wrapped), dtype, scaler), plain)
    baseline, checkpointed = real_models.baseline(case, names)
    with checkpointed():
        row["baseline"] = baseline
        row["baseline_equal"] = equal(step_result(case, case.plain, dtype, scaler), plain)
        row["baseline_peak"] = real_models.step_peak(
            case, autocast_forward(case.plain, dtype), store.profile.input_size
        )
    return row


def autocast_forward(forward, dtype: torch.dtype):
    """``forward`` under autocast to ``dtype``, in a region of its own (the backward then runs outside)."""

    def run() -> torch.Tensor:
        with torch.autocast("cpu", dtype=dtype):
            return forward()

    return run


def fp16_row(name: str, entry: tuple) -> dict:
    """``name`` under fp16 autocast with a GradScaler (its scale applied to the loss; the scaled
    gradients compared), or the one-line reason it fails."""
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    return real_models.attempt(lambda: measure_model(name, entry, torch.float16, scaler))


def _mib(value: int) -> str:
    return f"{value / 2**20:.2f}"


def _peak(cell: dict) -> str:
    if "failed" in cell:
        return f"failed: {cell['failed']}"
    return f"{_mib(cell['predicted_peak'])} vs {_mib(cell['measured_peak'])} ({cell['error']:+.2%})"


def _least(row: dict) -> str:
    if "failed" in row["least"]:
        return ""
    ours, theirs = row["least"]["measured_peak"], row["baseline_peak"]
    return f"{_mib(ours)} vs {_mib(theirs)}" + (" (**above**)" if ours > theirs else "")


def markdown(rows: list[dict]) -> str:
    lines = [
        "| model | autocast | stages | store-all: predicted vs measured (MiB) | below store-all | least |"
        " least: remat vs per-block checkpoint (MiB) | remat equal to plain autocast (below / least) |"
        " per-block checkpoint equal |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "failed" in r:
            lines.append(f"| {r['model']} | {r.get('dtype', '')} | failed: {r['failed']} | | | | | | |")
            continue
        dtype = r["dtype"].removeprefix("torch.")
        lines.append(
            f"| {r['model']} | {dtype} | {r['stages']} | {_peak(r['store_all'])} | {_peak(r['half'])} at"
            f" {r['fraction']:.0%} | {_peak(r['least'])} | {_least(r)} | {'yes' if r['equal_half'] else 'no'} /"
            f" {'yes' if r['equal_least'] else 'no'} | {'yes' if r['baseline_equal'] else 'no'} ({r['baseline']}) |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(MODELS), help="comma-separated model names")
    parser.add_argument("--fp16", default="", help="a model to run under fp16 autocast with a GradScaler too")
    common.add_quick(parser, "a GPT-2 of 2 layers of 32")
    common.add_out(parser, "autocast_models")
    args = parser.parse_args()
    if args.quick:
        args.only = "gpt2"
    torch.set_num_threads(1)
    note = "shared 2-core machine (other sessions' jobs beside it); peaks are allocator bytes, not times"
    machine = common.machine(note)  # at the start: its load average is the run's
    every = cut_models.quick_models() if args.quick else cut_models.models(real_models.IMAGE)
    rows = []
    for name in args.only.split(","):
        rows.append(real_models.attempt(lambda n=name: measure_model(n, every[n])) | {"model": name})
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    if args.fp16:
        rows.append(fp16_row(args.fp16, every[args.fp16]) | {"model": args.fp16, "dtype": "torch.float16"})
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    common.write_result({"machine": machine, "rows": rows}, common.out_path(args, "autocast_models"), indent=1)
    print(markdown(rows))


if __name__ == "__main__":
    main()
