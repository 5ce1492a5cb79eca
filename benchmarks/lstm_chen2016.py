"""Chen et al. 2016's long-sequence RNN case: an LSTM unrolled over T = 100 .. 10,000 steps.

The chain (remat.zoo.lstm): one stage per time step of a real ``nn.LSTMCell`` (batch 16,
input 64, hidden 128, fp32, CPU), profiled for real on a few steps and repeated (the stages are
identical). Then:

1. the front at each T: store-all, Chen's sqrt(T), revolve's binomial schedules (the checkpoint
   count c searched: least memory within an overhead) and the DP (the least budget whose optimal
   schedule is within the overhead, by bisection with solve; for T > 400 on at most 400 blocks of
   equal length), at "one extra forward", +50% and +100% over store-all, and
   revolve with c = ceil(log2 T) checkpoints (the O(log T) end);
2. the DP's limit: seconds and peak RSS of optimal_front on T identical stages (one subprocess
   each), until one takes over LIMIT_S;
3. execution on the real LSTM on the CPU at T = 1,000 and 10,000: measured peak (the executor's
   remat.replay.report.compare) vs the simulator's, and gradients torch.equal to the plain
   unrolled loop.

    python -m benchmarks.lstm_chen2016 [--quick]   # --table: the markdown tables and the plot of the last run
    python -m benchmarks.lstm_chen2016 --dp-steps 2000,5000,10000   # the DP on one stage per step

``--dp-steps`` runs only the DP part of the front on one stage per step, no blocks (above 1,000
stages ``optimal`` is the blocked DP of remat.solver.chain.dp.blocked, at its default 500 slots),
and adds it to the results file as ``dp_without_blocks`` (the rest of the file is kept).

Writes benchmarks/results/lstm_chen2016.json and docs/lstm_memory_vs_T.png. Bytes, milliseconds.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

from benchmarks import common
from benchmarks.common import ROOT
from remat.replay.chain import RematChain
from remat.replay.report import compare
from remat.schedules import ChainProfile, InfeasibleBudgetError, write_json
from remat.solver import solve
from remat.trace.chain import as_chain
from remat.zoo.lstm import UnrolledLSTM, repeated_profile, unrolled_loop

BATCH, INPUT, HIDDEN = 16, 64, 128
TS = (100, 200, 500, 1000, 2000, 5000, 10000)
DP_TS = (50, 100, 200, 400, 800, 1000, 1400)
DP_MAX_STAGES = 400  # above this many steps the DP runs on blocks of block_steps(T) steps
DP_SLOTS = 4000  # the DP's memory levels (see dp_least_memory)
LIMIT_S = 150.0
EXECUTE_TS = (1000, 10000)
RESULTS = ROOT / "benchmarks" / "results" / "lstm_chen2016.json"
PLOT = ROOT / "docs" / "lstm_memory_vs_T.png"


def state() -> torch.Tensor:
    return torch.randn(BATCH, 2 * HIDDEN, generator=torch.Generator().manual_seed(1))


def stage_profile(steps_per_stage: int) -> ChainProfile:
    """A few real stages of ``steps_per_stage`` steps, profiled; the rest of the chain repeats them."""
    model = UnrolledLSTM(8 * steps_per_stage, BATCH, INPUT, HIDDEN, steps_per_stage)
    return repeated_profile(model, state(), sample=8, repeats=7)


def chain_of(base: ChainProfile, stages: int) -> ChainProfile:
    steps = stages * base.metadata["steps_per_stage"]
    metadata = dict(base.metadata, steps=steps)
    stage = base.stages[0]
    named = tuple(dataclasses.replace(stage, name=f"t{i * base.metadata['steps_per_stage']}") for i in range(stages))
    return ChainProfile(f"lstm-T{steps}-k{base.metadata['steps_per_stage']}", base.input_size, named, metadata)


def overhead(schedule) -> float:
    p = schedule.predicted
    return p.recompute_ms / (p.compute_ms - p.recompute_ms)


def least_within(within, lo: int, hi: int, close_enough):
    """Bisection for the least x in (lo, hi] whose ``within(x)`` is a schedule (``lo`` is assumed
    not within); returns that schedule, or None when not even ``hi`` is within."""
    best = within(hi)
    if best is None:
        return None
    while not close_enough(lo, hi):
        mid = (lo + hi) // 2
        schedule = within(mid)
        if schedule is None:
            lo = mid
        else:
            hi, best = mid, schedule
    return best


def revolve_least_memory(profile: ChainProfile, level: float):
    """The revolve schedule with the fewest checkpoints c within ``level`` overhead (revolve's forward
    steps, hence its overhead, never grow with c); None if even c = T - 1 is not within it."""

    def within(c: int):
        schedule = solve(profile, 2**62, "revolve", checkpoints=c)
        return schedule if overhead(schedule) <= level + 1e-12 else None

    # c = hi is within the level, c = lo is not (0 is no schedule)
    return least_within(within, 0, max(1, profile.length - 1), lambda lo, hi: hi - lo <= 1)


def dp_without_blocks(step: ChainProfile, steps_list, levels: dict) -> list[dict]:
    """The DP's least memory within each overhead level on T one-step stages (no blocks of steps),
    with seconds per T and the solver's claim (the blocked DP above 1,000 stages)."""
    from remat.solver.chain.dp import blocked

    rows = []
    for steps in steps_list:
        profile = chain_of(step, steps)
        begin = time.perf_counter()
        row = {"T": steps, "stages": steps}
        slots = DP_SLOTS if steps <= blocked.FLAT_LIMIT else 500
        for name, level in levels.items():
            found = dp_least_memory(profile, resolve(level, profile), slots)
            row[f"dp {name}"] = point(found)
            row["claim"] = found.extra.get("claim") if found is not None else None
            row["blocks"] = found.extra.get("blocks") if found is not None else None
        row["slots"], row["seconds"] = slots, time.perf_counter() - begin
        rows.append(row)
        print(
            f"T={steps}: "
            + ", ".join(f"{k} {v['peak_memory'] / 2**20:.2f} MiB" for k, v in row.items() if k.startswith("dp "))
            + f" ({row['seconds']:.0f} s)",
            flush=True,
        )
    return rows


