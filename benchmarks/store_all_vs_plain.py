"""Store-all against the plain model's training step, and predicted against measured, on the nine models.

    python -m benchmarks.store_all_vs_plain [--only gpt2,bert] [--image 64] [--steps 2]

For each model of benchmarks/cut_models.py (built from configs, random weights, batch 2, CPU fp32,
the loss inside the step): the plain step (model forward + loss + backward, no remat) measured by
the allocator (:class:`remat.measure.allocator.AllocatorMeter`), then ``remat.checkpoint`` at
store-all, at 50% of the store-all peak (or, when the DP cannot meet that, halfway between its
least memory and store-all) and at the DP's minimum budget, each replayed and measured
by the same meter (``RematModel.report()``). Both sides use the accounting of docs/model.md:
the allocator's peak above what was allocated before the step, plus the chain input a[0];
parameters and their pre-allocated, zeroed gradients are outside it.

Prints a table (MiB; errors in %) and writes benchmarks/results/store_all_vs_plain.json with the
machine it ran on.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
from torch import nn

import remat
from benchmarks import common, cut_models
from remat.models.hub import build_library_model
from remat.replay.report import plain_step_peak
from remat.schedules import RematError

MIB = 2**20


def _call(model: nn.Module, inputs: object, image_model: bool, target: torch.Tensor | None) -> torch.Tensor:
    if isinstance(inputs, dict):
        return model(**inputs).loss
    out = model(inputs)
    return nn.functional.cross_entropy(out, target) if image_model else out


def plain_peak(model: nn.Module, inputs: object, image_model: bool, target, steps: int) -> int:
    """The plain step's allocator peak + a[0] (bytes): :func:`remat.replay.report.plain_step_peak`."""
    first = inputs if isinstance(inputs, torch.Tensor) else next(iter(inputs.values()))
    return plain_step_peak(model, lambda: _call(model, inputs, image_model, target), first, steps=steps)


def _reading(wrapped, steps: int) -> dict:
    report = wrapped.report(steps=steps, warmup=1)
    return {
        "budget": wrapped.schedule.budget,
        "predicted": report.predicted_peak,
        "measured": report.measured_peak,
        "live_tensors": report.measured_tensor_peak,
        "error": report.peak_error,
        "recomputes": sum(op in ("F_ck", "F_n") for op, _ in wrapped.schedule.ops),
    }


def run_one(spec: str, config: dict, inputs: object, image_model: bool, steps: int) -> dict:
    torch.manual_seed(0)
    model = build_library_model(spec, config).train()
    target = torch.tensor([1, 7]) if image_model else None
    loss = nn.functional.cross_entropy if image_model else None
    row: dict = {"spec": spec, "config": config, "plain": plain_peak(model, inputs, image_model, target, steps)}
    example = inputs if isinstance(inputs, dict) else (inputs,)
    try:
        wrapped = remat.checkpoint(model, example, budget=1.0, loss=loss, target=target, repeats=1, warmup=1)
    except RematError as error:
        return {**row, "error": str(error)}
    row["stages"] = len(wrapped.profile.stages)
    row["names"] = [s.name for s in wrapped.profile.stages]
    row["store_all"] = _reading(wrapped, steps)
    row["store_all"]["vs_plain"] = (row["store_all"]["measured"] - row["plain"]) / row["plain"]
    low, high = wrapped.least_peak, row["store_all"]["predicted"]
    # 50% of store-all when the DP can meet it, else halfway between its least memory and store-all
    middle = high // 2 if high // 2 >= low else (low + high) // 2
    for label, budget in (("optimal_mid", middle), ("optimal_min", low)):
        row[label] = _reading(wrapped.with_budget(budget), steps)
    return row


def _cell(reading: dict) -> str:
    return f"{reading['predicted'] / MIB:8.2f} {reading['measured'] / MIB:8.2f} {100 * reading['error']:+7.2f}%"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated model names (benchmarks/cut_models.py)")
    parser.add_argument("--image", type=int, default=64, help="image side for the vision models")
    parser.add_argument("--steps", type=int, default=2, help="measured steps per reading (after one warm-up)")
    parser.add_argument("--threads", type=int, default=None, help="torch thread count")
    common.add_quick(parser, "a GPT-2 of 2 layers of 32, one measured step")
    common.add_out(parser, "store_all_vs_plain")
    args = parser.parse_args()
    out = common.out_path(args, "store_all_vs_plain")
    if args.quick:
        args.steps = 1
    if args.threads:
        torch.set_num_threads(args.threads)
    table = cut_models.quick_models() if args.quick else cut_models.models(args.image)
    chosen = args.only.split(",") if args.only else list(table)
    previous = json.loads(out.read_text()).get("models", {}) if out.exists() and args.only else {}
    rows = dict(previous)
    head = "predicted measured   error"
    print(f"{'model':<31} {'plain':>8} {'store-all':>9} {'vs plain':>8} | store-all {head} | "
          f"optimal mid {head} | optimal min {head}")  # fmt: skip
    for name in chosen:
        row = run_one(*table[name], steps=args.steps)
        rows[name] = row
        if "error" in row:
            print(f"{name:<31} {row['plain'] / MIB:8.2f}  {row['error']}")
            continue
        s = row["store_all"]
        print(f"{name:<31} {row['plain'] / MIB:8.2f} {s['measured'] / MIB:9.2f} {100 * s['vs_plain']:+7.2f}% | "
              f"{_cell(s)} | {_cell(row['optimal_mid'])} | {_cell(row['optimal_min'])}")  # fmt: skip
        sys.stdout.flush()
        out.parent.mkdir(parents=True, exist_ok=True)  # after each model: a long run keeps what it did
        meta = {"machine": common.machine(), "batch": 2, "seq": cut_models.SEQ, "image": args.image}
        out.write_text(json.dumps({**meta, "unit": "bytes", "models": rows}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
