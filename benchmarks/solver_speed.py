"""Speed of the ``optimal`` chain DP: the whole memory/compute front for chains of 50..1000 stages.

For each chain length (a random heterogeneous chain, fixed seed) this measures, each size in its
own subprocess so that peak RSS is per size:

Times are wall-clock and CPU (process) seconds; the speed-up compares CPU times, which other
jobs on a shared machine disturb less than wall-clock.

* ``table_s``: filling the DP table for the store-all budget at ``--slots`` levels;
* ``front_s``: :func:`remat.solver.optimal.optimal_front` end to end (table + reading one schedule
  back per level where the optimum improves);
* peak RSS of that subprocess;
* ``reference_s``: a straightforward implementation of the same recurrence (pure-Python loops
  over segments, memory levels and split points, no skipping), on the sizes given by
  ``--reference`` only (it is cubic in the length times the slots and takes minutes beyond ~100
  stages); its table must equal the vectorized one, and the speed-up is measured in the same run.

Usage: ``python benchmarks/solver_speed.py [--sizes 50,100,200,400,1000] [--slots 500]
[--reference 50]``. Prints a table and writes benchmarks/results/solver_speed.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import random
import resource
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from remat.schedules import ChainProfile, Stage  # noqa: E402


def bench_chain(n: int, seed: int = 0) -> ChainProfile:
    """A heterogeneous chain: activations 0.5-8 MB, saved 1-4x the output, some transients."""
    rng = random.Random(seed * 100_003 + n)
    stages = []
    for i in range(n):
        out = rng.randint(500_000, 8_000_000)
        stages.append(
            Stage(
                name=f"layer{i}",
                forward_ms=round(rng.uniform(0.2, 3.0), 4),
                backward_ms=round(rng.uniform(0.4, 6.0), 4),
                output_size=out,
                saved_size=int(out * rng.uniform(1.0, 4.0)),
                forward_overhead=rng.choice([0, 0, out // 2]),
                backward_overhead=rng.choice([0, out, 2 * out]),
            )
        )
    return ChainProfile(name=f"bench{n}", input_size=3_000_000, stages=tuple(stages))


def reference_top(profile: ChainProfile, slot: int, levels: int) -> list[float]:
    """C(0, n, k) for k = 0..levels by the plain recurrence (see remat/solver/optimal_table.py),
    with the same conservative slot rounding, in pure Python: no vectorization, no skipping."""
    from remat.solver.optimal_table import chain_sizes, record_requirement

    n = profile.length
    sizes = chain_sizes(profile, slot)
    A = [int(x) for x in sizes.act_slots]
    G = [int(x) for x in sizes.g_slots]
    SV = [int(x) for x in sizes.saved_slots]
    fwd_first = [int(x) for x in sizes.forward_slots[:, 0]]
    fwd_next = [int(x) for x in sizes.forward_slots[:, 1]]
    f = [s.forward_ms for s in profile.stages]
    b = [s.backward_ms for s in profile.stages]
    inf = math.inf
    K = levels
    # C[s][t][k]; C[t][t][k] = 0 for k >= 0
    C = [[None] * (n + 1) for _ in range(n + 1)]
    for t in range(n + 1):
        C[t][t] = [0.0] * (K + 1)

    def value(s: int, t: int, k: int) -> float:
        if k < 0:
            return inf
        return C[s][t][min(k, K)]

    # X[s][t]: exact bytes the store-all schedule of [s, t) needs; from ceil(X / S) slots on the
    # segment is certified to store everything (the same rule as the vectorized table)
    X = [[0] * (n + 1) for _ in range(n + 1)]
    st = profile.stages
    act = sizes.act
    for s in range(n - 1, -1, -1):
        for t in range(s + 1, n + 1):
            g = act[t] if t < n else 0
            X[s][t] = max(
                st[s].saved_size + st[s].forward_overhead,
                st[s].saved_size + X[s + 1][t],
                st[s].saved_size + act[s + 1] + act[s] + st[s].backward_overhead - g,
            )
    for s in range(n - 1, -1, -1):
        for t in range(s + 1, n + 1):
            req1 = record_requirement(sizes, s, t, n)
            row = [inf] * (K + 1)
            store_all_from = -(-X[s][t] // slot)
            store_all_ms = sum(f[i] + b[i] for i in range(s, t))
            for k in range(K + 1):
                if k >= store_all_from:
                    row[k] = store_all_ms
                    continue
                best = inf
                if k >= req1:
                    best = f[s] + b[s] + value(s + 1, t, k - SV[s])
                need = fwd_first[s]
                forward = f[s]
                for j in range(s + 1, t):
                    if need <= k:
                        cost = forward + value(j, t, k - A[j]) + value(s, j, k + G[t] - A[j])
                        if cost < best:
                            best = cost
                    need = max(need, fwd_next[j])
                    forward += f[j]
                row[k] = best
            C[s][t] = row
    return C[0][n]


def run_one(n: int, slots: int, reference: bool) -> dict:
    """Measure one size in this process (called in a subprocess by main)."""
    import numpy as np

    from remat.solver.optimal import optimal_front
    from remat.solver.optimal_table import build_table, slot_size
    from remat.solver.store_all import store_all_peak

    profile = bench_chain(n)
    free = store_all_peak(profile) - profile.input_size
    slot = slot_size(free, slots)
    levels = min(slots, free // slot)
    start, cpu = time.perf_counter(), time.process_time()
    table = build_table(profile, slot, levels)
    table_s, table_cpu_s = time.perf_counter() - start, time.process_time() - cpu
    top = table.top.copy()
    cells = int(sum(len(d) for d in table.decisions.values()))
    del table
    start, cpu = time.perf_counter(), time.process_time()
    front = optimal_front(profile, slots=slots)
    front_s, front_cpu_s = time.perf_counter() - start, time.process_time() - cpu
    result = {
        "stages": n,
        "slots": slots,
        "table_s": table_s,
        "table_cpu_s": table_cpu_s,
        "front_s": front_s,
        "front_cpu_s": front_cpu_s,
        "front_points": len(front),
        "computed_cells": cells,
        "all_cells": n * (n + 1) // 2 * (levels + 1),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    if reference:
        start, cpu = time.perf_counter(), time.process_time()
        ref = reference_top(profile, slot, levels)
        result["reference_s"] = time.perf_counter() - start
        result["reference_cpu_s"] = time.process_time() - cpu
        result["speedup"] = result["reference_cpu_s"] / table_cpu_s
        ref_arr = np.array(ref)
        same_feasible = bool(np.array_equal(np.isfinite(ref_arr), np.isfinite(top)))
        finite = np.isfinite(ref_arr)
        rel = float(np.max(np.abs(ref_arr[finite] - top[finite]) / ref_arr[finite])) if finite.any() else 0.0
        result["reference_agrees"] = same_feasible and rel < 1e-5
        result["reference_max_rel_diff"] = rel
    return result


def machine() -> dict:
    def version(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": version("numpy"),
        "torch": version("torch"),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "load_average_at_start": list(os.getloadavg()),
        "note": "shared machine: other jobs were running; times are wall-clock and noisy",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="50,100,200,400,1000")
    parser.add_argument("--slots", type=int, default=500)
    parser.add_argument("--reference", default="50", help="sizes on which to time the pure-Python reference")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--with-reference", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "solver_speed.json"))
    args = parser.parse_args(argv)
    if args.one is not None:
        print(json.dumps(run_one(args.one, args.slots, args.with_reference)))
        return 0
    sizes = [int(x) for x in args.sizes.split(",") if x]
    reference = {int(x) for x in args.reference.split(",") if x}
    info = machine()
    rows = []
    header = (
        f"{'stages':>6} {'table s':>8} {'(cpu)':>7} {'front s':>8} {'(cpu)':>7} {'points':>6} "
        f"{'cells computed':>20} {'peak RSS MB':>11} {'reference s':>11} {'(cpu)':>7} {'speed-up':>8}"
    )
    print(header)
    print("-" * len(header))
    for n in sizes:
        command = [sys.executable, __file__, "--one", str(n), "--slots", str(args.slots)]
        if n in reference:
            command.append("--with-reference")
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        row = json.loads(done.stdout.strip().splitlines()[-1])
        rows.append(row)
        if "reference_s" in row:
            ref = f"{row['reference_s']:>11.1f} {row['reference_cpu_s']:>7.1f} {row['speedup']:>7.0f}x"
        else:
            ref = f"{'-':>11} {'-':>7} {'-':>8}"
        share = f"{row['computed_cells']:,} ({100 * row['computed_cells'] / row['all_cells']:.0f}%)"
        print(
            f"{n:>6} {row['table_s']:>8.2f} {row['table_cpu_s']:>7.2f} {row['front_s']:>8.2f} "
            f"{row['front_cpu_s']:>7.2f} {row['front_points']:>6} {share:>20} {row['peak_rss_mb']:>11.0f} {ref}",
            flush=True,
        )
        if "reference_agrees" in row and not row["reference_agrees"]:
            print(f"  reference DISAGREES (max relative difference {row['reference_max_rel_diff']:.3g})")
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    with open(args.output, "w") as handle:
        json.dump({"benchmark": "solver_speed", "machine": info, "results": rows}, handle, indent=2)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
