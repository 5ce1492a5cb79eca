"""The largest batch that fits, for GPT-2-small-like and ResNet-50-like models, on an 80 GiB and a
24 GiB device, at 0/10/30% overhead over store-all: store-all, Chen's sqrt(n) and the optimal DP.

What ``remat plan`` does for each cell (remat.solver.plan): meta-tensor profiles at three batch
sizes (exact sizes; times = FLOPs at a nominal rate, so overheads are FLOP ratios and stages with
no matmul/convolution are free), a per-field growth model, the largest batch by the simulator,
confirmed against real meta profiles at the answer and the next batch. Memory outside the
activations: ``auto`` = 4 x parameters (weights, gradients, Adam's two moments), fp32.

    python -m benchmarks.plan_table

Prints the table and writes benchmarks/results/plan_table.json (with machine info) and
docs/plan_gpt2_80gb.png (largest batch vs overhead allowed, 0..100%).
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import torch

from benchmarks import common
from benchmarks.common import ROOT
from remat.profile.batch import chain_profiler
from remat.schedules import write_json
from remat.solver.plan import (
    PLAN_STRATEGIES,
    confirmed_largest,
    fit_growth,
    fixed_bytes_auto,
    overhead_curve,
)

GIB = 2**30
MODELS = {
    "GPT-2-small-like (12 x 768, seq 1024, vocab 50257)": (
        "remat.zoo.gpt2:gpt2_small",
        (2, 1024, 768),
        [2, 4, 6],
    ),
    "ResNet-50-like (224 x 224)": ("remat.zoo.vision:resnet50", (8, 3, 224, 224), [8, 16, 24]),
}
DEVICES = {"80 GiB": 80 * GIB, "24 GiB": 24 * GIB}
OVERHEADS = (0.0, 0.1, 0.3)
PLOT = ROOT / "docs" / "plan_gpt2_80gb.png"


def cell(fit) -> dict:
    row = {"batch": fit.size, "next_batch": fit.next_size, "next_reason": fit.next_reason}
    if fit.schedule is not None:
        row.update(peak_memory=fit.schedule.predicted.peak_memory, overhead=fit.overhead)
    return row


def run_model(
    label: str, spec: str, shape, points, devices: dict = DEVICES, overheads: tuple = OVERHEADS
) -> tuple[list[dict], object, int]:
    profile_at = chain_profiler(spec, shape, 0, "meta", torch.float32, torch.device("cpu"))
    growth = fit_growth(profile_at, points)
    fixed = fixed_bytes_auto(growth.profiles[0])
    rows = []
    for device, memory in devices.items():
        sqrt_any, growth = confirmed_largest(growth, profile_at, memory - fixed, math.inf, "chen-sqrt")
        for allowed in overheads:
            fits = {}
            for strategy in PLAN_STRATEGIES:
                fits[strategy], growth = confirmed_largest(growth, profile_at, memory - fixed, allowed, strategy)
            rows.append(
                {"model": label, "device": device, "memory": memory, "fixed_bytes": fixed, "max_overhead": allowed}
                | {name: cell(fit) for name, fit in fits.items()}
                | {"chen-sqrt at any overhead": cell(sqrt_any)}
            )
            print(f"  {device} +{100 * allowed:.0f}%: " + ", ".join(f"{k} {v.size}" for k, v in fits.items()))
    return rows, growth, fixed


def fmt(row: dict, strategy: str) -> str:
    got = row[strategy]
    if got["batch"] is not None:
        return str(got["batch"])
    if strategy != "chen-sqrt":
        return "-"
    anyway = row["chen-sqrt at any overhead"]
    return f"- ({anyway['batch']} at +{100 * anyway['overhead']:.1f}%)" if anyway["batch"] else "-"


def table(rows: list[dict]) -> str:
    lines = [
        "| model | device | overhead | store-all | √n (chen-sqrt) | optimal | optimal / store-all |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        best, base = row["optimal"]["batch"] or 0, row["store-all"]["batch"] or 0
        ratio = f"{best / base:.2f}x" if base else "-"
        lines.append(
            f"| {row['model']} | {row['device']} | {100 * row['max_overhead']:.0f}% | {fmt(row, 'store-all')} | "
            f"{fmt(row, 'chen-sqrt')} | {fmt(row, 'optimal')} | {ratio} |"
        )
    return "\n".join(lines)


def plot_curve(growth, budget: int, path: Path) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    overheads = [p / 100 for p in range(0, 101, 5)]
    curves = overhead_curve(growth, budget, overheads)
    figure, axis = plt.subplots(figsize=(7, 4.5))
    for name, sizes in curves.items():
        axis.step([100 * o for o in overheads], [s or 0 for s in sizes], where="post", marker=".", label=name)
    axis.set_xlabel("overhead allowed over store-all (%, FLOP-time model)")
    axis.set_ylabel("largest batch (seq 1024)")
    axis.set_title("GPT-2-small-like, 80 GiB device, fp32, Adam state outside the activations")
    axis.grid(alpha=0.3)
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return {"overheads": overheads, "largest_batch": curves}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    common.add_quick(parser, "the ResNet-50-like model on 24 GiB at 10% overhead, no plot")
    common.add_out(parser, "plan_table")
    args = parser.parse_args()
    out = common.out_path(args, "plan_table")
    models = {k: v for k, v in MODELS.items() if k.startswith("ResNet")} if args.quick else MODELS
    begin = time.perf_counter()
    rows, growths, curve = [], {}, None
    for label, (spec, shape, points) in models.items():
        print(label)
        cells = {"devices": {"24 GiB": DEVICES["24 GiB"]}, "overheads": (0.1,)} if args.quick else {}
        model_rows, growth, fixed = run_model(label, spec, shape, points, **cells)
        rows += model_rows
        growths[label] = {"growth": growth.kind, "points": list(growth.points), "non_linear": growth.describe()}
        if label.startswith("GPT-2"):
            curve = plot_curve(growth, DEVICES["80 GiB"] - fixed, PLOT)
    print()
    print(table(rows))
    write_json(
        {
            "machine": common.machine("meta-tensor profiles: no timing on this machine enters the table"),
            "setup": "meta-tensor profiles, times = FLOPs / nominal rate, fp32, fixed bytes = 4 x parameters",
            "growth": growths,
            "rows": rows,
            "gpt2_80gib_curve": curve,
            "seconds": time.perf_counter() - begin,
        },
        out,
    )
    print(f"wrote {out}{'' if args.quick else f' and {PLOT}'} in {time.perf_counter() - begin:.0f} s")


if __name__ == "__main__":
    main()
