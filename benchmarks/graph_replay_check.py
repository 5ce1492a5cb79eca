"""Graph schedules replayed on real models (CPU): predicted vs measured peak memory and step time.

For a ResNet with skips, a U-Net with long skips and a small transformer (the replay tests'
models, tests/graph/graph_models.py) and torchvision's ResNet-18 layout (remat.zoo.resnet18,
whose convolutions allocate oneDNN scratch inside the kernels), graph profiles are built with
torch.fx (each node's overhead: the allocator's transient during one run of it), every registered
graph strategy is solved at budgets (percent of the store-all peak), and each schedule is replayed
with :class:`remat.replay.graph.GraphReplay` and judged against the allocator
(:func:`remat.replay.graph.measure_graph`: the c10 CPU allocator's running total around
every op; parameters, their pre-allocated gradients and the input are outside it):

* ``peak err``: the allocator's peak (transients and kernel buffers included) vs the simulator's;
* ``after``: largest |allocator - predicted| bytes right after an op (the loss scalar: a few bytes);
* ``tensors``: the live-tensor tracker's peak (a diagnostic: it misses kernel buffers), and
  ``shapes err``: the error a profile whose overheads come from tensor shapes alone
  (``overheads="shapes"``, the previous default) makes against the allocator for the same schedule;
* ``step``: median step milliseconds, and the plain model's in the same run (ratio).

    python -m benchmarks.graph_replay_check --budgets 100,85,75 --time-limit 10

Writes benchmarks/results/graph_replay_check.json with the machine it ran on. One intra-op
thread (the machine is shared; two threads per op mostly wait on each other; a profile's
overheads hold at the thread count it was made with).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch

from benchmarks import common
from remat.graph.profiler import profile_graph
from remat.replay.graph import GraphReplay, measure_graph
from remat.schedules import InfeasibleBudgetError, format_size, simulate
from remat.solver.registry import get_strategy, solve, strategy_names
from remat.zoo.resnet18 import resnet18
from tests.graph.graph_models import TinyTransformer, small_resnet, small_unet

MODELS = {
    "resnet": (small_resnet, lambda: torch.randn(4, 3, 32, 32)),
    "unet": (small_unet, lambda: torch.randn(2, 3, 32, 32)),
    "transformer": (TinyTransformer, lambda: torch.randint(0, 50, (8, 16))),
    "resnet18": (resnet18, lambda: torch.randn(4, 3, 64, 64)),
}


def plain_step_ms(model: torch.nn.Module, x: torch.Tensor, repeats: int) -> float:
    times = []
    for _ in range(repeats + 1):
        begin = time.perf_counter()
        out = model(x)
        out.float().sum().backward()
        times.append((time.perf_counter() - begin) * 1e3)
    return statistics.median(times[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", default="100,85,75", help="percent of the store-all peak")
    parser.add_argument("--time-limit", type=float, default=10.0, help="seconds for ilp / lp-rounding")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per schedule")
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated, of: " + ", ".join(MODELS))
    common.add_out(parser, "graph_replay_check")
    common.add_quick(parser, "the first model at 100%, 1 step, 2 s solver limits")
    args = parser.parse_args()
    if args.quick:
        args.models, args.budgets, args.steps, args.time_limit = next(iter(MODELS)), "100", 1, 2.0
    torch.set_num_threads(1)
    budgets = [int(b) for b in args.budgets.split(",")]
    rows = []
    header = (
        f"{'model':<12} {'strategy':<12} {'budget':>6} {'predicted':>10} {'measured':>10} {'peak err':>8} "
        f"{'after err':>9} {'tensors':>10} {'shapes err':>10} {'step ms':>8} {'plain ms':>8}"
    )
    print(header)
    for name in args.models.split(","):
        factory, make_input = MODELS[name]
        torch.manual_seed(0)
        model = factory()
        x = make_input()
        profile = profile_graph(model, example_inputs=x, name=name)
        shapes = profile_graph(model, example_inputs=x, name=name, overheads="shapes")
        plain = plain_step_ms(copy.deepcopy(model), x, args.steps)
        store_all = solve(profile, 2**62, "store-all").predicted.peak_memory
        for strategy in strategy_names("graph"):
            options = {"time_limit": args.time_limit} if "time_limit" in get_strategy(strategy, "graph").options else {}
            for percent in budgets:
                budget = store_all * percent // 100
                try:
                    schedule = solve(profile, budget, strategy, **options)
                except InfeasibleBudgetError:
                    print(f"{name:<12} {strategy:<12} {percent:>5}% infeasible")
                    continue
                wrapped = GraphReplay(copy.deepcopy(model), schedule, profile)
                m = measure_graph(wrapped, [x], timed_steps=args.steps)
                after_err = max(abs(a - b) for a, b in zip(m.measured_after, m.predicted_after, strict=True))
                shapes_peak = simulate(shapes, schedule.ops, timeline=False).peak_memory
                shapes_err = (m.measured_peak - shapes_peak) / shapes_peak
                row = {
                    "model": name,
                    "strategy": strategy,
                    "budget_percent": percent,
                    "budget": budget,
                    "predicted_peak": m.predicted_peak,
                    "measured_peak": m.measured_peak,
                    "peak_error": m.peak_error,
                    "measured_by": "allocator",
                    "max_after_error_bytes": after_err,
                    "live_tensor_peak": m.tensor_peak,
                    "bookkeeping_peak": m.bookkeeping_peak,
                    "shapes_overheads_predicted_peak": shapes_peak,
                    "shapes_overheads_error": shapes_err,
                    "step_ms": m.step_ms,
                    "plain_step_ms": plain,
                    "predicted_compute_ms_flops_estimate": m.predicted_ms,
                    "recompute_ms": schedule.predicted.recompute_ms,
                    "extra": {k: v for k, v in schedule.extra.items() if isinstance(v, (int, float, str))},
                }
                rows.append(row)
                print(
                    f"{name:<12} {strategy:<12} {percent:>5}% {format_size(m.predicted_peak):>10} "
                    f"{format_size(m.measured_peak):>10} {100 * m.peak_error:>+7.3f}% {after_err:>8}B "
                    f"{format_size(m.tensor_peak):>10} {100 * shapes_err:>+9.1f}% {m.step_ms:>8.1f} {plain:>8.1f}"
                )
    worst = max((abs(r["peak_error"]) for r in rows), default=0.0)
    worst_shapes = max((abs(r["shapes_overheads_error"]) for r in rows), default=0.0)
    print(f"worst peak error vs the allocator {100 * worst:.3f}% (shape-only overheads: {100 * worst_shapes:.1f}%)")
    result = {
        "benchmark": "graph_replay_check",
        "worst_peak_error": worst,
        "worst_shapes_overheads_error": worst_shapes,
        "machine": common.machine("2-core machine shared with other sessions: step times are noisy"),
        "rows": rows,
    }
    common.write_result(result, common.out_path(args, "graph_replay_check"))


if __name__ == "__main__":
    main()
