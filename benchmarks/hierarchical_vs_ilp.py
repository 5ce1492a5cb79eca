"""The hierarchical graph solver against the flat ILP: step time, distance to the ILP's best and
to its proven bound, and solve seconds, on the bundled model graphs.

For each graph (examples/graph_<name>.json) and budget (percent of its store-all peak) it runs
``hierarchical`` and takes the flat side from benchmarks/results/ilp_speed.json, or from the
ilp_speed.py outputs named by ``--flat-files`` (the best of ``ilp`` and ``lp-rounding`` over
them, at the time limits recorded there, and the largest proven lower bound) when they have the
point; with ``--ilp-limit S`` it runs ``ilp`` itself (S seconds per point)
for the points the file lacks. Prints a table and writes benchmarks/results/hierarchical_vs_ilp.json
with the machine it ran on.

    python -m benchmarks.hierarchical_vs_ilp --graphs vgg16,unet,mobilenetv2,resnet50 --budgets 50,70,85,90
    python -m benchmarks.hierarchical_vs_ilp --graphs /tmp/graph_vit_b_16.json --ilp-limit 60 \
        --out /tmp/hierarchical_vs_ilp_generated.json
    python -m benchmarks.hierarchical_vs_ilp --flat-from hierarchical_vs_ilp.json

``--flat-from`` keeps the flat side of an earlier run of this script where those files have no
row (the file is read before it is written again).

Times are wall-clock seconds on whatever machine runs this (the JSON records its load).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from benchmarks import common
from benchmarks.common import ROOT
from remat.schedules import RematError, load_profile
from remat.solver import solve
from remat.solver.graph.baselines import store_all_plan
from remat.solver.graph.stages import plan_peak

RESULTS = ROOT / "benchmarks" / "results"
FILES = ("ilp_speed.json",)  # ilp_speed.py outputs the flat side is read from (--flat-files)


def previous_flat(path: Path, graph: str, percent: float) -> dict | None:
    """The flat side recorded at this point by an earlier run of this script (its JSON), or None."""
    for run in json.loads(path.read_text())["runs"]:
        if run["graph"] == graph and run["budget_percent"] == percent and run.get("flat"):
            source, note = str(run["flat"].get("source")), f", as recorded in {path.name}"
            return run["flat"] | {"source": source if source.endswith(note) else source + note}
    return None


def recorded_flat(graph: str, percent: float, files: list[str]) -> dict | None:
    """The flat solvers' best cost (ms), best bound (ms) and time limits at this point over the
    ilp_speed.py outputs ``files`` (in results/), or None when none has the point."""
    found, limits, seen = [], set(), []
    for name in files:
        path = RESULTS / name
        if not path.exists():
            continue
        for run in json.loads(path.read_text())["runs"]:
            if run["graph"] != graph or run["budget_percent"] != percent:
                continue
            seen.append(name)
            rows = [r for r in run["results"] if r["strategy"] in ("ilp", "lp-rounding") and "compute_ms" in r]
            found += rows
            limits |= {r.get("time_limit", 60.0) for r in rows if r["strategy"] == "ilp"}
    if not seen:
        return None
    where = ", ".join(sorted(set(seen)))
    if not found:
        return {"best_ms": None, "bound_ms": None, "source": f"{where} (no flat schedule)"}
    best = min(found, key=lambda r: r["compute_ms"])
    bound = max(r.get("lower_bound_ms") or 0.0 for r in found)
    seconds = "/".join(f"{limit:g}" for limit in sorted(limits))
    return {
        "best_ms": best["compute_ms"],
        "best_strategy": best["strategy"],
        "bound_ms": bound,
        "source": f"{where} ({seconds} s ILP)",
    }


def live_flat(profile, budget: int, limit: float) -> dict:
    try:
        schedule = solve(profile, budget, "ilp", time_limit=limit)
    except RematError as error:
        return {"best_ms": None, "bound_ms": None, "source": f"ilp {limit:g} s here: {error}"}
    return {
        "best_ms": schedule.predicted.compute_ms,
        "best_strategy": "ilp",
        "bound_ms": schedule.extra.get("lower_bound_ms"),
        "source": f"ilp {limit:g} s here",
    }


def point(
    graph: str, percent: float, ilp_limit: float | None, previous: Path | None = None, files: tuple[str, ...] = FILES
) -> dict:
    path = Path(graph) if graph.endswith(".json") else ROOT / "examples" / f"graph_{graph}.json"
    graph = path.stem.removeprefix("graph_")
    profile = load_profile(path)
    store_all = plan_peak(profile, store_all_plan(profile))
    budget = int(store_all * percent / 100)
    base = profile.store_all_compute_ms
    row = {"graph": graph, "nodes": profile.size, "budget_percent": percent, "budget": budget, "store_all_ms": base}
    start = time.perf_counter()
    try:
        schedule = solve(profile, budget, "hierarchical")
        row |= {
            "compute_ms": schedule.predicted.compute_ms,
            "peak_memory": schedule.predicted.peak_memory,
            "blocks": schedule.extra.get("blocks"),
        }
    except RematError as error:
        row["error"] = str(error)
    row["seconds"] = round(time.perf_counter() - start, 3)
    flat = recorded_flat(graph, percent, list(files))
    if flat is None and previous is not None:
        flat = previous_flat(previous, graph, percent)
    if flat is None and ilp_limit:
        flat = live_flat(profile, budget, ilp_limit)
    row["flat"] = flat
    if flat and flat.get("best_ms") and "compute_ms" in row:
        row["vs_flat_best"] = row["compute_ms"] / flat["best_ms"] - 1
    if flat and flat.get("bound_ms") and "compute_ms" in row:
        row["vs_flat_bound"] = row["compute_ms"] / flat["bound_ms"] - 1
    return row


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:+.2f}%"


def _overheads(row: dict) -> tuple[str, str]:
    """(hierarchical's, the flat ILP's) step-time overhead over store-all, as text."""
    over = _pct(row["compute_ms"] / row["store_all_ms"] - 1) if "compute_ms" in row else "infeasible"
    flat = row.get("flat") or {}
    flat_over = _pct(flat["best_ms"] / row["store_all_ms"] - 1) if flat.get("best_ms") else "—"
    return over, flat_over


def markdown(row: dict) -> str:
    """The row for docs/strategies.md's table."""
    over, flat_over = _overheads(row)
    cells = [row["graph"], f"{row['budget_percent']:.0f}%", over, f"{row['seconds']:.2f}", flat_over]
    cells += [_pct(row.get("vs_flat_best")), _pct(row.get("vs_flat_bound"))]
    return "| " + " | ".join(cells) + " |"


