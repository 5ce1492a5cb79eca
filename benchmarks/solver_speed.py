"""Speed of the ``optimal`` chain DP: the whole memory/compute front for chains of 50..1000 stages.

For each chain length (a random heterogeneous chain, fixed seed) this measures, each
implementation in its own subprocess so that peak RSS is per size and per implementation:

* ``table_s``: filling the DP table for the store-all budget at ``--slots`` levels with the numba
  kernel (:func:`remat.solver.chain.dp.table.build_table`, compiled code loaded from numba's cache);
* ``front_s``: :func:`remat.solver.chain.optimal.optimal_front` end to end (table + reading one schedule
  back per level where the optimum improves), and the peak RSS of that subprocess;
* ``numpy_s``: the same table filled by the numpy-vectorized implementation the kernel replaced
  (benchmarks/optimal_numpy.py), on the sizes given by ``--numpy``; its table must be identical
  (same float32 optimum at every level, same decisions), and its own peak RSS;
* ``reference_s``: a straightforward implementation of the same recurrence (pure-Python loops
  over segments, memory levels and split points, no skipping), on the sizes given by
  ``--reference`` only (it is cubic in the length times the slots and takes minutes beyond ~100
  stages); its optimum must agree with the kernel's.

Speed-ups compare CPU (process) times measured in the same run, which other jobs on a shared
machine disturb less than wall-clock; both are printed. The kernel's one-time compile cost is
measured separately: a subprocess with an empty ``NUMBA_CACHE_DIR`` (compile + a 10-stage
table), then a second one with the cache it left (load + the same table).

Usage: ``python -m benchmarks.solver_speed [--sizes 50,100,200,400,1000] [--slots 500]
[--numpy 50,100,200,400,1000] [--reference 50]``. Prints a table and writes
benchmarks/results/solver_speed.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import resource
import subprocess
import sys
import tempfile
import time

from benchmarks import common
from benchmarks.common import ROOT
from remat.schedules import ChainProfile, Stage


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
    """C(0, n, k) for k = 0..levels by the plain recurrence (see remat/solver/chain/dp/table.py),
    with the same conservative slot rounding, in pure Python: no vectorization, no skipping."""
    from remat.solver.chain.dp.table import chain_sizes, record_requirement

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


def _sizes_for(profile: ChainProfile, slots: int) -> tuple[int, int]:
    from remat.solver.chain.dp.table import slot_size
    from remat.solver.chain.store_all import store_all_peak

    free = store_all_peak(profile) - profile.input_size
    slot = slot_size(free, slots)
    return slot, min(slots, free // slot)


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_kernel(n: int, slots: int) -> dict:
    """The numba kernel's table and the whole front, in this process (a subprocess of main)."""
    from remat.solver.chain.dp.table import build_table
    from remat.solver.chain.optimal import optimal_front

    profile = bench_chain(n)
    slot, levels = _sizes_for(profile, slots)
    build_table(bench_chain(3), 1_000_000, 10)  # load the compiled kernel from the cache first
    start, cpu = time.perf_counter(), time.process_time()
    table = build_table(profile, slot, levels)
    table_s, table_cpu_s = time.perf_counter() - start, time.process_time() - cpu
    top = table.top.tolist()
    cells = int(table.flat.size)
    del table
    start, cpu = time.perf_counter(), time.process_time()
    front = optimal_front(profile, slots=slots)
    front_s, front_cpu_s = time.perf_counter() - start, time.process_time() - cpu
    return {
        "table_s": table_s,
        "table_cpu_s": table_cpu_s,
        "front_s": front_s,
        "front_cpu_s": front_cpu_s,
        "front_points": len(front),
        "computed_cells": cells,
        "all_cells": n * (n + 1) // 2 * (levels + 1),
        "peak_rss_mb": _rss_mb(),
        "top": top,
    }