def dp_least_memory(profile: ChainProfile, level: float, slots: int | None = None):
    """The DP's least budget whose fastest schedule is within ``level`` overhead, to 0.2%: bisection
    on the budget with the public solve at DP_SLOTS. solve reads the multi-scale front (tables 8x
    apart), so a budget between two tables is resolved in fewer levels than its own table would
    give: at the default 500 slots the T = 1,000 point was 2.61 MiB, at 4,000 slots 2.27 MiB."""

    def within(budget: int):
        try:
            schedule = solve(profile, budget, "optimal", slots=slots or DP_SLOTS)
        except InfeasibleBudgetError:
            return None
        return schedule if overhead(schedule) <= level + 1e-12 else None

    store_all = solve(profile, 2**62, "store-all").predicted.peak_memory
    return least_within(within, profile.input_size, store_all, lambda lo, hi: hi - lo <= 0.002 * hi)


def point(schedule_or_point) -> dict | None:
    if schedule_or_point is None:
        return None
    if hasattr(schedule_or_point, "predicted"):
        p = schedule_or_point.predicted
        extra = {"checkpoints": schedule_or_point.extra.get("checkpoints")}
        return {"peak_memory": p.peak_memory, "overhead": p.recompute_ms / (p.compute_ms - p.recompute_ms)} | extra
    base = schedule_or_point.compute_ms - schedule_or_point.recompute_ms
    return {"peak_memory": schedule_or_point.peak_memory, "overhead": schedule_or_point.recompute_ms / base}