def show(row: dict) -> str:
    over, flat_over = _overheads(row)
    return (
        f"{row['graph']:<12} {row['budget_percent']:>4.0f}%  {over:>10}  {row['seconds']:>6.2f} s"
        f"  {flat_over:>10}  {_pct(row.get('vs_flat_best')):>9}  {_pct(row.get('vs_flat_bound')):>9}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", default="vgg16,unet,mobilenetv2,resnet50", help="names in examples/ or .json paths")
    parser.add_argument("--budgets", default="50,70,85,90", help="percent of the store-all peak")
    parser.add_argument("--ilp-limit", type=float, default=None, help="run the ILP here where the file lacks a point")
    parser.add_argument(
        "--flat-from",
        default=None,
        help="an earlier output of this script (in results/): its flat side where the files lack a point",
    )
    parser.add_argument(
        "--flat-files",
        default=",".join(FILES),
        help="ilp_speed.py outputs in results/ (comma-separated): the flat side is the best schedule and the "
        "largest bound over all of them",
    )
    common.add_quick(parser, "VGG-16 at 90%, the flat side from the files (no ILP run)")
    common.add_out(parser, "hierarchical_vs_ilp")
    args = parser.parse_args()
    if args.quick:
        args.graphs, args.budgets, args.ilp_limit = "vgg16", "90", None
    previous = RESULTS / args.flat_from if args.flat_from else None
    data = {"machine": common.machine("2-core machine shared with other sessions: times are noisy")}
    data["command"] = " ".join(sys.argv)
    data["runs"] = []
    head = f"{'graph':<12} {'budget':>5}  {'hier step':>10}  {'seconds':>8}  {'flat best':>10}"
    print(head + f"  {'vs best':>9}  {'vs bound':>9}")
    for graph in args.graphs.split(","):
        for percent in (float(b) for b in args.budgets.split(",")):
            row = point(graph, percent, args.ilp_limit, previous, tuple(args.flat_files.split(",")))
            data["runs"].append(row)
            print(show(row), flush=True)
    print("\n".join(markdown(row) for row in data["runs"]))
    common.write_result(data, common.out_path(args, "hierarchical_vs_ilp"), indent=1)


if __name__ == "__main__":
    main()