def run_numpy(n: int, slots: int) -> dict:
    """The numpy-vectorized table (the previous implementation), in this process."""
    from benchmarks.optimal_numpy import build_table_numpy
    from remat.solver.chain.dp.table import build_table

    profile = bench_chain(n)
    slot, levels = _sizes_for(profile, slots)
    start, cpu = time.perf_counter(), time.process_time()
    table = build_table_numpy(profile, slot, levels)
    numpy_s, numpy_cpu_s = time.perf_counter() - start, time.process_time() - cpu
    rss = _rss_mb()
    # identical tables: compare with the kernel's (filled after the numpy RSS was taken). On
    # segments longer than 97 stages the numpy version's block pruning has a 1e-5 slack that can
    # skip a split point within 1e-5 of its bound; then the kernel may find a slightly better cell.
    import numpy as np

    kernel = build_table(profile, slot, levels)
    differing = 0
    for (s, t), d in table.decisions.items():
        differing += int(np.count_nonzero(kernel.segment_decisions(s, t) != d))
    finite = np.isfinite(table.top)
    rel = (table.top[finite] - kernel.top[finite]) / table.top[finite]
    return {
        "numpy_s": numpy_s,
        "numpy_cpu_s": numpy_cpu_s,
        "numpy_peak_rss_mb": rss,
        "numpy_identical": bool(np.array_equal(kernel.top, table.top)) and differing == 0,
        "numpy_differing_decisions": differing,
        "numpy_top_levels_differing": int(np.count_nonzero(kernel.top != table.top)),
        "numpy_top_max_rel_excess": float(rel.max()) if rel.size else 0.0,  # (numpy - kernel) / numpy
        "kernel_top_never_above_numpy": bool(np.all(rel >= 0))
        and bool(np.array_equal(finite, np.isfinite(kernel.top))),
    }


def run_reference(n: int, slots: int) -> dict:
    profile = bench_chain(n)
    slot, levels = _sizes_for(profile, slots)
    start, cpu = time.perf_counter(), time.process_time()
    ref = reference_top(profile, slot, levels)
    return {"reference_s": time.perf_counter() - start, "reference_cpu_s": time.process_time() - cpu, "ref_top": ref}


def run_compile() -> dict:
    """First call of the kernel in this process: compile (empty cache) or load (warm cache)."""
    start, cpu = time.perf_counter(), time.process_time()
    from remat.solver.chain.dp.table import build_table

    build_table(bench_chain(10), 1_000_000, 50)
    return {"first_call_s": time.perf_counter() - start, "first_call_cpu_s": time.process_time() - cpu}


def _subprocess(args: list[str], env: dict | None = None) -> dict:
    command = [sys.executable, "-m", "benchmarks.solver_speed", *args]
    done = subprocess.run(command, capture_output=True, text=True, check=True, env=env, cwd=ROOT)
    return json.loads(done.stdout.strip().splitlines()[-1])


def compile_times() -> dict:
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        cold = _subprocess(["--part", "compile"], env)
        warm = _subprocess(["--part", "compile"], env)
    return {
        "compile_s": cold["first_call_s"],
        "compile_cpu_s": cold["first_call_cpu_s"],
        "cached_load_s": warm["first_call_s"],
        "cached_load_cpu_s": warm["first_call_cpu_s"],
    }


