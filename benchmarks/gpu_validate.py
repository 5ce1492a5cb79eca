"""Predicted vs measured peak activation memory and step time: chain and graph schedules.

Chains: for each model, profile it (remat.profile.chain), solve the ``optimal`` schedule at
100%, 60% and 35% of the store-all peak (or the smallest feasible budget, if lower ones are
infeasible), replay each with RematChain for a few training steps and measure. The prediction is
judged against the allocator (remat.measure.allocator.AllocatorMeter; CUDA: max_memory_allocated
relative to the memory before the step, read around every op; CPU: the c10 allocator's running
total from torch.profiler memory events); the live-tensor tracker's peak is printed beside it
("tensors": what a tensor count sees, without kernel workspaces). ``resnet18`` is torchvision's
ResNet-18 layout, whose convolutions allocate workspaces inside the kernels.

Graphs: for each model, its forward+backward graph (remat.graph.profiler: times
measured on the device, each node's transient the allocator's peak during one run of it), then
``store-all`` at 100% and ``chen-greedy``, ``lp-rounding`` and ``ilp`` (time-limited,
warm-started) at 85% and 75% of the store-all peak (a strategy that cannot meet a budget is
reported and skipped), each replayed with GraphReplay and judged against the allocator as the
chains are (remat.replay.graph.measure_graph: the same AllocatorMeter, read around every
op), the live-tensor peak beside it.

Sized to finish in well under 8 minutes on one H100/H200; ``--device cpu`` uses small sizes.

    python -m benchmarks.gpu_validate                 # CUDA, large sizes
    python -m benchmarks.gpu_validate --device cpu    # CPU, small sizes (a minute or two)

Writes benchmarks/results/gpu_validate[_cpu].json with the machine it ran on.
"""

from __future__ import annotations

import argparse
import copy
import time

import torch

from benchmarks import common
from remat.graph.profiler import profile_graph
from remat.profile.chain import profile_chain
from remat.replay.chain import RematChain
from remat.replay.graph import GraphReplay, compare_graph
from remat.replay.report import compare
from remat.schedules import InfeasibleBudgetError, format_size, simulate
from remat.solver import solve
from remat.trace.chain import as_chain
from remat.zoo import small
from remat.zoo.resnet18 import resnet18

SIZES = {
    # model: {size: (factory kwargs, input shape)}
    "cnn": {
        "large": (dict(widths=(64, 128, 256, 512), blocks=2), (64, 3, 96, 96)),
        "small": (dict(widths=(8, 16), blocks=2), (8, 3, 16, 16)),
    },
    "mlp": {
        "large": (dict(depth=24, width=4096, in_features=1024), (2048, 1024)),
        "small": (dict(depth=8, width=128, in_features=64), (32, 64)),
    },
    "transformer": {
        "large": (dict(in_features=512, dim=512, depth=12, heads=8, dropout=0.1), (16, 512, 512)),
        "small": (dict(in_features=32, dim=32, depth=4, heads=4, dropout=0.1), (4, 16, 32)),
    },
}
SIZES["resnet18"] = {"large": ({}, (64, 3, 224, 224)), "small": ({}, (8, 3, 96, 96))}
FACTORIES = {"cnn": small.cnn, "mlp": small.mlp, "transformer": small.transformer, "resnet18": resnet18}
FRACTIONS = (1.0, 0.6, 0.35)
GRAPH_RUNS = (("store-all", 1.0), *((s, f) for f in (0.85, 0.75) for s in ("chen-greedy", "lp-rounding", "ilp")))


def solve_at(profile, budget: int):
    try:
        return solve(profile, budget, "optimal")
    except InfeasibleBudgetError as error:
        if error.min_budget is None:
            raise
        return solve(profile, error.min_budget, "optimal")


