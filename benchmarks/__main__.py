"""``python -m benchmarks --quick``: every CPU benchmark's quick form, one after another, each in a
process of its own, writing into a temporary folder (never results/); a line per benchmark, then
the total. A benchmark that needs what this machine lacks (a GPU, transformers) is skipped with a
line saying so. ``--only a,b`` runs some; ``--list`` prints the suite.

Exit status 0 when every benchmark that ran passed, 1 when one failed, 2 on bad input.
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks import common


@dataclass(frozen=True)
class Benchmark:
    """A benchmark of the suite: ``needs`` what it cannot run without ("transformers",
    "torchvision", "gpu"); ``quick`` the arguments of its quick form."""

    name: str
    measures: str
    needs: tuple[str, ...] = ()
    quick: tuple[str, ...] = ("--quick",)


TV = ("transformers", "torchvision")
HF_TRAINER = ("transformers", "accelerate")

# benchmarks/README.md lists the same benchmarks with their run times (tests/benchmarks/test_suite.py)
SUITE = (
    Benchmark("solver_speed", "the chain DP's table and front against numpy and a pure-Python reference"),
    Benchmark("front_speed", "`remat solve` / `remat pareto` on long random chains: time and RSS"),
    Benchmark("ilp_speed", "the graph MILP (CP-SAT, HiGHS) against the LP relaxation and the baselines"),
    Benchmark("hierarchical_vs_ilp", "the hierarchical graph solver against the flat ILP"),
    Benchmark("time_limits", "graph strategies under time limits: kept or not, wall seconds"),
    Benchmark("executor_overhead", "RematChain against checkpoint_sequential at equal memory"),
    Benchmark("meter_cost", "what metering a step costs (allocator meter, tensor tracker)"),
    Benchmark("options_front", "stage options (several saved sets per stage) on a GPT-2: the front"),
    Benchmark("graph_replay_check", "graph schedules replayed on CPU: predicted vs the allocator"),
    Benchmark("gpu_validate", "predicted vs measured peak and time, chains and graphs, on a GPU", ("gpu",)),
    Benchmark("chen2016", "Chen et al. 2016's ResNet-1001 claims on meta tensors"),
    Benchmark("lstm_chen2016", "Chen et al. 2016's LSTM: memory against sequence length"),
    Benchmark("plan_table", "`remat plan`: the largest batch that fits, per device and overhead"),
    Benchmark("machine_drift", "this machine's own drift of a fixed step's time"),
    Benchmark("compile_peak_check", "remat.compile's predicted peak against the allocator", TV),
    Benchmark("cut_models", "the cut and its proof on library models", TV),
    Benchmark("store_all_vs_plain", "store-all replay against the plain step's peak", TV),
    # --runs 0: no fresh profiles beside busy processes for the error column (minutes)
    Benchmark("real_models", "remat against plain PyTorch and HF checkpointing", TV, ("--quick", "--runs", "0")),
    Benchmark("autocast_models", "remat under bf16 / fp16 autocast", TV),
    Benchmark("issue42_models", "issue 42's architectures: real_models' columns and bf16 cut inside autocast", TV),
    Benchmark("dynamic_shapes", "batches of every shape: remat against HF checkpointing", TV),
    Benchmark("gpt2_compare", "GPT-2 side by side: remat, HF checkpointing, torch.compile", ("transformers",)),
    Benchmark("trainer_first_step", "time to the first step under a transformers.Trainer", HF_TRAINER),
    # one row: its --quick runs each of the four rows tiny, a minute or more each
    Benchmark("does_not_fit", "steps that do not fit a memory cap without remat", TV, ("--quick", "--only", "resmlp")),
    Benchmark("compile_front", "remat.compile against torch.compile's activation_memory_budget", TV),
    Benchmark("compile_models", "remat.compile on library models", TV),
)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_one(bench: Benchmark, folder: Path, timeout: float) -> tuple[str, float, float]:
    """Its quick form in a fresh process: ("ok" | "FAILED: <last line>" | "skipped: <why>", wall
    seconds, CPU seconds of the process and its children: on a loaded machine the wall clock
    says more about the load, the CPU seconds about the benchmark)."""
    why = common.missing(bench.needs)
    if why is not None:
        return f"skipped: {why}", 0.0, 0.0
    command = [
        sys.executable,
        "-m",
        f"benchmarks.{bench.name}",
        *bench.quick,
        "--out",
        str(folder / f"{bench.name}.json"),
    ]
    begin, cpu = time.perf_counter(), _children_cpu()
    # a session of its own: past the timeout its children (busy loops, capped children) go with it
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=common.ROOT, start_new_session=True
    )
    try:
        _, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        return f"FAILED: no end within {timeout:.0f} s", time.perf_counter() - begin, _children_cpu() - cpu
    seconds, cpu = time.perf_counter() - begin, _children_cpu() - cpu
    if process.returncode != 0:
        lines = [line for line in stderr.splitlines() if line.strip()] or ["no output"]
        return f"FAILED (exit {process.returncode}): {lines[-1][:200]}", seconds, cpu
    return "ok", seconds, cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="run every CPU benchmark's quick form")
    parser.add_argument("--only", help="comma-separated benchmark names")
    parser.add_argument("--list", action="store_true", help="print the suite (needs, quick forms)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per benchmark (default 300)")
    args = parser.parse_args(argv)
    known = {b.name: b for b in SUITE}
    chosen = [n for n in (args.only or "").split(",") if n]
    unknown = [n for n in chosen if n not in known]
    if unknown:
        parser.error(f"--only: unknown benchmark {unknown[0]!r}; known: {', '.join(known)}")
    suite = [known[n] for n in chosen] if chosen else list(SUITE)
    if args.list:
        for b in suite:
            print(f"{b.name:<20} {', '.join(b.needs) or '-':<26} {' '.join(b.quick):<24} {b.measures}")
        return 0
    if not args.quick:
        parser.error("say --quick (the full benchmarks run one at a time: python -m benchmarks.NAME)")
    failed, began, load = 0, time.perf_counter(), os.getloadavg()[0]
    print(f"{'benchmark':<20} {'wall s':>7} {'CPU s':>7}  result (load average {load:.1f})", flush=True)
    with tempfile.TemporaryDirectory(prefix="remat-benchmarks-") as folder:
        for bench in suite:
            verdict, seconds, cpu = run_one(bench, Path(folder), args.timeout)
            failed += verdict.startswith("FAILED")
            print(f"{bench.name:<20} {seconds:7.1f} {cpu:7.1f}  {verdict}", flush=True)
    wall, cpu, load = time.perf_counter() - began, _children_cpu(), os.getloadavg()[0]
    print(f"{len(suite)} benchmarks, {failed} failed, {wall:.0f} s wall, {cpu:.0f} s CPU (load average {load:.1f})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
