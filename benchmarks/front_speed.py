"""Speed of the whole ``remat pareto`` command on random chains, next to the DP front alone.

For each chain length (random chains from tests/solver/chain/test_optimal_kernel.py's generator, the one the
issue's numbers came from: arbitrary byte sizes, transients on some stages, fixed seed) this
runs, in the same run and each in its own subprocess:

* ``pareto``: ``python -m remat pareto chain.json --plot front.png --csv front.csv`` with the default
  strategies (every chain strategy), end to end: start-up, numba's cached code, the multi-scale DP
  front, every baseline's sweep, the CSV and the PNG;
* ``front``: :func:`remat.solver.chain.optimal.optimal_front` alone (after loading the compiled kernel);
* ``phases``: :func:`remat.solver.pareto.chain.chain_front`'s parts timed one by one in one process
  (the DP front, then each baseline's sweep), to show where the time goes.

From the CSV it checks the acceptance items: the front's least memory is at most every
baseline's, and every baseline point is dominated by an optimal point (one with no more memory
and no more time). Wall-clock and CPU seconds are both printed (CPU is the steadier guide on a
shared machine). Usage: ``python -m benchmarks.front_speed [--sizes 100,400,1000] [--seed 0]
[--repeats 5]`` (chains up to 400 stages run the whole command ``--repeats`` times and show the
median); prints a table and writes benchmarks/results/front_speed.json with the machine it ran on.
``--lstm-only`` adds issue 11's resolution case (:func:`lstm_resolution`, needs torch) to that file.

Long chains (issue 24): for every size it also times the whole ``remat solve --strategy optimal
--budget 50%`` command and records the peak RSS of both commands (``/usr/bin/time -v``; above
1,000 stages ``optimal`` is the blocked DP, :mod:`remat.solver.chain.dp.blocked`). ``--loss`` adds
the blocked DP's loss against the flat DP on a 1,000-stage chain where both run (at fixed
budgets and over the whole front, for blocks of ceil(n / 200) = 5 stages and of 50, the block
length used at 10,000 stages), and ``--rss 100000`` every chain strategy's whole ``solve``
command on a 100,000-stage chain: exit status, seconds, peak RSS and its one-line refusal when
it refuses, plus ``remat simulate`` of a 100,000-stage schedule. ``--long`` writes those under
the key ``long`` of benchmarks/results/front_speed.json (with the machine and a baseline: the whole
``store-all`` command on the same chain, timed in the same run).
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import common
from benchmarks.common import ROOT
from remat.schedules import save_profile


def random_chain(n: int, seed: int):
    """tests/solver/chain/test_optimal_kernel.py's random chain (unit = 1 byte)."""
    spec = importlib.util.spec_from_file_location(
        "kernel_tests", ROOT / "tests" / "solver" / "chain" / "test_optimal_kernel.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.random_chain(n, seed, 1)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed(command: list[str]) -> tuple[float, float, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    start, cpu = time.perf_counter(), _children_cpu()
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr}")
    return time.perf_counter() - start, _children_cpu() - cpu, done.stdout


def part_front(path: str) -> dict:
    from remat.schedules import load_profile
    from remat.solver.chain.dp.blocked import FLAT_LIMIT
    from remat.solver.chain.dp.table import build_table
    from remat.solver.chain.optimal import optimal_front
    from remat.solver.chain.store_all import store_all_peak

    profile = load_profile(path)
    if profile.length <= FLAT_LIMIT:  # load the compiled kernel first (a flat table above is O(n**2) memory)
        build_table(profile, max(1, store_all_peak(profile)), 2)
    start, cpu = time.perf_counter(), time.process_time()
    front = optimal_front(profile)
    return {"front_s": time.perf_counter() - start, "front_cpu_s": time.process_time() - cpu, "points": len(front)}


