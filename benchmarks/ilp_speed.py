"""How fast the graph ILP certifies optimal schedules on real model graphs, next to LP rounding,
the baselines and (when registered) the hierarchical solver.

For each model graph (examples/graph_<name>.json: the bundled VGG16, U-Net, MobileNetV2 and
ResNet-50, plus ViT-B/16, DenseNet-121 and GPT-2) and each budget (percent of its store-all
peak): the baselines' step time (store-all, chen-sqrt, chen-greedy), LP rounding (cost, LP bound),
the ILP at each time limit in each formulation (``--formulations``: Checkmate's stage MILP and
Moccasin's retention intervals; status, objective, proven lower bound, gap, solve seconds) and
``hierarchical`` (skipped, with a note in the JSON, while that strategy is not registered).
Prints a table and writes benchmarks/results/ilp_speed.json with the machine it ran on, once
after every (graph, budget) row, so an interrupted run keeps what it measured.

    python -m benchmarks.ilp_speed                                   # 7 graphs x 50/70/85/90% x 60, 600 s
    python -m benchmarks.ilp_speed --graphs resnet50,unet --budgets 50,70 --limits 60
    python -m benchmarks.ilp_speed --compare-backends --graphs vgg16 --budgets 80 --limits 30

Times are wall-clock seconds on whatever machine runs this; note its load (the JSON records
the CPU count and load average at the start).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from benchmarks import common
from benchmarks.common import ROOT
from remat.schedules import InfeasibleBudgetError, RematError, load_profile
from remat.solver import solve
from remat.solver.graph.baselines import best_baseline_plan, store_all_plan
from remat.solver.graph.ilp.checkmate_search import solve_model
from remat.solver.graph.stages import memory_lower_bound, plan_peak
from remat.solver.registry import strategy_names


def _run(profile, budget, strategy, **options) -> dict:
    start = time.perf_counter()
    try:
        schedule = solve(profile, budget, strategy, **options)
    except RematError as error:
        row = {"strategy": strategy, "error": str(error), "seconds": round(time.perf_counter() - start, 2)}
        if isinstance(error, InfeasibleBudgetError):
            row["min_budget"] = error.min_budget
        return row
    row = {
        "strategy": strategy,
        "compute_ms": schedule.predicted.compute_ms,
        "peak_memory": schedule.predicted.peak_memory,
        "seconds": round(time.perf_counter() - start, 2),
    }
    for key in ("status", "lower_bound_ms", "gap", "solve_seconds", "source", "variables", "rounding", "note"):
        if key in schedule.extra:
            row[key] = schedule.extra[key]
    return row


GRAPHS = "vgg16,unet,mobilenetv2,resnet50,vit_b16,densenet121,gpt2"
HIERARCHICAL = "hierarchical"


def benchmark(
    names, percents, limits, workers, lp_limit, formulations, done=lambda entry: None, lp_rounding=True
) -> list[dict]:
    """One entry per (graph, budget), handed to ``done`` as soon as it is measured."""
    rows = []
    hierarchical = HIERARCHICAL in strategy_names("graph")
    for name in names:
        profile = load_profile(ROOT / "examples" / f"graph_{name}.json")
        top = plan_peak(profile, store_all_plan(profile))
        for percent in percents:
            budget = int(top * percent / 100)
            entry = {
                "graph": name,
                "nodes": profile.size,
                "edges": len(profile.edges),
                "budget_percent": percent,
                "budget": budget,
                "store_all_peak": top,
                "store_all_ms": profile.store_all_compute_ms,
                "node_bound": memory_lower_bound(profile),
                "results": [],
            }
            for strategy in ("store-all", "chen-sqrt", "chen-greedy"):
                entry["results"].append(_run(profile, budget, strategy))
            if lp_rounding:
                entry["results"].append(_run(profile, budget, "lp-rounding", time_limit=lp_limit))
            for limit in limits:
                for formulation in formulations:
                    row = _run(profile, budget, "ilp", time_limit=limit, workers=workers, formulation=formulation)
                    row |= {"time_limit": limit, "formulation": formulation}
                    entry["results"].append(row)
            if hierarchical:
                entry["results"].append(_run(profile, budget, HIERARCHICAL))
            else:
                entry["note"] = f"strategy '{HIERARCHICAL}' is not registered in this checkout: no column"
            rows.append(entry)
            print_entry(entry)
            done(entry)
    return rows


def print_entry(entry: dict) -> None:
    base = entry["store_all_ms"]
    print(
        f"\n{entry['graph']} ({entry['nodes']} nodes) at {entry['budget_percent']}% of store-all "
        f"({entry['budget'] / 2**30:.2f} GiB); store-all step {base:.1f} ms",
        flush=True,
    )
    for row in entry["results"]:
        label = row["strategy"] + (f" {row['formulation'][:4]}" if "formulation" in row else "")
        label += f" {row['time_limit']:g}s" if "time_limit" in row else ""
        if "error" in row:
            if row.get("min_budget"):
                smallest = row["min_budget"] / 2**30
                print(f"  {label:<16} infeasible; smallest budget it meets {smallest:.3f} GiB", flush=True)
            else:
                print(f"  {label:<16} {row['error']}", flush=True)
            continue
        extra = ""
        if "lower_bound_ms" in row:
            extra = f"  bound {row['lower_bound_ms']:.1f}  gap {100 * row['gap']:.3f}%"
        if "status" in row:
            extra += f"  {row['status']}"
        overhead = 100 * (row["compute_ms"] / base - 1)
        took = f"[{row['seconds']:.1f} s]"
        print(f"  {label:<16} {row['compute_ms']:.1f} ms (+{overhead:.2f}%){extra}  {took}", flush=True)


def compare_backends(names, percents, limit, workers) -> list[dict]:
    rows = []
    for name in names:
        profile = load_profile(ROOT / "examples" / f"graph_{name}.json")
        top = plan_peak(profile, store_all_plan(profile))
        for percent in percents:
            budget = int(top * percent / 100)
            warm = best_baseline_plan(profile, budget)
            for backend, threads in (("cp-sat", 1), ("cp-sat", 2), ("cp-sat", workers), ("scip", 2)):
                result = solve_model(profile, budget, limit, threads, backend, hint=warm[1] if warm else None)
                row = {
                    "graph": name,
                    "budget_percent": percent,
                    "backend": backend,
                    "workers": threads,
                    "status": result.status,
                    "objective_ms": result.objective_ms,
                    "lower_bound_ms": result.lower_bound_ms,
                    "solve_seconds": round(result.solve_seconds, 2),
                    "warm_start_ms": warm[1].cost_ms(profile) if warm else None,
                }
                if result.plan is not None:
                    row["peak_memory"] = plan_peak(profile, result.plan)
                    row["within_budget"] = row["peak_memory"] <= budget
                print(row, flush=True)
                rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", default=GRAPHS)
    parser.add_argument("--budgets", default="50,70,85,90", help="percent of the store-all peak")
    parser.add_argument("--limits", default="60,600", help="ILP time limits in seconds")
    parser.add_argument("--lp-limit", type=float, default=60.0, help="LP relaxation time limit, seconds")
    parser.add_argument("--workers", type=int, default=8, help="CP-SAT workers")
    parser.add_argument("--formulations", default="checkmate,moccasin", help="ilp formulations, each at every limit")
    parser.add_argument("--compare-backends", action="store_true")
    parser.add_argument(
        "--no-lp-rounding", action="store_true", help="leave out the lp-rounding column (its own strategy, unchanged)"
    )
    common.add_out(parser, "ilp_speed")
    common.add_quick(parser, "VGG-16 at 90%, checkmate, 2 s limits, 1 worker")
    parser.add_argument("--append", action="store_true", help="add to the rows already in --out")
    args = parser.parse_args()
    if args.quick:
        args.graphs, args.budgets, args.limits, args.lp_limit = "vgg16", "90", "2", 2.0
        args.workers, args.formulations, args.compare_backends = 1, "checkmate", False
    names = [n for n in args.graphs.split(",") if n]
    percents = [float(p) for p in args.budgets.split(",") if p]
    limits = [float(x) for x in args.limits.split(",") if x]
    out = common.out_path(args, "ilp_speed")
    data = {
        "machine": common.machine("2-core machine shared with several other sessions during the run: times are noisy"),
        "command": " ".join(sys.argv),
        "runs": [],
        "backends": [],
    }
    if args.append and out.exists():
        previous = json.loads(out.read_text())
        data["runs"] = previous.get("runs", [])
        data["backends"] = previous.get("backends", [])
        # One machine record per invocation (load differs between them).
        data["machines"] = previous.get("machines") or [m for m in (previous.get("machine"),) if m]
        data["machines"].append(data["machine"])
    out.parent.mkdir(parents=True, exist_ok=True)

    def write(entry: dict | None = None) -> None:
        if entry is not None:
            data["runs"].append(entry)
        out.write_text(json.dumps(data, indent=1))

    if args.compare_backends:
        data["backends"] += compare_backends(names, percents, limits[0], args.workers)
        write()
    else:
        formulations = [f for f in args.formulations.split(",") if f]
        benchmark(names, percents, limits, args.workers, args.lp_limit, formulations, write, not args.no_lp_rounding)
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