def block_steps(steps: int) -> int:
    """The fewest steps per block (a divisor of T) that leave at most DP_MAX_STAGES blocks."""
    return next(k for k in range(1, steps + 1) if steps % k == 0 and steps // k <= DP_MAX_STAGES)


def resolve(level: float | None, profile: ChainProfile) -> float:
    """An overhead level; None is "one extra forward": the chain's forward time over its store-all step."""
    if level is not None:
        return level
    forward = sum(s.forward_ms for s in profile.stages)
    return forward / profile.store_all_compute_ms


def front_at(step: ChainProfile, block: ChainProfile, steps: int, levels: dict) -> dict:
    profile = chain_of(step, steps)
    row = {
        "T": steps,
        "store-all": point(solve(profile, 2**62, "store-all")),
        "chen-sqrt": point(solve(profile, 2**62, "chen-sqrt")),
        "revolve log2 T": point(solve(profile, 2**62, "revolve", checkpoints=math.ceil(math.log2(steps)))),
    }
    k = block_steps(steps)
    dp_profile = profile if k == 1 else chain_of(block, steps // k)
    dp_label = "dp" if k == 1 else f"dp (blocks of {k} steps)"
    begin = time.perf_counter()
    for name, level in levels.items():
        row[f"revolve {name}"] = point(revolve_least_memory(profile, resolve(level, profile)))
        row[f"dp {name}"] = point(dp_least_memory(dp_profile, resolve(level, dp_profile)))
    row["dp_label"], row["dp_seconds"] = dp_label, time.perf_counter() - begin
    print(
        f"T={steps:>6}: store-all {row['store-all']['peak_memory'] / 2**20:8.1f} MiB, "
        f"sqrt {row['chen-sqrt']['peak_memory'] / 2**20:6.2f} MiB (+{100 * row['chen-sqrt']['overhead']:.0f}%), "
        + ", ".join(
            f"{k} {v['peak_memory'] / 2**20:.2f} MiB" for k, v in row.items() if isinstance(v, dict) and "one" in k
        ),
        flush=True,
    )
    return row


DP_PROBE = """
import json, resource, sys, time
from remat.schedules import ChainProfile, Stage
from remat.solver.chain.optimal import optimal_front
stage = Stage(**json.loads(sys.argv[2]))
profile = ChainProfile("lstm", int(sys.argv[3]), (stage,) * int(sys.argv[1]))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
begin = time.perf_counter()
front = optimal_front(profile)
print(json.dumps({"T": int(sys.argv[1]), "seconds": time.perf_counter() - begin, "points": len(front),
                  "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "rss_before_mib": before / 1024}))
"""


def dp_limit(step: ChainProfile, sizes) -> list[dict]:
    rows = []
    for steps in sizes:
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        stage = json.dumps(step.stages[0].to_dict())
        out = subprocess.run(
            [sys.executable, "-c", DP_PROBE, str(steps), stage, str(step.input_size)],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(f"DP on T={steps}: {rows[-1]['seconds']:.1f} s, peak RSS {rows[-1]['rss_mib']:.0f} MiB", flush=True)
        if rows[-1]["seconds"] > LIMIT_S:
            break
    return rows


def gradients(model: UnrolledLSTM, run, x: torch.Tensor, weight: torch.Tensor) -> list[torch.Tensor]:
    model.zero_grad()
    leaf = x.clone().requires_grad_(True)
    (run(leaf) * weight).sum().backward()
    return [p.grad.clone() for p in model.cell.parameters()] + [leaf.grad]


def execute(step: ChainProfile, steps: int, chosen: dict) -> list[dict]:
    k = step.metadata["steps_per_stage"]
    model = UnrolledLSTM(steps, BATCH, INPUT, HIDDEN, k)
    profile = chain_of(step, steps // k)
    x = state()
    weight = torch.randn(BATCH, 2 * HIDDEN, generator=torch.Generator().manual_seed(2))
    expected = gradients(model, lambda s: unrolled_loop(model, s), x, weight)
    rows = []
    for label, schedule in chosen.items():
        begin = time.perf_counter()
        wrapped = RematChain(as_chain(model), schedule, profile)
        report = compare(profile, schedule, wrapped, x, steps=1)
        got = gradients(model, wrapped, x, weight)
        equal = all(torch.equal(a, b) for a, b in zip(got, expected, strict=True))
        # with several steps per stage, the shared weights' gradient is summed per stage, then across
        # stages: another association of the same float sum than the plain loop's, so not bit-equal
        relative = max(float((a - b).abs().max() / b.abs().max()) for a, b in zip(got, expected, strict=True))
        rows.append(
            {
                "T": steps,
                "schedule": label,
                "predicted_peak": report.predicted_peak,
                "measured_peak": report.measured_peak,
                "peak_error": report.peak_error,
                "predicted_ms": report.predicted_ms,
                "measured_ms": report.measured_ms,
                "gradients_equal": equal,
                "gradient_max_relative_difference": relative,
                "seconds": time.perf_counter() - begin,
            }
        )
        print(
            f"executed T={steps} {label:<28}: predicted {report.predicted_peak / 2**20:8.3f} MiB, measured "
            f"{report.measured_peak / 2**20:8.3f} MiB ({100 * report.peak_error:+.3f}%), gradients equal: {equal}",
            flush=True,
        )
    return rows


def plot(rows: list[dict], levels: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ts = [r["T"] for r in rows]
    mib = 2**20
    figure, axis = plt.subplots(figsize=(8, 5.5))
    axis.plot(ts, [r["store-all"]["peak_memory"] / mib for r in rows], "k-", label="store-all")
    axis.plot(ts, [r["chen-sqrt"]["peak_memory"] / mib for r in rows], "C0o-", label="Chen sqrt(T)")
    for color, name in zip(("C1", "C2", "C3"), levels, strict=True):
        revolve = [(r["T"], r[f"revolve {name}"]) for r in rows if r[f"revolve {name}"]]
        axis.plot([t for t, _ in revolve], [p["peak_memory"] / mib for _, p in revolve], f"{color}s-",
                  label=f"revolve, {name}")  # fmt: skip
        dp = [(r["T"], r[f"dp {name}"]) for r in rows if r.get(f"dp {name}")]
        axis.plot([t for t, _ in dp], [p["peak_memory"] / mib for _, p in dp], f"{color}x--", label=f"DP, {name}")
    logs = [(r["T"], r["revolve log2 T"]["peak_memory"] / mib) for r in rows]
    axis.plot([t for t, _ in logs], [m for _, m in logs], "C4^-", label="revolve, ceil(log2 T) checkpoints")
    sqrt0 = rows[0]["chen-sqrt"]["peak_memory"] / mib / math.sqrt(ts[0])
    axis.plot(ts, [sqrt0 * math.sqrt(t) for t in ts], ":", color="gray", label="∝ sqrt(T)")
    log0 = logs[0][1] / math.log2(ts[0])
    axis.plot(ts, [log0 * math.log2(t) for t in ts], "-.", color="gray", label="∝ log2(T)")
    axis.set_xscale("log")
    axis.set_yscale("log")
    axis.set_xlabel("sequence length T (one stage per step; the DP on blocks of steps above T = 400)")
    axis.set_ylabel("peak activation memory (MiB)")
    axis.set_title(f"LSTM (batch {BATCH}, input {INPUT}, hidden {HIDDEN}, fp32): memory vs T at fixed overhead")
    axis.grid(alpha=0.3, which="both")
    axis.legend(fontsize=7, ncol=2)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def markdown(results: dict) -> str:
    """The front and execution tables of docs/replication.md, from the results file."""
    mib = 2**20

    def cell(p: dict | None) -> str:
        return "-" if p is None else f"{p['peak_memory'] / mib:.2f} (+{100 * p['overhead']:.0f}%)"

    names = ("one extra forward", "+50%", "+100%")
    lines = [
        "| T | store-all | √T (chen-sqrt) | "
        + " | ".join(f"revolve {n} | DP {n}" for n in names)
        + " | revolve ⌈log2 T⌉ | DP on |",
        "|---" * (5 + 2 * len(names)) + "|",
    ]
    for r in results["front"]:
        cells = [cell(r["store-all"]), cell(r["chen-sqrt"])]
        cells += [c for n in names for c in (cell(r[f"revolve {n}"]), cell(r[f"dp {n}"]))]
        checkpoints = r["revolve log2 T"]["checkpoints"]
        cells += [
            f"{cell(r['revolve log2 T'])}, c={checkpoints}",
            r["dp_label"].replace("dp", "").strip(" ()") or "steps",
        ]
        lines.append(f"| {r['T']:,} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "| T | schedule | predicted peak (bytes) | measured peak (bytes) | error | gradients |",
        "|---|---|---|---|---|---|",
    ]
    for e in results["executed"]:
        grads = "torch.equal" if e["gradients_equal"] else "equal to float rounding"
        lines.append(
            f"| {e['T']:,} | {e['schedule']} | {e['predicted_peak']:,} | {e['measured_peak']:,} | "
            f"{100 * e['peak_error']:+.3f}% | {grads} |"
        )
    lines += ["", "| T (DP stages) | optimal_front seconds | peak RSS MiB |", "|---|---|---|"]
    lines += [f"| {d['T']:,} | {d['seconds']:.1f} | {d['rss_mib']:.0f} |" for d in results["dp_limit"]]
    return "\n".join(lines)


def main() -> None:
    sys.setrecursionlimit(100_000)  # revolve_ops recurses once per checkpoint (c up to T - 1)
    # one thread: on the shared, loaded 2-core machine two OpenMP threads made each small LSTMCell
    # op 7-20x slower (spinning on a busy core)
    torch.set_num_threads(1)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    common.add_quick(parser, "T = 100 only, the DP probe at 50, executed at T = 100; no plot")
    common.add_out(parser, "lstm_chen2016")
    parser.add_argument(
        "--front-only",
        action="store_true",
        help="recompute the front; keep the DP limit and executions of the last run",
    )
    parser.add_argument(
        "--execute-only",
        action="store_true",
        help="re-run the executions; keep the front and the DP limit of the last run",
    )
    parser.add_argument(
        "--table", action="store_true", help="print the markdown tables from the results file and redraw the plot"
    )
    parser.add_argument("--dp-steps", help="T,T,...: only the DP on one stage per step (no blocks), into the results")
    args = parser.parse_args()
    if args.dp_steps:
        results = json.loads(RESULTS.read_text())
        levels = {"one extra forward": None, "+50%": 0.5, "+100%": 1.0}
        step = stage_profile(1)
        rows = dp_without_blocks(step, [int(t) for t in args.dp_steps.split(",")], levels)
        results["dp_without_blocks"] = {
            "machine": common.machine("shared machine (2 cores, several sessions): times are noisy"),
            "stage": step.stages[0].to_dict(),
            "rows": rows,
        }
        write_json(results, RESULTS)
        print(f"wrote {RESULTS.relative_to(ROOT)}")
        return
    if args.table:  # and redraw the plot from the same file
        results = json.loads(RESULTS.read_text())
        print(markdown(results))
        plot(results["front"], {"one extra forward": None, "+50%": 0.5, "+100%": 1.0}, PLOT)
        return
    out = common.out_path(args, "lstm_chen2016")
    ts = (100,) if args.quick else TS
    executes = (100,) if args.quick else EXECUTE_TS
    begin = time.perf_counter()
    step = stage_profile(1)
    stage = step.stages[0]
    levels = {"one extra forward": None, "+50%": 0.5, "+100%": 1.0}
    print(f"stage: {stage}; one extra forward = +{100 * resolve(None, step):.1f}%", flush=True)
    blocks = {block_steps(t): stage_profile(block_steps(t)) for t in (*ts, *executes)}
    previous = json.loads(RESULTS.read_text()) if args.front_only or args.execute_only else {}
    if args.execute_only:
        rows = previous["front"]
    else:
        rows = [front_at(step, blocks[block_steps(t)], t, levels) for t in ts]
        if not args.quick:
            plot(rows, levels, PLOT)
    limit = previous.get("dp_limit") or dp_limit(step, (50,) if args.quick else DP_TS)
    executed = [] if args.execute_only else list(previous.get("executed", []))
    kept_keys = ["front", "dp_limit"] if args.execute_only else ["dp_limit", "executed"]
    kept = {"kept_from_run_of": previous["machine"]["date"], "kept": kept_keys} if previous else {}
    for t in () if args.front_only else executes:
        profile = chain_of(step, t)
        chosen = {
            "chen-sqrt": solve(profile, 2**62, "chen-sqrt"),
            "revolve +100%": revolve_least_memory(profile, 1.0),
            f"revolve c={math.ceil(math.log2(t))} (log2 T)": solve(
                profile, 2**62, "revolve", checkpoints=math.ceil(math.log2(t))
            ),
        }
        executed += execute(step, t, chosen)
        if t == 1000:  # the DP's schedule on blocks, replayed on the LSTM cut into those blocks
            k = block_steps(t)
            block_chain = chain_of(blocks[k], t // k)
            dp = dp_least_memory(block_chain, resolve(None, block_chain))
            executed += execute(blocks[k], t, {f"dp one extra forward, blocks of {k}": dp})
    write_json(
        {
            "machine": common.machine("shared machine (2 cores, several sessions): times are noisy"),
            "setup": {"batch": BATCH, "input": INPUT, "hidden": HIDDEN, "dtype": "float32", "device": "cpu"},
            "stage": stage.to_dict(),
            "levels": {
                k: v if v is not None else "forward / (forward + backward) of each chain" for k, v in levels.items()
            },
            "front": rows,
            "dp_limit": limit,
            "executed": executed,
            **kept,
            "seconds": time.perf_counter() - begin,
        },
        out,
    )
    print(f"wrote {out}{'' if args.quick else f' and {PLOT}'} in {time.perf_counter() - begin:.0f} s")


if __name__ == "__main__":
    main()
