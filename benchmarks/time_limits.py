"""Does ``--time-limit`` hold? Wall time of whole ilp / lp-rounding solves against their limit.

For each graph (the bundled ResNet-50 graph, the U-Net graph, and a generated 401-node chain
graph), budget and limit: the wall seconds of the whole solve (``remat.solver.solve``, exactly
what ``remat solve`` runs), the solver's own reported elapsed seconds and phases, whether it
kept the promise (limit + 5% + 1 s, ``remat.solver.deadline``), and its result or error.
Prints a table and writes benchmarks/results/time_limits.json with the machine it ran on.

    python -m benchmarks.time_limits --limits 2,5,10,30 --budgets 50,80

Times are wall-clock seconds on whatever machine runs this (the JSON records its load).
"""

from __future__ import annotations

import argparse
import time

from benchmarks import common
from benchmarks.common import ROOT
from remat.schedules import RematError, load_profile
from remat.solver import solve
from remat.solver.budget import reference_peak
from remat.solver.deadline import Deadline
from remat.solver.graph.chain_to_graph import chain_to_graph


def graphs() -> dict:
    from tests.solver.graph.test_chain_as_graph import random_chain

    return {
        "resnet50": load_profile(ROOT / "examples" / "graph_resnet50.json"),
        "unet": load_profile(ROOT / "examples" / "graph_unet.json"),
        "chain200-as-graph": chain_to_graph(random_chain(200, seed=1)),
    }


def run(name: str, profile, percent: int, strategy: str, limit: float) -> dict:
    budget = reference_peak(profile) * percent // 100
    start = time.perf_counter()
    row = {"graph": name, "nodes": profile.size, "budget_percent": percent, "strategy": strategy, "limit": limit}
    try:
        schedule = solve(profile, budget, strategy, time_limit=limit)
    except RematError as error:
        row["error"] = str(error)
        schedule = None
    row["wall_seconds"] = round(time.perf_counter() - start, 3)
    row["kept"] = Deadline(limit).within_margin(row["wall_seconds"])
    if schedule is not None:
        extra = schedule.extra
        row["compute_ms"] = schedule.predicted.compute_ms
        for key in ("elapsed_seconds", "phases_seconds", "status", "source", "gap", "note"):
            if key in extra:
                row[key] = extra[key]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limits", default="2,5,10,30", help="seconds, comma-separated")
    parser.add_argument("--budgets", default="50,80", help="percent of the store-all peak, comma-separated")
    parser.add_argument("--strategies", default="ilp,lp-rounding")
    parser.add_argument("--graphs", default="resnet50,unet,chain200-as-graph", help="comma-separated")
    common.add_quick(parser, "the 200-stage chain as a graph, lp-rounding, 1 s, 80%")
    common.add_out(parser, "time_limits")
    args = parser.parse_args()
    if args.quick:
        args.limits, args.budgets, args.strategies, args.graphs = "1", "80", "lp-rounding", "chain200-as-graph"
    limits = [float(x) for x in args.limits.split(",")]
    budgets = [int(x) for x in args.budgets.split(",")]
    rows = []
    print(f"{'graph':<18} {'nodes':>5} {'budget':>6} {'strategy':<12} {'limit':>6} {'wall s':>7} {'kept':>5}  result")
    for name, profile in graphs().items():
        if name not in args.graphs.split(","):
            continue
        for percent in budgets:
            for strategy in args.strategies.split(","):
                for limit in limits:
                    row = run(name, profile, percent, strategy, limit)
                    rows.append(row)
                    result = row.get("error") or f"{row['compute_ms']:.1f} ms ({row.get('source', strategy)})"
                    print(
                        f"{name:<18} {row['nodes']:>5} {percent:>5}% {strategy:<12} {limit:>6g} "
                        f"{row['wall_seconds']:>7.2f} {'yes' if row['kept'] else 'NO':>5}  {result[:90]}",
                        flush=True,
                    )
    common.write_result({"machine": common.machine(), "rows": rows}, common.out_path(args, "time_limits"), indent=1)


if __name__ == "__main__":
    main()