def part_phases(path: str) -> dict:
    from remat.schedules import load_profile
    from remat.solver import strategy_names
    from remat.solver.chain.optimal import optimal_front
    from remat.solver.chain.store_all import store_all_peak
    from remat.solver.pareto.chain import budget_sweep, sweep_strategy

    profile = load_profile(path)
    phases = {}
    start = time.process_time()
    front = optimal_front(profile)
    phases["optimal"] = time.process_time() - start
    low = min(p.peak_memory for p in front)
    budgets = budget_sweep(max(profile.input_size, low // 2), store_all_peak(profile), 24)
    for name in strategy_names("chain"):
        if name != "optimal":
            start = time.process_time()
            sweep_strategy(profile, name, budgets)
            phases[name] = time.process_time() - start
    return {"phases_cpu_s": phases}


def check_front(csv_path: str) -> dict:
    """Least memory per strategy, and baseline points that no optimal point dominates."""
    with open(csv_path) as handle:
        rows = list(csv.DictReader(handle))
    points = [(r["strategy"], int(r["peak_memory"]), float(r["compute_ms"])) for r in rows]
    optimal = [(m, t) for s, m, t in points if s == "optimal"]
    least = {}
    for name, memory, _ in points:
        least[name] = min(least.get(name, memory), memory)
    undominated = [
        (name, memory, ms)
        for name, memory, ms in points
        if name != "optimal" and not any(m <= memory and t <= ms * (1 + 1e-9) for m, t in optimal)
    ]
    return {
        "least_memory": least,
        "front_least_is_least": all(least["optimal"] <= v for v in least.values()),
        "baseline_points": sum(1 for name, _, _ in points if name != "optimal"),
        "baseline_points_not_dominated": len(undominated),
        "not_dominated": undominated[:10],
    }


def timed_rss(command: list[str], timeout: float = 600) -> dict:
    """Run ``command`` under ``/usr/bin/time -v``: exit status, wall seconds, peak RSS (MiB) and
    the last line of its stderr (a refusal's one line)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    start = time.perf_counter()
    try:
        done = subprocess.run(
            ["/usr/bin/time", "-v", *command], capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "seconds": time.perf_counter() - start}
    seconds = time.perf_counter() - start
    lines = done.stderr.splitlines()
    rss = next((int(x.split(":")[1]) for x in lines if "Maximum resident set size" in x), 0)
    own = [x for x in lines if not x.startswith("\t") and "Command exited" not in x and x.strip()]
    return {"status": done.returncode, "seconds": seconds, "rss_mib": rss / 1024, "message": own[-1] if own else ""}


def solve_command(path: Path, strategy: str, budget: str, out: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "remat",
        "solve",
        str(path),
        "--strategy",
        strategy,
        "--budget",
        budget,
        "-o",
        str(out),
    ]


def run_size(n: int, seed: int, work: Path, repeats: int = 1) -> dict:
    """One chain's row; the whole command is run ``repeats`` times (the median is ``pareto_s``,
    every run is kept: one run on a shared 2-core machine varies by a second or more)."""
    profile = random_chain(n, seed)
    path = work / f"chain{n}.json"
    save_profile(profile, path)
    png, table = work / f"front{n}.png", work / f"front{n}.csv"
    command = [sys.executable, "-m", "remat", "pareto", str(path), "--plot", str(png), "--csv", str(table)]
    baseline = timed_rss(solve_command(path, "store-all", "100%", work / f"baseline{n}.json"))
    solved = timed_rss(solve_command(path, "optimal", "50%", work / f"solve{n}.json"))
    pareto_rss = timed_rss(command)
    runs = [_timed(command)[:2] for _ in range(repeats)]
    wall, cpu = statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs)
    row = {"stages": n, "seed": seed, "pareto_s": wall, "pareto_cpu_s": cpu, "png_written": png.exists()}
    row |= {"pareto_runs_s": [w for w, _ in runs], "pareto_runs_cpu_s": [c for _, c in runs]}
    row |= {"baseline_store_all_solve_s": baseline["seconds"], "baseline_rss_mib": baseline.get("rss_mib")}
    row |= {"solve_s": solved["seconds"], "solve_rss_mib": solved.get("rss_mib"), "solve_status": solved["status"]}
    row |= {"pareto_rss_mib": pareto_rss.get("rss_mib"), "pareto_rss_run_s": pareto_rss["seconds"]}
    for part in ("front", "phases"):
        _, _, out = _timed([sys.executable, "-m", "benchmarks.front_speed", "--part", part, "--path", str(path)])
        row.update(json.loads(out.strip().splitlines()[-1]))
    row.update(check_front(str(table)))
    return row


def loss_at(n: int, seed: int, blocks: tuple[int, ...] = (5, 50), fractions=(0.1, 0.2, 0.3, 0.5, 0.7, 0.9)) -> dict:
    """The blocked DP against the flat DP on one ``n``-stage chain where both run: at fixed
    budgets (a fraction of the way from the flat minimum to store-all), the relative loss
    (blocked - flat) / flat of ``solve``; over the whole front, for each flat front point the
    fastest blocked point with no more memory; and the proven direction (flat <= blocked at the
    same slots, every level of the budget's table)."""
    import numpy as np

    from remat.solver.chain.dp import blocked, single
    from remat.solver.chain.dp.table import build_table, slot_size
    from remat.solver.chain.store_all import store_all_peak

    profile = random_chain(n, seed)
    low, high = single.minimum_budget(profile), store_all_peak(profile)
    start = time.perf_counter()
    flat_front = list(single.front(profile, 500).points)
    flat_s = time.perf_counter() - start
    rows = []
    for block in blocks:
        start = time.perf_counter()
        front = blocked.front(profile, 500, block)
        seconds = time.perf_counter() - start
        at = []
        for fraction in fractions:
            budget = int(low + fraction * (high - low))
            flat = single.solve(profile, budget, 500).predicted.compute_ms
            try:
                mine = blocked.solve(profile, budget, 500, block).predicted.compute_ms
            except Exception as error:  # below the family's least memory
                at.append({"fraction": fraction, "budget": budget, "flat_ms": flat, "blocked": str(error)})
                continue
            free = budget - profile.input_size
            slot = slot_size(free, 500)
            levels = min(500, free // slot)
            flat_top = build_table(profile, slot, levels).top
            mine_top = blocked.build(profile, slot, levels, block).top
            both = np.isfinite(mine_top)
            # the flat table sums in float32: within 2n * 2**-24 (relative) of the exact sums
            excess = float(np.max((flat_top[both] - mine_top[both]) / mine_top[both], initial=0.0))
            tolerance = 2 * n * 2.0**-24
            at.append(
                {
                    "fraction": fraction,
                    "budget": budget,
                    "flat_ms": flat,
                    "blocked_ms": mine,
                    "loss": (mine - flat) / flat,
                    "flat_over_blocked_max": excess,
                    "float32_tolerance": tolerance,
                    "flat_le_blocked_every_level": excess <= tolerance,
                }
            )
        worst, covered = 0.0, 0
        for point in flat_front:
            within = [p.compute_ms for p in front if p.peak_memory <= point.peak_memory]
            if within:
                covered += 1
                worst = max(worst, (min(within) - point.compute_ms) / point.compute_ms)
        rows.append(
            {
                "stages_per_block": block,
                "front_s": seconds,
                "least_memory": blocked.least_budget(profile, block),
                "at_budgets": at,
                "front_worst_loss": worst,
                "flat_points_covered": covered,
                "flat_points": len(flat_front),
            }
        )
    return {
        "stages": n,
        "seed": seed,
        "flat_least_memory": low,
        "store_all_peak": high,
        "flat_front_s": flat_s,
        "blocked": rows,
    }


STRATEGIES_100K = ("store-all", "recompute-all", "sequential", "chen-sqrt", "chen-greedy", "revolve", "optimal")


def rss_at(n: int, seed: int, work: Path) -> dict:
    """Every chain strategy's whole ``solve`` command on an ``n``-stage chain (store-all at 100%,
    the others at 50%), then ``remat simulate`` of the chen-sqrt schedule."""
    path = work / f"chain{n}.json"
    save_profile(random_chain(n, seed), path)
    rows = {}
    for name in STRATEGIES_100K:
        budget = "100%" if name == "store-all" else "50%"
        rows[name] = timed_rss(solve_command(path, name, budget, work / f"{name}.json")) | {"budget": budget}
        print(f"  {n} stages, {name:>13}: {rows[name]}", flush=True)
    schedule = work / "chen-sqrt.json"
    if schedule.exists():
        rows["simulate (chen-sqrt)"] = timed_rss([sys.executable, "-m", "remat", "simulate", str(path), str(schedule)])
        print(f"  simulate: {rows['simulate (chen-sqrt)']}", flush=True)
    return {"stages": n, "seed": seed, "commands": rows}


def long_main(args: argparse.Namespace) -> int:
    """``--long``: the loss at ``--loss`` stages and the 100k RSS table, into the result's ``long``."""
    info = common.machine("shared machine: other jobs were running; times are wall-clock and noisy")
    results: dict = {"benchmark": "front_speed (long chains)", "machine": info}
    with tempfile.TemporaryDirectory() as work:
        if args.loss:
            results["loss"] = loss_at(args.loss, args.seed)
            for row in results["loss"]["blocked"]:
                losses = [a.get("loss") for a in row["at_budgets"] if "loss" in a]
                print(
                    f"blocks of {row['stages_per_block']}: loss at budgets {[f'{x:.4%}' for x in losses]}, "
                    f"front worst {row['front_worst_loss']:.4%}, front {row['front_s']:.2f} s"
                )
        if args.rss:
            path = Path(work) / "baseline.json"
            save_profile(random_chain(args.rss, args.seed), path)
            results["baseline_store_all_100_percent"] = timed_rss(
                solve_command(path, "store-all", "100%", path.with_suffix(".out"))
            )
            results["rss"] = rss_at(args.rss, args.seed, Path(work))
    info["load_average_at_end"] = list(os.getloadavg())
    common.update_result(args.output, "long", results, indent=1)
    return 0


def lstm_resolution() -> dict:
    """Issue 11's resolution case: the LSTM of benchmarks/lstm_chen2016.py, T = 1,000 in blocks of
    4 steps (250 stages, a freshly profiled block), least memory whose fastest schedule is within
    one extra forward: by bisection with ``solve`` at the default 500 slots, and from the front
    alone (what ``solve`` returned before it also used the budget's own table)."""
    from benchmarks import lstm_chen2016 as lstm
    from remat.solver.chain.optimal import DEFAULT_SLOTS, optimal_front

    chain = lstm.chain_of(lstm.stage_profile(4), 250)
    level = lstm.resolve(None, chain)
    lstm.DP_SLOTS = DEFAULT_SLOTS
    start = time.perf_counter()
    solved = lstm.dp_least_memory(chain, level)
    seconds = time.perf_counter() - start
    within = [p.peak_memory for p in optimal_front(chain) if p.recompute_ms <= level * (p.compute_ms - p.recompute_ms)]
    return {
        "case": "LSTM T=1000 in blocks of 4, least memory within one extra forward",
        "overhead_level": level,
        "solve_500_slots_bytes": solved.predicted.peak_memory,
        "solve_500_slots_mib": solved.predicted.peak_memory / 2**20,
        "solve_table_free_bytes": solved.extra.get("table_free_bytes"),
        "front_alone_bytes": min(within),
        "front_alone_mib": min(within) / 2**20,
        "bisection_s": seconds,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,400,1000")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=5, help="runs of the whole command per size (median shown)")
    parser.add_argument("--part", choices=("front", "phases"), help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    common.add_out(parser, "front_speed", dest="output")
    common.add_quick(parser, "100 stages, one run")
    parser.add_argument("--lstm-only", action="store_true", help="add the LSTM resolution case to the results file")
    parser.add_argument("--long", action="store_true", help="the long-chain checks only (--loss, --rss)")
    parser.add_argument("--loss", type=int, default=0, help="with --long: stages of the blocked-vs-flat comparison")
    parser.add_argument("--rss", type=int, default=0, help="with --long: stages of every strategy's RSS check")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.repeats = "100", 1
    args.output = common.out_path(args, "front_speed", dest="output")
    if args.lstm_only:
        resolution = lstm_resolution() | {"load_average": list(os.getloadavg())}
        print(json.dumps(resolution, indent=1))
        common.update_result(args.output, "lstm_resolution", resolution, indent=1)
        return 0
    if args.long:
        return long_main(args)
    if args.part:
        print(json.dumps((part_front if args.part == "front" else part_phases)(args.path)))
        return 0
    info = common.machine("shared machine: other jobs were running; times are wall-clock and noisy")
    header = (
        f"{'stages':>6} {'base s':>7} {'solve s':>8} {'RSS MiB':>8} {'pareto s':>9} {'(cpu)':>7} {'RSS MiB':>8} "
        f"{'DP front s':>10} {'(cpu)':>7} "
        f"{'least: front':>12} {'others':>8} {'undominated':>11}"
    )
    print(header)
    print("-" * len(header))
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for n in (int(x) for x in args.sizes.split(",") if x):
            row = run_size(n, args.seed, Path(work), args.repeats if n <= 400 else 1)
            rows.append(row)
            others = min(v for k, v in row["least_memory"].items() if k != "optimal")
            print(
                f"{n:>6} {row['baseline_store_all_solve_s']:>7.2f} {row['solve_s']:>8.2f} "
                f"{row['solve_rss_mib']:>8.0f} {row['pareto_s']:>9.2f} "
                f"{row['pareto_cpu_s']:>7.2f} {row['pareto_rss_mib']:>8.0f} {row['front_s']:>10.2f} "
                f"{row['front_cpu_s']:>7.2f} {row['least_memory']['optimal']:>12} {others:>8} "
                f"{row['baseline_points_not_dominated']:>5} / {row['baseline_points']:<4}"
            )
            if len(row["pareto_runs_s"]) > 1:
                print(
                    f"       pareto runs, wall s: {', '.join(f'{w:.2f}' for w in row['pareto_runs_s'])} (median above)"
                )
            phases = ", ".join(f"{k} {v:.2f}" for k, v in row["phases_cpu_s"].items())
            print(f"       CPU s by phase: {phases}")
    info["load_average_at_end"] = list(os.getloadavg())
    data = {"benchmark": "front_speed", "machine": info, "results": rows}
    common.write_result(data, args.output, indent=1, keep=("lstm_resolution", "long"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