def _agreement(top: list[float], ref: list[float]) -> tuple[bool, float]:
    import numpy as np

    top_arr, ref_arr = np.array(top), np.array(ref)
    same_feasible = bool(np.array_equal(np.isfinite(ref_arr), np.isfinite(top_arr)))
    finite = np.isfinite(ref_arr)
    rel = float(np.max(np.abs(ref_arr[finite] - top_arr[finite]) / ref_arr[finite])) if finite.any() else 0.0
    return same_feasible and rel < 1e-5, rel


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="50,100,200,400,1000")
    parser.add_argument("--slots", type=int, default=500)
    parser.add_argument("--numpy", default="50,100,200,400,1000", help="sizes on which to time the numpy version")
    parser.add_argument("--reference", default="50", help="sizes on which to time the pure-Python reference")
    parser.add_argument("--part", choices=("kernel", "numpy", "reference", "compile"), help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    common.add_out(parser, "solver_speed", dest="output")
    common.add_quick(parser, "50 and 100 stages, no pure-Python reference, no cold numba compile")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.numpy, args.reference = "50,100", "50", ""
    args.output = common.out_path(args, "solver_speed", dest="output")
    if args.part is not None:
        parts = {"kernel": run_kernel, "numpy": run_numpy, "reference": run_reference}
        result = run_compile() if args.part == "compile" else parts[args.part](args.n, args.slots)
        print(json.dumps(result))
        return 0
    sizes = [int(x) for x in args.sizes.split(",") if x]
    with_numpy = {int(x) for x in args.numpy.split(",") if x}
    with_reference = {int(x) for x in args.reference.split(",") if x}
    info = common.machine("shared machine: other jobs were running; times are wall-clock and noisy")
    compiled = None if args.quick else compile_times()  # a cold compile alone takes a minute or more
    if compiled is not None:
        print(
            f"numba kernel: first call with an empty cache {compiled['compile_s']:.1f} s "
            f"({compiled['compile_cpu_s']:.1f} s CPU); with the cache {compiled['cached_load_s']:.2f} s "
            f"({compiled['cached_load_cpu_s']:.2f} s CPU)"
        )
    rows = []
    header = (
        f"{'stages':>6} {'table s':>8} {'(cpu)':>7} {'front s':>8} {'(cpu)':>7} {'points':>6} "
        f"{'cells computed':>20} {'RSS MB':>6} {'numpy s':>8} {'(cpu)':>7} {'RSS MB':>6} {'x':>5} "
        f"{'reference s':>11} {'(cpu)':>7} {'x':>6}"
    )
    print(header)
    print("-" * len(header))
    slot_args = ["--slots", str(args.slots)]
    for n in sizes:
        row = {"stages": n, "slots": args.slots}
        row.update(_subprocess(["--part", "kernel", "--n", str(n), *slot_args]))
        top = row.pop("top")
        numpy_cols = f"{'-':>8} {'-':>7} {'-':>6} {'-':>5}"
        if n in with_numpy:
            row.update(_subprocess(["--part", "numpy", "--n", str(n), *slot_args]))
            row["numpy_speedup"] = row["numpy_cpu_s"] / row["table_cpu_s"]
            numpy_cols = (
                f"{row['numpy_s']:>8.2f} {row['numpy_cpu_s']:>7.2f} {row['numpy_peak_rss_mb']:>6.0f} "
                f"{row['numpy_speedup']:>4.1f}x"
            )
        ref_cols = f"{'-':>11} {'-':>7} {'-':>6}"
        if n in with_reference:
            ref = _subprocess(["--part", "reference", "--n", str(n), *slot_args])
            agrees, rel = _agreement(top, ref.pop("ref_top"))
            row.update(ref)
            row["reference_speedup"] = row["reference_cpu_s"] / row["table_cpu_s"]
            row["reference_agrees"] = agrees
            row["reference_max_rel_diff"] = rel
            ref_cols = f"{row['reference_s']:>11.1f} {row['reference_cpu_s']:>7.1f} {row['reference_speedup']:>5.0f}x"
        rows.append(row)
        share = f"{row['computed_cells']:,} ({100 * row['computed_cells'] / row['all_cells']:.0f}%)"
        print(
            f"{n:>6} {row['table_s']:>8.2f} {row['table_cpu_s']:>7.2f} {row['front_s']:>8.2f} "
            f"{row['front_cpu_s']:>7.2f} {row['front_points']:>6} {share:>20} {row['peak_rss_mb']:>6.0f} "
            f"{numpy_cols} {ref_cols}",
            flush=True,
        )
        if n in with_numpy and not row["numpy_identical"]:
            print(
                f"  numpy table differs: {row['numpy_differing_decisions']:,} decisions, "
                f"{row['numpy_top_levels_differing']} front levels, numpy above the kernel by at most "
                f"{row['numpy_top_max_rel_excess']:.2g} (relative); kernel never above numpy: "
                f"{row['kernel_top_never_above_numpy']}"
            )
        if n in with_reference and not row["reference_agrees"]:
            print(f"  reference DISAGREES (max relative difference {row['reference_max_rel_diff']:.3g})")
    info["load_average_at_end"] = list(os.getloadavg())
    document = {"benchmark": "solver_speed", "machine": info, "compile": compiled, "results": rows}
    common.write_result(document, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