def run_graph(name: str, size: str, device: torch.device, args: argparse.Namespace) -> list[dict]:
    """Graph schedules of one model: profile its graph, solve, replay, measure (see the docstring)."""
    kwargs, shape = SIZES[name][size]
    torch.manual_seed(0)
    model = FACTORIES[name](**kwargs).to(device).train()
    x = torch.randn(*shape, device=device)
    profile = profile_graph(model, example_inputs=x, device=device, time_source="measured", repeats=3)
    store_all_peak = solve(profile, 2**62, "store-all").predicted.peak_memory
    rows = []
    for strategy, fraction in GRAPH_RUNS:
        budget = int(store_all_peak * fraction)
        options = {"time_limit": args.ilp_time_limit} if strategy in ("ilp", "lp-rounding") else {}
        label = f"{name}/{strategy}"
        try:
            schedule = solve(profile, budget, strategy, **options)
        except InfeasibleBudgetError as error:
            print(f"{label:<28} {fraction:>7.0%}  infeasible: {error}")
            continue
        wrapped = GraphReplay(copy.deepcopy(model), schedule, profile)
        report = compare_graph(profile, schedule, wrapped, [x], steps=args.steps, warmup=1)
        assert simulate(profile, schedule.ops, timeline=False).peak_memory == report.predicted_peak
        rows.append(
            {
                "kind": "graph",
                "model": name,
                "strategy": strategy,
                "fraction_of_store_all": fraction,
                "nodes": profile.size,
                "input_shape": list(shape),
                "gap": schedule.extra.get("gap"),
                **{k: v for k, v in report.to_dict().items() if k not in ("timeline", "strategy")},
            }
        )
        print(
            f"{label:<28} {fraction:>7.0%} {format_size(report.predicted_peak):>11} "
            f"{format_size(report.measured_peak):>11} {100 * report.peak_error:>+6.2f}% "
            f"{report.predicted_ms:>9.2f} {report.measured_ms:>9.2f} {100 * report.time_error:>+6.1f}% "
            f"{format_size(report.measured_tensor_peak):>11}"
        )
        del wrapped
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--size", choices=("large", "small"), help="default: large on CUDA, small on CPU")
    parser.add_argument("--steps", type=int, default=5, help="measured steps per schedule")
    parser.add_argument("--models", default="cnn,mlp,transformer,resnet18")
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")
    parser.add_argument("--graph-models", default="cnn,transformer,resnet18", help="graph replay models ('' for none)")
    parser.add_argument("--ilp-time-limit", type=float, default=10.0, help="seconds per ILP / LP solve (graphs)")
    common.add_out(parser, "gpu_validate")
    common.add_quick(parser, "small sizes, the CNN and the MLP, 1 step, graphs of the CNN")
    args = parser.parse_args()
    if args.quick:
        args.size, args.steps, args.models, args.graph_models = "small", 1, "cnn,mlp", "cnn"
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    size = args.size or ("large" if device.type == "cuda" else "small")
    # a CPU run is not the GPU benchmark's result: results/gpu_validate_cpu.json
    out_path = common.out_path(args, "gpu_validate" if device.type == "cuda" else "gpu_validate_cpu")
    started = time.perf_counter()
    rows = []
    print(f"device {device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'}), sizes {size}")
    header = ("model", "budget", "pred peak", "meas peak", "err", "pred ms", "meas ms", "err", "tensors")
    widths = (-12, 8, 11, 11, 7, 9, 9, 7, 11)
    print(" ".join(f"{h:<{-w}}" if w < 0 else f"{h:>{w}}" for h, w in zip(header, widths, strict=True)))
    for name in args.models.split(","):
        kwargs, shape = SIZES[name][size]
        torch.manual_seed(0)
        model = FACTORIES[name](**kwargs).to(device).train()
        chain = as_chain(model)
        x = torch.randn(*shape, device=device)
        profile = profile_chain(chain, x, name=f"{name}-{size}-{device.type}", repeats=5, warmup=2)
        store_all_peak = solve(profile, 2**62, "store-all").predicted.peak_memory
        for fraction in FRACTIONS:
            schedule = solve_at(profile, int(store_all_peak * fraction))
            wrapped = RematChain(copy.deepcopy(chain), schedule, profile)
            report = compare(profile, schedule, wrapped, x, steps=args.steps, warmup=1)
            assert simulate(profile, schedule.ops, timeline=False).peak_memory == report.predicted_peak
            row = {
                "kind": "chain",
                "model": name,
                "fraction_of_store_all": fraction,
                "budget": schedule.budget,
                "stages": profile.length,
                "input_shape": list(shape),
                **{k: v for k, v in report.to_dict().items() if k != "timeline"},
            }
            rows.append(row)
            print(
                f"{name:<12} {fraction:>7.0%} {format_size(report.predicted_peak):>11} "
                f"{format_size(report.measured_peak):>11} {100 * report.peak_error:>+6.2f}% "
                f"{report.predicted_ms:>9.2f} {report.measured_ms:>9.2f} {100 * report.time_error:>+6.1f}% "
                f"{format_size(report.measured_tensor_peak):>11}"
            )
            del wrapped
        del model, chain, x
        if device.type == "cuda":
            torch.cuda.empty_cache()
    graph_models = [m for m in args.graph_models.split(",") if m]
    if graph_models:
        print("graph schedules (GraphReplay)")
        print(" ".join(f"{h:<{-w}}" if w < 0 else f"{h:>{w}}" for h, w in zip(header, widths, strict=True)))
    for name in graph_models:
        rows.extend(run_graph(name, size, device, args))
        if device.type == "cuda":
            torch.cuda.empty_cache()
    elapsed = time.perf_counter() - started
    for kind in ("chain", "graph"):
        errors = [abs(r["peak_memory"]["error"]) for r in rows if r["kind"] == kind]
        if errors:
            print(f"worst {kind} peak-memory error {100 * max(errors):.2f}%")
    print(f"total {elapsed:.0f} s")
    result = {
        "benchmark": "gpu_validate",
        "device": str(device),
        "size": size,
        "machine": common.machine(),
        "elapsed_s": elapsed,
        "rows": rows,
    }
    common.write_result(result, out_path)


if __name__ == "__main__":
    main()
