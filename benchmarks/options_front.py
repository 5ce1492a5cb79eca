"""The multi-option chain DP's front against the single-option DP's, on a GPT-2 from a config.

The model is remat.zoo.gpt2's GPT2 (GPT-2's block, written out) at the issue's size by
default: 8 layers, n_embd 256, 4 heads, batch 4 x 256 tokens, dropout 0, one CPU thread, but with
a 2,048-token vocabulary: at GPT-2's 50,257 the chain's output (the logits, 206 MB, and their
gradient as large) sets every peak and no block-level choice moves it (measured: least memory
446 MB with or without options, store-all 606 MB). It is
profiled once with ``options=True`` (remat.profile.options: every block gets its
selective-recording options, measured by the allocator); the single-option profile is the same
profile with the options dropped, so both DPs see identical numbers for option 0.

For each budget (a fraction of the store-all peak) both ``optimal`` schedules are solved and
replayed (RematChain) on the real model, and the table shows predicted and measured (allocator)
peak and step time; measured times are the fastest of ``--steps`` steps, noisy on a shared
machine, to be read as ratios within one run. Then the two fronts are compared: the least memory
of each, and at every point of the single-option front the multi-option front's time at no more
memory.

    python -m benchmarks.options_front [--layers 8 --dim 256 --seq 256 --batch 4]

Writes benchmarks/results/options_front.json (with the machine it ran on).
"""

from __future__ import annotations

import argparse
import copy
import time

import torch

from benchmarks import common
from remat.profile.chain import profile_chain
from remat.replay.chain import RematChain
from remat.replay.report import compare
from remat.schedules import InfeasibleBudgetError, format_size
from remat.solver import solve
from remat.solver.chain.optimal import optimal_front
from remat.solver.chain.store_all import store_all_peak
from remat.zoo.gpt2 import GPT2


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=2048, help="default 2,048: see the module doc")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3, help="profiler: timed runs per stage")
    parser.add_argument("--steps", type=int, default=3, help="replay: measured steps per schedule")
    parser.add_argument("--budgets", default="1.0,0.7,0.5,0.35,0.25,0.18", help="fractions of the store-all peak")
    common.add_out(parser, "options_front", dest="output")
    common.add_quick(parser, "2 layers of 64, 32 tokens, two budgets")
    args = parser.parse_args()
    if args.quick:
        args.layers, args.dim, args.seq, args.batch, args.vocab = 2, 64, 32, 1, 256
        args.repeats, args.steps, args.budgets = 1, 1, "1.0,0.5"
    args.output = common.out_path(args, "options_front", dest="output")
    return args


def _row(profile, model, x, budget: int, steps: int) -> dict:
    try:
        schedule = solve(profile, budget, "optimal")
    except InfeasibleBudgetError as error:
        return {"budget": budget, "infeasible": str(error)}
    report = compare(profile, schedule, RematChain(copy.deepcopy(model), schedule, profile), x, steps=steps)
    return {
        "budget": budget,
        "options_used": sum(1 for op in schedule.ops if len(op) == 3),
        "predicted_peak": report.predicted_peak,
        "measured_peak": report.measured_peak,
        "peak_error": report.peak_error,
        "predicted_ms": report.predicted_ms,
        "measured_ms": report.measured_ms,
    }


def _cell(row: dict) -> str:
    if "infeasible" in row:
        return f"{'infeasible':>44}"
    return (
        f"{format_size(row['predicted_peak']):>10} {format_size(row['measured_peak']):>10} "
        f"{100 * row['peak_error']:+6.2f}% {row['measured_ms']:8.1f} ms {row.get('options_used', 0):3d}"
    )


def _front_comparison(single: list, multi: list) -> list[dict]:
    rows = []
    for point in single:
        within = [p for p in multi if p.peak_memory <= point.peak_memory]
        best = min(within, key=lambda p: p.compute_ms)
        rows.append(
            {
                "single_peak": point.peak_memory,
                "single_ms": point.compute_ms,
                "multi_ms_at_no_more_memory": best.compute_ms,
                "multi_peak": best.peak_memory,
            }
        )
    return rows


def main() -> None:
    args = _arguments()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = GPT2(args.layers, args.dim, args.heads, args.seq, args.vocab, dropout=0.0).train()
    x = torch.randn(args.batch, args.seq, args.dim)
    began = time.perf_counter()
    multi = profile_chain(model, x, repeats=args.repeats, options=True)
    profile_s = time.perf_counter() - began
    single = multi.without_options()
    reference = store_all_peak(multi)
    print(f"profiled in {profile_s:.0f} s; store-all peak {format_size(reference)}; options per stage:")
    for stage in multi.stages:
        described = ", ".join(
            f"'{o.name}' {format_size(o.saved_size)} +{o.backward_ms - stage.backward_ms:.1f} ms" for o in stage.options
        )
        print(f"  {stage.name}: saved {format_size(stage.saved_size)}; {described or 'no options'}")
    rows = []
    header = f"{'pred':>10} {'measured':>10} {'error':>7} {'step':>11} {'opt':>3}"
    print(f"\n{'budget':>16}  single-option: {header}  |  multi-option: {header}")
    for fraction in (float(f) for f in args.budgets.split(",")):
        budget = int(fraction * reference)
        one, many = _row(single, model, x, budget, args.steps), _row(multi, model, x, budget, args.steps)
        rows.append({"fraction": fraction, "single": one, "multi": many})
        print(f"{fraction:5.2f} {format_size(budget):>10}  {'':15}{_cell(one)}  |  {'':14}{_cell(many)}")
    single_front, multi_front = optimal_front(single), optimal_front(multi)
    fronts = _front_comparison(single_front, multi_front)
    least_single, least_multi = single_front[0].peak_memory, multi_front[0].peak_memory
    print(
        f"\nleast memory: single-option {format_size(least_single)}, multi-option {format_size(least_multi)} "
        f"({100 * least_multi / least_single:.1f}%); front points {len(single_front)} vs {len(multi_front)}"
    )
    slower = max((r["multi_ms_at_no_more_memory"] / r["single_ms"] for r in fronts), default=1.0)
    faster = min((r["multi_ms_at_no_more_memory"] / r["single_ms"] for r in fronts), default=1.0)
    print(f"multi-option time at each single-option point's memory: x{faster:.3f} .. x{slower:.3f} (predicted)")
    result = {
        "config": vars(args) | {"output": str(args.output)},
        "profile_seconds": profile_s,
        "store_all_peak": reference,
        "stages": [s.to_dict() for s in multi.stages],
        "budgets": rows,
        "least_memory": {"single": least_single, "multi": least_multi},
        "fronts": fronts,
        "machine": common.machine("shared 2-core machine: times are noisy; ratios within the run"),
    }
    common.write_result(result, args.output, indent=1)


if __name__ == "__main__":
    main()
